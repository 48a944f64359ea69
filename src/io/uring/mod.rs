//! The io_uring engine: O_DIRECT reads at deep queues from any number of tasks.
//!
//! Design ([`ring`]): the task that wants a page pushes the read into the submission queue
//! itself (under a lock) and calls `io_uring_enter`; one dedicated completion thread per engine
//! waits for completions and sends each page to its task over a oneshot channel. So a read
//! costs one system call to submit and one thread wake-up to deliver, and completions wake
//! tasks on whatever tokio runtime they run on (DataFusion's multi-threaded one, or plain
//! threads in tools and the I/O benchmark). A first version used a ring thread for submission
//! too (tasks woke it through an eventfd): that second hand-off cost 10 to 30 % of fio's IOPS
//! at queue depths 1 to 64 on this project's machine. An eventfd registered with tokio was not
//! chosen because it ties the engine to one runtime. Files are registered with the ring (fixed
//! files) where the kernel allows it; buffers are page-aligned heap buffers recycled through a
//! free list. Fixed buffers are not used: pages outlive the read (they stay in the buffer
//! pool), so a registered buffer would have to be copied out to be reused.

pub mod request;
pub mod ring;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use futures::FutureExt;
use futures::channel::oneshot;
use io_uring::IoUring;
use parking_lot::Mutex;

use self::request::ReadOp;
use self::ring::{Shared, Tracker};
use super::buf::Recycler;
use super::files::FileTable;
use super::metrics::IoMetrics;
use super::{FileId, IoEngine, ReadFuture};
use crate::storage::{Result, StorageError};

/// Most files one engine registers with the ring.
const REGISTERED_FILES: u32 = 4096;

/// Settings of a [`UringEngine`].
#[derive(Debug, Clone, Copy)]
pub struct UringConfig {
    /// Most reads in flight (default 256; up to 32768).
    pub max_in_flight: usize,
    /// Open files with O_DIRECT (bypass the OS cache).
    pub direct: bool,
}

impl Default for UringConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 256,
            direct: true,
        }
    }
}

/// Page reads through io_uring.
pub struct UringEngine {
    shared: Arc<Shared>,
    files: Arc<FileTable>,
    recycler: Arc<Recycler>,
    config: UringConfig,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringEngine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl UringEngine {
    /// Sets up the ring and its completion thread; fails where io_uring is unavailable.
    pub fn new(config: UringConfig) -> std::io::Result<Self> {
        let max_in_flight = config.max_in_flight.clamp(1, 32768);
        // Room for every read plus a wake-up no-op.
        let entries = (max_in_flight as u32 + 1).next_power_of_two().min(32768);
        let ring: IoUring = IoUring::builder()
            .setup_cqsize(entries * 2)
            .build(entries)?;
        let fixed_files = ring
            .submitter()
            .register_files_sparse(REGISTERED_FILES)
            .is_ok();
        let files = Arc::new(FileTable::default());
        // Pages evicted from (or emptied out of) the pool are reused by every engine.
        let recycler = Recycler::shared();
        let shared = Arc::new(Shared {
            ring,
            tracker: Mutex::new(Tracker::default()),
            max_in_flight,
            use_fixed: AtomicBool::new(fixed_files),
            shutdown: AtomicBool::new(false),
            unsubmitted: AtomicBool::new(false),
            metrics: IoMetrics::new(),
            files: files.clone(),
            recycler: recycler.clone(),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ooode-uring".into())
            .spawn(move || ring::run(thread_shared))?;
        Ok(Self {
            shared,
            files,
            recycler,
            config: UringConfig {
                max_in_flight,
                ..config
            },
            thread: Some(thread),
        })
    }
}

impl IoEngine for UringEngine {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        let (id, file, new) = self.files.open(path, self.config.direct)?;
        if new && self.shared.use_fixed.load(SeqCst) {
            let registered = id.0 < REGISTERED_FILES
                && self
                    .shared
                    .ring
                    .submitter()
                    .register_files_update(id.0, &[file.as_raw_fd()])
                    .is_ok();
            if !registered {
                // Table full or an old kernel: plain descriptors work everywhere.
                self.shared.use_fixed.store(false, SeqCst);
            }
        }
        Ok(id)
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.files.path(file)
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        let Some(fd) = self.files.file(file) else {
            let err = StorageError::InvalidArgument(format!("file id {} was not opened", file.0));
            return futures::future::ready(Err(err)).boxed();
        };
        let (reply, rx) = oneshot::channel();
        self.shared.submit(ReadOp {
            file,
            fd,
            offset,
            buf: self.recycler.get(len),
            reply,
        });
        let path = self.files.path(file);
        let flush = FlushOnDrop(self.shared.clone());
        async move {
            // Let the other tasks that are ready push their reads first, then enter the kernel
            // once for all of them. Dropped before that (cancelled), the guard still flushes.
            tokio::task::yield_now().await;
            drop(flush);
            rx.await.unwrap_or_else(|_| {
                Err(StorageError::io(
                    path,
                    "read",
                    std::io::Error::other("the io_uring engine stopped"),
                ))
            })
        }
        .boxed()
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        &self.shared.metrics
    }

    fn max_in_flight(&self) -> usize {
        self.config.max_in_flight
    }
}

/// Submits pushed reads when dropped.
struct FlushOnDrop(Arc<Shared>);

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        self.0.flush();
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_process_wide_page_buffers() {
        // Where io_uring is unavailable the engine is not used, so there is nothing to share.
        let Ok(engine) = UringEngine::new(UringConfig::default()) else {
            return;
        };
        assert!(Arc::ptr_eq(&engine.recycler, &Recycler::shared()));
        assert!(Arc::ptr_eq(&engine.shared.recycler, &Recycler::shared()));
    }
}
