//! Tables kept in object storage (`s3://bucket/path/t`, `gs://...`, `http(s)://...`,
//! `file://...` through DataFusion's object store registry).
//!
//! ```text
//!   open: LIST the table's prefix (sizes, e-tags) + GET manifest.json ──> Table (checked:
//!         every object there and long enough), kept with the provider like a local table
//!   read: TableIo ──> ObjectStoreEngine (one per store and runtime): a ranged GET per page,
//!         pages keyed in the buffer pool by object URL and e-tag
//! ```
//!
//! A table's URL stands for its directory: its objects are named as its files would be
//! (`<url>/heap.0.pages`), so errors name the object, and the layers below need no second
//! kind of location.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;

use crate::io::object_store_engine::store_error;
use crate::storage::columnar_sums::BlockSums;
use crate::storage::manifest::MANIFEST_FILE;
use crate::storage::segments::{SEGMENTS_FILE, SegmentList};
use crate::storage::{Result, StorageError, Table};

/// A table in object storage, opened: its manifest and the version of each of its objects.
#[derive(Debug)]
pub struct RemoteTable {
    url: PathBuf,
    /// Its first segment (schema, how segments are built).
    table: Arc<Table>,
    /// Its segments (the bulk load first), as listed in `segments.json` when it was opened.
    segments: Vec<Arc<Table>>,
    /// That list and its object's e-tag (None: the table has no `segments.json`).
    list: Option<(SegmentList, Option<String>)>,
    store: Arc<dyn ObjectStore>,
    /// The store's URL (`s3://bucket`): the engine's root.
    store_url: String,
    /// Object URL -> version (e-tag, else size and modification time).
    versions: HashMap<PathBuf, String>,
}

