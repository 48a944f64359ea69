//! Layer 2: getting pages from the flash array into memory. Knows files, byte offsets and
//! pages; not rows, not B+trees (that is [`crate::access`]).
//!
//! ```text
//!   BufferPool (byte budget, 64 shards, CLOCK with a hint for B+tree inner nodes,
//!      │        single-flight reads that end cleanly when every waiter gives up)
//!      │ misses
//!   dyn IoEngine: UringEngine (io_uring, O_DIRECT, one ring per core, an optional queue
//!                              in front of the device by query size; default on Linux)
//!                 SyncEngine  (one read at a time on the calling thread, polled io_uring or pread:
//!                              the in-order baseline, and the fallback)
//!                 ObjectStoreEngine (ranged GETs)
//!                 FaultyEngine (wraps any engine; injects errors, short reads, delays)
//! ```
//!
//! The engine trait is tiny: open a file, read `len` bytes at `offset` as a `'static` future.
//! Buffers are page-aligned and owned by the engine while the kernel may write to them, so a
//! read future that is dropped before completion leaks nothing and corrupts nothing: the
//! engine finishes the read and recycles the buffer. Reads started inside a [`batch`] reach
//! the kernel in one system call.

pub mod arena;
pub mod batch;
pub mod buf;
pub mod cpus;
pub mod disk_cache;
pub mod fault;
pub mod files;
pub mod metrics;
pub mod object_store_engine;
pub mod polled;
pub mod pool;
pub mod priority;
pub mod read_log;
pub mod sync_engine;
pub mod uring;
pub mod wait;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;

pub use buf::{PageBuf, Recycler};
pub use disk_cache::{CachedEngine, DiskCache, DiskCacheStats};
pub use fault::{Fault, FaultyEngine};
pub use metrics::{IoMetrics, IoSnapshot, Sample, Sampler};
pub use object_store_engine::ObjectStoreEngine;
pub use pool::{BufferPool, PageHint, PoolMemory, PoolStats};
pub use sync_engine::SyncEngine;
pub use uring::{UringConfig, UringEngine};

use crate::storage::Result;

/// A file opened in an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A page read in progress. `'static`: it can be spawned, stored, or dropped at any time.
pub type ReadFuture = BoxFuture<'static, Result<PageBuf>>;

/// Where reads started by [`IoEngine::start_read`] end: told each read's outcome once, on
/// the thread that takes its completion. An operator with many reads in flight gets them
/// into a queue of its own this way: no future, task or wake-up per read.
pub trait ReadSink: Send + Sync {
    /// The read `token` ended with `result`; its completion was taken at `ended` (one clock
    /// read for all the completions taken together: the kernel had posted each before).
    fn complete(&self, token: u64, result: Result<PageBuf>, ended: std::time::Instant);
}

/// Reads byte ranges (pages) of files.
pub trait IoEngine: Send + Sync + std::fmt::Debug {
    /// Short name ("io_uring", "sync", ...).
    fn name(&self) -> &'static str;

    /// Opens (or finds the already opened) file at `path`.
    fn open(&self, path: &Path) -> Result<FileId>;

    /// Opens `path` as of `version` (an object's e-tag): engines that read objects give each
    /// version its own id; others ignore the version.
    fn open_version(&self, path: &Path, version: &str) -> Result<FileId> {
        let _ = version;
        self.open(path)
    }

    /// Path of an opened file.
    fn path(&self, file: FileId) -> PathBuf;

    /// Reads `len` bytes at `offset` (both multiples of 4 KiB for O_DIRECT).
    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture;

    /// Reads `len` bytes at `offset` for a query of size `class` (see [`priority`]): an
    /// engine with a queue of its own in front of the device serves smaller classes first.
    fn read_in_class(&self, file: FileId, offset: u64, len: usize, class: usize) -> ReadFuture {
        let _ = class;
        self.read(file, offset, len)
    }

    /// Starts reading `len` bytes at `offset` for a query of size `class`, to end in `sink`
    /// with `token`; false if this engine does not (it reads through futures only) or has no
    /// room for the read now: then nothing was started and `sink` hears nothing. Once
    /// started, the read always ends in `sink`, even if the engine stops meanwhile, and
    /// never before this call returned on the calling thread (another thread may end it
    /// meanwhile).
    fn start_read(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        class: usize,
        sink: &Arc<dyn ReadSink>,
        token: u64,
    ) -> bool {
        let _ = (file, offset, len, class, sink, token);
        false
    }

