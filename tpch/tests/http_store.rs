//! ooode tables on an HTTP server (WebDAV: wsgidav, started on loopback by the test), the
//! `http://` scheme of DataFusion's object store registry: `COPY ... TO 'http://...' STORED AS
//! OOODE` puts them there with plain PUTs (HTTP has no multipart uploads), `CREATE EXTERNAL
//! TABLE ... LOCATION 'http://...'` reads them with ranged GETs; every column of every TPC-H
//! table at SF 0.01 comes back equal and the 22 queries return what stock DataFusion returns
//! on Parquet files on the same server.
//!
//! `.ci/run` installs the server (`pip install wsgidav cheroot`); without it the test fails
//! saying so.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use indicatif::ProgressBar;
use object_store::http::HttpBuilder;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::runner::query_rows;
use ooode_tpch::tables::{TABLES, TpchTable};

const SF: f64 = 0.01;

/// A WebDAV server over a directory, stopped when dropped.
struct WebDav {
    child: Child,
    url: String,
}

impl WebDav {
    fn start(root: &Path) -> Self {
        std::fs::create_dir_all(root).unwrap();
        // A free port: bound, read and let go (the server binds it right after).
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        // A thread per connection: enough for every read ooode keeps in flight (256 by
        // default), or connections beyond the threads wait until their requests time out.
        let config = root.with_extension("yaml");
        std::fs::write(
            &config,
            "server_args:\n  numthreads: 600\n  request_queue_size: 1024\n",
        )
        .unwrap();
        let child = Command::new("wsgidav")
            .arg("-c")
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--root")
            .arg(root)
            .args(["--auth", "anonymous", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start the WebDAV server `wsgidav` ({e}); install it with \
                     `pip install wsgidav cheroot` (.ci/run does)"
                )
            });
        let mut server = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("wsgidav exited at start: {status}");
            }
            assert!(Instant::now() < deadline, "wsgidav did not listen in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::new(
            HttpBuilder::new()
                .with_url(&self.url)
                .with_client_options(ClientOptions::new().with_allow_http(true))
                .build()
                .unwrap(),
        )
    }
}

impl Drop for WebDav {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn run(ctx: &SessionContext, sql: &str) {
    let df = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{e}\n{sql}"));
    df.collect().await.unwrap_or_else(|e| panic!("{e}\n{sql}"));
}

async fn rows(ctx: &SessionContext, sql: &str) -> Vec<String> {
    query_rows(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"))
}

fn query(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("queries/q{n}.sql"));
    std::fs::read_to_string(path).unwrap()
}

fn table_options(t: &TpchTable) -> String {
    let mut options = vec![format!(
        "'ooode.clustering_key' '{}'",
        t.clustering_key.join(",")
    )];
    if !t.indexes.is_empty() {
        let indexes: Vec<String> = t.indexes.iter().map(|cols| cols.join(",")).collect();
        options.push(format!("'ooode.indexes' '{}'", indexes.join(";")));
    }
    options.join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_on_an_http_server_equal_their_source_and_queries_equal_stock_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataSet::new(dir.path().join("local"), SF);
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    let server = WebDav::start(&dir.path().join("dav"));
    let store = server.store();

    // No store options and nothing registered: ooode builds the HTTP store from the URL.
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for t in &TABLES {
        let src = format!("src_{}", t.name);
        let parquet = data.parquet_file(t.name);
        ctx.register_parquet(&src, parquet.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        let url = format!("{}/ooode/{}", server.url, t.name);
        run(
            &ctx,
            &format!(
                "COPY (SELECT * FROM {src}) TO '{url}' STORED AS OOODE OPTIONS ({})",
                table_options(t)
            ),
        )
        .await;
        run(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{url}'",
                t.name
            ),
        )
        .await;
    }

    // Really on the server: lineitem's heap (over one part of a multipart upload) went in one
    // PUT, whole.
    let heap = store
        .head(&"ooode/lineitem/heap.0.pages".into())
        .await
        .unwrap();
    let local_heap = data.ooode_table("lineitem").join("heap.0.pages");
    let local_len = std::fs::metadata(&local_heap).unwrap().len();
    assert_eq!(heap.size, local_len);
    assert!(
        heap.size > 8 << 20,
        "lineitem's heap is larger than one upload part ({} bytes)",
        heap.size
    );
    assert!(
        store
            .head(&"ooode/orders/manifest.json".into())
            .await
            .is_ok()
    );

    // Every column of every table, through the columnar copy and through the heap pages.
    for t in &TABLES {
        let want = rows(&ctx, &format!("SELECT * FROM src_{}", t.name)).await;
        assert!(!want.is_empty(), "{} has rows", t.name);
        for columnar in ["true", "false"] {
            run(&ctx, &format!("SET ooode.columnar_scan = {columnar}")).await;
            let got = rows(&ctx, &format!("SELECT * FROM {}", t.name)).await;
            assert!(
                got == want,
                "{} differs (columnar_scan = {columnar})",
                t.name
            );
        }
    }
    run(&ctx, "SET ooode.columnar_scan = true").await;

    // Stock DataFusion on Parquet files on the same server.
    let stock = SessionContext::new();
    let url = ObjectStoreUrl::parse(&server.url).unwrap();
    stock.register_object_store(url.as_ref(), store.clone());
    for t in &TABLES {
        let object = format!("parquet/{}.parquet", t.name);
        let bytes = std::fs::read(data.parquet_file(t.name)).unwrap();
        store
            .put(&object.as_str().into(), PutPayload::from(bytes))
            .await
            .unwrap();
        let location = format!("{}/{object}", server.url);
        stock
            .register_parquet(t.name, &location, ParquetReadOptions::default())
            .await
            .unwrap();
    }
    let gets = || -> u64 {
        ooode_providers::ooode_runtime(&ctx)
            .engines()
            .iter()
            .filter(|e| e.name() == "object_store")
            .map(|e| e.metrics().snapshot().reads)
            .sum()
    };
    let before = gets();
    for n in 1..=22 {
        let sql = query(n);
        let want = rows(&stock, &sql).await;
        for rule in ["never", "always", "auto"] {
            run(&ctx, &format!("SET ooode.index_join = '{rule}'")).await;
            let got = rows(&ctx, &sql).await;
            assert!(got == want, "q{n} differs (index_join = {rule})");
        }
    }
    assert!(gets() > before, "index plans read pages from the server");

    // A file sent in one PUT is held in memory under a reservation: a pool too small for it
    // refuses the upload, and nothing is put.
    let small: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 20));
    let object = "refused/heap.0.pages".into();
    let err = ooode_providers::upload::put_file(&store, &local_heap, &object, &small)
        .await
        .expect_err("a 1 MiB pool cannot hold the file");
    assert!(err.to_string().contains("Resources exhausted"), "{err}");
    assert!(matches!(
        store.head(&object).await,
        Err(object_store::Error::NotFound { .. })
    ));
}
