//! A fault-injecting engine wrapper for tests: errors, short reads, corruption and delays on
//! chosen pages, everything else passed through.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use parking_lot::Mutex;

use super::buf::PageBuf;
use super::metrics::IoMetrics;
use super::{FileId, IoEngine, ReadFuture, ReadSink};
use crate::storage::page::AlignedBuf;
use crate::storage::{Result, StorageError};

/// What to do to a read.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Fail with this OS error number (e.g. `libc::EIO`).
    Error(i32),
    /// Return only the first `n` bytes (reported as a short read).
    ShortRead(usize),
    /// Flip the bits of the byte at this offset within the page.
    Corrupt(usize),
    /// Complete after this delay.
    Delay(Duration),
}

/// Wraps an engine and applies [`Fault`]s to reads of chosen (file, offset) pairs.
#[derive(Debug)]
pub struct FaultyEngine {
    inner: Arc<dyn IoEngine>,
    faults: Mutex<HashMap<(PathBuf, u64), Fault>>,
}

impl FaultyEngine {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn IoEngine>) -> Self {
        Self {
            inner,
            faults: Mutex::new(HashMap::new()),
        }
    }

    /// Applies `fault` to every read of `offset` in file `path` from now on.
    pub fn inject(&self, path: &Path, offset: u64, fault: Fault) {
        let key = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        self.faults.lock().insert((key, offset), fault);
    }

    /// Removes all faults.
    pub fn clear(&self) {
        self.faults.lock().clear();
    }
}

/// `fault` (not a delay) applied to the outcome of a read of `len` bytes at `offset` of
/// `path`. An error fault fails the read once the real one ended, as a failing device would.
fn apply(
    fault: &Fault,
    path: &Path,
    offset: u64,
    len: usize,
    read: Result<PageBuf>,
) -> Result<PageBuf> {
    let page = read?;
    match *fault {
        Fault::Error(errno) => Err(StorageError::io(
            path,
            format!("read {len} bytes at offset {offset}"),
            std::io::Error::from_raw_os_error(errno),
        )),
        Fault::ShortRead(n) => Err(super::files::short_read(path, offset, len, n.min(len))),
        Fault::Corrupt(at) => {
            let mut copy = AlignedBuf::zeroed(page.len());
            copy.copy_from_slice(&page);
            if let Some(b) = copy.get_mut(at) {
                *b ^= 0xFF;
            }
            Ok(PageBuf::new(copy, None))
        }
        Fault::Delay(_) => Ok(page),
    }
}

/// A read started into a sink, with its fault: applied when the read ends (a delay on a
/// thread of its own, the completion's thread being someone else's).
struct Faulted {
    sink: Arc<dyn ReadSink>,
    fault: Fault,
    path: PathBuf,
    offset: u64,
    len: usize,
}

impl ReadSink for Faulted {
    fn complete(&self, token: u64, result: Result<PageBuf>, ended: Instant) {
        if let Fault::Delay(d) = self.fault {
            let sink = self.sink.clone();
            std::thread::spawn(move || {
                std::thread::sleep(d);
                sink.complete(token, result, Instant::now());
            });
            return;
        }
        let result = apply(&self.fault, &self.path, self.offset, self.len, result);
        self.sink.complete(token, result, ended);
    }
}

impl IoEngine for FaultyEngine {
    fn name(&self) -> &'static str {
        "faulty"
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        self.inner.open(path)
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.inner.path(file)
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        let path = self.inner.path(file);
        let fault = self.faults.lock().get(&(path.clone(), offset)).cloned();
        let read = self.inner.read(file, offset, len);
        match fault {
            None => read,
            Some(Fault::Error(errno)) => {
                // The real read still runs (and completes), as a failing device would.
                drop(read);
                let err = StorageError::io(
                    path,
                    format!("read {len} bytes at offset {offset}"),
                    std::io::Error::from_raw_os_error(errno),
                );
                futures::future::ready(Err(err)).boxed()
            }
            Some(fault) if !matches!(fault, Fault::Delay(_)) => {
                async move { apply(&fault, &path, offset, len, read.await) }.boxed()
            }
            Some(Fault::Delay(d)) => async move {
                tokio::time::sleep(d).await;
                read.await
            }
            .boxed(),
            Some(_) => unreachable!("every other fault is applied above"),
        }
    }

    fn starts_reads(&self) -> bool {
        self.inner.starts_reads()
    }

    fn start_read(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        class: usize,
        sink: &Arc<dyn ReadSink>,
        token: u64,
    ) -> bool {
        let path = self.inner.path(file);
        let Some(fault) = self.faults.lock().get(&(path.clone(), offset)).cloned() else {
            return self.inner.start_read(file, offset, len, class, sink, token);
        };
        let faulted: Arc<dyn ReadSink> = Arc::new(Faulted {
            sink: sink.clone(),
            fault,
            path,
            offset,
            len,
        });
        self.inner
            .start_read(file, offset, len, class, &faulted, token)
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        self.inner.metrics()
    }

    fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight()
    }

    fn close_in(&self, dir: &Path) -> usize {
        self.inner.close_in(dir)
    }

    fn reap_now(&self) -> bool {
        self.inner.reap_now()
    }
}
