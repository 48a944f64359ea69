//! Sharded tables and tables in object storage in one distributed query: TPC-H at SF 0.01
//! with customer, orders and lineitem sharded over three worker processes and the other
//! five tables in a real S3 server (s3s-fs) on loopback. The stages that read the tables in
//! S3 run on the workers (ooode's scan, index scan and index join nodes travel through the
//! codec), which build their stores from their own environment; the 22 queries equal stock
//! DataFusion's on Parquet in the same bucket, with index joins never, always and auto.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use ooode_tpch::s3::{ACCESS_KEY, Latency, S3Server, SECRET_KEY};
use ooode_tpch::tables::TABLES;

#[allow(dead_code)]
mod support;
use support::stores::{local_data, object_gets, query, rows, run, stock_on, table_options};

const BUCKET: &str = "bkt";
const SHARDED: [&str; 3] = ["customer", "orders", "lineitem"];

/// An `ooode-tpch worker` process, killed when dropped.
struct Worker {
    addr: String,
    child: Child,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A worker whose environment reaches `server`.
fn start_worker(data: &Path, server: &S3Server) -> Worker {
    let addr = free_addr();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ooode-tpch"));
    cmd.args(["worker", "--listen", &addr, "--data"])
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd.env("AWS_ENDPOINT", server.endpoint())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1");
    let child = cmd.spawn().expect("ooode-tpch worker starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "worker {addr} never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Worker { addr, child }
}

fn coordinator(workers: &[Worker]) -> SessionContext {
    let addrs: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    let builder = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new().with_target_partitions(2));
    let state = ooode_distributed::with_ooode_distributed(builder, &addrs)
        .unwrap()
        .build();
    SessionContext::new_with_state(state)
}

/// Loads the sharded tables under `dir` and the others into the bucket, and opens them all.
async fn load(ctx: &SessionContext, data_dir: &Path, dir: &Path, server: &S3Server) {
    let data = ooode_tpch::datagen::DataSet::new(data_dir, support::stores::SF);
    for t in &TABLES {
        let src = format!("src_{}", t.name);
        ctx.register_parquet(
            &src,
            data.parquet_file(t.name).to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
        let options = table_options(t).join(", ");
        let (location, options, open_options) = if SHARDED.contains(&t.name) {
            (
                dir.join(t.name).display().to_string(),
                format!("{options}, 'ooode.shards' '3'"),
                String::new(),
            )
        } else {
            (
                format!("s3://{BUCKET}/ooode/{}", t.name),
                format!("{options}, {}", server.sql_options()),
                format!("OPTIONS ({})", server.sql_options()),
            )
        };
        run(
            ctx,
            &format!(
                "COPY (SELECT * FROM {src}) TO '{location}' STORED AS OOODE OPTIONS ({options})"
            ),
        )
        .await;
        run(
            ctx,
            &format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{location}' {open_options}",
                t.name
            ),
        )
        .await;
    }
}

async fn worker_object_reads(workers: &[Worker]) -> u64 {
    let mut total = 0;
    for w in workers {
        total += ooode_distributed::client::reads(&w.addr)
            .await
            .unwrap()
            .object_reads;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_in_s3_are_read_by_the_workers_and_queries_equal_stock_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let data = local_data(&dir.path().join("local"));
    let server = S3Server::spawn(
        Path::new(env!("CARGO_BIN_EXE_ooode-tpch")),
        &dir.path().join("s3"),
        Latency::default(),
    )
    .expect("start the S3 server");
    server.create_bucket(BUCKET).unwrap();
    let workers: Vec<Worker> = (0..3)
        .map(|i| start_worker(&dir.path().join(format!("worker{i}")), &server))
        .collect();
    let ctx = coordinator(&workers);
    load(
        &ctx,
        &dir.path().join("local"),
        &dir.path().join("sharded"),
        &server,
    )
    .await;
    let stock = stock_on(
        &data,
        &format!("s3://{BUCKET}"),
        &server.store(BUCKET).unwrap(),
    )
    .await;

    // An index join of a sharded table with a table in S3 runs in the workers' stage: the
    // workers fetch the S3 table's pages, the coordinator none.
    run(&ctx, "SET ooode.index_join = 'always'").await;
    let join = "SELECT n_name, COUNT(*), MIN(c_name) FROM customer \
                JOIN nation ON c_nationkey = n_nationkey GROUP BY n_name";
    let explain = rows(&ctx, &format!("EXPLAIN {join}")).await.join("\n");
    let in_stages = |explain: &str, node: &str| {
        explain
            .split_once("┌───── Stage")
            .is_some_and(|(_, stages)| stages.contains(node))
    };
    assert!(in_stages(&explain, "IndexJoinExec"), "{explain}");
    // As a hash join, the S3 table's scan (through its Parquet copy) is a stage of its own
    // on a worker, broadcast to the others.
    run(&ctx, "SET ooode.index_join = 'never'").await;
    let hashed = rows(&ctx, &format!("EXPLAIN {join}")).await.join("\n");
    assert!(
        in_stages(&hashed, "OoodeScanExec") && hashed.contains("reads=parquet copy"),
        "{hashed}"
    );
    assert_eq!(rows(&ctx, join).await, rows(&stock, join).await);
    run(&ctx, "SET ooode.index_join = 'always'").await;
    let (coordinator_before, workers_before) =
        (object_gets(&ctx), worker_object_reads(&workers).await);
    let got = rows(&ctx, join).await;
    assert_eq!(got, rows(&stock, join).await);
    assert!(got.len() > 10, "{got:?}");
    assert!(
        worker_object_reads(&workers).await > workers_before,
        "the workers read the S3 table"
    );
    assert_eq!(
        object_gets(&ctx),
        coordinator_before,
        "the coordinator read no page of it"
    );

    for n in 1..=22 {
        let sql = query(n);
        let want = rows(&stock, &sql).await;
        for rule in ["never", "always", "auto"] {
            run(&ctx, &format!("SET ooode.index_join = '{rule}'")).await;
            let got = rows(&ctx, &sql).await;
            assert!(got == want, "q{n} differs (index_join = {rule})");
        }
    }
}
