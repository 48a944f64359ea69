//! Object store servers other than S3 ([`crate::s3`]) for the tests, run on loopback: a WebDAV
//! server (wsgidav, `pip install wsgidav cheroot`) for `http://` tables and Azure Blob
//! Storage's emulator (Azurite, `npm install -g azurite`) for `az://` tables. `.ci/run`
//! installs both; a missing one is an error saying how to install it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A server process, stopped when dropped.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Its URL: `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program` with `args`; returns once it accepts connections on `port`.
fn start(program: &str, args: &[&str], port: u16, install: &str) -> Result<Server, BoxError> {
    // Another server there would answer in its place.
    TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("port {port} for `{program}` is taken: {e}"))?;
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start `{program}` ({e}); install it with `{install}`"))?;
    let mut server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(
                format!("`{program}` exited at start ({status}); is port {port} taken?").into(),
            );
        }
        if Instant::now() > deadline {
            return Err(format!("`{program}` did not listen on port {port} in 60 s").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(server)
}

/// A port nobody listens on now (bound, read and let go; the server binds it right after).
fn free_port() -> Result<u16, BoxError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A WebDAV server over the directory `root` (created), at a free port.
pub fn webdav(root: &Path) -> Result<Server, BoxError> {
    std::fs::create_dir_all(root)?;
    // A thread per connection: enough for every read ooode keeps in flight (256 by default),
    // and a backlog for them all, or connections beyond them wait until requests time out.
    let config = root.with_extension("wsgidav.yaml");
    std::fs::write(
        &config,
        "server_args:\n  numthreads: 600\n  request_queue_size: 1024\n",
    )?;
    let port = free_port()?;
    let (config, root) = (path_str(&config)?, path_str(root)?);
    let port_arg = port.to_string();
    let args = [
        "-c",
        config,
        "--host",
        "127.0.0.1",
        "--port",
        &port_arg,
        "--root",
        root,
        "--auth",
        "anonymous",
        "-q",
    ];
    start("wsgidav", &args, port, "pip install wsgidav cheroot")
}

fn path_str(p: &Path) -> Result<&str, BoxError> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()).into())
}

/// Azurite's well-known development account (public, documented by Microsoft).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The port object_store's emulator mode connects to (without `AZURITE_BLOB_STORAGE_URL`),
/// so `'azure.use_emulator' 'true'` finds the server.
pub const AZURITE_PORT: u16 = 10000;

/// Azure Blob Storage's emulator keeping its blobs under `dir` (created), with the blob
/// container `container` created.
pub fn azurite(dir: &Path, container: &str) -> Result<Server, BoxError> {
    std::fs::create_dir_all(dir)?;
    let port = AZURITE_PORT.to_string();
    let args = [
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        &port,
        "--location",
        path_str(dir)?,
        "--silent",
        "--skipApiVersionCheck",
        "--disableTelemetry",
    ];
    let server = start(
        "azurite-blob",
        &args,
        AZURITE_PORT,
        "npm install -g azurite",
    )?;
    create_container(container)?;
    Ok(server)
}

/// Creates blob container `name` in Azurite: object_store has no call for it, so one signed
/// request (Shared Key, as Azure documents it) made here.
fn create_container(name: &str) -> Result<(), BoxError> {
    use base64::Engine;
    use hmac::{KeyInit, Mac};
    use std::io::{Read, Write};
    let b64 = base64::engine::general_purpose::STANDARD;
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let version = "2021-08-06";
    // VERB, eleven empty standard headers, the x-ms-* headers, then the resource (the
    // emulator's path holds the account once more).
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n\
         /{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&b64.decode(AZURITE_KEY)?)?;
    mac.update(to_sign.as_bytes());
    let signature = b64.encode(mac.finalize().into_bytes());
    let request = format!(
        "PUT /{AZURITE_ACCOUNT}/{name}?restype=container HTTP/1.1\r\n\
         Host: 127.0.0.1:{AZURITE_PORT}\r\nx-ms-date: {date}\r\nx-ms-version: {version}\r\n\
         Authorization: SharedKey {AZURITE_ACCOUNT}:{signature}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    let mut stream = TcpStream::connect(("127.0.0.1", AZURITE_PORT))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    match response.starts_with("HTTP/1.1 201") {
        true => Ok(()),
        false => Err(format!("create container {name}: {response}").into()),
    }
}
