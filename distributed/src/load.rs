//! `COPY (query) TO 'dir' STORED AS OOODE OPTIONS ('ooode.shards' 'S', ...)`: a sharded load.
//!
//! The coordinator runs the query, sends each row to the worker of its shard (hash of the
//! distribution key, [`crate::hash`]), each worker writes its shards as ordinary ooode
//! tables (`DoPut`, all shards at once), and the shard map is written last in `dir`: the
//! table appears whole or not at all. A failed load removes the shards it wrote from the
//! workers (and says so, or names what it could not remove).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, GetExt, Result, Statistics, plan_err};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory};
use datafusion::datasource::physical_plan::{FileScanConfig, FileSinkConfig, FileSource};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::LexRequirement;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::{SinkExt, StreamExt};
use object_store::{ObjectMeta, ObjectStore};
use ooode_providers::writer::{OoodeFormatFactory, SHARD_KEYS, check_options, load_options};

use crate::hash::{HASH_NAME, can_shard_on, shard_of_rows};
use crate::service::{PutShard, PutShardDone};
use crate::shard_map::{SHARD_MAP_VERSION, ShardEntry, ShardMap};

/// `STORED AS OOODE` in `COPY` of a distributed session: sharded when the options say so,
/// otherwise ooode's one-node load.
#[derive(Debug, Default)]
pub struct ShardedFormatFactory {
    single: OoodeFormatFactory,
}

impl GetExt for ShardedFormatFactory {
    fn get_ext(&self) -> String {
        self.single.get_ext()
    }
}

impl FileFormatFactory for ShardedFormatFactory {
    fn create(
        &self,
        state: &dyn Session,
        options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        if !options.keys().any(|k| SHARD_KEYS.contains(&k.as_str())) {
            return self.single.create(state, options);
        }
        Ok(Arc::new(ShardedFormat::from_options(state, options)?))
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        self.single.default()
    }
}

/// A sharded load's settings.
#[derive(Debug, Clone)]
pub(crate) struct ShardedLoad {
    shards: u32,
    workers: Vec<String>,
    distribution_key: Vec<String>,
    /// The `ooode.*` options each shard's load takes (clustering key, indexes, ...).
    shard_options: HashMap<String, String>,
    clustering_key: Vec<String>,
    indexes: Vec<Vec<String>>,
    replace: bool,
    /// Seconds replaced shards stay on the workers (`ooode.remote_retention_secs`).
    retention_secs: u64,
}

/// See [`ShardedFormatFactory`]: ooode's format, whose writer loads shards onto workers.
#[derive(Debug)]
pub struct ShardedFormat {
    load: ShardedLoad,
    /// ooode's one-node format, for everything but writing.
    single: Arc<dyn FileFormat>,
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

impl ShardedFormat {
    fn from_options(state: &dyn Session, options: &HashMap<String, String>) -> Result<Self> {
        let mut shard_options = HashMap::new();
        let mut shards = None;
        let mut workers = None;
        let mut key = None;
        for (k, v) in options {
            match k.as_str() {
                "ooode.shards" => match v.trim().parse::<u32>() {
                    Ok(n) if n > 0 => shards = Some(n),
                    _ => return plan_err!("ooode.shards must be a positive number, not '{v}'"),
                },
                "ooode.workers" => workers = Some(list(v)),
                "ooode.distribution_key" => key = Some(list(v)),
                _ if k.starts_with("ooode.") => {
                    shard_options.insert(k.clone(), v.clone());
                }
                _ if k.starts_with("format.") => {}
                other => {
                    return plan_err!(
                        "option '{other}' does not apply to a sharded table (its shards are \
                         on the workers' local disks)"
                    );
                }
            }
        }
        let load = load_options(&shard_options)?;
        if !load.data_paths.is_empty() {
            return plan_err!(
                "ooode.data_paths names local directories; a sharded table's shards are in \
                 each worker's data directory"
            );
        }
        let workers = match workers {
            Some(w) if !w.is_empty() => w,
            Some(_) => return plan_err!("ooode.workers lists no worker"),
            None => crate::session::session_workers(state.config())?,
        };
        let distribution_key = match key {
            Some(k) if !k.is_empty() => k,
            Some(_) => return plan_err!("ooode.distribution_key names no column"),
            // The leading clustering column: a key's rows (all lines of an order) stay in one
            // shard, so lookups by it go to one worker.
            None if !load.clustering_key.is_empty() => load.clustering_key[..1].to_vec(),
            None => {
                return plan_err!(
                    "a sharded table needs a distribution key: give ooode.distribution_key \
                     or ooode.clustering_key"
                );
            }
        };
        Ok(Self {
            single: OoodeFormatFactory.default(),
            load: ShardedLoad {
                shards: shards.unwrap_or(workers.len() as u32),
                workers,
                distribution_key,
                shard_options,
                clustering_key: load.clustering_key.clone(),
                indexes: load.indexes.clone(),
                replace: load.replace,
                retention_secs: ooode_providers::provider::ooode_config(state)
                    .remote_retention_secs,
            },
        })
    }
}

#[async_trait]
impl FileFormat for ShardedFormat {
    fn get_ext(&self) -> String {
        self.single.get_ext()
    }

