//! `OoodeTable`: an ooode table as a DataFusion TableProvider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::{DFSchema, DataFusionError, Result, Statistics};
use datafusion::datasource::TableType;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use ooode::access::{OoodeRuntime, QueryIo, to_df};
use ooode::config::OoodeConfig;
use ooode::exec::OoodeScanExec;
use ooode::optimizer::read_ahead;
use ooode::storage::Table;

/// A table stored in the ooode format.
///
/// Scans read heap pages through the I/O layer; the ooode optimizer rule turns scans with
/// selective predicates into index scans and hash joins into index nested-loop joins. Filters
/// are reported `Inexact`: DataFusion keeps its FilterExec, which the rule folds into an index
/// scan where an index applies.
#[derive(Debug)]
pub struct OoodeTable {
    dir: PathBuf,
    name: String,
    schema: SchemaRef,
    rows: u64,
    /// The Parquet copy's metadata and statistics, once a scan read them.
    columnar: parking_lot::Mutex<Option<Arc<ColumnarFile>>>,
}

impl OoodeTable {
    /// Opens the table in `dir` (checking its manifest and files).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let table = Table::open(&dir).map_err(to_df)?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Self {
            schema: table.schema().clone(),
            rows: table.manifest().row_count,
            columnar: Default::default(),
            dir,
            name,
        })
    }

    /// Table directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// DataFusion's own Parquet scan of the table's columnar copy: the plan a ListingTable of
    /// that one file makes, built from the file's metadata and statistics kept here (a
    /// ListingTable lists and stats the file on every scan: a fifth of planning a point query).
    async fn parquet_scan(
        &self,
        state: &dyn Session,
        file: &Path,
        projection: &[usize],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use datafusion::datasource::file_format::FileFormat;
        use datafusion::datasource::file_format::parquet::ParquetFormat;
        use datafusion::datasource::listing::PartitionedFile;
        use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
        use datafusion::datasource::table_schema::TableSchema;
        let columnar = self.columnar_file(state, file).await?;
        let stats = columnar.statistics.clone();
        let part = PartitionedFile::from(columnar.meta.clone()).with_statistics(stats.clone());
        let group = FileGroup::new(vec![part]).with_statistics(stats.clone());
        let format = ParquetFormat::default();
        let source = format.file_source(TableSchema::from(self.schema.clone()));
        let config = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
            .with_file_groups(vec![group])
            .with_statistics(stats.as_ref().clone())
            .with_projection_indices(Some(projection.to_vec()))?
            .with_limit(limit)
            .build();
        format.create_physical_plan(state, config).await
    }

    /// The columnar copy's object metadata and statistics, read once per version of the file.
    async fn columnar_file(&self, state: &dyn Session, file: &Path) -> Result<Arc<ColumnarFile>> {
        use datafusion::datasource::file_format::FileFormat;
        use datafusion::datasource::file_format::parquet::ParquetFormat;
        let io_err = |e: std::io::Error| {
            DataFusionError::Execution(format!(
                "ooode table {}: {}: {e}",
                self.name,
                file.display()
            ))
        };
        let fs_meta = std::fs::metadata(file).map_err(io_err)?;
        let stamp = (fs_meta.len(), fs_meta.modified().map_err(io_err)?);
        if let Some(known) = self.columnar.lock().as_ref()
            && known.stamp == stamp
        {
            return Ok(known.clone());
        }
        let absolute = std::path::absolute(file).map_err(io_err)?;
        let location = object_store::path::Path::from_absolute_path(&absolute)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let store = state
            .runtime_env()
            .object_store(ObjectStoreUrl::local_filesystem())?;
        let meta = object_store::ObjectStoreExt::head(&store, &location).await?;
        let statistics = ParquetFormat::default()
            .infer_stats_and_ordering(state, &store, self.schema.clone(), &meta)
            .await?
            .statistics;
        let known = Arc::new(ColumnarFile {
            stamp,
            meta,
            statistics: Arc::new(statistics),
        });
        *self.columnar.lock() = Some(known.clone());
        Ok(known)
    }
}

/// What a scan of a table's Parquet copy needs to know about the file.
#[derive(Debug)]
struct ColumnarFile {
    /// Size and modification time when it was read: a file replaced since is read again.
    stamp: (u64, std::time::SystemTime),
    meta: object_store::ObjectMeta,
    statistics: Arc<Statistics>,
}

/// The session's ooode settings (defaults if the extension is not registered).
pub fn ooode_config(state: &dyn Session) -> OoodeConfig {
    state
        .config_options()
        .extensions
        .get::<OoodeConfig>()
        .cloned()
        .unwrap_or_default()
}

#[async_trait]
impl TableProvider for OoodeTable {
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
        let config = ooode_config(state);
        let runtime = OoodeRuntime::for_env(state.runtime_env());
        runtime.configure(&config);
        let table = runtime
            .table(&self.dir, config.execution_mode, config.direct_io)
            .map_err(to_df)?;
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let partitions = match config.execution_mode {
            ooode::exec::ExecutionMode::InOrder => 1,
            ooode::exec::ExecutionMode::OutOfOrder => state.config().target_partitions(),
        };
        let columnar_file = table.table().manifest().columnar.clone();
        let query = QueryIo::new(&runtime, &config);
        let scan = OoodeScanExec::new(
            table.clone(),
            self.name.clone(),
            projection.clone(),
            partitions,
            query.clone(),
        )?;
        // A filter that makes this a small index scan: its pages are read while the rest of
        // the query is planned. A filter that cannot be planned here is left to the FilterExec.
        let predicate = datafusion::logical_expr::utils::conjunction(filters.iter().cloned())
            .and_then(|f| {
                let schema = DFSchema::try_from(self.schema.clone()).ok()?;
                state.create_physical_expr(f, &schema).ok()
            });
        let scan = match predicate {
            Some(predicate) => {
                let io = scan.io_metrics().clone();
                let ahead = read_ahead(&table, &predicate, &config, io, &query)?;
                scan.with_read_ahead(ahead)
            }
            None => scan,
        };
        match columnar_file {
            Some(file) if config.columnar_scan => {
                let parquet = self
                    .parquet_scan(state, &self.dir.join(file), &projection, limit)
                    .await?;
                Ok(Arc::new(scan.with_columnar(parquet)))
            }
            _ => Ok(Arc::new(scan)),
        }
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = Precision::Exact(self.rows as usize);
        Some(stats)
    }
}
