//! Sharded tables on three `ooode worker` processes on loopback, with this test as the
//! coordinator (the embedding API, `with_ooode_distributed`): TPC-H loaded sharded returns
//! exactly what one node returns, each shard lives on (and is read by) its own worker, and
//! a worker killed mid-query fails that query with an error naming it.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use indicatif::ProgressBar;
use ooode_distributed::{ShardMap, WorkerReads};
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::fig4::fig4_sql;
use ooode_tpch::runner::query_rows;
use ooode_tpch::tables::{TABLES, TpchTable};

const SF: f64 = 0.1;

/// An `ooode worker` process, killed when dropped.
struct Worker {
    addr: String,
    data: PathBuf,
    child: Child,
}

impl Worker {
    fn start(addr: &str, data: &Path) -> Worker {
        Self::start_with(addr, data, &[])
    }

    /// A worker with more `ooode worker` arguments.
    fn start_with(addr: &str, data: &Path, args: &[&str]) -> Worker {
        let child = Command::new(env!("CARGO_BIN_EXE_ooode"))
            .args(["worker", "--listen", addr])
            .args(args)
            .arg("--data")
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ooode worker starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "worker {addr} never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        Worker {
            addr: addr.to_string(),
            data: data.to_path_buf(),
            child,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn start_workers(dir: &Path, n: usize) -> Vec<Worker> {
    (0..n)
        .map(|i| Worker::start(&free_addr(), &dir.join(format!("worker{i}"))))
        .collect()
}

fn coordinator(workers: &[Worker]) -> SessionContext {
    let addrs: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    let builder = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new());
    let state = ooode_distributed::with_ooode_distributed(builder, &addrs)
        .unwrap()
        .build();
    SessionContext::new_with_state(state)
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

/// The error of `sql`, which must fail.
async fn query_error(ctx: &SessionContext, sql: &str) -> String {
    let result = ctx.sql(sql).await.unwrap().collect().await;
    result.map(drop).unwrap_err().to_string()
}

fn query(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tpch/queries/q{n}.sql"));
    std::fs::read_to_string(path).unwrap()
}

fn copy_options(t: &TpchTable) -> String {
    let mut options = vec![format!(
        "'ooode.clustering_key' '{}'",
        t.clustering_key.join(",")
    )];
    if !t.indexes.is_empty() {
        let indexes: Vec<String> = t.indexes.iter().map(|c| c.join(",")).collect();
        options.push(format!("'ooode.indexes' '{}'", indexes.join(";")));
    }
    options.push("'ooode.shards' '3'".into());
    options.join(", ")
}

async fn reads(workers: &[Worker]) -> Vec<WorkerReads> {
    let mut out = Vec::new();
    for w in workers {
        out.push(ooode_distributed::client::reads(&w.addr).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sharded_on_three_workers_returns_what_one_node_returns() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataSet::new(dir.path().join("tpch"), SF);
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    let workers = start_workers(dir.path(), 3);
    let ctx = coordinator(&workers);
    let one_node = ooode_providers::ooode_context(SessionConfig::new());
    for t in &TABLES {
        let src = data.parquet_file(t.name).display().to_string();
        ctx.register_parquet(
            format!("src_{}", t.name),
            &src,
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
        let sharded = dir.path().join("sharded").join(t.name);
        run(
            &ctx,
            &format!(
                "COPY (SELECT * FROM src_{}) TO '{}' STORED AS OOODE OPTIONS ({})",
                t.name,
                sharded.display(),
                copy_options(t)
            ),
        )
        .await;
        run(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
                t.name,
                sharded.display()
            ),
        )
        .await;
        run(
            &one_node,
            &format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
                t.name,
                data.ooode_table(t.name).display()
            ),
        )
        .await;

        // Each shard is on its worker's disk, and only there.
        let map = ShardMap::read(&sharded).unwrap();
        assert_eq!(map.shards.len(), 3);
        for (i, shard) in map.shards.iter().enumerate() {
            assert_eq!(shard.worker, workers[i].addr, "{}: shard {i}", t.name);
            for (j, w) in workers.iter().enumerate() {
                let there = w
                    .data
                    .join(&map.table_id)
                    .join(format!("shard-{i}"))
                    .join("manifest.json")
                    .exists();
                assert_eq!(there, i == j, "{}: shard {i} on worker {j}", t.name);
            }
        }
        // Distinct counts from the shards' indexes: orders' o_custkey (an index, not the
        // distribution key) is the largest shard's count, at most the table's.
        if t.name == "orders" {
            let at = map
                .columns
                .iter()
                .position(|c| c.name == "o_custkey")
                .unwrap();
            let counted = map.column_stats[at].distinct.expect("o_custkey counted");
            let exact: u64 = rows(&one_node, "SELECT COUNT(DISTINCT o_custkey) FROM orders").await
                [0]
            .parse()
            .unwrap();
            assert!(
                counted <= exact && counted * 2 >= exact,
                "{counted} vs {exact}"
            );
        }
        let count = format!("SELECT COUNT(*) FROM {}", t.name);
        assert_eq!(rows(&ctx, &count).await, rows(&one_node, &count).await);
        assert_eq!(
            rows(&ctx, &count).await,
            [format!("{}", map.row_count)],
            "{}: shard map row count",
            t.name
        );
    }

    let before = reads(&workers).await;
    for n in 1..=22 {
        let sql = query(n);
        let want = rows(&one_node, &sql).await;
        for rule in ["auto", "always", "never"] {
            run(&ctx, &format!("SET ooode.index_join = '{rule}'")).await;
            let got = rows(&ctx, &sql).await;
            assert!(
                got == want,
                "q{n} differs on three workers (index_join = {rule})"
            );
        }
    }
    for rule in ["auto", "always", "never"] {
        run(&ctx, &format!("SET ooode.index_join = '{rule}'")).await;
        for n in [1, 15, 150, 1500] {
            let sql = fig4_sql(n);
            let want = rows(&one_node, &sql).await;
            assert_eq!(rows(&ctx, &sql).await, want, "Fig. 4 at N = {n} ({rule})");
        }
    }
    // Every worker read its own shards' pages, each scan in a stage routed to it: no worker
    // had to serve a scan of its shards to a stage running elsewhere (lookups aside).
    let after = reads(&workers).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a.reads + a.hits > b.reads + b.hits,
            "worker {i} read nothing: {a:?}"
        );
        assert_eq!(
            a.fetches, b.fetches,
            "worker {i} served shards to another process"
        );
    }

    // A selective Fig. 4 point joins through lookups on the shards' indexes: orders by its
    // o_custkey index (every shard: orders is sharded on o_orderkey), lineitem by its
    // clustering key (the key's shard only: lineitem is sharded on it).
    run(&ctx, "SET ooode.index_join = 'auto'").await;
    let explain = rows(&ctx, &format!("EXPLAIN {}", fig4_sql(1)))
        .await
        .join("\n");
    assert_eq!(
        explain.matches("ShardLookupJoinExec").count(),
        2,
        "{explain}"
    );
    assert!(explain.contains("lookups=to the key's shard"), "{explain}");
    assert!(explain.contains("lookups=to every shard"), "{explain}");
    let lookups: u64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.lookups - b.lookups)
        .sum();
    assert!(lookups > 0, "the index plans looked rows up on the workers");
    // Both in the workers' stage of customer's scan: no lookup runs on the coordinator.
    let head = explain.split("Stage 1 ").next().unwrap();
    assert!(!head.contains("ShardLookupJoinExec"), "{explain}");

