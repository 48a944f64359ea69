//! The synchronous engine: one `pread` at a time, on the calling thread.
//!
//! This is the in-order engine of the paper (IODE): the caller waits for each read before it
//! can issue the next, and reads from several threads take turns, so at most one read is
//! outstanding per engine. It is also the fallback where io_uring cannot be set up.

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
    one_at_a_time: parking_lot::Mutex<()>,
}

impl SyncEngine {
    /// A pread engine; `direct` opens files with O_DIRECT.
    pub fn new(direct: bool) -> Self {
        Self {
            files: FileTable::default(),
            // Pages evicted from the pool come back to the process's frames.
            recycler: Recycler::shared(),
            metrics: IoMetrics::new(),
            direct,
            one_at_a_time: parking_lot::Mutex::new(()),
        }
    }

    /// Reads now, blocking the calling thread.
    pub fn read_now(&self, file: FileId, offset: u64, len: usize) -> Result<PageBuf> {
        let path = self.files.path(file);
        let f = self.files.file(file).ok_or_else(|| {
            StorageError::InvalidArgument(format!("file id {} was not opened", file.0))
        })?;
        let mut buf = self.recycler.get(len);
        let _turn = self.one_at_a_time.lock();
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

    fn max_in_flight(&self) -> usize {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_process_wide_page_buffers() {
        let a = SyncEngine::new(false);
        let b = SyncEngine::new(true);
        assert!(Arc::ptr_eq(&a.recycler, &Recycler::shared()));
        assert!(Arc::ptr_eq(&a.recycler, &b.recycler));
    }
}
