//! A worker: `ooode worker --listen ADDR --data DIR`.
//!
//! One gRPC server on one port with two services: datafusion-distributed's worker (runs the
//! stages the coordinator sends, ooode's codec and runtime registered), and an Arrow Flight
//! service of ooode's own for what is not a query stage: `DoPut` loads a shard, `DoGet` reads
//! shards for a stage run elsewhere, actions drop a table's shards and report read counters.
//! Shards live in the data directory as `<table_id>/shard-<n>`, each an ordinary ooode table.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::JoinType;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use ooode::access::OoodeRuntime;
use ooode::config::OoodeConfig;
use ooode_providers::OoodeTable;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::scan::ShardScanSpec;

/// The probe keys' column in a lookup's plan on the worker.
const PROBE_KEY: &str = "__ooode_probe_key";
use crate::shard_map::valid_table_id;

/// Removes the table files under `dir`, closed first everywhere; whether there were any.
fn remove_table_dir(dir: &Path) -> Result<bool> {
    if !dir.exists() {
        return Ok(false);
    }
    OoodeRuntime::forget_table_everywhere(dir);
    std::fs::remove_dir_all(dir)
        .map_err(|e| DataFusionError::Execution(format!("remove {}: {e}", dir.display())))?;
    Ok(true)
}

/// A shard opened as some segments: its directory and their names.
type ShardKey = (PathBuf, Vec<String>);

/// The shards of this worker process and the runtime that reads them.
pub struct LocalShards {
    data: PathBuf,
    runtime: Arc<RuntimeEnv>,
    /// Opened shards (as the segments a shard map named), kept: their B+tree roots and
    /// columnar footers stay cached.
    tables: Mutex<HashMap<ShardKey, Arc<OoodeTable>>>,
    /// Shard scans asked for by another process (`DoGet`): stages that ran elsewhere.
    fetches: std::sync::atomic::AtomicU64,
    /// Lookups (a lookup join's probes) asked for by another process.
    lookups: std::sync::atomic::AtomicU64,
    /// Sessions shard reads run in, by what distinguishes them.
    sessions: Mutex<HashMap<SessionKey, SessionContext>>,
}

impl std::fmt::Debug for LocalShards {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("LocalShards")
            .field("data", &self.data)
            .field("tables", &self.tables.lock().len())
            .finish()
    }
}

/// What makes two shard reads' sessions differ.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SessionKey {
    settings: Vec<(String, String)>,
    probe: bool,
    batch_size: usize,
    target_partitions: usize,
}

/// Sessions kept at most (a coordinator that changes settings all the time makes new ones).
const MAX_SESSIONS: usize = 64;

/// Page reads of a worker's ooode runtime, for tests and benchmarks that check where a
/// query read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReads {
    /// Reads issued to the device.
    pub reads: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Pages found in the buffer pool.
    pub hits: u64,
    /// Shard scans served to another process: a stage reading this worker's shards ran
    /// elsewhere (0 when every such stage was routed here).
    pub fetches: u64,
    /// Lookups served to another process (a lookup join's probes of this worker's shards).
    pub lookups: u64,
    /// Of `reads`, those of tables in object storage (ranged GETs).
    #[serde(default)]
    pub object_reads: u64,
}

impl LocalShards {
    /// The shards under `data`, read through `runtime`.
    pub fn new(data: impl Into<PathBuf>, runtime: Arc<RuntimeEnv>) -> Self {
        Self {
            data: data.into(),
            runtime,
            tables: Mutex::default(),
            fetches: Default::default(),
            lookups: Default::default(),
            sessions: Mutex::default(),
        }
    }

    /// The worker's data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The runtime (memory pool, ooode's buffer pool and engines) of the worker.
    pub fn runtime(&self) -> &Arc<RuntimeEnv> {
        &self.runtime
    }

    /// Directory of a table's shard.
    pub fn shard_dir(&self, table_id: &str, shard: u32) -> PathBuf {
        self.data.join(table_id).join(format!("shard-{shard}"))
    }

    /// The directory of segment `segment` of a shard (an error for a name that is none).
    pub fn segment_dir(&self, table_id: &str, shard: u32, segment: &str) -> Result<PathBuf> {
        let valid = segment.starts_with(ooode::storage::segments::SEGMENT_PREFIX)
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid_table_id(table_id) || !valid {
            return Err(DataFusionError::Execution(format!(
                "'{segment}' of '{table_id}' is not a segment name"
            )));
        }
        Ok(self.shard_dir(table_id, shard).join(segment))
    }

