//! The object store of a table URL (`s3://bucket/path/t`): the one registered in the session's
//! `RuntimeEnv` (as datafusion-cli registers one for `CREATE EXTERNAL TABLE ... OPTIONS
//! ('aws.access_key_id' ...)`, or an application with `register_object_store`), else one built
//! here from the statement's `aws.*` options and the `AWS_*` environment variables, then
//! registered, so later statements (and DataFusion's own Parquet scans) find it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::execution::object_store::ObjectStoreUrl;
use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::{BackoffConfig, ClientConfigKey, ClientOptions, RetryConfig};

/// Prefixes of statement options that configure an object store, not the table.
pub const STORE_OPTION_PREFIXES: &[&str] = &["aws.", "gcp.", "azure.", "http."];

/// Whether `location` names a table in object storage (any `scheme://` but `file://`).
pub fn is_remote(location: &str) -> bool {
    location.contains("://") && !location.starts_with("file://")
}

/// Whether `key` is an object store option.
pub fn is_store_option(key: &str) -> bool {
    STORE_OPTION_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Requests in flight one store's HTTP client keeps connections for: the engine's reads in
/// flight are bounded by admission (`ooode.max_outstanding_io_total`, up to thousands).
const IDLE_CONNECTIONS: usize = 1024;

/// The store for `store_url` (`scheme://authority`): registered, or built from `options`.
pub fn store_for(
    state: &dyn Session,
    store_url: &str,
    options: &HashMap<String, String>,
) -> Result<Arc<dyn ObjectStore>> {
    let url = ObjectStoreUrl::parse(store_url)?;
    let env = state.runtime_env();
    let given: Vec<(&String, &String)> =
        options.iter().filter(|(k, _)| is_store_option(k)).collect();
    if given.is_empty()
        && let Ok(store) = env.object_store(&url)
    {
        return Ok(store);
    }
    let mut wanted: Vec<(String, String)> = given
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    wanted.sort();
    // The store this statement's options built before, if it is still the one registered:
    // one client (one connection pool, one engine) for all tables of a bucket.
    if let Ok(registered) = env.object_store(&url)
        && BUILT.lock().iter().any(|(u, o, store)| {
            u == store_url
                && *o == wanted
                && store
                    .upgrade()
                    .is_some_and(|s| Arc::ptr_eq(&s, &registered))
        })
    {
        return Ok(registered);
    }
    let Some(store) = build_store(store_url, &given)? else {
        return match env.object_store(&url) {
            Ok(store) if given.is_empty() => Ok(store),
            _ => plan_err!(
                "no object store is registered for {store_url}; register one with \
                 SessionContext::register_object_store (ooode builds stores for s3://, gs://, \
                 az:// and http(s):// URLs itself)"
            ),
        };
    };
    env.register_object_store(url.as_ref(), store.clone());
    let mut built = BUILT.lock();
    built.retain(|(_, _, s)| s.strong_count() > 0);
    built.push((store_url.to_string(), wanted, Arc::downgrade(&store)));
    Ok(store)
}

/// The store for `store_url` (`scheme://authority`) built from the environment alone
/// (`AWS_*`, `GOOGLE_*`, `AZURE_*`); None for a scheme ooode cannot build.
pub fn store_from_env(store_url: &str) -> Result<Option<Arc<dyn ObjectStore>>> {
    build_store(store_url, &[])
}

/// The store for `store_url` built from `given` options and the environment, as datafusion-cli
/// builds them for Parquet (`aws.*` with `AWS_*`, `gcp.*` with `GOOGLE_*`, `azure.*` with
/// `AZURE_*`; an HTTP server needs only its URL); None for a scheme ooode cannot build.
fn build_store(
    store_url: &str,
    given: &[(&String, &String)],
) -> Result<Option<Arc<dyn ObjectStore>>> {
    let (scheme, authority) = store_url.split_once("://").unwrap_or((store_url, ""));
    let failed = |e: object_store::Error| DataFusionError::Plan(format!("store {store_url}: {e}"));
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" | "s3a" => {
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(authority)
                .with_client_options(client_options_and_env("AWS_"))
                .with_retry(retry_config());
            for (key, value) in options_of(store_url, given, "aws")? {
                let parsed: AmazonS3ConfigKey = format!("aws_{key}")
                    .parse()
                    .map_err(|_| unknown_option("S3", "aws", key))?;
                builder = builder.with_config(parsed, value);
            }
            Arc::new(builder.build().map_err(failed)?)
        }
        "gs" | "gcs" => {
            let mut builder = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(authority)
                .with_client_options(client_options_and_env("GOOGLE_"))
                .with_retry(retry_config());
            for (key, value) in options_of(store_url, given, "gcp")? {
                let parsed: GoogleConfigKey = format!("google_{key}")
                    .parse()
                    .map_err(|_| unknown_option("GCS", "gcp", key))?;
                builder = builder.with_config(parsed, value);
            }
            Arc::new(builder.build().map_err(failed)?)
        }
        "az" | "azure" | "abfs" | "abfss" => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_url(store_url)
                .with_client_options(client_options_and_env("AZURE_"))
                .with_retry(retry_config());
            for (key, value) in options_of(store_url, given, "azure")? {
                let parsed =
                    AzureKeys::parse(key).ok_or_else(|| unknown_option("Azure", "azure", key))?;
                builder = builder.with_config(parsed, value);
            }
            Arc::new(builder.build().map_err(failed)?)
        }
        "http" | "https" => {
            // The server's URL is the store; its objects are paths below it.
            let mut builder = HttpBuilder::new()
                .with_url(store_url)
                .with_client_options(client_options().with_allow_http(scheme == "http"))
                .with_retry(retry_config());
            for (key, value) in options_of(store_url, given, "http")? {
                let parsed =
                    HttpKeys::parse(key).ok_or_else(|| unknown_option("HTTP", "http", key))?;
                builder = builder.with_config(parsed, value);
            }
            Arc::new(builder.build().map_err(failed)?)
        }
        _ => return Ok(None),
    };
    Ok(Some(store))
}

