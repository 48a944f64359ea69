//! ooode tables in object storage, against a real S3 server (s3s-fs) started on loopback by
//! the test: `COPY ... TO 's3://...' STORED AS OOODE` loads them, `CREATE EXTERNAL TABLE ...
//! LOCATION 's3://...'` reads them; every column of every TPC-H table comes back equal, and the
//! 22 queries return what stock DataFusion returns on Parquet in the same bucket.

use std::path::Path;
use std::sync::Arc;

use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use indicatif::ProgressBar;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::s3::{Latency, S3Server};
use ooode_tpch::tables::{TABLES, TpchTable};

mod support;
use support::stores::{
    SF, check_every_column, check_queries, local_data, object_gets, rows, run, stock_on,
    table_options,
};

#[path = "../../examples/s3_table.rs"]
#[allow(dead_code)]
mod s3_table;

const BUCKET: &str = "bkt";

fn server(dir: &Path, latency: Latency) -> S3Server {
    let server = S3Server::spawn(Path::new(env!("CARGO_BIN_EXE_ooode-tpch")), dir, latency)
        .expect("start the S3 server");
    server.create_bucket(BUCKET).unwrap();
    server
}

async fn try_run(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<()> {
    ctx.sql(sql).await?.collect().await.map(drop)
}

fn copy_options(t: &TpchTable, server: &S3Server) -> String {
    let mut options = table_options(t);
    options.push(server.sql_options());
    options.join(", ")
}

/// Loads orders alone at SF 0.01 under `dir/local`.
fn local_orders(dir: &Path) -> (DataSet, TpchTable) {
    let data = DataSet::new(dir.join("local"), SF);
    let orders = ooode_tpch::tables::table("orders").unwrap();
    load_table(
        &data,
        &orders,
        load_options(&orders),
        &ProgressBar::hidden(),
    )
    .unwrap();
    (data, orders)
}

/// Registers the local Parquet copy of each of `tables` as `src_<name>` (once) and copies it
/// into the bucket as the ooode table `s3://bkt/<prefix>/<name>`.
async fn copy_tables(
    ctx: &SessionContext,
    data: &DataSet,
    server: &S3Server,
    tables: &[TpchTable],
    prefix: &str,
) {
    for t in tables {
        let src = format!("src_{}", t.name);
        if !ctx.table_exist(src.as_str()).unwrap() {
            let parquet = data.parquet_file(t.name);
            ctx.register_parquet(
                &src,
                parquet.to_str().unwrap(),
                ParquetReadOptions::default(),
            )
            .await
            .unwrap();
        }
        let url = format!("s3://{BUCKET}/{prefix}/{}", t.name);
        run(
            ctx,
            &format!(
                "COPY (SELECT * FROM {src}) TO '{url}' STORED AS OOODE OPTIONS ({})",
                copy_options(t, server)
            ),
        )
        .await;
    }
}

/// An ooode session with every TPC-H table copied into the bucket and opened from there.
async fn ooode_on_s3(data: &DataSet, server: &S3Server) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    copy_tables(&ctx, data, server, &TABLES, "ooode").await;
    for t in &TABLES {
        run(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION 's3://{BUCKET}/ooode/{}' \
                 OPTIONS ({})",
                t.name,
                t.name,
                server.sql_options()
            ),
        )
        .await;
    }
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_in_s3_equal_their_source_and_queries_equal_stock_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let data = local_data(&dir.path().join("local"));
    let server = server(&dir.path().join("s3"), Latency::default());
    let ctx = ooode_on_s3(&data, &server).await;

    // The table really is in the bucket: its objects, manifest among them, under its prefix.
    let store = server.store(BUCKET).unwrap();
    let listed: Vec<String> =
        futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(&"ooode/orders".into())))
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.location.to_string())
            .collect();
    assert!(
        listed.contains(&"ooode/orders/manifest.json".to_string())
            && listed.contains(&"ooode/orders/heap.0.pages".to_string()),
        "{listed:?}"
    );

    check_every_column(&ctx).await;
    let stock = stock_on(&data, &format!("s3://{BUCKET}"), &store).await;
    let modes = [
        ("out_of_order", "never"),
        ("out_of_order", "always"),
        ("out_of_order", "auto"),
        ("in_order", "always"),
    ];
    check_queries(&ctx, &stock, &modes).await;
}

