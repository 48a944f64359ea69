//! `COPY (query) TO 'dir' STORED AS OOODE OPTIONS (...)`: loading a table from SQL.
//!
//! Options (all optional):
//! - `'ooode.clustering_key' 'col[,col]'` - rows are ordered by it; a sparse index is built on it
//! - `'ooode.indexes' 'col[,col][;col[,col]]...'` - one secondary index per `;`-separated entry
//! - `'ooode.page_size' '8KiB'` - 4 KiB to 64 KiB
//! - `'ooode.data_paths' 'dir1,dir2'` - stripe the page files over these directories
//! - `'ooode.stripe_unit' '64KiB'` - bytes per stripe (a multiple of the page size)
//! - `'ooode.replace' 'true'` - replace an existing table (refused otherwise)
//!
//! An unknown option or a column that does not exist is an error naming it.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{DataFusionError, GetExt, Result, Statistics, not_impl_err, plan_err};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory};
use datafusion::datasource::physical_plan::{
    ArrowSource, FileScanConfig, FileSinkConfig, FileSource,
};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::LexRequirement;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;
use object_store::{ObjectMeta, ObjectStore};
use ooode::access::{OoodeRuntime, to_df};
use ooode::config::OoodeConfig;
use ooode::storage::page::parse_page_size;
use ooode::storage::{LoadOptions, TableWriter};

const KEYS: &[&str] = &[
    "ooode.clustering_key",
    "ooode.indexes",
    "ooode.page_size",
    "ooode.data_paths",
    "ooode.stripe_unit",
    "ooode.replace",
    "ooode.shards",
    "ooode.workers",
    "ooode.distribution_key",
];

/// The options of a sharded load: taken by ooode-distributed's `COPY` (a session built with
/// its `with_ooode_distributed`), an error anywhere else.
pub const SHARD_KEYS: &[&str] = &["ooode.shards", "ooode.workers", "ooode.distribution_key"];

/// The `ooode.` options of `COPY ... STORED AS OOODE OPTIONS (...)` as a table options
/// extension. The writer reads the options from the COPY statement itself; this extension lets
/// code that first applies a COPY's options to the session's table options accept the known
/// keys, and name an unknown one.
#[derive(Debug, Clone, Default)]
pub struct OoodeCopyOptions {
    values: std::collections::BTreeMap<String, String>,
}

impl ConfigExtension for OoodeCopyOptions {
    const PREFIX: &'static str = "ooode";
}

impl ExtensionOptions for OoodeCopyOptions {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = key.strip_prefix("ooode.").unwrap_or(key);
        let full = format!("ooode.{key}");
        if !KEYS.contains(&full.as_str()) {
            return Err(DataFusionError::Configuration(format!(
                "unknown ooode table option '{full}'; known: {}",
                KEYS.join(", ")
            )));
        }
        self.values.insert(key.to_string(), value.to_string());
        Ok(())
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        KEYS.iter()
            .map(|k| {
                let key = k.trim_start_matches("ooode.");
                ConfigEntry {
                    key: k.to_string(),
                    value: self.values.get(key).cloned(),
                    description: "an option of COPY ... STORED AS OOODE",
                }
            })
            .collect()
    }
}

fn columns(list: &str) -> Vec<String> {
    list.split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

/// Parses `COPY ... OPTIONS` into load options; unknown keys are errors naming the key.
/// Object store options (`aws.*`, ...) are left to [`crate::remote`].
pub fn load_options(options: &HashMap<String, String>) -> Result<LoadOptions> {
    let mut load = LoadOptions::default();
    for (key, value) in options {
        if crate::remote::is_store_option(key) {
            continue;
        }
        match key.as_str() {
            "ooode.clustering_key" => load.clustering_key = columns(value),
            "ooode.indexes" => {
                load.indexes = value
                    .split(';')
                    .map(columns)
                    .filter(|c| !c.is_empty())
                    .collect()
            }
            "ooode.page_size" => load.page_size = parse_page_size(value).map_err(to_df)?,
            "ooode.stripe_unit" => load.stripe_unit = parse_page_size_any(value)?,
            "ooode.data_paths" => {
                load.data_paths = value.split(',').map(|p| PathBuf::from(p.trim())).collect()
            }
            "ooode.replace" => {
                load.replace = match value.trim().to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    other => {
                        return plan_err!("ooode.replace must be true or false, not '{other}'");
                    }
                }
            }
            other if SHARD_KEYS.contains(&other) => {
                return plan_err!(
                    "option '{other}' loads a sharded table, which needs workers: start the \
                     shell with --workers host:port,... or build the session with \
                     ooode_distributed::with_ooode_distributed"
                );
            }
            other => {
                return plan_err!(
                    "unknown option '{other}' for STORED AS OOODE (known: {})",
                    KEYS.join(", ")
                );
            }
        }
    }
    Ok(load)
}

