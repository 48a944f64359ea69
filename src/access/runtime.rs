//! ooode's runtime state, one per DataFusion [`RuntimeEnv`]: engines, buffer pool, admission
//! of reads, and the tables opened on them.
//!
//! ```text
//!   SessionContext ──> SessionState ──> Arc<RuntimeEnv> ──(registry)──> Arc<OoodeRuntime>
//!                                        memory_pool  <── buffer pool reservation
//! ```
//!
//! DataFusion 55's `RuntimeEnv` has no slot for extensions, so the registry maps each live
//! `RuntimeEnv` (by address, checked through a weak reference) to its ooode runtime. Sessions
//! that share a `RuntimeEnv` (a service's sessions) share the runtime: one buffer pool, one cap
//! on reads in flight shared fairly between their queries. Contexts with runtimes of their own
//! share nothing; a runtime ends with its `RuntimeEnv` (and the last plan using it).
//! Settings take effect when a query is planned with them ([`OoodeRuntime::configure`]): the
//! pool's budget and the cap on reads in flight are the ones of the session planning.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};

use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::RuntimeEnv;
use parking_lot::Mutex;

use super::admission::Admission;
use super::idle_lane::IdleLane;
use super::remote::RemoteTable;
use super::slots::LongQuerySlots;
use super::table_io::{FileKeys, TableIo};
use crate::config::{ExecutionMode, OoodeConfig};
use crate::io::{
    BufferPool, CachedEngine, DiskCache, IoEngine, ObjectStoreEngine, PoolMemory, Recycler,
    SyncEngine, default_engine,
};
use crate::storage::{Result, Table};

/// Most reads one ring of an io_uring engine keeps in flight; admission keeps all queries
/// of a runtime below it.
const ENGINE_MAX_IN_FLIGHT: usize = crate::config::MAX_READS_IN_FLIGHT;

/// The engines, pool, admission and opened tables of one `RuntimeEnv`.
#[derive(Debug)]
pub struct OoodeRuntime {
    pool: Arc<BufferPool>,
    recycler: Arc<Recycler>,
    admission: Arc<Admission>,
    /// `ooode.device_queue_depth`, applied to the local engines.
    device_queue_depth: AtomicUsize,
    /// `ooode.in_order_poll_us`, applied to the in-order engines.
    in_order_poll_us: AtomicU64,
    memory: Arc<dyn MemoryPool>,
    engines: Mutex<HashMap<(ExecutionMode, bool), Arc<dyn IoEngine>>>,
    tables: Mutex<HashMap<(PathBuf, ExecutionMode, bool), Arc<TableIo>>>,
    /// Engines of object stores, by store URL (`s3://bucket`) and disk cache directory.
    /// Per store (URL and identity: a store registered again for a URL, with other
    /// credentials or client options, gets an engine of its own) and disk cache.
    object_engines: Mutex<HashMap<ObjectEngineKey, Arc<dyn IoEngine>>>,
    /// The local flash cache of remote pages, if configured (`ooode.disk_cache_path`).
    disk_cache: Mutex<Option<(usize, Arc<DiskCache>)>>,
    /// (configured pool bytes, memory fraction) last applied.
    applied: Mutex<Option<(usize, u64)>>,
    /// Turns of long queries (`ooode.max_long_queries`; None: no limit). Queries keep the
    /// slots they were planned with when the setting changes.
    long_slots: Mutex<Option<Arc<LongQuerySlots>>>,
    /// Threads at idle priority for long queries' operators, started when first wanted
    /// (None: they could not be started).
    idle_lane: OnceLock<Option<IdleLane>>,
    /// Queries with an operator's output stream open.
    executing_queries: AtomicUsize,
    /// When an operator task of a query not estimated long last started: nanoseconds
    /// after `created` (0: never).
    last_short_start: AtomicU64,
    created: std::time::Instant,
    /// Operator tasks started: of short queries, of long ones on the caller's runtime, of
    /// long ones on the idle lane.
    operator_tasks: [AtomicU64; 3],
}

