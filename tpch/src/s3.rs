//! A real S3-compatible server on loopback for tests and benchmarks: `s3s-fs` (an S3 server
//! over a local directory, one bucket per subdirectory) in a child process of this program
//! (`ooode-tpch s3-server`), optionally behind an injected latency per request that every
//! client (ooode and stock DataFusion alike) pays.
//!
//! ```text
//!   S3Server::spawn ──> ooode-tpch s3-server --root DIR [--latency-ms L --jitter-ms J]
//!        prints "listening on http://127.0.0.1:PORT"; exits when its stdin closes
//!   request ──> sleep(L ± J) ──> s3s-fs (SigV4 checked against one access key)
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use hyper::body::Incoming;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The server's only credentials.
pub const ACCESS_KEY: &str = "ooode-test";
/// Secret of [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "ooode-test-secret";

/// Delay added in front of every request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Mean delay, milliseconds.
    pub mean_ms: f64,
    /// Uniform jitter around the mean, milliseconds.
    pub jitter_ms: f64,
}

/// A running server (killed when dropped).
#[derive(Debug)]
pub struct S3Server {
    child: Option<Child>,
    endpoint: String,
    root: PathBuf,
    latency: Latency,
}

impl S3Server {
    /// Starts `exe s3-server` (this program) serving the directory `root`.
    pub fn spawn(exe: &Path, root: &Path, latency: Latency) -> Result<Self, BoxError> {
        std::fs::create_dir_all(root)?;
        let mut child = Command::new(exe)
            .args(["s3-server", "--root"])
            .arg(root)
            .args(["--latency-ms", &latency.mean_ms.to_string()])
            .args(["--jitter-ms", &latency.jitter_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(endpoint) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            return Err(format!("the S3 server did not start: {line:?}").into());
        };
        Ok(Self {
            endpoint: endpoint.to_string(),
            child: Some(child),
            root: root.to_path_buf(),
            latency,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The directory served.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The injected latency.
    pub fn latency(&self) -> Latency {
        self.latency
    }

    /// Creates bucket `name` (a directory of the served root).
    pub fn create_bucket(&self, name: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(self.root.join(name))
    }

    /// A store for `bucket` on this server, with the given credentials.
    pub fn store_with(
        &self,
        bucket: &str,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Arc<dyn ObjectStore>, BoxError> {
        Ok(Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(&self.endpoint)
                .with_allow_http(true)
                .with_bucket_name(bucket)
                .with_region("us-east-1")
                .with_access_key_id(access_key)
                .with_secret_access_key(secret_key)
                .build()?,
        ))
    }

    /// A store for `bucket` on this server.
    pub fn store(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, BoxError> {
        self.store_with(bucket, ACCESS_KEY, SECRET_KEY)
    }

    /// The `OPTIONS (...)` entries a SQL statement needs to reach this server.
    pub fn sql_options(&self) -> String {
        format!(
            "'aws.access_key_id' '{ACCESS_KEY}', 'aws.secret_access_key' '{SECRET_KEY}', \
             'aws.endpoint' '{}', 'aws.allow_http' 'true', 'aws.region' 'us-east-1'",
            self.endpoint
        )
    }

    /// Requests and bytes served so far (asked over HTTP, outside the injected latency).
    pub fn stats(&self) -> Result<ServerStats, BoxError> {
        use std::io::{Read, Write};
        let addr = self.endpoint.trim_start_matches("http://");
        let mut conn = std::net::TcpStream::connect(addr)?;
        write!(
            conn,
            "GET {STATS_PATH} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )?;
        let mut text = String::new();
        conn.read_to_string(&mut text)?;
        let body = text.split("\r\n\r\n").nth(1).ok_or("no body")?;
        // A chunked body has its length on the line before the JSON.
        let json = body.lines().find(|l| l.starts_with('{')).ok_or("no JSON")?;
        Ok(serde_json::from_str(json)?)
    }

    /// Stops the server process without closing its socket (SIGSTOP): connections are
    /// accepted by the kernel and requests sent, but nothing answers, as a server that hangs.
    pub fn pause(&self) -> std::io::Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) -> std::io::Result<()> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        let Some(child) = &self.child else {
            return Err(std::io::Error::other("the server was stopped"));
        };
        let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
        // SAFETY: kill(2) takes plain integers; `pid` is our own child, not yet reaped (the
        // Child is held, and waited for only in `stop`), so it names no other process.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Kills the server (for tests of a server that goes away).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A small random generator for jitter (no dependency for one number per request).
struct Jitter(AtomicU64);

impl Jitter {
    fn next_unit(&self) -> f64 {
        // xorshift64*, shared by all connections.
        let mut x = self.0.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone)]
struct Delayed {
    inner: s3s::service::S3Service,
    latency: Latency,
    jitter: Arc<Jitter>,
    stats: Arc<Counters>,
    /// Print each request's arrival on stderr (`OOODE_S3_TRACE=1`), to see a query's
    /// dependent round trips.
    trace: bool,
    /// Held through each conditional PUT: s3s-fs checks `If-Match` / `If-None-Match` and then
    /// writes, so two such PUTs at once could both pass; S3 makes the pair atomic.
    conditional: Arc<tokio::sync::Mutex<()>>,
    started: std::time::Instant,
}

/// Requests served and response bytes (by Content-Length), for [`S3Server::stats`].
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// The path that answers with the server's counters instead of going to S3.
const STATS_PATH: &str = "/__ooode_stats";

/// What the server has served so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerStats {
    /// Requests served.
    pub requests: u64,
    /// Response body bytes.
    pub bytes: u64,
}

impl ServerStats {
    /// What was served between `earlier` and `self`.
    pub fn since(&self, earlier: &ServerStats) -> ServerStats {
        ServerStats {
            requests: self.requests - earlier.requests,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Delayed {
    type Response = s3s::HttpResponse;
    type Error = s3s::HttpError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        if req.uri().path() == STATS_PATH {
            let stats = ServerStats {
                requests: self.stats.requests.load(Ordering::Relaxed),
                bytes: self.stats.bytes.load(Ordering::Relaxed),
            };
            let body = serde_json::to_string(&stats).unwrap_or_default();
            let resp = hyper::Response::new(s3s::Body::from(body));
            return Box::pin(async move { Ok(resp) });
        }
        if self.trace {
            let range = req.headers().get(hyper::header::RANGE);
            eprintln!(
                "{:9.3} ms {} {} {}",
                self.started.elapsed().as_secs_f64() * 1e3,
                req.method(),
                req.uri().path(),
                range.and_then(|r| r.to_str().ok()).unwrap_or("")
            );
        }
        let conditional = (req.method() == hyper::Method::PUT
            && (req.headers().contains_key(hyper::header::IF_MATCH)
                || req.headers().contains_key(hyper::header::IF_NONE_MATCH)))
        .then(|| self.conditional.clone());
        let stats = self.stats.clone();
        let ms =
            self.latency.mean_ms + (self.jitter.next_unit() * 2.0 - 1.0) * self.latency.jitter_ms;
        let inner = self.inner.clone();
        Box::pin(async move {
            if ms > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(ms / 1e3)).await;
            }
            let _one_at_a_time = match &conditional {
                Some(lock) => Some(lock.lock().await),
                None => None,
            };
            let resp = hyper::service::Service::call(&inner, req).await;
            stats.requests.fetch_add(1, Ordering::Relaxed);
            if let Ok(r) = &resp {
                let len = r
                    .headers()
                    .get(hyper::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .unwrap_or(0);
                stats.bytes.fetch_add(len, Ordering::Relaxed);
            }
            resp
        })
    }
}

/// Serves `root` on a loopback port (printing `listening on <endpoint>`) until stdin closes.
pub async fn serve(root: &Path, latency: Latency) -> Result<(), BoxError> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    let fs = s3s_fs::FileSystem::new(root)
        .map_err(|e| format!("s3s-fs on {}: {e:?}", root.display()))?;
    let mut builder = s3s::service::S3ServiceBuilder::new(fs);
    builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
    let service = Delayed {
        inner: builder.build(),
        latency,
        jitter: Arc::new(Jitter(AtomicU64::new(0x9e37_79b9_7f4a_7c15))),
        stats: Arc::default(),
        trace: std::env::var_os("OOODE_S3_TRACE").is_some_and(|v| v == "1"),
        conditional: Arc::default(),
        started: std::time::Instant::now(),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The parent holds our stdin: when it exits (or drops the server), so do we.
    let mut stdin_closed = std::pin::pin!(tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    }));
    let http = Builder::new(TokioExecutor::new());
    loop {
        let (socket, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(_) => continue,
            },
            _ = &mut stdin_closed => return Ok(()),
        };
        let _ = socket.set_nodelay(true);
        let conn = http
            .serve_connection(TokioIo::new(socket), service.clone())
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