    fn get_ext_with_compression(&self, c: &FileCompressionType) -> Result<String> {
        self.single.get_ext_with_compression(c)
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        self.single.compression_type()
    }

    async fn infer_schema(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        self.single.infer_schema(state, store, objects).await
    }

    async fn infer_stats(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Statistics> {
        self.single
            .infer_stats(state, store, table_schema, object)
            .await
    }

    async fn create_physical_plan(
        &self,
        state: &dyn Session,
        conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.single.create_physical_plan(state, conf).await
    }

    async fn create_writer_physical_plan(
        &self,
        input: Arc<dyn ExecutionPlan>,
        _state: &dyn Session,
        conf: FileSinkConfig,
        _order_requirements: Option<LexRequirement>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !conf.table_partition_cols.is_empty() {
            return plan_err!("PARTITIONED BY is not supported for STORED AS OOODE");
        }
        let dest = conf
            .original_url
            .strip_prefix("file://")
            .unwrap_or(&conf.original_url);
        if ooode_providers::remote::is_remote(dest) {
            return plan_err!(
                "a sharded table's shard map is kept in a local directory of the \
                 coordinator, not at {dest}"
            );
        }
        let dest = PathBuf::from(dest);
        if !self.load.replace && (ShardMap::exists(&dest) || dest.join("manifest.json").exists()) {
            return plan_err!(
                "an ooode table already exists at {}; add OPTIONS ('ooode.replace' 'true') \
                 to replace it",
                dest.display()
            );
        }
        // Fail now, before any row is read: bad columns, types or options.
        let schema = input.schema();
        let mut key_columns = Vec::new();
        for name in &self.load.distribution_key {
            let Ok(i) = schema.index_of(name) else {
                return plan_err!("distribution key column '{name}' is not in the query's output");
            };
            let t = schema.field(i).data_type();
            if !can_shard_on(t) {
                return plan_err!(
                    "cannot shard on column '{name}' of type {t} (integers, dates, Decimal128 \
                     and strings can be distribution keys)"
                );
            }
            key_columns.push(i);
        }
        let mut probe = load_options(&self.load.shard_options)?;
        probe.replace = false;
        check_options(schema.clone(), &probe)?;
        let sink = ShardedSink {
            dest,
            load: self.load.clone(),
            key_columns,
            schema: schema.clone(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        self.single.file_source(table_schema)
    }
}

/// Sends the rows of a sharded load to the workers (see the module docs).
#[derive(Debug)]
pub(crate) struct ShardedSink {
    dest: PathBuf,
    load: ShardedLoad,
    key_columns: Vec<usize>,
    schema: SchemaRef,
}

impl DisplayAs for ShardedSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ShardedSink: dest={}, shards={}, workers=[{}], distribution_key=[{}]",
            self.dest.display(),
            self.load.shards,
            self.load.workers.join(", "),
            self.load.distribution_key.join(", ")
        )
    }
}

/// A directory name for this load's shards on the workers: the table's name and a time.
fn new_table_id(dest: &Path) -> String {
    let name: String = dest
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos:x}", if name.is_empty() { "t" } else { &name })
}