/// Where an operator task ran (the index of its count in `OoodeRuntime::operator_tasks`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum TaskPlace {
    Short = 0,
    LongOnCaller = 1,
    LongOnIdleLane = 2,
}

/// Operator tasks a runtime's queries started, by where they ran (see
/// [`QueryIo::operator_lane`](super::QueryIo::operator_lane)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OperatorTasks {
    /// Of queries not estimated long, on the caller's runtime.
    pub short: u64,
    /// Of long queries, on the caller's runtime (alone, or the idle lane off).
    pub long_on_caller: u64,
    /// Of long queries, on the idle lane.
    pub long_on_idle_lane: u64,
}

/// Raises the soft limit of open files to the hard limit, once per process: engines keep
/// every page file they opened open (each segment of a growing table adds a few), and many
/// systems start processes at a soft limit of 1024.
fn raise_open_file_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given, which lives on this stack.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            // SAFETY: setrlimit only reads the struct; raising the soft limit up to the hard
            // one needs no privilege.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
                log::debug!("ooode: could not raise the open file limit");
            }
        }
    });
}

/// An object engine's key: store URL, store identity, disk cache directory.
type ObjectEngineKey = (String, usize, PathBuf);

type Registry = Vec<(Weak<RuntimeEnv>, usize, Arc<OoodeRuntime>)>;

static REGISTRY: Mutex<Registry> = Mutex::new(Vec::new());

/// The buffer pool's bytes, reserved in DataFusion's memory pool.
#[derive(Debug)]
struct ReservedMemory(Mutex<MemoryReservation>);

impl PoolMemory for ReservedMemory {
    fn try_grow(&self, bytes: usize) -> bool {
        self.0.lock().try_grow(bytes).is_ok()
    }
    fn shrink(&self, bytes: usize) {
        self.0.lock().shrink(bytes)
    }
}

/// The permits of the runtime's cap that long queries leave free under `config`.
fn short_query_reserve(config: &OoodeConfig) -> usize {
    config.max_outstanding_io_total * config.short_query_io_reserve_percent / 100
}

impl OoodeRuntime {
    /// The runtime of `env` (made on first use).
    pub fn for_env(env: &Arc<RuntimeEnv>) -> Arc<OoodeRuntime> {
        let address = Arc::as_ptr(env) as usize;
        let mut registry = REGISTRY.lock();
        // Runtimes of RuntimeEnvs that are gone end here (their plans may still hold them).
        registry.retain(|(weak, _, _)| weak.strong_count() > 0);
        if let Some((_, _, rt)) = registry
            .iter()
            .find(|(weak, addr, _)| *addr == address && weak.upgrade().is_some())
        {
            return rt.clone();
        }
        let rt = Arc::new(Self::new(env.memory_pool.clone()));
        registry.push((Arc::downgrade(env), address, rt.clone()));
        rt
    }

