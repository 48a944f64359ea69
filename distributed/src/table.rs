//! `ShardedTable`: a sharded ooode table as the coordinator sees it, opened from its shard
//! map by `CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION 'dir'`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Column, Result, Statistics, plan_err};
use datafusion::config::ExtensionOptions;
use datafusion::datasource::TableType;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{CreateExternalTable, Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use ooode_providers::OoodeTableFactory;

use crate::scan::{ShardScanExec, ShardScanSpec};
use crate::shard_map::ShardMap;

/// A sharded table (see the module docs).
#[derive(Debug)]
pub struct ShardedTable {
    dir: PathBuf,
    schema: SchemaRef,
    /// The shard map as last read, its statistics, and the file's size and time then.
    current: parking_lot::RwLock<Arc<Opened>>,
}

#[derive(Debug)]
struct Opened {
    map: ShardMap,
    statistics: Statistics,
    stamp: Option<Stamp>,
}

/// What tells one written shard map from another: every write renames a new file into
/// place (a new inode), with its own size and time.
type Stamp = (u64, u64, std::time::SystemTime);

fn stamp_of(dir: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir.join(crate::shard_map::SHARD_MAP_FILE)).ok()?;
    Some((meta.ino(), meta.len(), meta.modified().ok()?))
}

impl Opened {
    fn read(dir: &Path) -> Result<Self> {
        let stamp = stamp_of(dir);
        let map = ShardMap::read(dir)?;
        let statistics =
            crate::stats::table_statistics(&map.schema()?, map.row_count, &map.column_stats);
        Ok(Self {
            map,
            statistics,
            stamp,
        })
    }
}

impl ShardedTable {
    /// Opens the sharded table whose shard map is in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let opened = Opened::read(&dir)?;
        Ok(Self {
            schema: opened.map.schema()?,
            dir,
            current: parking_lot::RwLock::new(Arc::new(opened)),
        })
    }

    /// The shard map now: read again when an `INSERT` (of this or another process) wrote a
    /// new one since.
    fn current(&self) -> Result<Arc<Opened>> {
        let known = self.current.read().clone();
        if known.stamp.is_some() && stamp_of(&self.dir) == known.stamp {
            return Ok(known);
        }
        let again = Arc::new(Opened::read(&self.dir)?);
        if again.map.schema()? != self.schema {
            return plan_err!(
                "the sharded table in {} was loaded again with other columns: create it again",
                self.dir.display()
            );
        }
        *self.current.write() = again.clone();
        Ok(again)
    }

    /// Its shard map (as last read).
    pub fn shard_map(&self) -> ShardMap {
        self.current.read().map.clone()
    }

    /// The directory of its shard map.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `e` with every column unqualified: the worker plans the shard as a table of its own.
fn unqualified(e: Expr) -> Result<Expr> {
    e.transform(|e| match e {
        Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
            c.name,
        )))),
        other => Ok(Transformed::no(other)),
    })
    .data()
}

/// The `ooode.*` settings of `config` that a query's reads on a worker follow. The buffer
/// pool and disk cache are the worker's own (its process, its memory, its disk).
pub(crate) fn shipped_settings(config: &ooode::config::OoodeConfig) -> Vec<(String, String)> {
    config
        .entries()
        .into_iter()
        .filter(|e| !e.key.contains("buffer_pool") && !e.key.contains("disk_cache"))
        .filter_map(|e| Some((e.key, e.value?)))
        .collect()
}

#[async_trait]
impl TableProvider for ShardedTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use datafusion_proto::bytes::Serializeable;
        let opened = self.current()?;
        let map = &opened.map;
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        // Only filters that travel: one that cannot be serialized stays above, unpushed.
        let shippable: Vec<Expr> = filters
            .iter()
            .map(|f| unqualified(f.clone()))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|f| f.to_bytes().is_ok())
            .collect();
        let filters_shipped = shippable.len();
        let filter = conjunction(shippable);
        let spec = ShardScanSpec {
            table: self.dir.display().to_string(),
            table_id: map.table_id.clone(),
            columns: map.columns.clone(),
            shards: map.shards.clone(),
            projection,
            filter: filter
                .as_ref()
                .map(|f| f.to_bytes())
                .transpose()?
                .map(|b| b.to_vec()),
            filter_text: filter.as_ref().map(|f| f.to_string()),
            limit,
            settings: shipped_settings(&ooode_providers::provider::ooode_config(state)),
            filters_pushed: filters.len(),
            filters_shipped,
            lookup_columns: map.lookup_columns(),
            clustering_first: map
                .clustering_key
                .first()
                .and_then(|k| map.columns.iter().position(|c| c.name == *k)),
            distribution_key: map.distribution_columns(),
            shard_count: map.shards.len() as u32,
            table_rows: map.row_count,
            scan_pages: map.scan_pages,
            probe: None,
        };
        let table_stats = opened.statistics.clone().project(Some(&spec.projection));
        let filtered = match &filter {
            Some(f) => crate::stats::under_filter(state, &self.schema, &opened.statistics, f),
            None => opened.statistics.clone(),
        };
        let stats = filtered.project(Some(&spec.projection));
        Ok(Arc::new(
            ShardScanExec::try_new(spec, None)?
                .with_statistics(stats)
                .with_table_statistics(table_stats),
        ))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    fn statistics(&self) -> Option<Statistics> {
        let opened = self
            .current()
            .unwrap_or_else(|_| self.current.read().clone());
        Some(opened.statistics.clone())
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let sink = crate::insert::ShardedInsertSink::new(
            self.dir.clone(),
            self.schema.clone(),
            insert_op,
            ooode_providers::provider::ooode_config(state).remote_retention_secs,
        )?;
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// `STORED AS OOODE` in a distributed session: a directory with a shard map is a sharded
/// table; anything else is opened as ooode opens it on one node.
#[derive(Debug, Default)]
pub struct ShardedTableFactory {
    single: OoodeTableFactory,
}

#[async_trait]
impl TableProviderFactory for ShardedTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        if let [location] = cmd.locations.as_slice() {
            let dir = Path::new(location.strip_prefix("file://").unwrap_or(location));
            if ShardMap::exists(dir) {
                if let Some(key) = cmd.options.keys().find(|k| !k.starts_with("format.")) {
                    return plan_err!(
                        "unknown option '{key}' for a sharded OOODE table (its shard map says \
                         where everything is)"
                    );
                }
                let table = ShardedTable::open(dir)?;
                let given = cmd.schema.as_arrow();
                if !given.fields().is_empty() && given.fields() != table.schema().fields() {
                    return plan_err!(
                        "the column list does not match the sharded table at {location}; leave \
                         it out: the schema comes from the table"
                    );
                }
                return Ok(Arc::new(table));
            }
        }
        self.single.create(state, cmd).await
    }
}
