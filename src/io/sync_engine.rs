//! The synchronous engine: each read on the calling thread, which waits for it.
//!
//! This is the in-order engine of the paper (IODE): the caller waits for each read before it
//! can issue the next. Files opened with O_DIRECT are read through the thread's own io_uring,
//! polling for the completion before sleeping ([`super::polled`], `ooode.in_order_poll_us`);
//! others, and threads without io_uring, use `pread`. In order, a query's nodes run inside
//! their consumers' polls, so each pipeline (partition) of the query has one read
//! outstanding; queries on other threads read at the same time (no lock is held across the
//! system call). It is also the fallback where io_uring cannot be set up.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use futures::FutureExt;

use super::buf::{PageBuf, Recycler};
use super::files::{FileTable, short_read};
use super::metrics::IoMetrics;
use super::polled::{self, Waited};
use super::{FileId, IoEngine, ReadFuture};
use crate::storage::{Result, StorageError};

/// Synchronous `pread` engine.
#[derive(Debug)]
pub struct SyncEngine {
    files: FileTable,
    recycler: Arc<Recycler>,
    metrics: Arc<IoMetrics>,
    direct: bool,
    /// Microseconds a read's completion is polled for before the thread sleeps.
    poll_us: AtomicU64,
    polled: AtomicU64,
    slept: AtomicU64,
}

/// Default of `ooode.in_order_poll_us`: about one read of this project's disk at depth 1.
pub const DEFAULT_POLL_US: u64 = 100;

impl SyncEngine {
    /// A synchronous engine; `direct` opens files with O_DIRECT.
    pub fn new(direct: bool) -> Self {
        Self::with_recycler(direct, Recycler::new(0))
    }

    /// A pread engine whose freed page buffers go to `recycler` (shared with the other
    /// engines of a runtime: the frames of one buffer pool).
    pub fn with_recycler(direct: bool, recycler: Arc<Recycler>) -> Self {
        Self {
            files: FileTable::default(),
            recycler,
            metrics: IoMetrics::new(),
            direct,
            poll_us: AtomicU64::new(DEFAULT_POLL_US),
            polled: AtomicU64::new(0),
            slept: AtomicU64::new(0),
        }
    }

    /// Reads of O_DIRECT files whose completion came while the thread polled, and those it
    /// slept for (the rest were read with `pread`).
    pub fn waits(&self) -> (u64, u64) {
        (self.polled.load(Relaxed), self.slept.load(Relaxed))
    }

    /// One read of `buf.len()` bytes at `offset`: through the thread's ring where the file
    /// bypasses the OS cache, else (or where the ring is unavailable) with `pread`.
    fn read_once(&self, f: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        if self.direct {
            let poll = Duration::from_micros(self.poll_us.load(Relaxed));
            if let Some((result, waited)) = polled::read_at(f.as_raw_fd(), buf, offset, poll) {
                let counter = match waited {
                    Waited::Polled => &self.polled,
                    Waited::Slept => &self.slept,
                };
                counter.fetch_add(1, Relaxed);
                return result;
            }
        }
        f.read_at(buf, offset)
    }

    /// Reads now, blocking the calling thread.
    pub fn read_now(&self, file: FileId, offset: u64, len: usize) -> Result<PageBuf> {
        let path = self.files.path(file);
        let f = self.files.file(file).ok_or_else(|| {
            StorageError::InvalidArgument(format!("file id {} was not opened", file.0))
        })?;
        let mut buf = self.recycler.get(len);
        let guard = self.metrics.start_read();
        let mut done = 0;
        while done < len {
            match self.read_once(&f, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                    ) => {}
                Err(e) => {
                    guard.finish(None);
                    // The buffer serves the next read (and is no longer counted alive).
                    self.recycler.put(buf);
                    return Err(StorageError::io(
                        &path,
                        format!("read {len} bytes at offset {offset}"),
                        e,
                    ));
                }
            }
        }
        if done < len {
            guard.finish(None);
            self.recycler.put(buf);
            return Err(short_read(&path, offset, len, done));
        }
        guard.finish(Some(len));
        Ok(PageBuf::new(buf, Some(self.recycler.clone())))
    }
}

impl IoEngine for SyncEngine {
    fn name(&self) -> &'static str {
        "sync"
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        Ok(self.files.open(path, self.direct)?.0)
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.files.path(file)
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        // The read happens here, before the future is even polled: in-order by construction.
        futures::future::ready(self.read_now(file, offset, len)).boxed()
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        &self.metrics
    }

    fn reads_on_call(&self) -> bool {
        true
    }

    fn max_in_flight(&self) -> usize {
        1
    }

    fn set_poll_budget(&self, micros: u64) {
        self.poll_us.store(micros, Relaxed);
    }

    fn close_in(&self, dir: &Path) -> usize {
        self.files.close_in(dir).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In order on O_DIRECT files reads through the thread's ring, with the poll budget as
    /// set; every read is counted as polled or slept for (none fell back to pread).
    #[test]
    fn direct_reads_go_through_the_polled_ring() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pages");
        let data: Vec<u8> = (0..4 * 4096u32)
            .map(|i| (i / 4096 * 7 + i % 13) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let engine = SyncEngine::new(true);
        let file = engine.open(&path).unwrap();
        for (i, budget) in [0, 100, 0, 1000].into_iter().enumerate() {
            engine.set_poll_budget(budget);
            let page = engine.read_now(file, i as u64 * 4096, 4096).unwrap();
            assert_eq!(&page[..], &data[i * 4096..(i + 1) * 4096]);
        }
        let (polled, slept) = engine.waits();
        assert_eq!(
            polled + slept,
            4,
            "io_uring unavailable: reads fell back to pread"
        );
        // Past the end of the file: the short read is an error naming it.
        let err = engine.read_now(file, 3 * 4096, 8192).unwrap_err();
        assert!(
            err.to_string().contains("short read: 4096 of 8192"),
            "{err}"
        );
    }

    #[test]
    fn reuses_the_given_page_buffers() {
        let recycler = Recycler::new(1 << 20);
        let a = SyncEngine::with_recycler(false, recycler.clone());
        assert!(Arc::ptr_eq(&a.recycler, &recycler));
        // A failed read gives its buffer back.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pages");
        std::fs::write(&path, vec![7u8; 4096]).unwrap();
        let file = a.open(&path).unwrap();
        assert!(a.read_now(file, 0, 8192).is_err(), "a short read");
        assert_eq!(recycler.free_bytes(), 8192, "the buffer came back");
        assert_eq!(recycler.own_bytes(), 8192, "one buffer alive, free");
        let page = a.read_now(file, 0, 4096).unwrap();
        assert_eq!(&page[..], &[7u8; 4096][..]);
    }
}
