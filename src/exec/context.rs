//! Process-wide I/O resources of ooode (engines, buffer pool, opened tables) and the per-query
//! read budget.
//!
//! Engines and the buffer pool are shared by every query of the process, like DataFusion's
//! runtime: the pool's budget is global, and an io_uring engine serves any number of tables.
//! Each query gets its own [`QueryIo`]: the execution mode and a semaphore of
//! `ooode.max_outstanding_io` permits, one per page read in flight, shared by all ooode nodes
//! of that query (the optimizer rule hands the same one to every node it plans).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use datafusion::common::{DataFusionError, Result};
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::config::{ExecutionMode, OoodeConfig};
use crate::io::{BufferPool, IoEngine, IoMetrics, SyncEngine, TableIo, default_engine};
use crate::storage::Table;

/// Most reads one io_uring engine keeps in flight (queries limit themselves below it).
const ENGINE_MAX_IN_FLIGHT: usize = 4096;

/// Engines, pool and opened tables of the process.
#[derive(Debug)]
pub struct OoodeRuntime {
    pool: Arc<BufferPool>,
    engines: Mutex<HashMap<(bool, bool), Arc<dyn IoEngine>>>,
    tables: Mutex<HashMap<(PathBuf, bool, bool), Arc<TableIo>>>,
}

static RUNTIME: OnceLock<OoodeRuntime> = OnceLock::new();

/// Converts a storage error into a DataFusion error, once, at the boundary.
pub fn to_df(e: crate::storage::StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl OoodeRuntime {
    /// The process-wide runtime; the first call sizes the buffer pool from `config`.
    pub fn get(config: &OoodeConfig) -> &'static OoodeRuntime {
        RUNTIME.get_or_init(|| {
            let budget = if config.buffer_pool_bytes == 0 {
                crate::io::pool::default_budget()
            } else {
                config.buffer_pool_bytes
            };
            OoodeRuntime {
                pool: BufferPool::new(budget),
                engines: Mutex::new(HashMap::new()),
                tables: Mutex::new(HashMap::new()),
            }
        })
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// The engine for a mode: io_uring (or its fallback) out of order, pread in order.
    pub fn engine(&self, mode: ExecutionMode, direct: bool) -> Arc<dyn IoEngine> {
        let in_order = mode == ExecutionMode::InOrder;
        self.engines
            .lock()
            .entry((in_order, direct))
            .or_insert_with(|| {
                if in_order {
                    Arc::new(SyncEngine::new(direct))
                } else {
                    default_engine(ENGINE_MAX_IN_FLIGHT, direct)
                }
            })
            .clone()
    }

    /// The table in `dir`, opened for reading in `mode` (cached: a table is opened once).
    pub fn table(&self, dir: &Path, mode: ExecutionMode, direct: bool) -> Result<Arc<TableIo>> {
        let key = (dir.to_path_buf(), mode == ExecutionMode::InOrder, direct);
        if let Some(t) = self.tables.lock().get(&key) {
            return Ok(t.clone());
        }
        let table = Arc::new(Table::open(dir).map_err(to_df)?);
        let io = Arc::new(
            TableIo::open(table, self.engine(mode, direct), self.pool.clone()).map_err(to_df)?,
        );
        self.tables.lock().insert(key, io.clone());
        Ok(io)
    }

    /// Forgets the opened copy of the table in `dir` (after it was replaced on disk).
    pub fn forget_table(&self, dir: &Path) {
        self.tables.lock().retain(|k, _| k.0 != dir);
    }
}

/// The I/O budget and counters of one query.
#[derive(Debug)]
pub struct QueryIo {
    /// Execution mode.
    pub mode: ExecutionMode,
    /// O_DIRECT reads.
    pub direct: bool,
    /// One permit per page read in flight.
    pub permits: Arc<Semaphore>,
    /// Reads of the whole query.
    pub metrics: Arc<IoMetrics>,
    /// Counters of the query's plan nodes that issued reads.
    nodes: Mutex<Vec<std::sync::Weak<IoMetrics>>>,
    /// Reads issued while a read of another plan node of the query was in flight.
    overlapped: std::sync::atomic::AtomicU64,
}

impl QueryIo {
    /// A budget from the session settings: `max_outstanding_io` permits out of order, one in
    /// order.
    pub fn new(config: &OoodeConfig) -> Arc<Self> {
        let permits = match config.execution_mode {
            ExecutionMode::InOrder => 1,
            ExecutionMode::OutOfOrder => config.max_outstanding_io.max(1),
        };
        Arc::new(Self {
            mode: config.execution_mode,
            direct: config.direct_io,
            permits: Arc::new(Semaphore::new(permits)),
            metrics: IoMetrics::new(),
            nodes: Mutex::new(Vec::new()),
            overlapped: Default::default(),
        })
    }

    /// Registers a plan node's counters (for [`QueryIo::overlapped_reads`]).
    pub fn register_node(&self, node: &Arc<IoMetrics>) {
        let mut nodes = self.nodes.lock();
        if !nodes
            .iter()
            .any(|n| std::ptr::eq(n.as_ptr(), Arc::as_ptr(node)))
        {
            nodes.push(Arc::downgrade(node));
        }
    }

    /// Notes a read of `node` about to be issued: counts it as overlapped if another node of
    /// the query has a read in flight.
    pub fn note_read(&self, node: &Arc<IoMetrics>) {
        let others_busy = self.nodes.lock().iter().any(|n| {
            !std::ptr::eq(n.as_ptr(), Arc::as_ptr(node))
                && n.upgrade().is_some_and(|m| m.snapshot().in_flight > 0)
        });
        if others_busy {
            self.overlapped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Reads issued while another plan node of the query had a read in flight: proof that
    /// the levels of a join chain run at the same time.
    pub fn overlapped_reads(&self) -> u64 {
        self.overlapped.load(std::sync::atomic::Ordering::Relaxed)
    }
}