    /// Whether [`IoEngine::start_read`] can start reads (else it always refuses).
    fn starts_reads(&self) -> bool {
        false
    }

    /// Sets how many reads the engine keeps at the device at once, 0 for no limit of its own
    /// (engines without a queue of their own ignore it).
    fn set_device_queue_depth(&self, depth: usize) {
        let _ = depth;
    }

    /// Microseconds a synchronous engine polls for a read's completion before its thread
    /// sleeps (`ooode.in_order_poll_us`); engines that never wait on the calling thread
    /// ignore it.
    fn set_poll_budget(&self, micros: u64) {
        let _ = micros;
    }

    /// Reads a run of many pages at once (`len` bytes at `offset`), for loading a table's
    /// pinned index nodes: a page cache between the engine and the store leaves it alone.
    fn read_run(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        self.read(file, offset, len)
    }

    /// Reads several ranges; engines that can submit a batch at once override this.
    fn read_batch(&self, reads: &[(FileId, u64, usize)]) -> Vec<ReadFuture> {
        reads
            .iter()
            .map(|&(f, off, len)| self.read(f, off, len))
            .collect()
    }

    /// The engine's own counters (all reads it served).
    fn metrics(&self) -> &Arc<IoMetrics>;

    /// Starts a record of the next `capacity` reads asked of the engine (file, offset,
    /// length), in place of any earlier one; false from engines that keep none.
    fn record_reads(&self, capacity: usize) -> bool {
        let _ = capacity;
        false
    }

    /// Stops recording and returns the reads recorded, as (file path, offset, length), in
    /// the order they were asked for.
    fn recorded_reads(&self) -> Vec<(PathBuf, u64, usize)> {
        Vec::new()
    }

    /// Most reads the engine keeps in flight.
    fn max_in_flight(&self) -> usize;

    /// Whether a read is done when [`IoEngine::read`] returns (on the calling thread), so
    /// that a read future is never pending.
    fn reads_on_call(&self) -> bool {
        false
    }

    /// Closes the files this engine opened directly in `dir` (a segment whose files were
    /// removed: an open descriptor would keep their disk space until the process exits).
    /// Returns how many it closed.
    fn close_in(&self, dir: &Path) -> usize {
        let _ = dir;
        0
    }

    /// Takes completions that are ready, on the calling thread, for engines whose
    /// completions are otherwise taken by someone else (a reactor task); returns whether it
    /// took any. See [`wait::block_on_reads`].
    fn reap_now(&self) -> bool {
        false
    }
}

/// How to pick an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring if the kernel allows it, else pread (said once on stderr).
    Auto,
    /// io_uring only.
    Uring,
    /// Synchronous pread.
    Sync,
}

/// The default engine: io_uring with `max_in_flight` reads in flight per ring, reading into
/// the recycler's arena registered with the rings (fixed buffers) where the kernel allows it,
/// falling back to pread where io_uring cannot be set up (no kernel support, blocked by
/// seccomp); freed page buffers go to `recycler`.
pub fn default_engine(
    max_in_flight: usize,
    direct: bool,
    recycler: Arc<Recycler>,
) -> Arc<dyn IoEngine> {
    match UringEngine::new(UringConfig {
        max_in_flight,
        direct,
        recycler: Some(recycler.clone()),
        // Measured with the arena on huge pages and settled (docs/log.md, 2026-12-05,
        // evening): a page from the OS cache 3 % less CPU, 64 clients no different.
        fixed_buffers: true,
        ..Default::default()
    }) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                log::warn!(
                    "ooode: io_uring is not available ({e}); falling back to synchronous pread, \
                     one read at a time per query"
                )
            });
            Arc::new(SyncEngine::with_recycler(direct, recycler))
        }
    }
}

/// Whether io_uring can be set up here (kernel support, not blocked by seccomp), and why not.
pub fn uring_available() -> std::result::Result<(), String> {
    io_uring::IoUring::new(2)
        .map(drop)
        .map_err(|e| e.to_string())
}