fn engines_named(ctx: &SessionContext, name: &str) -> Vec<Arc<dyn ooode::io::IoEngine>> {
    ooode_providers::ooode_runtime(ctx)
        .engines()
        .into_iter()
        .filter(|e| e.name() == name)
        .collect()
}

/// The error of `sql`, as text (panics if it succeeds).
async fn error_of(ctx: &SessionContext, sql: &str) -> String {
    match try_run(ctx, sql).await {
        Ok(()) => panic!("expected an error from {sql}"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(error: &str, words: &[&str]) {
    for w in words {
        assert!(error.contains(w), "error should mention {w:?}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_storage_faults_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataSet::new(dir.path().join("local"), SF);
    let wanted: Vec<TpchTable> = TABLES
        .iter()
        .copied()
        .filter(|t| ["nation", "customer", "orders"].contains(&t.name))
        .collect();
    for t in &wanted {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    // 2 ms per request: an in-order scan of a table takes long enough to stop the server in.
    let latency = Latency {
        mean_ms: 2.0,
        jitter_ms: 0.5,
    };
    let server = server(&dir.path().join("s3"), latency);
    let store = server.store(BUCKET).unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for copy in ["a", "b"] {
        copy_tables(&ctx, &data, &server, &wanted, copy).await;
    }
    let open = |name: &str, url: &str| {
        format!(
            "CREATE EXTERNAL TABLE {name} STORED AS OOODE LOCATION '{url}' OPTIONS ({})",
            server.sql_options()
        )
    };

    // A location with no table.
    let e = error_of(&ctx, &open("nope", &format!("s3://{BUCKET}/nothing/here"))).await;
    assert_mentions(
        &e,
        &[
            "s3://bkt/nothing/here",
            "not an ooode table",
            "manifest.json",
        ],
    );

    // Loading over an existing table without asking to replace it.
    let e = error_of(
        &ctx,
        &format!(
            "COPY (SELECT * FROM src_nation) TO 's3://{BUCKET}/a/nation' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'n_nationkey', {})",
            server.sql_options()
        ),
    )
    .await;
    assert_mentions(&e, &["already exists", "ooode.replace"]);

    // Wrong credentials (a context of its own: the statement registers its store).
    let other = ooode_providers::ooode_context(SessionConfig::new());
    let bad = server
        .sql_options()
        .replace("ooode-test-secret", "wrong-secret");
    let e = error_of(
        &other,
        &format!("CREATE EXTERNAL TABLE n STORED AS OOODE LOCATION 's3://{BUCKET}/a/nation' OPTIONS ({bad})"),
    )
    .await;
    assert_mentions(&e, &["s3://bkt/a/nation"]);
    assert!(
        e.contains("403") || e.to_lowercase().contains("signature") || e.contains("denied"),
        "says why: {e}"
    );

    // An object of the table deleted, or truncated, before it is opened.
    store.delete(&"a/nation/heap.0.pages".into()).await.unwrap();
    let e = error_of(&ctx, &open("n1", &format!("s3://{BUCKET}/a/nation"))).await;
    assert_mentions(&e, &["s3://bkt/a/nation/heap.0.pages", "no such object"]);
    let heap = store.get(&"b/customer/heap.0.pages".into()).await.unwrap();
    let heap = heap.bytes().await.unwrap();
    store
        .put(
            &"b/customer/heap.0.pages".into(),
            PutPayload::from(heap.slice(..heap.len() - 8192)),
        )
        .await
        .unwrap();
    let e = error_of(&ctx, &open("c1", &format!("s3://{BUCKET}/b/customer"))).await;
    assert_mentions(&e, &["s3://bkt/b/customer/heap.0.pages", "truncated"]);

    // A page damaged in the bucket: the query reading it fails naming object and page.
    run(&ctx, &open("orders_a", &format!("s3://{BUCKET}/a/orders"))).await;
    run(&ctx, "SET ooode.columnar_scan = false").await;
    let heap = store.get(&"a/orders/heap.0.pages".into()).await.unwrap();
    let mut bytes = heap.bytes().await.unwrap().to_vec();
    bytes[3 * 8192 + 100] ^= 0x5a;
    store
        .put(&"a/orders/heap.0.pages".into(), PutPayload::from(bytes))
        .await
        .unwrap();
    let e = error_of(&ctx, "SELECT sum(o_totalprice) FROM orders_a").await;
    assert_mentions(&e, &["s3://bkt/a/orders/heap.0.pages", "page 3"]);

    // The columnar copy damaged in the bucket: its block checksums catch it (arrow-rs
    // writes no Parquet page CRCs), naming object and block.
    let parquet = store.get(&"b/nation/columns.parquet".into()).await.unwrap();
    let mut bytes = parquet.bytes().await.unwrap().to_vec();
    bytes[200] ^= 0x20;
    store
        .put(&"b/nation/columns.parquet".into(), PutPayload::from(bytes))
        .await
        .unwrap();
    run(&ctx, &open("nation_b", &format!("s3://{BUCKET}/b/nation"))).await;
    run(&ctx, "SET ooode.columnar_scan = true").await;
    let e = error_of(&ctx, "SELECT * FROM nation_b").await;
    assert_mentions(
        &e,
        &["s3://bkt/b/nation/columns.parquet", "block 0", "checksum"],
    );
    run(&ctx, "SET ooode.columnar_scan = false").await;

    // The server stops answering (a hung server: connections open, no replies). With a
    // request timeout of 1 s (object_store's client option, as `aws.timeout`), a query fails
    // within seconds naming the object and page; once the server answers again, so do queries.
    let hung = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    run(
        &hung,
        &format!(
            "CREATE EXTERNAL TABLE orders_h STORED AS OOODE LOCATION 's3://{BUCKET}/b/orders' \
             OPTIONS ({}, 'aws.timeout' '1s')",
            server.sql_options()
        ),
    )
    .await;
    run(&hung, "SET ooode.columnar_scan = false").await;
    server.pause().unwrap();
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        try_run(&hung, "SELECT sum(o_totalprice) FROM orders_h"),
    )
    .await
    .expect("a query on a hung server ends");
    let took = started.elapsed();
    server.resume().unwrap();
    let e = result
        .expect_err("a query on a hung server fails")
        .to_string();
    println!("server hung: failed after {took:?}: {e}");
    assert_mentions(&e, &["s3://bkt/b/orders/heap.0.pages", "page "]);
    // Not "timeout" alone: every object_store error names its `retry_timeout` setting.
    assert!(e.to_lowercase().contains("timed out"), "says why: {e}");
    assert!(took.as_secs() < 60, "failed in {took:?}");
    // Once the server answers again (it first works off the requests that piled up while it
    // was stopped), so do queries.
    ooode_providers::ooode_runtime(&hung).pool().clear();
    let mut answered = Err(String::new());
    for _ in 0..20 {
        answered = try_run(&hung, "SELECT sum(o_totalprice) FROM orders_h")
            .await
            .map_err(|e| e.to_string());
        if answered.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    answered.expect("a query after the server came back");

    // The server goes away in the middle of a query: it fails, nothing hangs, no read is
    // left in flight, and nothing is left loading in the buffer pool.
    run(&ctx, &open("orders_b", &format!("s3://{BUCKET}/b/orders"))).await;
    ooode_providers::ooode_runtime(&ctx).pool().clear();
    run(&ctx, "SET ooode.execution_mode = 'in_order'").await;
    let reads = || object_gets(&ctx);
    let before = reads();
    let mut server = server;
    let query = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let r = try_run(
                &ctx,
                "SELECT count(*) FROM orders_b WHERE o_comment LIKE '%x%'",
            )
            .await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        reads() > before,
        "the query was reading when the server stopped"
    );
    server.stop();
    let (result, took) = tokio::time::timeout(std::time::Duration::from_secs(120), query)
        .await
        .expect("the query ends")
        .unwrap();
    let e = result
        .expect_err("a query whose server died fails")
        .to_string();
    println!("server gone: failed after {took:?}: {e}");
    assert_mentions(&e, &["s3://bkt/b/orders/heap.0.pages", "page "]);
    assert!(took.as_secs() < 60, "failed in {took:?}");
    let runtime = ooode_providers::ooode_runtime(&ctx);
    for engine in engines_named(&ctx, "object_store") {
        let mut idle = false;
        for _ in 0..200 {
            idle = engine.metrics().snapshot().in_flight == 0;
            if idle {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(idle, "reads still in flight");
    }
    assert_eq!(runtime.pool().stats().loading, 0, "loading entries left");
}

/// Waits until the disk cache's background writes have settled; returns its pages.
async fn settled_pages(ctx: &SessionContext) -> u64 {
    let cache = ooode_providers::ooode_runtime(ctx)
        .disk_cache()
        .expect("a disk cache");
    let (mut last, mut same) = (u64::MAX, 0);
    while same < 5 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let pages = cache.stats().pages;
        same = if pages == last { same + 1 } else { 0 };
        last = pages;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_cache_serves_remote_pages_and_never_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let (data, orders) = local_orders(dir.path());
    let mut server = server(&dir.path().join("s3"), Latency::default());
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    let cache_dir = dir.path().join("cache");
    run(
        &ctx,
        &format!("SET ooode.disk_cache_path = '{}'", cache_dir.display()),
    )
    .await;
    run(&ctx, "SET ooode.disk_cache_bytes = '64MiB'").await;
    run(&ctx, "SET ooode.columnar_scan = false").await;
    let parquet = data.parquet_file("orders");
    ctx.register_parquet(
        "src",
        parquet.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let url = format!("s3://{BUCKET}/t/orders");
    run(
        &ctx,
        &format!(
            "COPY (SELECT * FROM src) TO '{url}' STORED AS OOODE OPTIONS ({})",
            copy_options(&orders, &server)
        ),
    )
    .await;
    run(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE orders STORED AS OOODE LOCATION '{url}' OPTIONS ({})",
            server.sql_options()
        ),
    )
    .await;
    let q = "SELECT o_orderpriority, count(*), sum(o_totalprice) FROM {t} GROUP BY o_orderpriority";
    let want = rows(&ctx, &q.replace("{t}", "src")).await;
    let runtime = ooode_providers::ooode_runtime(&ctx);
    let gets = || object_gets(&ctx);
    let query = q.replace("{t}", "orders");

    // Cold: from the store, into the cache.
    assert_eq!(rows(&ctx, &query).await, want);
    let cached = settled_pages(&ctx).await;
    assert!(cached > 0, "pages were cached");
    let cache = runtime.disk_cache().unwrap();
    assert!(cache.stats().pages <= (64 << 20) / 8192);

    // Warm disk: the pool emptied, every page from the cache, no GET.
    runtime.pool().clear();
    let (before, hits) = (gets(), cache.stats().hits);
    assert_eq!(rows(&ctx, &query).await, want);
    assert_eq!(gets(), before, "no request to the store");
    let warm_hits = cache.stats().hits - hits;
    assert!(
        warm_hits >= cached,
        "{warm_hits} hits, {cached} pages cached"
    );

    // A damaged cache file: the damaged slots fail their CRC and are read from the store.
    let file = cache_dir.join("pages-8192.cache");
    let damage = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&damage, &vec![0xa5u8; 5 * 8192], 8192).unwrap();
    damage.sync_all().unwrap();
    runtime.pool().clear();
    let (before, bad) = (gets(), cache.stats().bad);
    assert_eq!(rows(&ctx, &query).await, want);
    assert!(cache.stats().bad > bad, "damaged slots detected");
    assert!(gets() > before, "damaged pages read from the store");
    settled_pages(&ctx).await;

    // The store gone: the cache alone answers.
    server.stop();
    runtime.pool().clear();
    assert_eq!(rows(&ctx, &query).await, want);
}

/// INSERT into a table in object storage: each insert uploads a segment and commits it by a
/// conditional PUT of `segments.json`; concurrent writers of two sessions both land; the
/// table then answers as an in-memory table given the same statements, through scans and
/// index plans, and another session opening it sees every segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_into_a_table_in_object_storage() {
    let dir = tempfile::tempdir().unwrap();
    let (data, orders) = local_orders(dir.path());
    let server = server(&dir.path().join("s3"), Latency::default());
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    let parquet = data.parquet_file("orders");
    ctx.register_parquet(
        "src",
        parquet.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    run(&ctx, "CREATE TABLE m AS SELECT * FROM src").await;
    let url = format!("s3://{BUCKET}/g/orders");
    run(
        &ctx,
        &format!(
            "COPY (SELECT * FROM src) TO '{url}' STORED AS OOODE OPTIONS ({})",
            copy_options(&orders, &server)
        ),
    )
    .await;
    let create = format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{url}' OPTIONS ({})",
        server.sql_options()
    );
    run(&ctx, &create).await;
    let other = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    other
        .register_parquet(
            "src",
            parquet.to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
    run(&other, &create).await;
    // One insert, then one from each session at the same time.
    let rows_of = |k: u64| format!("SELECT * FROM src WHERE o_orderkey % 7 = {k}");
    run(&ctx, &format!("INSERT INTO t {}", rows_of(1))).await;
    run(&ctx, &format!("INSERT INTO m {}", rows_of(1))).await;
    let (a, b) = (ctx.clone(), other.clone());
    let (r1, r2) = tokio::join!(
        async move { try_run(&a, &format!("INSERT INTO t {}", rows_of(2))).await },
        async move { try_run(&b, &format!("INSERT INTO t {}", rows_of(3))).await },
    );
    r1.unwrap();
    r2.unwrap();
    for k in [2, 3] {
        run(&ctx, &format!("INSERT INTO m {}", rows_of(k))).await;
    }
    let store = server.store(BUCKET).unwrap();
    let list = store.get(&"g/orders/segments.json".into()).await.unwrap();
    let list = String::from_utf8(list.bytes().await.unwrap().to_vec()).unwrap();
    let list =
        ooode::storage::segments::SegmentList::parse(&list, Path::new("segments.json")).unwrap();
    assert_eq!((list.version, list.segments.len()), (3, 4), "{list:?}");
    let checks = [
        "SELECT count(*), sum(o_totalprice), count(DISTINCT o_orderkey) FROM {t}",
        "SELECT o_orderkey, o_totalprice FROM {t} WHERE o_custkey = 370",
        "SELECT o_orderpriority, count(*) FROM {t} WHERE o_orderkey BETWEEN 100 AND 900 \
         GROUP BY o_orderpriority",
    ];
    // A session reads a table in object storage as of its CREATE EXTERNAL TABLE or its own
    // last insert: `ctx` has not seen `other`'s insert. A session opening it now sees all.
    let reopened = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    run(&reopened, &create).await;
    for check in checks {
        let want = rows(&ctx, &check.replace("{t}", "m")).await;
        for (columnar, rule) in [("true", "never"), ("false", "always"), ("true", "auto")] {
            let session = &reopened;
            run(session, &format!("SET ooode.columnar_scan = {columnar}")).await;
            run(session, &format!("SET ooode.index_join = '{rule}'")).await;
            let got = rows(session, &check.replace("{t}", "t")).await;
            assert_eq!(got, want, "{check} (columnar {columnar}, {rule})");
        }
    }
    // Compaction: the four segments merged into one; with no retention the replaced ones
    // and an upload no commit named (an insert that stopped before its commit) go at once.
    let orphan: object_store::path::Path = "g/orders/seg-000099-dead-1/manifest.json".into();
    store.put(&orphan, PutPayload::from("{}")).await.unwrap();
    run(&reopened, "SET ooode.remote_retention_secs = 0").await;
    let report = rows(
        &reopened,
        "SELECT segments_before, segments_after, removed_segments, kept_segments, \
         uncommitted_removed FROM ooode_compact('t')",
    )
    .await;
    assert_eq!(report, vec!["4|1|4|0|1"], "{report:?}");
    let list = remote_list(&store, "g/orders").await;
    assert!(
        list.segments.len() == 1 && list.retired.is_empty() && list.segments[0] != ".",
        "{list:?}"
    );
    let top = store
        .list_with_delimiter(Some(&"g/orders".into()))
        .await
        .unwrap();
    let files: Vec<_> = top
        .objects
        .iter()
        .map(|o| o.location.filename().unwrap().to_string())
        .collect();
    let mut files = files;
    files.sort();
    assert_eq!(
        files,
        vec!["manifest.json", "segments.json"],
        "the bulk load's files went"
    );
    assert_eq!(top.common_prefixes.len(), 1, "{:?}", top.common_prefixes);
    // The compacted table, in the session that compacted it and in a new one, and after
    // another insert.
    run(&other, &format!("INSERT INTO t {}", rows_of(5))).await;
    run(&ctx, &format!("INSERT INTO m {}", rows_of(5))).await;
    let fresh = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    run(&fresh, &create).await;
    for check in checks {
        let want = rows(&ctx, &check.replace("{t}", "m")).await;
        for session in [&other, &fresh] {
            for (columnar, rule) in [("true", "never"), ("false", "always")] {
                run(session, &format!("SET ooode.columnar_scan = {columnar}")).await;
                run(session, &format!("SET ooode.index_join = '{rule}'")).await;
                let got = rows(session, &check.replace("{t}", "t")).await;
                assert_eq!(
                    got, want,
                    "compacted: {check} (columnar {columnar}, {rule})"
                );
            }
        }
    }
    // INSERT OVERWRITE: the new rows alone; the replaced segments stay for the retention
    // time (an hour by default: `other` keeps them), then a compaction removes them.
    run(&other, &format!("INSERT OVERWRITE t {}", rows_of(4))).await;
    let want = rows(
        &ctx,
        &format!("SELECT count(*), sum(o_totalprice) FROM ({})", rows_of(4)),
    )
    .await;
    let count = "SELECT count(*), sum(o_totalprice) FROM t";
    assert_eq!(rows(&other, count).await, want);
    let list = remote_list(&store, "g/orders").await;
    assert_eq!(
        (list.segments.len(), list.retired.len()),
        (1, 2),
        "{list:?}"
    );
    let kept = rows(
        &other,
        "SELECT removed_segments, kept_segments FROM ooode_compact('t')",
    )
    .await;
    assert_eq!(kept, vec!["0|2"]);
    let removed = rows(
        &reopened,
        "SELECT removed_segments, kept_segments FROM ooode_compact('t')",
    )
    .await;
    assert_eq!(removed, vec!["2|0"]);
    assert_eq!(rows(&reopened, count).await, want);
    let list = remote_list(&store, "g/orders").await;
    assert!(
        list.retired.is_empty() && list.retired_at.is_empty(),
        "{list:?}"
    );
}

/// The segment list of the table at `prefix` in `store`.
async fn remote_list(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
) -> ooode::storage::segments::SegmentList {
    let path: object_store::path::Path = format!("{prefix}/segments.json").into();
    let got = store.get(&path).await.unwrap();
    let text = String::from_utf8(got.bytes().await.unwrap().to_vec()).unwrap();
    ooode::storage::segments::SegmentList::parse(&text, Path::new("segments.json")).unwrap()
}

/// `examples/s3_table.rs` against the test server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_s3_example_runs() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("s3"), Latency::default());
    let target = s3_table::S3Target {
        endpoint: server.endpoint().to_string(),
        bucket: BUCKET.to_string(),
        access_key: ooode_tpch::s3::ACCESS_KEY.to_string(),
        secret_key: ooode_tpch::s3::SECRET_KEY.to_string(),
    };
    let result = s3_table::run(&target, &dir.path().join("cache"))
        .await
        .unwrap();
    assert!(result.contains("| 100    | 1237675.0 |"), "{result}");
}
