//! The io_uring engine: O_DIRECT reads at deep queues from any number of tasks.
//!
//! Design: one dedicated ring thread per engine owns the ring ([`ring`]); tasks hand it reads
//! through a queue and wait on a oneshot channel, so completions wake the waiting tasks on
//! whatever tokio runtime they run on, and no runtime needs to know about the ring. A dedicated
//! thread was chosen over an eventfd registered with tokio because the executor's tasks live on
//! DataFusion's multi-threaded runtime: a single submitter batches submissions from all of them
//! (one `io_uring_enter` per batch, not per read), and the engine works the same from plain
//! threads (the I/O benchmark, tools). Files are registered with the ring (fixed files) where
//! the kernel allows it; buffers are page-aligned heap buffers recycled through a free list.
//! Fixed buffers are not used: pages outlive the read (they stay in the buffer pool), so a
//! registered buffer would have to be copied out to be reused.

pub mod request;
pub mod ring;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use futures::FutureExt;
use futures::channel::oneshot;
use io_uring::IoUring;
use parking_lot::Mutex;

use self::request::{Command, ReadOp};
use self::ring::Shared;
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
#[derive(Debug)]
pub struct UringEngine {
    shared: Arc<Shared>,
    files: Arc<FileTable>,
    recycler: Arc<Recycler>,
    config: UringConfig,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UringEngine {
    /// Sets up the ring and its thread; fails where io_uring is unavailable.
    pub fn new(config: UringConfig) -> std::io::Result<Self> {
        let max_in_flight = config.max_in_flight.clamp(1, 32768);
        // Room for every read plus the eventfd read.
        let entries = (max_in_flight as u32 + 1).next_power_of_two().min(32768);
        let ring: IoUring = IoUring::builder()
            .setup_cqsize(entries * 2)
            .build(entries)?;
        let fixed_files = ring
            .submitter()
            .register_files_sparse(REGISTERED_FILES)
            .is_ok();
        // SAFETY: eventfd returns a new descriptor (or -1, checked) that we then own.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: efd is a valid descriptor owned by nobody else.
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        let files = Arc::new(FileTable::default());
        let recycler = Recycler::new(max_in_flight * 2);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Default::default()),
            sleeping: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            eventfd,
            metrics: IoMetrics::new(),
            files: files.clone(),
            recycler: recycler.clone(),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ooode-uring".into())
            .spawn(move || ring::run(ring, thread_shared, max_in_flight, fixed_files))?;
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
        if new && id.0 < REGISTERED_FILES {
            self.shared.submit(Command::Register {
                slot: id.0,
                fd: file.as_raw_fd(),
            });
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
        if file.0 >= REGISTERED_FILES {
            // Beyond the registered table the ring falls back to plain descriptors for all.
            self.shared.submit(Command::PlainDescriptors);
        }
        let (reply, rx) = oneshot::channel();
        self.shared.submit(Command::Read(ReadOp {
            file,
            fd,
            offset,
            buf: self.recycler.get(len),
            reply,
        }));
        let path = self.files.path(file);
        async move {
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

impl Drop for UringEngine {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