    /// Removes a segment of a shard; whether it was there.
    pub fn drop_segment(&self, segment: &crate::service::SegmentRef) -> Result<bool> {
        let dir = self.segment_dir(&segment.table_id, segment.shard, &segment.segment)?;
        remove_table_dir(&dir)
    }

    /// Removes the segments of a shard that `prune` does not keep (those of inserts that
    /// never committed); their names.
    pub fn prune_segments(&self, prune: &crate::service::PruneSegments) -> Result<Vec<String>> {
        let shard = self.shard_dir(&prune.table_id, prune.shard);
        if !valid_table_id(&prune.table_id) || !shard.is_dir() {
            return Ok(Vec::new());
        }
        let entries = std::fs::read_dir(&shard)
            .map_err(|e| DataFusionError::Execution(format!("list {}: {e}", shard.display())))?;
        let mut removed = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_segment =
                name.starts_with(ooode::storage::segments::SEGMENT_PREFIX) && entry.path().is_dir();
            if !is_segment || prune.keep.contains(&name) {
                continue;
            }
            let dir = self.segment_dir(&prune.table_id, prune.shard, &name)?;
            if remove_table_dir(&dir)? {
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// Whether this worker holds the shard.
    pub fn holds(&self, table_id: &str, shard: u32) -> bool {
        valid_table_id(table_id)
            && self
                .shard_dir(table_id, shard)
                .join("manifest.json")
                .exists()
    }

    /// Removes every shard of a table from this worker.
    pub fn drop_table(&self, table_id: &str) -> Result<bool> {
        if !valid_table_id(table_id) {
            return Err(DataFusionError::Execution(format!(
                "'{table_id}' is not a table id"
            )));
        }
        let dir = self.data.join(table_id);
        self.tables.lock().retain(|k, _| !k.0.starts_with(&dir));
        remove_table_dir(&dir)
    }

    /// Counts a shard read asked for by another process (a lookup, or a scan).
    pub fn note_fetch(&self, lookup: bool) {
        let counter = if lookup { &self.lookups } else { &self.fetches };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The worker's read counters so far.
    pub fn reads(&self) -> WorkerReads {
        let runtime = OoodeRuntime::for_env(&self.runtime);
        let mut out = WorkerReads {
            fetches: self.fetches.load(std::sync::atomic::Ordering::Relaxed),
            lookups: self.lookups.load(std::sync::atomic::Ordering::Relaxed),
            ..Default::default()
        };
        for engine in runtime.engines() {
            let s = engine.metrics().snapshot();
            if engine.name() == "object_store" {
                out.object_reads += s.reads;
            }
            out.reads += s.reads;
            out.bytes += s.bytes;
            out.hits += s.hits;
        }
        out
    }

    /// A session on this worker's runtime with ooode, `base`'s settings and the scan's
    /// `ooode.*` settings.
    fn session(&self, base: SessionConfig, spec: &ShardScanSpec) -> Result<SessionContext> {
        // Made once per distinct settings: a session with every function registered costs
        // more than a small lookup.
        let key = SessionKey {
            settings: spec.settings.clone(),
            probe: spec.probe.is_some(),
            batch_size: base.batch_size(),
            target_partitions: base.target_partitions(),
        };
        if let Some(ctx) = self.sessions.lock().get(&key) {
            return Ok(ctx.clone());
        }
        let mut config = base;
        if config.options().extensions.get::<OoodeConfig>().is_none() {
            config = config.with_option_extension(OoodeConfig::default());
        }
        for (key, value) in &spec.settings {
            config.options_mut().set(key, value)?;
        }
        // A lookup chose its keys for an index: the worker probes it, out of order.
        if spec.probe.is_some() {
            config.options_mut().set("ooode.index_join", "always")?;
        }
        let builder = SessionStateBuilder::new()
            .with_default_features()
            .with_config(config)
            .with_runtime_env(self.runtime.clone());
        let ctx = SessionContext::new_with_state(ooode_providers::with_ooode(builder).build());
        let mut sessions = self.sessions.lock();
        if sessions.len() >= MAX_SESSIONS {
            sessions.clear();
        }
        sessions.insert(key, ctx.clone());
        Ok(ctx)
    }

    /// The shard in `dir` as the segments `segments` (none: as loaded).
    async fn open(
        &self,
        dir: PathBuf,
        segments: &[String],
        ctx: &SessionContext,
    ) -> Result<Arc<OoodeTable>> {
        let key = (dir, segments.to_vec());
        if let Some(t) = self.tables.lock().get(&key) {
            return Ok(t.clone());
        }
        let table = Arc::new(match segments {
            [] => OoodeTable::open(&key.0)?,
            named => OoodeTable::open_segments(&key.0, named)?,
        });
        table.prepare(&ctx.state()).await;
        let mut tables = self.tables.lock();
        // Shards as earlier shard maps named them are read by no new query.
        tables.retain(|(d, _), _| *d != key.0);
        tables.insert(key, table.clone());
        Ok(table)
    }

    /// Reads the spec's shards (all held here): each shard's own plan, made by DataFusion
    /// and ooode's rules on this worker, so its filters become index scans where they win.
    pub async fn scan(
        &self,
        spec: &ShardScanSpec,
        base: SessionConfig,
    ) -> Result<
        futures::stream::BoxStream<'static, Result<datafusion::arrow::record_batch::RecordBatch>>,
    > {
        let ctx = self.session(base, spec)?;
        let filter = spec.filter_expr(&ctx.task_ctx())?;
        let schema = spec.table_schema()?;
        let columns: Vec<Expr> = spec
            .projection
            .iter()
            .map(|&i| {
                Expr::Column(datafusion::common::Column::new_unqualified(
                    schema.field(i).name(),
                ))
            })
            .collect();
        let probe = match &spec.probe {
            Some(p) => {
                let keys = p.keys()?;
                let Some(field) = schema.fields().get(p.column) else {
                    return Err(DataFusionError::Execution(format!(
                        "a lookup of column {} of {}, which has {} columns",
                        p.column,
                        spec.table,
                        schema.fields().len()
                    )));
                };
                let keys = RecordBatch::try_new(
                    Arc::new(Schema::new(vec![Field::new(
                        PROBE_KEY,
                        field.data_type().clone(),
                        true,
                    )])),
                    keys.columns().to_vec(),
                )?;
                Some((ctx.read_batch(keys)?.alias("probe")?, field.name().clone()))
            }
            None => None,
        };
        let mut streams: Vec<SendableRecordBatchStream> = Vec::new();
        for shard in &spec.shards {
            if !self.holds(&spec.table_id, shard.shard) {
                return Err(DataFusionError::Execution(format!(
                    "shard {} of {} is not in this worker's data directory {}",
                    shard.shard,
                    spec.table,
                    self.data.display()
                )));
            }
            let table = self
                .open(
                    self.shard_dir(&spec.table_id, shard.shard),
                    &shard.segments,
                    &ctx,
                )
                .await?;
            let mut df = ctx.read_table(table)?;
            if let Some(f) = &filter {
                df = df.filter(f.clone())?;
            }
            if let Some((keys, column)) = &probe {
                df = keys.clone().join(
                    df.alias("shard")?,
                    JoinType::Inner,
                    &[PROBE_KEY],
                    &[column.as_str()],
                    None,
                )?;
            }
            df = df.select(columns.clone())?;
            if let Some(n) = spec.limit {
                df = df.limit(0, Some(n))?;
            }
            streams.push(df.execute_stream().await?);
        }
        Ok(futures::stream::select_all(streams).boxed())
    }
}

/// Runs a worker on `listen` over the shards in `data` until `shutdown` completes, with
/// DataFusion's default runtime (no memory limit).
pub async fn serve(
    listen: SocketAddr,
    data: PathBuf,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    serve_with_runtime(listen, data, Arc::new(RuntimeEnv::default()), shutdown).await
}

/// [`serve`] with `runtime` for every stage and shard read of the worker: its memory pool
/// bounds them all (and ooode's buffer pool's share of it).
pub async fn serve_with_runtime(
    listen: SocketAddr,
    data: PathBuf,
    runtime: Arc<RuntimeEnv>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    std::fs::create_dir_all(&data).map_err(|e| {
        DataFusionError::Execution(format!("create the data directory {}: {e}", data.display()))
    })?;
    // Stores the coordinator's plans name: from this worker's environment, or bound when
    // the ooode node reading them is decoded.
    let runtime = crate::stores::worker_runtime(&runtime);
    let shards = Arc::new(LocalShards::new(data, runtime.clone()));
    let worker =
        datafusion_distributed::Worker::from_session_builder(crate::session::WorkerSession {
            shards: shards.clone(),
        })
        .with_runtime_env(runtime);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| DataFusionError::Execution(format!("listen on {listen}: {e}")))?;
    // Small messages (plans, lookups) must not wait for Nagle's algorithm.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(worker.into_worker_server())
        .add_service(crate::service::flight_server(shards))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| DataFusionError::Execution(format!("worker on {listen}: {e}")))
}
