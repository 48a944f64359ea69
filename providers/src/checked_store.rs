//! An object store that checks what DataFusion's Parquet reader fetches of a columnar copy
//! against its block checksums ([`ooode::storage::columnar_sums`]).
//!
//! ```text
//!   ParquetSource ──get_range(r)──> CheckedStore ──get_opts(r widened to 64 KiB blocks)──> store
//!                   <── r's bytes ──  CRC32C of every block checked  <──────────────────────┘
//! ```
//!
//! Each table's provider registers one under a URL of its own (`ooode-checked://p<process>-t<n>`) in the
//! session's `RuntimeEnv` and points its Parquet scan there; files it does not know (none, in
//! practice) pass through unchecked. A block that fails is an error naming file and block,
//! never bytes handed to the decoder.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use datafusion::execution::object_store::ObjectStoreUrl;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use ooode::storage::columnar_sums::BlockSums;
use parking_lot::RwLock;

/// A file whose reads are checked: its checksums and its name for errors.
#[derive(Debug, Clone)]
struct Checked {
    sums: Arc<BlockSums>,
    name: PathBuf,
}

/// See the module documentation.
#[derive(Debug)]
pub struct CheckedStore {
    inner: Arc<dyn ObjectStore>,
    url: ObjectStoreUrl,
    files: RwLock<HashMap<ObjectPath, Checked>>,
}

impl fmt::Display for CheckedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CheckedStore({})", self.inner)
    }
}

impl CheckedStore {
    /// A checked view of `inner`, under a URL no other store has.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Unique beyond this process too: a worker given plans by several coordinators
        // knows each store by its URL.
        static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let process = *PROCESS.get_or_init(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            // RandomState is seeded at random per process.
            std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                (nanos, std::process::id()),
            )
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let url = ObjectStoreUrl::parse(format!("ooode-checked://p{process:x}-t{n}"))
            .expect("a well-formed store URL");
        Arc::new(Self {
            inner,
            url,
            files: RwLock::default(),
        })
    }

    /// The URL to register this store under and to scan through.
    pub fn url(&self) -> &ObjectStoreUrl {
        &self.url
    }

    /// Reads of `location` are checked against `sums`; errors name the file `name`.
    pub fn check(&self, location: ObjectPath, sums: Arc<BlockSums>, name: PathBuf) {
        self.files.write().insert(location, Checked { sums, name });
    }

    async fn checked_get(
        &self,
        location: &ObjectPath,
        mut options: GetOptions,
        file: Checked,
    ) -> object_store::Result<GetResult> {
        let len = file.sums.file_len();
        let wanted: Range<u64> = match &options.range {
            None => 0..len,
            Some(GetRange::Bounded(r)) => r.start..r.end.min(len),
            Some(GetRange::Offset(o)) => *o..len,
            Some(GetRange::Suffix(n)) => len.saturating_sub(*n)..len,
        };
        if wanted.start >= wanted.end {
            // Empty or past the end: the store's own answer (an error, or nothing).
            return self.inner.get_opts(location, options).await;
        }
        let widened = file.sums.widen(wanted.clone());
        options.range = Some(GetRange::Bounded(widened.clone()));
        let got = self.inner.get_opts(location, options).await?;
        let (meta, attributes) = (got.meta.clone(), got.attributes.clone());
        let bytes = got.bytes().await?;
        let damaged = |e: ooode::storage::StorageError| object_store::Error::Generic {
            store: "ooode columnar copy",
            source: Box::new(e),
        };
        file.sums
            .verify(widened.start, &bytes, &file.name)
            .map_err(damaged)?;
        let from = (wanted.start - widened.start) as usize;
        let to = from + (wanted.end - wanted.start) as usize;
        if bytes.len() < to {
            return Err(damaged(ooode::storage::StorageError::corrupted(
                file.name.clone(),
                None,
                format!(
                    "short read: {} bytes of {}",
                    bytes.len(),
                    widened.end - widened.start
                ),
            )));
        }
        let part = bytes.slice(from..to);
        Ok(GetResult {
            payload: GetResultPayload::Stream(
                futures::stream::once(async move { Ok(part) }).boxed(),
            ),
            meta,
            range: wanted,
            attributes,
        })
    }
}

#[async_trait]
impl ObjectStore for CheckedStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let file = self.files.read().get(location).cloned();
        match file {
            Some(file) if !options.head => self.checked_get(location, options, file).await,
            _ => self.inner.get_opts(location, options).await,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjectPath>,
        offset: &ObjectPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn ranges_are_checked_by_whole_blocks() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = ObjectPath::from("t/columns.parquet");
        inner.put(&path, data.clone().into()).await.unwrap();
        let store = CheckedStore::new(inner.clone());
        let sums = Arc::new(BlockSums::of(&data, 65536));
        store.check(path.clone(), sums, "t/columns.parquet".into());
        let got = store.get_range(&path, 70_000..140_001).await.unwrap();
        assert_eq!(&got[..], &data[70_000..140_001]);
        let tail = store
            .get_opts(
                &path,
                GetOptions {
                    range: Some(GetRange::Suffix(10)),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(tail.range, 299_990..300_000);
        assert_eq!(&tail.bytes().await.unwrap()[..], &data[299_990..]);
        // One byte changed in the store: a read touching its block fails naming it; a read
        // of other blocks does not.
        let mut damaged = data.clone();
        damaged[131_100] ^= 0x10;
        inner.put(&path, damaged.into()).await.unwrap();
        let e = store.get_range(&path, 140_000..140_010).await.unwrap_err();
        assert!(
            e.to_string().contains("t/columns.parquet") && e.to_string().contains("block 2"),
            "{e}"
        );
        assert!(store.get_range(&path, 0..131_072).await.is_ok());
    }
}
