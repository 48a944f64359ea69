//! The shell's object store registry: datafusion-cli's (instrumented, for `\object_store_profiling`)
//! plus Azure URLs, which datafusion-cli cannot resolve.
//!
//! datafusion-cli resolves a statement's location before planning it: `s3://`, `gs://` and
//! `http(s)://` it builds itself; any other scheme it asks the registry for, and fails the
//! statement if none is registered. For `az://` (`azure://`, `abfs(s)://`) this registry
//! answers with a store built from the `AZURE_*` environment variables, or, if those do not
//! make one, with a placeholder that fails every request naming why. ooode's table factory
//! then builds the real store from the statement's `azure.*` options and registers it over
//! the placeholder (`ooode_providers::remote::store_for`).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::Result;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use url::Url;

/// datafusion-cli's registry, resolving Azure URLs too.
#[derive(Debug)]
pub struct ShellStores {
    inner: Arc<InstrumentedObjectStoreRegistry>,
}

impl ShellStores {
    /// Resolves through `inner` (datafusion-cli's instrumented registry) first.
    pub fn new(inner: Arc<InstrumentedObjectStoreRegistry>) -> Self {
        Self { inner }
    }
}

fn is_azure(url: &Url) -> bool {
    matches!(url.scheme(), "az" | "azure" | "abfs" | "abfss")
}

impl ObjectStoreRegistry for ShellStores {
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
        match self.inner.get_store(url) {
            Ok(store) => Ok(store),
            Err(_) if is_azure(url) => {
                let store_url = format!("{}://{}", url.scheme(), url.authority());
                Ok(
                    match MicrosoftAzureBuilder::from_env()
                        .with_url(&store_url)
                        .build()
                    {
                        Ok(store) => Arc::new(store),
                        Err(e) => Arc::new(Unconfigured {
                            url: store_url,
                            why: e.to_string(),
                        }),
                    },
                )
            }
            Err(e) => Err(e),
        }
    }
}

/// A store the environment could not configure: every request fails, saying what to give.
#[derive(Debug)]
struct Unconfigured {
    url: String,
    why: String,
}

impl std::fmt::Display for Unconfigured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unconfigured store {}", self.url)
    }
}

impl Unconfigured {
    fn error(&self) -> object_store::Error {
        object_store::Error::Generic {
            store: "Azure",
            source: format!(
                "no store for {}: give the statement 'azure.*' options or set the AZURE_* \
                 environment variables ({})",
                self.url, self.why
            )
            .into(),
        }
    }
}

#[async_trait]
impl ObjectStore for Unconfigured {
    async fn put_opts(
        &self,
        _: &Path,
        _: PutPayload,
        _: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.error())
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.error())
    }

    async fn get_opts(&self, _: &Path, _: GetOptions) -> object_store::Result<GetResult> {
        Err(self.error())
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        stream::once(std::future::ready(Err(self.error()))).boxed()
    }

    fn list(&self, _: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        stream::once(std::future::ready(Err(self.error()))).boxed()
    }

    async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
        Err(self.error())
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
        Err(self.error())
    }
}