/// The `prefix.*` options of `given` without their prefix; any other store option is an
/// error (an `aws.*` option on a `gs://` table is a mistake, not something to ignore).
fn options_of<'a>(
    store_url: &str,
    given: &[(&'a String, &'a String)],
    prefix: &str,
) -> Result<Vec<(&'a str, &'a str)>> {
    given
        .iter()
        .map(
            |(key, value)| match key.strip_prefix(prefix).and_then(|k| k.strip_prefix('.')) {
                Some(name) => Ok((name, value.as_str())),
                None => plan_err!("option '{key}' does not apply to {store_url}"),
            },
        )
        .collect()
}

fn unknown_option(store: &str, prefix: &str, key: &str) -> DataFusionError {
    DataFusionError::Plan(format!("unknown {store} option '{prefix}.{key}'"))
}

/// Table options of one object store's prefix (`azure.*`, `http.*`): tools that apply a
/// statement's options to the session's table options before planning (datafusion-cli
/// does, and it knows only `aws.*` and `gcp.*`) then accept them. Each key is checked
/// against object_store's keys; the store itself is built from the statement's options.
#[derive(Debug, Clone, Default)]
pub struct StoreTableOptions<S: StoreKeys> {
    values: std::collections::BTreeMap<String, String>,
    _store: std::marker::PhantomData<S>,
}

/// The keys of one store's options.
pub trait StoreKeys: std::fmt::Debug + Clone + Default + Send + Sync + 'static {
    /// The options' prefix, without the dot.
    const PREFIX: &'static str;
    /// object_store's key.
    type Key;
    /// The store's key named `key` (without the prefix), if it has one.
    fn parse(key: &str) -> Option<Self::Key>;
}

/// `azure.*`: any [`AzureConfigKey`].
#[derive(Debug, Clone, Default)]
pub struct AzureKeys;

impl StoreKeys for AzureKeys {
    const PREFIX: &'static str = "azure";
    type Key = AzureConfigKey;
    fn parse(key: &str) -> Option<AzureConfigKey> {
        key.parse().or_else(|_| format!("azure_{key}").parse()).ok()
    }
}

/// `http.*`: any HTTP client option ([`ClientConfigKey`]).
#[derive(Debug, Clone, Default)]
pub struct HttpKeys;

impl StoreKeys for HttpKeys {
    const PREFIX: &'static str = "http";
    type Key = ClientConfigKey;
    fn parse(key: &str) -> Option<ClientConfigKey> {
        key.parse().ok()
    }
}

impl<S: StoreKeys> datafusion::common::config::ConfigExtension for StoreTableOptions<S> {
    const PREFIX: &'static str = S::PREFIX;
}