fn parse_page_size_any(value: &str) -> Result<usize> {
    let t = value.trim().to_ascii_lowercase();
    let (digits, mult) = match t.strip_suffix("kib").or_else(|| t.strip_suffix('k')) {
        Some(d) => (d.to_string(), 1024),
        None => match t.strip_suffix("mib").or_else(|| t.strip_suffix('m')) {
            Some(d) => (d.to_string(), 1 << 20),
            None => (t.clone(), 1),
        },
    };
    match digits.trim().parse::<usize>() {
        Ok(n) => Ok(n * mult),
        Err(_) => plan_err!("ooode.stripe_unit '{value}' is not a size like 64KiB"),
    }
}

/// Creates [`OoodeFormat`]s for `STORED AS OOODE` in COPY statements.
#[derive(Debug, Default)]
pub struct OoodeFormatFactory;

impl GetExt for OoodeFormatFactory {
    fn get_ext(&self) -> String {
        "ooode".into()
    }
}

impl FileFormatFactory for OoodeFormatFactory {
    fn create(
        &self,
        _state: &dyn Session,
        format_options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        Ok(Arc::new(OoodeFormat {
            options: load_options(format_options)?,
            store_options: format_options
                .iter()
                .filter(|(k, _)| crate::remote::is_store_option(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }))
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        Arc::new(OoodeFormat {
            options: LoadOptions::default(),
            store_options: HashMap::new(),
        })
    }
}

/// The ooode table format as a DataFusion FileFormat: its writer loads a table. Reading goes
/// through `CREATE EXTERNAL TABLE ... STORED AS OOODE` (the table factory), not listing tables.
#[derive(Debug)]
pub struct OoodeFormat {
    options: LoadOptions,
    /// `aws.*` and other object store options, for a destination in object storage.
    store_options: HashMap<String, String>,
}

#[async_trait]
impl FileFormat for OoodeFormat {
    fn get_ext(&self) -> String {
        "ooode".into()
    }

    fn get_ext_with_compression(&self, _c: &FileCompressionType) -> Result<String> {
        Ok("ooode".into())
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        None
    }

    async fn infer_schema(
        &self,
        _state: &dyn Session,
        _store: &Arc<dyn ObjectStore>,
        _objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        not_impl_err!("read ooode tables with CREATE EXTERNAL TABLE ... STORED AS OOODE")
    }

    async fn infer_stats(
        &self,
        _state: &dyn Session,
        _store: &Arc<dyn ObjectStore>,
        _table_schema: SchemaRef,
        _object: &ObjectMeta,
    ) -> Result<Statistics> {
        not_impl_err!("read ooode tables with CREATE EXTERNAL TABLE ... STORED AS OOODE")
    }

    async fn create_physical_plan(
        &self,
        _state: &dyn Session,
        _conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        not_impl_err!("read ooode tables with CREATE EXTERNAL TABLE ... STORED AS OOODE")
    }

    async fn create_writer_physical_plan(
        &self,
        input: Arc<dyn ExecutionPlan>,
        state: &dyn Session,
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
        let mut options = self.options.clone();
        let config = state
            .config_options()
            .extensions
            .get::<OoodeConfig>()
            .cloned()
            .unwrap_or_default();
        if config.buffer_pool_bytes > 0 {
            options.memory_budget = options.memory_budget.min(config.buffer_pool_bytes);
        }
        // Fail now, before any row is read, on bad columns, types or options.
        let dest = if crate::remote::is_remote(dest) {
            if !options.data_paths.is_empty() {
                return plan_err!(
                    "ooode.data_paths stripes pages over local directories; a table in object \
                     storage cannot use it"
                );
            }
            check_options(input.schema(), &options)?;
            let url = dest.trim_end_matches('/').to_string();
            let (store_url, prefix) = ooode::access::remote::split_url(&url).map_err(to_df)?;
            let store = crate::remote::store_for(state, &store_url, &self.store_options)?;
            if !options.replace && crate::upload::table_exists(&store, &url, &prefix).await? {
                return plan_err!(
                    "an ooode table already exists at {url}; add OPTIONS ('ooode.replace' \
                     'true') to replace it"
                );
            }
            Destination::Remote { url, store, prefix }
        } else {
            drop_probe(dest, input.schema(), &options)?;
            Destination::Local(PathBuf::from(dest))
        };
        let schema = input.schema();
        Ok(Arc::new(DataSinkExec::new(
            input,
            Arc::new(OoodeCopySink::new(dest, options, schema)),
            None,
        )))
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        // Never used for reading (see the type's docs); DataFusion requires one.
        Arc::new(ArrowSource::new_file_source(table_schema))
    }
}

/// Validates schema and load options (before any row is read) by starting a writer in a
/// scratch directory.
pub fn check_options(schema: SchemaRef, options: &LoadOptions) -> Result<()> {
    let scratch = std::env::temp_dir().join(format!(
        "ooode-probe-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    let probe = LoadOptions {
        data_paths: vec![],
        replace: false,
        ..options.clone()
    };
    let result = TableWriter::create(scratch.join("t"), schema, probe).map(drop);
    let _ = std::fs::remove_dir_all(&scratch);
    result.map_err(to_df)
}

/// Validates schema and options, and that a local destination holds no table (unless
/// replacing).
fn drop_probe(dest: &str, schema: SchemaRef, options: &LoadOptions) -> Result<()> {
    check_options(schema, options)?;
    let dest = std::path::Path::new(dest);
    if dest.join("manifest.json").exists() && !options.replace {
        return plan_err!(
            "an ooode table already exists at {}; add OPTIONS ('ooode.replace' 'true') to replace it",
            dest.display()
        );
    }
    Ok(())
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Where a load goes.
#[derive(Debug, Clone)]
pub enum Destination {
    /// A local table directory.
    Local(PathBuf),
    /// A table URL in object storage: loaded in a local staging directory, then uploaded.
    Remote {
        /// `s3://bucket/path/t`.
        url: String,
        /// Its store.
        store: Arc<dyn ObjectStore>,
        /// The table's object prefix in the store.
        prefix: object_store::path::Path,
    },
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Destination::Local(dir) => write!(f, "{}", dir.display()),
            Destination::Remote { url, .. } => write!(f, "{url}"),
        }
    }
}

/// `COPY ... STORED AS OOODE`: loads the rows DataFusion's `DataSinkExec` hands it into an
/// ooode table (loaded locally, then uploaded for a table in object storage); the statement
/// returns the row count. `INSERT` uses the same `DataSinkExec` with [`crate::insert::OoodeSink`].
#[derive(Debug)]
pub struct OoodeCopySink {
    dest: Destination,
    options: LoadOptions,
    schema: SchemaRef,
}

impl OoodeCopySink {
    /// A load of rows of `schema` into the table at `dest`.
    pub fn new(dest: Destination, options: LoadOptions, schema: SchemaRef) -> Self {
        Self {
            dest,
            options,
            schema,
        }
    }
}

impl DisplayAs for OoodeCopySink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "OoodeCopySink: dest={}, clustering_key=[{}], indexes={:?}",
            self.dest,
            self.options.clustering_key.join(", "),
            self.options.indexes
        )
    }
}