    /// A runtime whose buffer pool reserves its bytes in `memory`.
    pub fn new(memory: Arc<dyn MemoryPool>) -> Self {
        raise_open_file_limit();
        let defaults = OoodeConfig::default();
        let reservation = MemoryConsumer::new("ooode buffer pool")
            .with_can_spill(true)
            .register(&memory);
        let budget = Self::pool_budget(&memory, &defaults);
        let pool = BufferPool::with_memory(
            budget,
            Some(Arc::new(ReservedMemory(Mutex::new(reservation)))),
        );
        Self {
            pool,
            // Page buffers on huge pages (see `io::arena`), up to the pool's first budget.
            recycler: Recycler::with_arena(budget),
            admission: {
                let admission = Admission::new(defaults.max_outstanding_io_total);
                admission.set_reserve(short_query_reserve(&defaults));
                admission
            },
            device_queue_depth: AtomicUsize::new(defaults.device_queue_depth),
            in_order_poll_us: AtomicU64::new(defaults.in_order_poll_us),
            memory,
            engines: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashMap::new()),
            object_engines: Mutex::new(HashMap::new()),
            disk_cache: Mutex::new(None),
            applied: Mutex::new(None),
            long_slots: Mutex::new(LongQuerySlots::for_setting(defaults.max_long_queries)),
            idle_lane: OnceLock::new(),
            executing_queries: AtomicUsize::new(0),
            last_short_start: AtomicU64::new(0),
            created: std::time::Instant::now(),
            operator_tasks: Default::default(),
        }
    }

    /// The buffer pool's budget under `config`: its setting (or a quarter of memory), at most
    /// the configured share of a finite memory limit.
    fn pool_budget(memory: &Arc<dyn MemoryPool>, config: &OoodeConfig) -> usize {
        let wanted = match config.buffer_pool_bytes {
            0 => crate::io::pool::default_budget(),
            n => n,
        };
        match memory.memory_limit() {
            MemoryLimit::Finite(limit) => {
                wanted.min((limit as f64 * config.buffer_pool_memory_fraction) as usize)
            }
            _ => wanted,
        }
    }

    /// Applies the runtime-wide settings of `config` (pool budget, cap on reads in flight).
    pub fn configure(&self, config: &OoodeConfig) {
        self.admission.set_cap(config.max_outstanding_io_total);
        self.admission.set_reserve(short_query_reserve(config));
        let mut slots = self.long_slots.lock();
        if slots.as_ref().map_or(0, |s| s.slots()) != config.max_long_queries {
            *slots = LongQuerySlots::for_setting(config.max_long_queries);
        }
        drop(slots);
        let depth = config.device_queue_depth;
        if self.device_queue_depth.swap(depth, Relaxed) != depth {
            for engine in self.engines.lock().values() {
                engine.set_device_queue_depth(depth);
            }
        }
        let poll = config.in_order_poll_us;
        if self.in_order_poll_us.swap(poll, Relaxed) != poll {
            for engine in self.engines.lock().values() {
                engine.set_poll_budget(poll);
            }
        }
        self.configure_disk_cache(config);
        let key = (
            config.buffer_pool_bytes,
            config.buffer_pool_memory_fraction.to_bits(),
        );
        let mut applied = self.applied.lock();
        if *applied != Some(key) {
            self.pool
                .set_budget(Self::pool_budget(&self.memory, config));
            *applied = Some(key);
        }
    }

    /// Opens the disk cache `config` names (one per directory and size; none if no path).
    fn configure_disk_cache(&self, config: &OoodeConfig) {
        let mut current = self.disk_cache.lock();
        if config.disk_cache_path.is_empty() {
            *current = None;
            return;
        }
        let dir = Path::new(&config.disk_cache_path);
        if current
            .as_ref()
            .is_some_and(|(bytes, c)| c.dir() == dir && *bytes == config.disk_cache_bytes)
        {
            return;
        }
        let local = self.engine(ExecutionMode::OutOfOrder, true);
        match DiskCache::open(dir, config.disk_cache_bytes, local) {
            Ok(cache) => *current = Some((config.disk_cache_bytes, cache)),
            Err(e) => {
                log::warn!("ooode: no disk cache: {e}");
                *current = None;
            }
        }
    }

    /// The disk cache of remote pages in use, if any.
    pub fn disk_cache(&self) -> Option<Arc<DiskCache>> {
        self.disk_cache.lock().as_ref().map(|(_, c)| c.clone())
    }

    /// Slots of long queries, if limited.
    pub fn long_slots(&self) -> Option<Arc<LongQuerySlots>> {
        self.long_slots.lock().clone()
    }

    /// The idle lane, started on first use with a thread per core (None if it could not
    /// be started: long queries then run on the caller's runtime).
    pub fn idle_lane(&self) -> Option<&IdleLane> {
        self.idle_lane
            .get_or_init(|| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                IdleLane::start(cores)
                    .inspect_err(|e| log::warn!("ooode: no idle lane for long queries: {e}"))
                    .ok()
            })
            .as_ref()
    }

    /// The idle lane if it was started.
    pub fn started_idle_lane(&self) -> Option<&IdleLane> {
        self.idle_lane.get()?.as_ref()
    }

    /// Queries executing now: with an ooode operator's output stream open (from its first
    /// `execute` until its consumer drops the last one).
    pub fn executing_queries(&self) -> usize {
        self.executing_queries.load(Relaxed)
    }

    /// Counts a query that starts (`true`) or stops executing.
    pub(crate) fn note_executing(&self, started: bool) {
        match started {
            true => self.executing_queries.fetch_add(1, Relaxed),
            false => self.executing_queries.fetch_sub(1, Relaxed),
        };
    }

    /// Notes that an operator task of a query not estimated long starts now.
    pub(crate) fn note_short_start(&self) {
        let nanos = self.created.elapsed().as_nanos().max(1) as u64;
        self.last_short_start.store(nanos, Relaxed);
    }

    /// Whether an operator task of a short query started within the last `window`.
    pub fn short_query_within(&self, window: std::time::Duration) -> bool {
        match self.last_short_start.load(Relaxed) {
            0 => false,
            nanos => {
                let since = self.created.elapsed().as_nanos() as u64;
                since.saturating_sub(nanos) <= window.as_nanos() as u64
            }
        }
    }

    /// Operator tasks started so far, by where they ran.
    pub fn operator_tasks(&self) -> OperatorTasks {
        let [short, caller, lane] = &self.operator_tasks;
        OperatorTasks {
            short: short.load(Relaxed),
            long_on_caller: caller.load(Relaxed),
            long_on_idle_lane: lane.load(Relaxed),
        }
    }

    /// Counts an operator task started at `place`.
    pub(crate) fn note_operator_task(&self, place: TaskPlace) {
        self.operator_tasks[place as usize].fetch_add(1, Relaxed);
    }

    /// Page buffers freed for reuse.
    pub fn recycler(&self) -> &Arc<Recycler> {
        &self.recycler
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Admission of reads for the queries of this runtime.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// DataFusion's memory pool of this runtime.
    pub fn memory_pool(&self) -> &Arc<dyn MemoryPool> {
        &self.memory
    }

    /// The engine for a mode: io_uring (or its fallback) out of order, the synchronous engine
    /// in order.
    pub fn engine(&self, mode: ExecutionMode, direct: bool) -> Arc<dyn IoEngine> {
        self.engines
            .lock()
            .entry((mode, direct))
            .or_insert_with(|| match mode {
                ExecutionMode::InOrder => {
                    let engine = SyncEngine::with_recycler(direct, self.recycler.clone());
                    engine.set_poll_budget(self.in_order_poll_us.load(Relaxed));
                    Arc::new(engine)
                }
                ExecutionMode::OutOfOrder => {
                    let engine =
                        default_engine(ENGINE_MAX_IN_FLIGHT, direct, self.recycler.clone());
                    engine.set_device_queue_depth(self.device_queue_depth.load(Relaxed));
                    engine
                }
            })
            .clone()
    }

    /// Engines made so far.
    pub fn engines(&self) -> Vec<Arc<dyn IoEngine>> {
        let mut all: Vec<_> = self.engines.lock().values().cloned().collect();
        all.extend(self.object_engines.lock().values().cloned());
        all
    }

    /// The engine reading objects of `remote`'s store (one per store, for both modes: in
    /// order is a budget of one read, not another engine).
    /// With a disk cache configured, the engine reads through it.
    fn object_engine(&self, remote: &RemoteTable) -> Result<Arc<dyn IoEngine>> {
        let cache = self.disk_cache();
        let key = (
            remote.store_url().to_string(),
            // The store's identity (the allocation it lives in), not only its URL.
            Arc::as_ptr(remote.store()) as *const () as usize,
            cache
                .as_ref()
                .map(|c| c.dir().to_path_buf())
                .unwrap_or_default(),
        );
        let mut engines = self.object_engines.lock();
        if let Some(engine) = engines.get(&key) {
            return Ok(engine.clone());
        }
        let mut engine: Arc<dyn IoEngine> = Arc::new(ObjectStoreEngine::try_new(
            remote.store().clone(),
            remote.store_url(),
            ENGINE_MAX_IN_FLIGHT,
            self.recycler.clone(),
        )?);
        if let Some(cache) = cache {
            engine = Arc::new(CachedEngine::new(engine, cache));
        }
        engines.insert(key, engine.clone());
        Ok(engine)
    }

    /// The table in object storage `remote`, for reading in `mode`.
    pub fn remote_table(&self, remote: &RemoteTable, mode: ExecutionMode) -> Result<Arc<TableIo>> {
        let key = (remote.url().to_path_buf(), mode, false);
        let engine = self.object_engine(remote)?;
        if let Some(t) = self.tables.lock().get(&key)
            && Arc::ptr_eq(t.table(), remote.table())
            && Arc::ptr_eq(t.engine(), &engine)
        {
            return Ok(t.clone());
        }
        let pool = self.pool.clone();
        let keys = FileKeys {
            pool: &|path| {
                let version = remote.version(path).unwrap_or("");
                Ok(pool.object_key(&path.to_string_lossy(), version))
            },
            version: &|path| remote.version(path).map(str::to_string),
        };
        let segments = remote.segments().to_vec();
        let mut io = TableIo::open_parts(segments, engine, self.pool.clone(), &keys)?
            .with_remote_url(remote.url());
        let mut tables = self.tables.lock();
        if let Some(other) = tables.iter().find(|(k, _)| k.0 == key.0).map(|(_, t)| t) {
            io.share_pinned(other);
        }
        let io = Arc::new(io);
        tables.insert(key, io.clone());
        Ok(io)
    }

    /// The table in `dir`, opened for reading in `mode` (a table is opened once per mode).
    pub fn table(&self, dir: &Path, mode: ExecutionMode, direct: bool) -> Result<Arc<TableIo>> {
        let key = (dir.to_path_buf(), mode, direct);
        if let Some(t) = self.tables.lock().get(&key) {
            return Ok(t.clone());
        }
        // Opened in another mode already: the same table, sharing its pinned index nodes.
        let other = self
            .tables
            .lock()
            .iter()
            .find(|(k, _)| k.0 == dir)
            .map(|(_, t)| t.clone());
        let table = match &other {
            Some(t) => t.table().clone(),
            None => Arc::new(Table::open(dir)?),
        };
        let mut io = TableIo::open(table, self.engine(mode, direct), self.pool.clone())?;
        if let Some(other) = &other {
            io.share_pinned(other);
        }
        Ok(self
            .tables
            .lock()
            .entry(key)
            .or_insert(Arc::new(io))
            .clone())
    }

    /// Forgets the opened copies of the table in `dir` (after it was replaced on disk).
    pub fn forget_table(&self, dir: &Path) {
        self.tables.lock().retain(|k, _| k.0 != dir);
    }

    /// Forgets the table in `dir` in every runtime of the process (a table was replaced).
    pub fn forget_table_everywhere(dir: &Path) {
        let runtimes: Vec<_> = REGISTRY.lock().iter().map(|r| r.2.clone()).collect();
        for rt in runtimes {
            rt.forget_table(dir);
        }
    }

    /// Closes the files directly in `dir` in every engine of every runtime of the process:
    /// the segment there was removed, and open descriptors would keep its disk space.
    /// Returns how many files were closed.
    pub fn close_files_everywhere(dir: &Path) -> usize {
        let runtimes: Vec<_> = REGISTRY.lock().iter().map(|r| r.2.clone()).collect();
        runtimes
            .iter()
            .flat_map(|rt| rt.engines())
            .map(|engine| engine.close_in(dir))
            .sum()
    }
}
