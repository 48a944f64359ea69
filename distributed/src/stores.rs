//! The object stores a worker reads through.
//!
//! A stage sent to a worker names stores by URL, as the coordinator registered them. The
//! worker's registry ([`WorkerStores`]) answers for those it does not have:
//! - `s3://`, `gs://`, `az://`, `http(s)://` stores are built from the worker's own
//!   environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as datafusion-cli builds them: the
//!   coordinator's credentials never travel;
//! - an ooode table's columnar copy is read through a store checking its block checksums,
//!   registered under a URL of the coordinator's own (`ooode-checked://...`). The worker
//!   answers for such a URL with a [`PendingStore`] (the Parquet scan that names it is
//!   decoded before the ooode scan above it), which the ooode scan's decoding then binds to
//!   the worker's own checking store of the same file.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use datafusion::common::Result;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use parking_lot::Mutex;
use url::Url;

/// The scheme of ooode's checking stores' URLs.
const CHECKED_SCHEME: &str = "ooode-checked";

/// Pending stores by URL, process-wide (the URLs are unique to the coordinator process that
/// made them).
static PENDING: Mutex<Option<HashMap<String, Weak<PendingStore>>>> = Mutex::new(None);

/// See the module documentation.
#[derive(Debug)]
pub struct WorkerStores {
    inner: Arc<dyn ObjectStoreRegistry>,
    /// Makes one store per URL when several stages ask at once.
    making: Mutex<()>,
}

impl WorkerStores {
    /// A registry answering first from `inner` (the stores registered so far).
    pub fn new(inner: Arc<dyn ObjectStoreRegistry>) -> Self {
        Self {
            inner,
            making: Mutex::new(()),
        }
    }
}

/// `runtime` with a [`WorkerStores`] registry over its own (the same memory pool, disk
/// manager and caches).
pub fn worker_runtime(runtime: &RuntimeEnv) -> Arc<RuntimeEnv> {
    let registry = Arc::new(WorkerStores::new(runtime.object_store_registry.clone()));
    Arc::new(
        RuntimeEnvBuilder::from_runtime_env(runtime)
            .with_object_store_registry(registry)
            .build()
            .expect("a runtime built from a running one"),
    )
}

impl ObjectStoreRegistry for WorkerStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let missing = match self.inner.get_store(url) {
            Ok(store) => return Ok(store),
            Err(e) => e,
        };
        let _making = self.making.lock();
        if let Ok(store) = self.inner.get_store(url) {
            return Ok(store);
        }
        let store: Arc<dyn ObjectStore> = if url.scheme() == CHECKED_SCHEME {
            PendingStore::for_url(url)
        } else {
            let base = format!("{}://{}", url.scheme(), url.authority());
            match ooode_providers::remote::store_from_env(&base)? {
                Some(store) => store,
                None => return Err(missing),
            }
        };
        self.inner.register_store(url, store.clone());
        Ok(store)
    }
}

/// A store named by the coordinator, bound to this process's store of the same files when
/// the plan node that reads them is decoded.
#[derive(Debug)]
pub struct PendingStore {
    url: String,
    bound: OnceLock<Arc<dyn ObjectStore>>,
}

impl std::fmt::Display for PendingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingStore({})", self.url)
    }
}

fn url_key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.authority())
}

impl PendingStore {
    fn for_url(url: &Url) -> Arc<Self> {
        let key = url_key(url);
        let mut pending = PENDING.lock();
        let map = pending.get_or_insert_with(HashMap::new);
        map.retain(|_, s| s.strong_count() > 0);
        if let Some(store) = map.get(&key).and_then(Weak::upgrade) {
            return store;
        }
        let store = Arc::new(Self {
            url: key.clone(),
            bound: OnceLock::new(),
        });
        map.insert(key, Arc::downgrade(&store));
        store
    }

    /// Binds the pending store of `url`, if this process made one, to `store` (a store is
    /// bound once: later plans name the same files).
    pub fn bind(url: &str, store: Arc<dyn ObjectStore>) -> bool {
        let Ok(url) = Url::parse(url) else {
            return false;
        };
        let found = PENDING
            .lock()
            .as_ref()
            .and_then(|m| m.get(&url_key(&url)).and_then(Weak::upgrade));
        match found {
            Some(pending) => {
                let _ = pending.bound.set(store);
                true
            }
            None => false,
        }
    }

    fn target(&self) -> object_store::Result<&Arc<dyn ObjectStore>> {
        self.bound
            .get()
            .ok_or_else(|| {
                object_store::Error::Generic {
            store: "ooode",
            source: format!(
                "{} names an ooode table's columnar copy that no plan node opened on this worker",
                self.url
            )
            .into(),
        }
            })
    }

    fn failed_stream<T: Send + 'static>(
        &self,
        e: object_store::Error,
    ) -> BoxStream<'static, object_store::Result<T>> {
        futures::stream::once(async move { Err(e) }).boxed()
    }
}

#[async_trait]
impl ObjectStore for PendingStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.target()?.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.target()?.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.target()?.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        match self.target() {
            Ok(t) => t.delete_stream(locations),
            Err(e) => self.failed_stream(e),
        }
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.target() {
            Ok(t) => t.list(prefix),
            Err(e) => self.failed_stream(e),
        }
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjectPath>,
        offset: &ObjectPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.target() {
            Ok(t) => t.list_with_offset(prefix, offset),
            Err(e) => self.failed_stream(e),
        }
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.target()?.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.target()?.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.target()?.rename_opts(from, to, options).await
    }
}
