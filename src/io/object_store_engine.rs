//! Page reads from an object store (S3, GCS, Azure, HTTP, or a local directory): one ranged
//! GET per page, so the same executor runs over tables kept in object storage.
//!
//! ```text
//!   read(file, offset, len) ──spawn──> the engine's own I/O runtime: GET bytes=offset..+len
//!        ReadFuture <── page (a recycled aligned buffer) ──┘   (dropped early: request aborted)
//! ```
//!
//! Requests run on a runtime of the engine's own, not on the caller's: the optimizer waits
//! for its range counts while blocking a worker of the query runtime, and requests that needed
//! that runtime's reactor would then never finish. How many requests are in flight is decided
//! by the caller's admission and budget, as for local reads; object_store's `get_ranges`
//! (10 requests at a time) is not used.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::RwLock;

use super::buf::{PageBuf, Recycler};
use super::metrics::IoMetrics;
use super::{FileId, IoEngine, ReadFuture};
use crate::storage::{Result, StorageError};

/// Reads pages with one `get_range` per page on an [`ObjectStore`].
#[derive(Debug)]
pub struct ObjectStoreEngine {
    store: Arc<dyn ObjectStore>,
    /// Maps a file's path to its object: the path relative to `root` (a directory, or a URL
    /// such as `s3://bucket` whose paths are `s3://bucket/key`).
    root: PathBuf,
    /// Opened files: path, version (empty if none given) and object.
    files: RwLock<Vec<(PathBuf, String, ObjectPath)>>,
    metrics: Arc<IoMetrics>,
    max_in_flight: usize,
    recycler: Arc<Recycler>,
    requests: RequestRuntime,
}

/// The runtime the engine's requests run on; shut down without waiting when the engine goes
/// (it may be dropped inside another runtime, where a blocking shutdown is not allowed).
#[derive(Debug)]
struct RequestRuntime(Option<tokio::runtime::Runtime>);

impl RequestRuntime {
    fn new() -> Result<Self> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ooode-object-store")
            .enable_all()
            .build()
            .map(|rt| Self(Some(rt)))
            .map_err(|e| StorageError::io("<object store runtime>", "start", e))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("runtime lives until drop").handle()
    }
}

impl Drop for RequestRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Aborts a spawned request when the read waiting for it is dropped (a cancelled query).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ObjectStoreEngine {
    /// An engine reading the files under `root` from `store`, where the file `root/a/b` is the
    /// object `a/b`; `max_in_flight` is what it reports as its depth (admission decides).
    ///
    /// # Panics
    /// If the engine's request runtime cannot be started (no threads left); see
    /// [`ObjectStoreEngine::try_new`].
    pub fn new(
        store: Arc<dyn ObjectStore>,
        root: impl Into<PathBuf>,
        max_in_flight: usize,
    ) -> Self {
        Self::try_new(store, root, max_in_flight, Recycler::new(0))
            .expect("start the object store engine's runtime")
    }

    /// As [`ObjectStoreEngine::new`], with page buffers from (and back to) `recycler`.
    pub fn try_new(
        store: Arc<dyn ObjectStore>,
        root: impl Into<PathBuf>,
        max_in_flight: usize,
        recycler: Arc<Recycler>,
    ) -> Result<Self> {
        Ok(Self {
            store,
            root: root.into(),
            files: RwLock::new(Vec::new()),
            metrics: IoMetrics::new(),
            max_in_flight,
            recycler,
            requests: RequestRuntime::new()?,
        })
    }

    fn file(&self, file: FileId) -> Option<(PathBuf, ObjectPath)> {
        self.files
            .read()
            .get(file.0 as usize)
            .map(|f| (f.0.clone(), f.2.clone()))
    }
}

/// The error of a failed GET, naming the object and the bytes asked for.
fn get_error(path: &Path, offset: u64, len: usize, e: object_store::Error) -> StorageError {
    store_error(
        path,
        format!("GET bytes {offset}..{}", offset + len as u64),
        e,
    )
}

/// An object store error as a storage error on `path` doing `op` (missing and refused
/// objects keep their kind).
pub fn store_error(
    path: impl Into<PathBuf>,
    op: impl Into<String>,
    e: object_store::Error,
) -> StorageError {
    let kind = match &e {
        object_store::Error::NotFound { .. } => std::io::ErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => std::io::ErrorKind::PermissionDenied,
        _ => std::io::ErrorKind::Other,
    };
    StorageError::io(path, op, std::io::Error::new(kind, with_causes(&e)))
}

/// An error's message followed by those of its causes not already in it: object_store's
/// "error sending request" says why (a timeout, a refused connection) only in its sources.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let line = c.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = c.source();
    }
    text
}

impl IoEngine for ObjectStoreEngine {
    fn name(&self) -> &'static str {
        "object_store"
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        self.open_version(path, "")
    }

    fn open_version(&self, path: &Path, version: &str) -> Result<FileId> {
        let rel = path.strip_prefix(&self.root).map_err(|_| {
            StorageError::InvalidArgument(format!(
                "{} is not under the object store root {}",
                path.display(),
                self.root.display()
            ))
        })?;
        let location = ObjectPath::from(rel.to_string_lossy().as_ref());
        let same = |f: &(PathBuf, String, ObjectPath)| f.0 == path && f.1 == version;
        if let Some(i) = self.files.read().iter().position(same) {
            return Ok(FileId(i as u32));
        }
        let mut files = self.files.write();
        if let Some(i) = files.iter().position(same) {
            return Ok(FileId(i as u32));
        }
        files.push((path.to_path_buf(), version.to_string(), location));
        Ok(FileId(files.len() as u32 - 1))
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.file(file).map(|f| f.0).unwrap_or_default()
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        let Some((path, location)) = self.file(file) else {
            let e = StorageError::InvalidArgument(format!("file id {} was not opened", file.0));
            return futures::future::ready(Err(e)).boxed();
        };
        let (store, recycler) = (self.store.clone(), self.recycler.clone());
        let guard = self.metrics.start_read();
        let request = self.requests.handle().spawn(async move {
            let got = store
                .get_range(&location, offset..offset + len as u64)
                .await
                .map_err(|e| get_error(&path, offset, len, e));
            let page = got.and_then(|bytes| {
                if bytes.len() < len {
                    return Err(super::files::short_read(&path, offset, len, bytes.len()));
                }
                let mut buf = recycler.get(len);
                buf.copy_from_slice(&bytes[..len]);
                Ok(PageBuf::new(buf, Some(recycler)))
            });
            guard.finish(page.as_ref().ok().map(|_| len));
            page
        });
        let abort = AbortOnDrop(request.abort_handle());
        async move {
            let out = request.await;
            drop(abort);
            out.unwrap_or_else(|e| {
                Err(StorageError::io(
                    "<object store request>",
                    "GET",
                    std::io::Error::other(e),
                ))
            })
        }
        .boxed()
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        &self.metrics
    }

    fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
}