/// Splits a table URL into its store's URL (`scheme://authority`) and the object prefix.
pub fn split_url(url: &str) -> Result<(String, ObjectPath)> {
    let bad = |why: &str| StorageError::InvalidArgument(format!("table location '{url}': {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("not a URL (scheme://bucket/path)"))?;
    if scheme.is_empty() {
        return Err(bad("no scheme"));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = ObjectPath::parse(path.trim_end_matches('/'))
        .map_err(|e| bad(&format!("bad object path: {e}")))?;
    Ok((format!("{scheme}://{authority}"), prefix))
}

impl RemoteTable {
    /// Opens the table at `url` in `store`: lists its objects and reads its manifest.
    pub async fn open(store: Arc<dyn ObjectStore>, url: &str) -> Result<Self> {
        let url = url.trim_end_matches('/');
        let (store_url, prefix) = split_url(url)?;
        let manifest_url = format!("{url}/{MANIFEST_FILE}");
        let manifest_object = prefix.clone().join(MANIFEST_FILE);
        let listed = async {
            store
                .list(Some(&prefix))
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| store_error(url, "LIST", e))
        };
        let manifest = async {
            match store.get(&manifest_object).await {
                Ok(got) => got
                    .bytes()
                    .await
                    .map_err(|e| store_error(&manifest_url, "GET", e)),
                Err(object_store::Error::NotFound { .. }) => Err(StorageError::NotATable {
                    path: PathBuf::from(url),
                    why: format!("it has no {MANIFEST_FILE}"),
                }),
                Err(e) => Err(store_error(&manifest_url, "GET", e)),
            }
        };
        let (listed, manifest) = futures::future::try_join(listed, manifest).await?;
        let text = String::from_utf8(manifest.to_vec()).map_err(|_| {
            StorageError::corrupted(&manifest_url, None, "manifest is not UTF-8 text")
        })?;
        let mut sizes = HashMap::new();
        let mut versions = HashMap::new();
        for meta in listed {
            let object_url = PathBuf::from(format!("{store_url}/{}", meta.location));
            let version = meta.e_tag.clone().unwrap_or_else(|| {
                format!(
                    "{}@{}",
                    meta.size,
                    meta.last_modified.timestamp_nanos_opt().unwrap_or(0)
                )
            });
            sizes.insert(object_url.clone(), meta.size);
            versions.insert(object_url, version);
        }
        let size_of = |path: &Path| -> Result<u64> {
            sizes.get(path).copied().ok_or_else(|| {
                StorageError::io(
                    path,
                    "find the object",
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
                )
            })
        };
        // A table that grew by INSERT: its other segments, their manifests fetched together.
        let list_url = PathBuf::from(format!("{url}/{SEGMENTS_FILE}"));
        let listed = match sizes.contains_key(&list_url) {
            true => fetch_segment_list(&store, url, &prefix).await?,
            false => None,
        };
        // The bulk load (the manifest at the top, which marks the table) is a segment until
        // a compaction replaces it; then its files may be gone.
        let names: Vec<String> = match &listed {
            Some((list, _)) => list.segments.clone(),
            None => vec![".".into()],
        };
        let root = match names.iter().any(|s| s == ".") {
            true => Some(Arc::new(Table::open_remote(
                PathBuf::from(url),
                &text,
                &size_of,
            )?)),
            false => None,
        };
        let segments: Vec<Arc<Table>> = futures::future::try_join_all(names.iter().map(|s| {
            let root = root.clone();
            let size_of = &size_of;
            let (store, prefix) = (&store, &prefix);
            async move {
                match root {
                    Some(root) if s == "." => Ok(root),
                    _ => open_segment(store, url, prefix, s, size_of).await,
                }
            }
        }))
        .await?;
        let table = segments[0].clone();
        let list = listed;
        Ok(Self {
            url: PathBuf::from(url),
            table,
            segments,
            list,
            store,
            store_url,
            versions,
        })
    }

    /// The table's segments, in the order of its list.
    pub fn segments(&self) -> &[Arc<Table>] {
        &self.segments
    }

    /// The segment list the table was opened with, and its object's e-tag.
    pub fn segment_list(&self) -> Option<&(SegmentList, Option<String>)> {
        self.list.as_ref()
    }

    /// The table's first segment (its schema, how segments are built; [`Self::segments`]
    /// has them all).
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// The object store holding it.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The store's URL (`s3://bucket`).
    pub fn store_url(&self) -> &str {
        &self.store_url
    }

    /// The table's URL.
    pub fn url(&self) -> &Path {
        &self.url
    }

    /// The object path of one of the table's files, named by its URL.
    pub fn object_path(&self, file_url: &Path) -> Result<ObjectPath> {
        let rel = file_url.strip_prefix(&self.store_url).map_err(|_| {
            StorageError::InvalidArgument(format!(
                "{} is not in {}",
                file_url.display(),
                self.store_url
            ))
        })?;
        ObjectPath::parse(rel.to_string_lossy().as_ref())
            .map_err(|e| StorageError::InvalidArgument(format!("{}: {e}", file_url.display())))
    }

    /// The block checksums of `segment`'s columnar copy, fetched (one GET) and checked
    /// against the manifest; None for a table loaded before copies had them.
    pub async fn columnar_sums(&self, segment: &Table) -> Result<Option<Arc<BlockSums>>> {
        let (Some(sums), Some(columnar)) = (
            &segment.manifest().columnar_sums,
            &segment.manifest().columnar,
        ) else {
            return Ok(None);
        };
        let url = segment.dir().join(&sums.file);
        let got = self
            .store
            .get(&self.object_path(&url)?)
            .await
            .map_err(|e| store_error(&url, "GET", e))?;
        let bytes = got.bytes().await.map_err(|e| store_error(&url, "GET", e))?;
        let parsed = BlockSums::from_bytes(&bytes, sums, &url)?;
        parsed.check_covers(segment.columnar_bytes(), &segment.dir().join(columnar))?;
        Ok(Some(Arc::new(parsed)))
    }

    /// The version of the object at `file_url` when the table was opened.
    pub fn version(&self, file_url: &Path) -> Option<&str> {
        self.versions.get(file_url).map(String::as_str)
    }
}

/// The segment list of the table at `url` (`prefix` in `store`) and its object's e-tag;
/// None when the table has no `segments.json`.
pub async fn fetch_segment_list(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
) -> Result<Option<(SegmentList, Option<String>)>> {
    let list_url = PathBuf::from(format!("{url}/{SEGMENTS_FILE}"));
    let got = match store.get(&prefix.clone().join(SEGMENTS_FILE)).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(store_error(&list_url, "GET", e)),
    };
    let e_tag = got.meta.e_tag.clone();
    let bytes = got
        .bytes()
        .await
        .map_err(|e| store_error(&list_url, "GET", e))?;
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| StorageError::corrupted(&list_url, None, "not UTF-8 text"))?;
    Ok(Some((SegmentList::parse(&text, &list_url)?, e_tag)))
}

/// Opens segment `name` of the table at `url` (`prefix` in `store`).
async fn open_segment(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
    name: &str,
    size_of: &(dyn Fn(&Path) -> Result<u64> + Sync),
) -> Result<Arc<Table>> {
    let seg_url = format!("{url}/{name}");
    let manifest_url = format!("{seg_url}/{MANIFEST_FILE}");
    let object = prefix.clone().join(name).join(MANIFEST_FILE);
    let got = store
        .get(&object)
        .await
        .map_err(|e| store_error(&manifest_url, "GET", e))?;
    let bytes = got
        .bytes()
        .await
        .map_err(|e| store_error(&manifest_url, "GET", e))?;
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| StorageError::corrupted(&manifest_url, None, "manifest is not UTF-8 text"))?;
    Ok(Arc::new(Table::open_remote(
        PathBuf::from(seg_url),
        &text,
        size_of,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_store_and_prefix() {
        let (store, prefix) = split_url("s3://bucket/a/b/t/").unwrap();
        assert_eq!(store, "s3://bucket");
        assert_eq!(prefix.as_ref(), "a/b/t");
        let (store, prefix) = split_url("http://127.0.0.1:9000/bkt/t").unwrap();
        assert_eq!(store, "http://127.0.0.1:9000");
        assert_eq!(prefix.as_ref(), "bkt/t");
        assert!(split_url("/local/dir").is_err());
        assert!(split_url("://x/y").is_err());
    }
}