impl ShardedSink {
    /// A sink sending rows of `schema` to the shards of the table whose map is `map` (in
    /// `dest`): for an `INSERT` into it, or (`replace`) its `INSERT OVERWRITE`, a new load
    /// with its settings.
    pub(crate) fn for_map(
        dest: PathBuf,
        map: &ShardMap,
        schema: SchemaRef,
        replace: bool,
        retention_secs: u64,
    ) -> Result<Self> {
        let key_columns = map
            .distribution_key
            .iter()
            .map(|k| schema.index_of(k))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut shard_options = HashMap::new();
        if !map.clustering_key.is_empty() {
            shard_options.insert("ooode.clustering_key".into(), map.clustering_key.join(","));
        }
        if !map.indexes.is_empty() {
            let indexes: Vec<String> = map.indexes.iter().map(|i| i.join(",")).collect();
            shard_options.insert("ooode.indexes".into(), indexes.join(";"));
        }
        Ok(Self {
            dest,
            load: ShardedLoad {
                shards: map.shards.len() as u32,
                workers: map.shards.iter().map(|s| s.worker.clone()).collect(),
                distribution_key: map.distribution_key.clone(),
                shard_options,
                clustering_key: map.clustering_key.clone(),
                indexes: map.indexes.clone(),
                replace,
                retention_secs,
            },
            key_columns,
            schema,
        })
    }

    fn worker_of(&self, shard: u32) -> &str {
        &self.load.workers[shard as usize % self.load.workers.len()]
    }

    /// Splits the input by shard and streams each part to its worker (into segment
    /// `segment` of each shard when given: an `INSERT`); the rows each shard received and
    /// each worker's answer.
    pub(crate) async fn send(
        &self,
        mut data: SendableRecordBatchStream,
        table_id: &str,
        segment: Option<&str>,
    ) -> Result<(Vec<(u64, PutShardDone)>, Vec<crate::stats::ColumnStats>)> {
        let shards = self.load.shards;
        let columns = ShardMap::columns_of(&self.schema);
        let mut senders = Vec::new();
        let mut loads = Vec::new();
        for shard in 0..shards {
            // Two batches in flight per shard: the input waits for the slowest worker.
            let (tx, rx) = futures::channel::mpsc::channel::<Result<RecordBatch>>(2);
            senders.push(tx);
            let put = PutShard {
                table_id: table_id.to_string(),
                shard,
                columns: columns.clone(),
                options: self.load.shard_options.clone(),
                segment: segment.map(str::to_string),
            };
            let worker = self.worker_of(shard).to_string();
            let schema = self.schema.clone();
            loads.push(tokio::spawn(async move {
                crate::client::put_shard(&worker, put, schema, rx).await
            }));
        }
        let mut sent = vec![0u64; shards as usize];
        let mut stats = crate::stats::StatsBuilder::new(self.schema.fields().len());
        let mut failure = None;
        'input: while let Some(batch) = data.next().await {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            stats.add(batch.columns());
            let key: Vec<ArrayRef> = self
                .key_columns
                .iter()
                .map(|&i| batch.column(i).clone())
                .collect();
            let ids = shard_of_rows(&key, shards)?;
            let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); shards as usize];
            for (row, id) in ids.iter().enumerate() {
                rows_of[*id as usize].push(row as u32);
            }
            for (shard, rows) in rows_of.into_iter().enumerate() {
                if rows.is_empty() {
                    continue;
                }
                let part = take_record_batch(&batch, &UInt32Array::from(rows))?;
                sent[shard] += part.num_rows() as u64;
                if senders[shard].send(Ok(part)).await.is_err() {
                    // That worker's load ended early: its error is collected below.
                    break 'input;
                }
            }
        }
        if let Some(e) = &failure {
            // Workers must not commit a shard of a failed input.
            for tx in &mut senders {
                let _ = tx
                    .send(Err(DataFusionError::Execution(format!(
                        "the load's input failed: {e}"
                    ))))
                    .await;
            }
        }
        drop(senders);
        let mut answers = Vec::new();
        let mut errors = Vec::new();
        for (shard, load) in loads.into_iter().enumerate() {
            match load.await {
                Ok(Ok(rows)) => answers.push(rows),
                Ok(Err(e)) => errors.push(e.to_string()),
                Err(e) => errors.push(format!("shard {shard}: {e}")),
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !errors.is_empty() {
            return Err(DataFusionError::Execution(errors.join("; ")));
        }
        Ok((sent.into_iter().zip(answers).collect(), stats.finish()))
    }

    /// The columns' statistics with the distinct counts the shards' indexes made: summed
    /// over shards for the distribution key (each value is in one shard), the largest
    /// shard's count for other columns (a value can be in every shard).
    pub(crate) fn with_distinct_counts(
        &self,
        mut stats: Vec<crate::stats::ColumnStats>,
        counts: &[(u64, PutShardDone)],
    ) -> Vec<crate::stats::ColumnStats> {
        let single_key = match self.load.distribution_key.as_slice() {
            [one] => Some(one.as_str()),
            _ => None,
        };
        for (i, field) in self.schema.fields().iter().enumerate() {
            let per_shard: Vec<u64> = counts
                .iter()
                .filter_map(|(_, done)| {
                    done.distinct
                        .iter()
                        .find(|(c, _)| c == field.name())
                        .map(|(_, d)| *d)
                })
                .collect();
            if per_shard.is_empty() || per_shard.len() != counts.len() {
                continue;
            }
            let distinct = match single_key == Some(field.name().as_str()) {
                true => per_shard.iter().sum(),
                false => per_shard.iter().copied().max().unwrap_or(0),
            };
            if let Some(s) = stats.get_mut(i) {
                s.distinct = Some(distinct);
            }
        }
        stats
    }

    /// Removes this load's shards from every worker; what could not be removed, if anything.
    async fn remove_shards(&self, table_id: &str) -> String {
        let mut left = Vec::new();
        for worker in &self.load.workers {
            if let Err(e) = crate::client::drop_table(worker, table_id).await {
                left.push(format!("{table_id} on {worker} ({e})"));
            }
        }
        if left.is_empty() {
            format!("the shards it wrote ({table_id}) were removed from the workers")
        } else {
            format!("left behind: {}", left.join(", "))
        }
    }
}