#[async_trait]
impl DataSink for OoodeCopySink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> Result<u64> {
        // A table for object storage is loaded here first, then uploaded.
        let staging = match &self.dest {
            Destination::Local(_) => None,
            Destination::Remote { .. } => Some(
                tempfile::Builder::new()
                    .prefix("ooode-upload-")
                    .tempdir()
                    .map_err(|e| {
                        DataFusionError::Execution(format!(
                            "create a staging directory in {}: {e}",
                            std::env::temp_dir().display()
                        ))
                    })?,
            ),
        };
        let writer_dest = match (&self.dest, &staging) {
            (Destination::Local(dir), _) => dir.clone(),
            (_, Some(tmp)) => tmp.path().join("t"),
            (_, None) => unreachable!("a remote destination has a staging directory"),
        };
        let staged = writer_dest.clone();
        let schema = data.schema();
        let manifest = load_from_stream(data, writer_dest, schema, self.options.clone()).await?;
        match &self.dest {
            Destination::Local(dir) => OoodeRuntime::forget_table_everywhere(dir),
            Destination::Remote { url, store, prefix } => {
                let replace = self.options.replace;
                let memory = context.memory_pool();
                crate::upload::upload_table(&staged, store, url, prefix, replace, memory).await?;
                OoodeRuntime::forget_table_everywhere(std::path::Path::new(url));
            }
        }
        drop(staging);
        Ok(manifest.row_count)
    }
}

/// Loads the batches of `input` into a new table at `dest` with `options`; the table appears
/// only if every batch arrived and the load finished (a failed input or a dropped future
/// leaves nothing there).
pub async fn load_from_stream(
    mut input: impl futures::Stream<Item = Result<RecordBatch>> + Unpin,
    dest: std::path::PathBuf,
    schema: SchemaRef,
    options: LoadOptions,
) -> Result<ooode::storage::Manifest> {
    // `None` commits; a channel closed without it (failed input, cancelled query) drops the
    // writer unfinished, which removes everything it wrote.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Option<RecordBatch>>(4);
    // Sorting, page writing and fsync are blocking work: a thread of their own.
    let writer = tokio::task::spawn_blocking(move || {
        let mut w = TableWriter::create(&dest, schema, options)?;
        for message in rx {
            match message {
                Some(batch) => w.write(&batch)?,
                None => return w.finish().map(Some),
            }
        }
        Ok(None)
    });
    let mut failed = None;
    while let Some(batch) = input.next().await {
        match batch {
            Ok(b) => {
                if tx.send(Some(b)).is_err() {
                    break; // the writer failed: its error is reported below
                }
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if let Some(e) = failed {
        drop(tx);
        let _ = writer.await;
        return Err(e);
    }
    let _ = tx.send(None);
    drop(tx);
    writer
        .await
        .map_err(|e| DataFusionError::Execution(e.to_string()))?
        .map_err(to_df)?
        .ok_or_else(|| DataFusionError::Execution("the table writer stopped".into()))
}
