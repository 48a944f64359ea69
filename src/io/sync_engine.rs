//! The synchronous engine: `pread` on the calling thread.
//!
//! This is the in-order engine of the paper (IODE): the caller waits for each read before it
//! can issue the next. In order, a query's nodes run inside their consumers' polls, so each
//! pipeline (partition) of the query has one read outstanding; queries on other threads read
//! at the same time (no lock is held across the system call). It is also the fallback where
//! io_uring cannot be set up.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;

use super::buf::{PageBuf, Recycler};
use super::files::{FileTable, short_read};
use super::metrics::IoMetrics;
use super::{FileId, IoEngine, ReadFuture};
use crate::storage::{Result, StorageError};

/// Synchronous `pread` engine.
#[derive(Debug)]
pub struct SyncEngine {
    files: FileTable,
    recycler: Arc<Recycler>,
    metrics: Arc<IoMetrics>,
    direct: bool,
}

impl SyncEngine {
    /// A pread engine; `direct` opens files with O_DIRECT.
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
        }
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
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    guard.finish(None);
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
            return Err(short_read(&path, offset, len, done));
        }
        guard.finish(Some(len));
        Ok(PageBuf::new(buf, Some(self.recycler.clone())))
    }
}

impl IoEngine for SyncEngine {
    fn name(&self) -> &'static str {
        "pread"
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

    fn close_in(&self, dir: &Path) -> usize {
        self.files.close_in(dir).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_given_page_buffers() {
        let recycler = Recycler::new(1 << 20);
        let a = SyncEngine::with_recycler(false, recycler.clone());
        assert!(Arc::ptr_eq(&a.recycler, &recycler));
    }
}