#[async_trait]
impl DataSink for ShardedSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let table_id = new_table_id(&self.dest);
        let (counts, column_stats) = match self.send(data, &table_id, None).await {
            Ok(c) => c,
            Err(e) => {
                let cleanup = self.remove_shards(&table_id).await;
                return Err(DataFusionError::Execution(format!(
                    "sharded load into {} failed: {e}; {cleanup}",
                    self.dest.display()
                )));
            }
        };
        let wrong = counts
            .iter()
            .enumerate()
            .find(|(_, (sent, done))| *sent != done.rows);
        if let Some((shard, (sent, done))) = wrong {
            let wrote = done.rows;
            let cleanup = self.remove_shards(&table_id).await;
            return Err(DataFusionError::Execution(format!(
                "sharded load into {}: shard {shard} was sent {sent} rows but its worker \
                 wrote {wrote}; {cleanup}",
                self.dest.display()
            )));
        }
        let replaced = ShardMap::read(&self.dest).ok();
        let column_stats = self.with_distinct_counts(column_stats, &counts);
        let mut map = ShardMap {
            format_version: SHARD_MAP_VERSION,
            table_id: table_id.clone(),
            columns: ShardMap::columns_of(&self.schema),
            distribution_key: self.load.distribution_key.clone(),
            hash: HASH_NAME.into(),
            row_count: counts.iter().map(|(s, _)| s).sum(),
            clustering_key: self.load.clustering_key.clone(),
            indexes: self.load.indexes.clone(),
            column_stats,
            scan_pages: counts.iter().map(|(_, done)| done.scan_pages).sum(),
            shards: (0..self.load.shards)
                .map(|shard| ShardEntry {
                    shard,
                    worker: self.worker_of(shard).to_string(),
                    rows: counts[shard as usize].0,
                    segments: vec![],
                })
                .collect(),
            created_by: format!("ooode-distributed {}", env!("CARGO_PKG_VERSION")),
            retired: replaced.as_ref().map(ShardMap::retire).unwrap_or_default(),
        };
        if let Err(e) = map.write(&self.dest) {
            let cleanup = self.remove_shards(&table_id).await;
            return Err(DataFusionError::Execution(format!("{e}; {cleanup}")));
        }
        // New queries no longer read the old shards; those planned before may for a while.
        let rows = map.row_count;
        if let Err(e) = map
            .remove_expired(&self.dest, self.load.retention_secs)
            .await
        {
            log::warn!(
                "ooode: removing replaced shards of {}: {e}",
                self.dest.display()
            );
        }
        Ok(rows)
    }
}