    // orders and lineitem are both sharded on the order key, alike: each order's lines are
    // on its own worker, so a lookup join of them stays in the worker's process.
    run(&ctx, "SET ooode.index_join = 'always'").await;
    let colocated = "SELECT COUNT(*), SUM(l_quantity) FROM orders JOIN lineitem \
                     ON o_orderkey = l_orderkey WHERE o_orderdate < DATE '1992-03-01'";
    let want = rows(&one_node, colocated).await;
    let before = reads(&workers).await;
    assert_eq!(rows(&ctx, colocated).await, want);
    let after = reads(&workers).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(a.lookups, b.lookups, "worker {i} was asked for lookups");
    }
    let explain = rows(&ctx, &format!("EXPLAIN {colocated}")).await.join("\n");
    assert!(explain.contains("lookups=to the key's shard"), "{explain}");
    // Semi and anti joins look up too: Q4's EXISTS (lineitem by its order key), Q22's NOT
    // EXISTS (orders by its o_custkey index).
    for (n, kind) in [
        (4, "ShardLookupJoinExec: Semi"),
        (22, "ShardLookupJoinExec: Anti"),
    ] {
        let explain = rows(&ctx, &format!("EXPLAIN {}", query(n)))
            .await
            .join("\n");
        assert!(explain.contains(kind), "q{n}: {explain}");
    }
    // A join on two keys or with a filter looks up by one key and checks the rest on the
    // pairs found: Q9's inner join with partsupp (ps_suppkey = l_suppkey checked), Q21's
    // semi and anti joins with lineitem (l_suppkey <> l_suppkey checked); their rows were
    // compared with one node's above.
    for (n, kind) in [(9, "Inner"), (21, "Semi"), (21, "Anti")] {
        let explain = rows(&ctx, &format!("EXPLAIN {}", query(n)))
            .await
            .join("\n");
        let conditioned = explain.lines().any(|l| {
            l.contains(&format!("ShardLookupJoinExec: {kind}")) && l.contains("condition=")
        });
        assert!(conditioned, "q{n} {kind}: {explain}");
    }
    run(&ctx, "SET ooode.index_join = 'auto'").await;

    // A one-node ooode table of the coordinator answers alone, and joined with sharded
    // tables is refused while planning, saying why (its files are not on the workers).
    run(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE nation_here STORED AS OOODE LOCATION '{}'",
            data.ooode_table("nation").display()
        ),
    )
    .await;
    let alone = "SELECT COUNT(*) FROM nation_here WHERE n_nationkey < 5";
    assert_eq!(rows(&ctx, alone).await, ["5"]);
    let mixed = "SELECT n_name, COUNT(*) AS customers FROM customer \
                 JOIN nation_here ON c_nationkey = n_nationkey GROUP BY n_name";
    let started = Instant::now();
    let err = query_error(&ctx, mixed).await;
    assert!(
        err.contains("table 'nation'") && err.contains("load it sharded"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused while planning"
    );

    // EXPLAIN shows the stages, their tasks and the worker of every shard read.
    let explain = rows(&ctx, &format!("EXPLAIN {}", query(3)))
        .await
        .join("\n");
    assert!(
        explain.contains("DistributedExec") && explain.contains("tasks=3"),
        "{explain}"
    );
    for w in &workers {
        assert!(explain.contains(&format!("@{}", w.addr)), "{explain}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_fails_the_query_naming_it_and_serves_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut workers = start_workers(dir.path(), 3);
    let ctx = coordinator(&workers);
    let table = dir.path().join("t");
    run(
        &ctx,
        &format!(
            "COPY (SELECT value AS k, value % 100 AS g FROM generate_series(1, 300000)) TO '{}' \
             STORED AS OOODE OPTIONS ('ooode.clustering_key' 'k', 'ooode.indexes' 'g', \
             'ooode.shards' '3')",
            table.display()
        ),
    )
    .await;
    run(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            table.display()
        ),
    )
    .await;
    let total = "SELECT COUNT(*), SUM(k) FROM t";
    let want = rows(&ctx, total).await;
    assert_eq!(want, ["300000|45000150000"]);

    // A long query: seconds of work in every worker's scan stage (a 30 KB string built per
    // row); worker 1 dies while it runs.
    let long = ctx
        .sql("SELECT SUM(length(repeat(CAST(k AS VARCHAR), 5000))) FROM t")
        .await
        .unwrap();
    let running = tokio::spawn(async move {
        long.collect()
            .await
            .map(|b| {
                datafusion::arrow::util::pretty::pretty_format_batches(&b)
                    .unwrap()
                    .to_string()
            })
            .map_err(|e| e.to_string())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !running.is_finished(),
        "the long query still runs when the worker is killed"
    );
    let dead = workers[1].addr.clone();
    workers[1].kill();
    let outcome = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the query ends (no hang)")
        .unwrap();
    let err = outcome.expect_err("the query fails with its worker gone");
    assert!(
        err.contains(&dead),
        "the error names the worker {dead}: {err}"
    );

    // The next query fails the same clear way, then works once the worker is back.
    let err = df_result(ctx.sql(total).await.unwrap().collect().await).unwrap_err();
    assert!(
        err.contains(&dead),
        "the error names the worker {dead}: {err}"
    );
    let data = workers[1].data.clone();
    workers[1] = Worker::start(&dead, &data);
    assert_eq!(rows(&ctx, total).await, want);
}

fn df_result(
    r: datafusion::common::Result<Vec<datafusion::arrow::record_batch::RecordBatch>>,
) -> Result<usize, String> {
    r.map(|b| b.len()).map_err(|e| e.to_string())
}

#[test]
fn the_shell_coordinates_workers() {
    let dir = tempfile::tempdir().unwrap();
    let workers = start_workers(dir.path(), 2);
    let addrs: Vec<&str> = workers.iter().map(|w| w.addr.as_str()).collect();
    let table = dir.path().join("t").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_ooode"))
        .args(["-q", "--workers", &addrs.join(",")])
        .args(["-c", &format!(
            "COPY (SELECT value AS k, value % 10 AS g FROM generate_series(1, 5000)) TO '{table}' \
             STORED AS OOODE OPTIONS ('ooode.clustering_key' 'k', 'ooode.indexes' 'g', \
             'ooode.shards' '4')"
        )])
        .args(["-c", &format!("CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{table}'")])
        .args(["-c", "SELECT COUNT(*) AS n, SUM(k) AS s FROM t WHERE g = 3"])
        .args(["-c", "EXPLAIN SELECT COUNT(*) FROM t WHERE g = 3"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // 500 rows with g = 3: 3 + 13 + ... + 4993.
    assert!(text.contains("| 500 | 1249000 |"), "{text}");
    // Four shards over two workers: each worker runs the task reading its two.
    let map = ShardMap::read(Path::new(&table)).unwrap();
    assert_eq!(map.shards.len(), 4);
    assert!(
        text.contains("Stage 1")
            && text.contains(&format!("shards=[0@{}, 2@{}]", addrs[0], addrs[0])),
        "{text}"
    );

    // Without workers, a sharded COPY is an error saying what is missing.
    let out = Command::new(env!("CARGO_BIN_EXE_ooode"))
        .args([
            "-q",
            "-c",
            &format!(
                "COPY (SELECT 1 AS k) TO '{table}2' STORED AS OOODE OPTIONS ('ooode.shards' '2')"
            ),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("needs workers") && text.contains("--workers"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_join_over_the_workers_memory_limit_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // Workers limited to 16 MiB each.
    let workers: Vec<Worker> = (0..2)
        .map(|i| {
            let data = dir.path().join(format!("worker{i}"));
            Worker::start_with(&free_addr(), &data, &["-m", "16M"])
        })
        .collect();
    let ctx = coordinator(&workers);
    for (name, sql) in [
        (
            "big",
            "SELECT value AS k, value % 50 AS g, repeat('x', 200) AS pad \
             FROM generate_series(1, 200000)",
        ),
        ("keys", "SELECT value AS g FROM generate_series(0, 49)"),
    ] {
        let at = dir.path().join(name);
        let options = match name {
            "big" => "'ooode.clustering_key' 'k', 'ooode.indexes' 'g', 'ooode.shards' '2'",
            _ => "'ooode.clustering_key' 'g', 'ooode.shards' '2'",
        };
        run(
            &ctx,
            &format!(
                "COPY ({sql}) TO '{}' STORED AS OOODE OPTIONS ({options})",
                at.display()
            ),
        )
        .await;
        run(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {name} STORED AS OOODE LOCATION '{}'",
                at.display()
            ),
        )
        .await;
    }
    run(&ctx, "SET ooode.index_join = 'always'").await;
    // A few keys fit: 4000 rows of 200 bytes each.
    let one_key = "SELECT COUNT(*) FROM keys JOIN big ON keys.g = big.g WHERE keys.g = 7";
    assert_eq!(rows(&ctx, one_key).await, ["4000"]);
    // Every key at once: 200,000 rows of 200 bytes come back to the workers' lookups.
    let sql = "SELECT COUNT(*), MAX(length(pad)) FROM keys JOIN big ON keys.g = big.g";
    let explain = rows(&ctx, &format!("EXPLAIN {sql}")).await.join("\n");
    assert!(explain.contains("ShardLookupJoinExec"), "{explain}");
    let err = query_error(&ctx, sql).await;
    // The lookup's rows fill a worker's pool; whichever of its reservations asks first fails:
    // the shard lookup gathering them, or the index join on the worker producing them.
    assert!(
        err.contains("Resources exhausted")
            && (err.contains("ShardLookupJoinExec") || err.contains("IndexJoinExec")),
        "{err}"
    );
    // Cleanly: the workers answer the next query.
    assert_eq!(rows(&ctx, one_key).await, ["4000"]);
}

/// The segment directories of `table_id` on `workers`' disks, per shard.
fn segment_dirs(workers: &[Worker], table_id: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for w in workers {
        let Ok(shards) = std::fs::read_dir(w.data.join(table_id)) else {
            continue;
        };
        for shard in shards.flatten() {
            for entry in std::fs::read_dir(shard.path()).unwrap().flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if name.starts_with("seg-") {
                    out.push((shard.file_name().to_string_lossy().to_string(), name));
                }
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_into_a_sharded_table_commit_on_every_worker_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut workers = start_workers(dir.path(), 3);
    let ctx = coordinator(&workers);
    let table = dir.path().join("t");
    run(
        &ctx,
        &format!(
            "COPY (SELECT value AS k, value % 100 AS g, 'v' || value AS s \
             FROM generate_series(1, 20000)) TO '{}' STORED AS OOODE OPTIONS \
             ('ooode.clustering_key' 'k', 'ooode.indexes' 'g', 'ooode.shards' '3')",
            table.display()
        ),
    )
    .await;
    let create = format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
        table.display()
    );
    run(&ctx, &create).await;
    let loaded = ShardMap::read(&table).unwrap();

    // New keys in every shard, then one row whose key is there already (one shard only).
    let added = "INSERT INTO t SELECT value, value % 100, 'new' || value \
                 FROM generate_series(20001, 23000)";
    assert_eq!(rows(&ctx, added).await, ["3000"]);
    assert_eq!(
        rows(&ctx, "INSERT INTO t VALUES (5, 5, 'again')").await,
        ["1"]
    );
    let map = ShardMap::read(&table).unwrap();
    assert_eq!(map.table_id, loaded.table_id);
    assert_eq!(map.row_count, 23001);
    assert_eq!(map.shards.iter().map(|s| s.rows).sum::<u64>(), 23001);
    // Every shard names what it holds, and holds nothing it does not name: the shards
    // that got no row of the second insert kept no empty segment of it.
    let named: Vec<(String, String)> = map
        .shards
        .iter()
        .flat_map(|s| {
            s.segments
                .iter()
                .filter(|n| n.as_str() != ".")
                .map(move |n| (format!("shard-{}", s.shard), n.clone()))
        })
        .collect();
    let mut named_sorted = named.clone();
    named_sorted.sort();
    assert_eq!(named_sorted, segment_dirs(&workers, &map.table_id));
    assert_eq!(named.len(), 4, "{named:?}");

    // Scans, index scans and lookups read the new segments on every worker, in this
    // session and in a new one.
    let fresh = coordinator(&workers);
    run(&fresh, &create).await;
    for session in [&ctx, &fresh] {
        for mode in ["never", "always", "auto"] {
            run(session, &format!("SET ooode.index_join = '{mode}'")).await;
            assert_eq!(
                rows(session, "SELECT COUNT(*), SUM(k) FROM t").await,
                ["23001|264511505"]
            );
            assert_eq!(
                rows(session, "SELECT COUNT(*) FROM t WHERE g = 7").await,
                ["230"]
            );
            assert_eq!(
                rows(session, "SELECT s FROM t WHERE k = 5 ORDER BY s").await,
                ["again", "v5"]
            );
            assert_eq!(
                rows(
                    session,
                    "SELECT v.x, t.s FROM (VALUES (5), (22000), (30000)) v(x) \
                     JOIN t ON t.k = v.x ORDER BY t.s"
                )
                .await,
                ["5|again", "22000|new22000", "5|v5"]
            );
        }
    }

    // An insert that fails on one worker commits nothing anywhere: the others' new
    // segments are removed, and every query reads what it read before.
    let dead = workers[2].addr.clone();
    workers[2].kill();
    let err = query_error(
        &ctx,
        "INSERT INTO t SELECT value, 1, 'lost' FROM generate_series(30001, 31000)",
    )
    .await;
    assert!(err.contains("INSERT into") && err.contains(&dead), "{err}");
    let data = workers[2].data.clone();
    workers[2] = Worker::start(&dead, &data);
    assert_eq!(ShardMap::read(&table).unwrap(), map);
    assert_eq!(segment_dirs(&workers, &map.table_id).len(), 4);
    assert_eq!(
        rows(&ctx, "SELECT COUNT(*), SUM(k) FROM t").await,
        ["23001|264511505"]
    );

    // A segment no shard map names (an insert whose coordinator died before its commit)
    // goes at the next insert; the named ones stay.
    let orphan = workers[0]
        .data
        .join(&map.table_id)
        .join("shard-0")
        .join("seg-000000-orphan-1");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::write(orphan.join("manifest.json"), "{}").unwrap();
    assert_eq!(
        rows(&ctx, "INSERT INTO t VALUES (23001, 1, 'after')").await,
        ["1"]
    );
    assert!(!orphan.exists(), "the uncommitted segment was removed");
    assert_eq!(
        rows(&ctx, "SELECT COUNT(*), SUM(k) FROM t").await,
        ["23002|264534506"]
    );

    // INSERT OVERWRITE replaces every row (a new load); the old shards stay on the workers
    // for the queries planned before (`ooode.remote_retention_secs`), and a later write
    // past that time removes them.
    assert_eq!(
        rows(
            &ctx,
            "INSERT OVERWRITE t SELECT value, value % 3, 'o' || value FROM generate_series(1, 90)"
        )
        .await,
        ["90"]
    );
    assert_eq!(
        rows(&ctx, "SELECT COUNT(*), SUM(k), MAX(s) FROM t WHERE g = 1").await,
        ["30|1335|o88"]
    );
    let replaced = ShardMap::read(&table).unwrap();
    assert_eq!(replaced.retired.len(), 1);
    assert_eq!(replaced.retired[0].table_id, map.table_id);
    for w in &workers {
        assert!(
            w.data.join(&map.table_id).exists(),
            "old shards kept a while"
        );
    }
    run(&ctx, "SET ooode.remote_retention_secs = 0").await;
    assert_eq!(
        rows(&ctx, "INSERT INTO t VALUES (91, 1, 'late')").await,
        ["1"]
    );
    assert!(ShardMap::read(&table).unwrap().retired.is_empty());
    for w in &workers {
        assert!(!w.data.join(&map.table_id).exists(), "old shards removed");
    }
    assert_eq!(
        rows(&ctx, "SELECT COUNT(*), MAX(s) FROM t WHERE g = 1").await,
        ["31|o88"]
    );
}