impl<S: StoreKeys> datafusion::common::config::ExtensionOptions for StoreTableOptions<S> {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn datafusion::common::config::ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = key
            .strip_prefix(S::PREFIX)
            .and_then(|k| k.strip_prefix('.'))
            .unwrap_or(key);
        if S::parse(key).is_none() {
            return Err(DataFusionError::Configuration(format!(
                "unknown object store option '{}.{key}'",
                S::PREFIX
            )));
        }
        self.values.insert(key.to_string(), value.to_string());
        Ok(())
    }

    fn entries(&self) -> Vec<datafusion::common::config::ConfigEntry> {
        self.values
            .iter()
            .map(|(k, v)| datafusion::common::config::ConfigEntry {
                key: format!("{}.{k}", S::PREFIX),
                value: Some(v.clone()),
                description: "an object store option",
            })
            .collect()
    }
}

/// A store built from statement options: its URL, the options (sorted), the store.
type Built = (
    String,
    Vec<(String, String)>,
    std::sync::Weak<dyn ObjectStore>,
);

/// Stores built here, so that statements with the same options share one.
static BUILT: std::sync::LazyLock<parking_lot::Mutex<Vec<Built>>> =
    std::sync::LazyLock::new(Default::default);

/// HTTP client settings of stores built here: connections kept for many reads in flight, and
/// a request that hangs fails after a while instead of holding its query.
fn client_options() -> ClientOptions {
    ClientOptions::new()
        .with_pool_max_idle_per_host(IDLE_CONNECTIONS)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(30))
}

/// [`client_options`] with the HTTP client settings of the environment variables starting
/// with `prefix` (`AWS_ALLOW_HTTP`, ...), which a builder's `from_env` reads and
/// `with_client_options` would otherwise replace.
fn client_options_and_env(prefix: &str) -> ClientOptions {
    let mut options = client_options();
    for (name, value) in std::env::vars() {
        let key = name
            .strip_prefix(prefix)
            .and_then(|k| k.to_ascii_lowercase().parse::<ClientConfigKey>().ok());
        if let Some(key) = key {
            options = options.with_config(key, value);
        }
    }
    options
}

/// Retries of stores built here: object_store's policy (transient errors, 5xx, timeouts),
/// shortened so a server that went away fails its queries within seconds, not minutes.
fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_locations_are_urls_other_than_file() {
        assert!(is_remote("s3://b/t"));
        assert!(is_remote("http://127.0.0.1:9000/b/t"));
        assert!(!is_remote("file:///tmp/t"));
        assert!(!is_remote("/tmp/t"));
        assert!(is_store_option("aws.endpoint"));
        assert!(!is_store_option("ooode.page_size"));
    }

    fn build(url: &str, options: &[(&str, &str)]) -> Result<Option<Arc<dyn ObjectStore>>> {
        let owned: Vec<(String, String)> = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let given: Vec<(&String, &String)> = owned.iter().map(|(k, v)| (k, v)).collect();
        build_store(url, &given)
    }

    #[test]
    fn every_scheme_datafusion_cli_knows_builds_from_its_options() {
        // Building makes no request: none of these needs a server.
        for (url, options) in [
            (
                "s3://b",
                vec![("aws.region", "eu-west-1"), ("aws.skip_signature", "true")],
            ),
            ("gs://b", vec![("gcp.skip_signature", "true")]),
            ("gcs://b", vec![("gcp.base_url", "http://127.0.0.1:1")]),
            ("az://c", vec![("azure.use_emulator", "true")]),
            (
                "abfs://c",
                vec![
                    ("azure.account_name", "a"),
                    ("azure.skip_signature", "true"),
                ],
            ),
            ("http://127.0.0.1:1", vec![("http.timeout", "1s")]),
            ("https://example.com", vec![]),
        ] {
            let store = build(url, &options).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(store.is_some(), "{url}");
        }
        assert!(
            build("foo://x", &[]).unwrap().is_none(),
            "unknown schemes: the registry's"
        );
    }

    #[test]
    fn a_wrong_store_option_is_an_error_naming_it() {
        let err = |url, options: &[(&str, &str)]| build(url, options).err().unwrap().to_string();
        assert!(err("gs://b", &[("aws.region", "x")]).contains("'aws.region' does not apply"));
        assert!(
            err("az://c", &[("azure.bogus", "x")]).contains("unknown Azure option 'azure.bogus'")
        );
        assert!(err("gs://b", &[("gcp.bogus", "x")]).contains("unknown GCS option 'gcp.bogus'"));
        assert!(
            err("http://h", &[("http.bogus", "x")]).contains("unknown HTTP option 'http.bogus'")
        );
        assert!(err("s3://b", &[("aws.bogus", "x")]).contains("unknown S3 option 'aws.bogus'"));
    }
}
