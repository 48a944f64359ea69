//! Page reads from an object store (S3, GCS, Azure, or a local directory) as ranged GETs, so the
//! same executor runs over data kept in object storage.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::RwLock;

use super::buf::PageBuf;
use super::metrics::IoMetrics;
use super::{FileId, IoEngine, ReadFuture};
use crate::storage::page::AlignedBuf;
use crate::storage::{Result, StorageError};

/// Reads pages with `get_range` / `get_ranges` on an [`ObjectStore`].
#[derive(Debug)]
pub struct ObjectStoreEngine {
    store: Arc<dyn ObjectStore>,
    /// Maps a local table path to its object location: the path relative to `root`.
    root: PathBuf,
    files: RwLock<Vec<(PathBuf, ObjectPath)>>,
    metrics: Arc<IoMetrics>,
    max_in_flight: usize,
}

impl ObjectStoreEngine {
    /// An engine reading the files under `root` from `store`, where the file `root/a/b` is the
    /// object `a/b`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        root: impl Into<PathBuf>,
        max_in_flight: usize,
    ) -> Self {
        Self {
            store,
            root: root.into(),
            files: RwLock::new(Vec::new()),
            metrics: IoMetrics::new(),
            max_in_flight,
        }
    }

    fn location(&self, file: FileId) -> Option<ObjectPath> {
        self.files.read().get(file.0 as usize).map(|f| f.1.clone())
    }
}

fn to_page(bytes: &[u8], len: usize, path: &Path, offset: u64) -> Result<PageBuf> {
    if bytes.len() < len {
        return Err(super::files::short_read(path, offset, len, bytes.len()));
    }
    let mut buf = AlignedBuf::zeroed(len);
    buf.copy_from_slice(&bytes[..len]);
    Ok(PageBuf::new(buf, None))
}

impl IoEngine for ObjectStoreEngine {
    fn name(&self) -> &'static str {
        "object_store"
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        let rel = path.strip_prefix(&self.root).map_err(|_| {
            StorageError::InvalidArgument(format!(
                "{} is not under the object store root {}",
                path.display(),
                self.root.display()
            ))
        })?;
        let location = ObjectPath::from(rel.to_string_lossy().as_ref());
        let mut files = self.files.write();
        if let Some(i) = files.iter().position(|f| f.0 == path) {
            return Ok(FileId(i as u32));
        }
        files.push((path.to_path_buf(), location));
        Ok(FileId(files.len() as u32 - 1))
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.files
            .read()
            .get(file.0 as usize)
            .map(|f| f.0.clone())
            .unwrap_or_default()
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        let store = self.store.clone();
        let location = self.location(file);
        let path = self.path(file);
        let metrics = self.metrics.clone();
        async move {
            let location = location.ok_or_else(|| {
                StorageError::InvalidArgument(format!("file id {} was not opened", file.0))
            })?;
            let guard = metrics.start_read();
            let got = store
                .get_range(&location, offset..offset + len as u64)
                .await;
            let page = got
                .map_err(|e| {
                    StorageError::io(
                        &path,
                        format!("GET {len} bytes at {offset}"),
                        std::io::Error::other(e),
                    )
                })
                .and_then(|bytes| to_page(&bytes, len, &path, offset));
            guard.finish(page.as_ref().ok().map(|_| len));
            page
        }
        .boxed()
    }

    fn read_batch(&self, reads: &[(FileId, u64, usize)]) -> Vec<ReadFuture> {
        // One get_ranges call per file: stores coalesce nearby ranges into fewer requests.
        let mut by_file: std::collections::BTreeMap<FileId, Vec<usize>> = Default::default();
        for (i, r) in reads.iter().enumerate() {
            by_file.entry(r.0).or_default().push(i);
        }
        let mut out: Vec<Option<ReadFuture>> = (0..reads.len()).map(|_| None).collect();
        for (file, idxs) in by_file {
            let ranges: Vec<_> = idxs
                .iter()
                .map(|&i| reads[i].1..reads[i].1 + reads[i].2 as u64)
                .collect();
            let store = self.store.clone();
            let location = self.location(file);
            let path = self.path(file);
            let metrics = self.metrics.clone();
            let guards: Vec<_> = idxs.iter().map(|_| metrics.start_read()).collect();
            let batch = async move {
                let location =
                    location.ok_or_else(|| format!("file id {} was not opened", file.0))?;
                store
                    .get_ranges(&location, &ranges)
                    .await
                    .map_err(|e| e.to_string())
            }
            .shared();
            for (k, (&i, guard)) in idxs.iter().zip(guards).enumerate() {
                let batch = batch.clone();
                let (offset, len) = (reads[i].1, reads[i].2);
                let path = path.clone();
                out[i] = Some(
                    async move {
                        let page = match batch.await {
                            Ok(parts) => to_page(&parts[k], len, &path, offset),
                            Err(e) => Err(StorageError::io(
                                &path,
                                format!("GET {len} bytes at {offset}"),
                                std::io::Error::other(e),
                            )),
                        };
                        guard.finish(page.as_ref().ok().map(|_| len));
                        page
                    }
                    .boxed(),
                );
            }
        }
        out.into_iter()
            .map(|f| f.expect("every read assigned"))
            .collect()
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        &self.metrics
    }

    fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
}
