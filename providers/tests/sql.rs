//! ooode from SQL: COPY ... STORED AS OOODE with options, CREATE EXTERNAL TABLE, SET, and the
//! errors a user meets.

use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

async fn sql(ctx: &SessionContext, q: &str) -> datafusion::common::Result<String> {
    let batches = ctx.sql(q).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

/// Copies table `src` into an ooode table in `dir` with COPY `options` and registers it as `t`.
async fn copy_src_to_t(ctx: &SessionContext, dir: &std::path::Path, options: &str) {
    let t = dir.join("t");
    let copy = format!(
        "COPY (SELECT * FROM src) TO '{}' STORED AS OOODE OPTIONS ({options})",
        t.display()
    );
    sql(ctx, &copy).await.unwrap();
    let create = format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
        t.display()
    );
    sql(ctx, &create).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_create_query_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    sql(&ctx, "CREATE TABLE src AS SELECT value AS id, value % 7 AS grp, concat('n', value) AS name FROM generate_series(1, 5000)").await.unwrap();

    let copy = format!(
        "COPY (SELECT * FROM src) TO '{}' STORED AS OOODE OPTIONS ('ooode.clustering_key' 'id', \
         'ooode.indexes' 'grp;grp,name', 'ooode.page_size' '4KiB')",
        t.display()
    );
    let out = sql(&ctx, &copy).await.unwrap();
    assert!(out.contains("5000"), "{out}");
    sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            t.display()
        ),
    )
    .await
    .unwrap();

    let want = sql(
        &ctx,
        "SELECT grp, count(*), min(name) AS first FROM src WHERE grp = 3 GROUP BY grp",
    )
    .await
    .unwrap();
    for rule in ["never", "always"] {
        sql(&ctx, &format!("SET ooode.index_join = '{rule}'"))
            .await
            .unwrap();
        let got = sql(
            &ctx,
            "SELECT grp, count(*), min(name) AS first FROM t WHERE grp = 3 GROUP BY grp",
        )
        .await
        .unwrap();
        assert_eq!(got, want, "index_join = {rule}");
    }
    let plan = sql(&ctx, "EXPLAIN SELECT * FROM t WHERE id BETWEEN 10 AND 20")
        .await
        .unwrap();
    assert!(plan.contains("IndexScanExec"), "{plan}");
    let analyzed = sql(
        &ctx,
        "EXPLAIN ANALYZE SELECT * FROM t WHERE id BETWEEN 10 AND 20",
    )
    .await
    .unwrap();
    assert!(
        analyzed.contains("pages_read") && analyzed.contains("max_reads_in_flight"),
        "{analyzed}"
    );

    // Errors name what is wrong.
    let bad = |opts: &str| {
        format!(
            "COPY (SELECT * FROM src) TO '{}' STORED AS OOODE OPTIONS ({opts})",
            dir.path().join("u").display()
        )
    };
    let e = sql(&ctx, &bad("'ooode.bogus' 'x'"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("ooode.bogus"), "{e}");
    let e = sql(&ctx, &bad("'ooode.indexes' 'nope'"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("'nope'"), "{e}");
    let e = sql(&ctx, &bad("'ooode.page_size' '3KiB'"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("page size"), "{e}");
    let e = sql(&ctx, "SET ooode.execution_mode = 'sideways'")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("sideways") && e.contains("in_order"), "{e}");
    let e = sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE m STORED AS OOODE LOCATION '{}'",
            dir.path().join("missing").display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("missing") && e.contains("not an ooode table"),
        "{e}"
    );
    assert!(
        !dir.path().join("u").exists(),
        "a failed COPY left a table behind"
    );

    // An existing table is replaced only when asked.
    let again = format!(
        "COPY (SELECT * FROM src WHERE id <= 10) TO '{}' STORED AS OOODE",
        t.display()
    );
    let e = sql(&ctx, &again).await.unwrap_err().to_string();
    assert!(
        e.contains("already exists") && e.contains("ooode.replace"),
        "{e}"
    );
    sql(
        &ctx,
        &format!("{again} OPTIONS ('ooode.replace' 'true', 'ooode.clustering_key' 'id')"),
    )
    .await
    .unwrap();
    // The table registered before reads the new one: its Parquet copy's statistics (which
    // answer COUNT(*) alone) and its rows are read again, not the replaced table's.
    let n = sql(&ctx, "SELECT count(*), sum(id) FROM t").await.unwrap();
    assert!(n.contains("| 10 ") && n.contains("| 55 "), "{n}");
    sql(&ctx, "DROP TABLE t").await.unwrap();
    sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            t.display()
        ),
    )
    .await
    .unwrap();
    let n = sql(&ctx, "SELECT count(*) FROM t").await.unwrap();
    assert!(n.contains("| 10 "), "{n}");
}

/// The scan's statistics are what DataFusion sees for the Parquet copy (exact rows, column
/// min/max) plus the distinct counts the indexes counted at load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_statistics_for_join_planning() {
    use datafusion::common::ScalarValue;
    use datafusion::common::stats::Precision;
    use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};

    let dir = tempfile::tempdir().unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    sql(&ctx, "CREATE TABLE src AS SELECT value AS id, value % 7 AS grp, value * 2 AS twice FROM generate_series(1, 3000)").await.unwrap();
    copy_src_to_t(
        &ctx,
        dir.path(),
        "'ooode.clustering_key' 'id', 'ooode.indexes' 'grp'",
    )
    .await;

    let plan = ctx
        .sql("SELECT id, grp, twice FROM t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let stats = StatisticsContext::new()
        .compute(plan.as_ref(), &StatisticsArgs::new())
        .unwrap();
    assert_eq!(stats.num_rows, Precision::Exact(3000));
    let [id, grp, twice] = &stats.column_statistics[..] else {
        panic!("three columns expected: {stats:?}");
    };
    assert_eq!(id.min_value, Precision::Exact(ScalarValue::Int64(Some(1))));
    assert_eq!(
        id.max_value,
        Precision::Exact(ScalarValue::Int64(Some(3000)))
    );
    assert_eq!(
        twice.max_value,
        Precision::Exact(ScalarValue::Int64(Some(6000)))
    );
    // Clustering key: 3000 distinct; index on grp: 7.
    assert_eq!(id.distinct_count, Precision::Inexact(3000));
    assert_eq!(grp.distinct_count, Precision::Inexact(7));
    assert_eq!(twice.distinct_count, Precision::Absent);
}

/// Index scans of a few rows feed their consumers directly; larger ones are spread over the
/// partitions as DataFusion would; the rows are the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_index_scans_run_in_one_partition() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    let src = "CREATE TABLE src AS SELECT value AS id, value % 7 AS grp, value % 1000 AS bucket \
               FROM generate_series(1, 5000)";
    sql(&ctx, src).await.unwrap();
    let options = "'ooode.clustering_key' 'id', 'ooode.indexes' 'bucket', 'ooode.page_size' '4KiB'";
    copy_src_to_t(&ctx, dir.path(), options).await;
    sql(&ctx, "SET ooode.index_join = 'always'").await.unwrap();
    // 5 rows (a projection of them feeds the aggregate), and 3000.
    for (condition, spread) in [("bucket = 7", false), ("bucket < 600", true)] {
        let query = |table: &str| {
            format!("SELECT grp, count(*) FROM {table} WHERE {condition} GROUP BY grp ORDER BY grp")
        };
        let plan = sql(&ctx, &format!("EXPLAIN {}", query("t"))).await.unwrap();
        assert!(plan.contains("IndexScanExec"), "{plan}");
        assert_eq!(
            plan.contains("RoundRobinBatch"),
            spread,
            "{condition}: {plan}"
        );
        assert_eq!(
            sql(&ctx, &query("t")).await.unwrap(),
            sql(&ctx, &query("src")).await.unwrap()
        );
    }
}

fn index_scans(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<dyn ExecutionPlan>>) {
    if plan.is::<ooode::exec::IndexScanExec>() {
        out.push(plan.clone());
    }
    for c in plan.children() {
        index_scans(c, out);
    }
}

/// The query budget of the first ooode table node of `plan`.
fn ooode_query(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<ooode::access::QueryIo>> {
    if let Some(scan) = plan.downcast_ref::<ooode::exec::IndexScanExec>() {
        return Some(scan.query().clone());
    }
    if let Some(scan) = plan.downcast_ref::<ooode::exec::OoodeScanExec>() {
        return Some(scan.query().clone());
    }
    plan.children().into_iter().find_map(ooode_query)
}

/// Reads of the index scan in `plan` (there is one) so far, and its reads in flight.
fn scan_reads(plan: &Arc<dyn ExecutionPlan>) -> (u64, u64) {
    let mut scans = Vec::new();
    index_scans(plan, &mut scans);
    assert_eq!(scans.len(), 1, "one index scan expected");
    let scan = scans[0]
        .downcast_ref::<ooode::exec::IndexScanExec>()
        .unwrap();
    let s = scan.io_metrics().snapshot();
    (s.reads, s.in_flight)
}

/// The physical plan of `query`, planned with ooode's buffer pool emptied first.
async fn cold_plan(ctx: &SessionContext, query: &str) -> Arc<dyn ExecutionPlan> {
    ooode_providers::ooode_runtime(ctx).pool().clear();
    ctx.sql(query)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap()
}

/// A context with `src` (ids 1..=5000, `bucket` = id % 1000) and `t`, its ooode copy in
/// `dir`: clustered by id, indexed by bucket, 4 KiB pages.
async fn bucket_table(dir: &std::path::Path) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    let src = "CREATE TABLE src AS SELECT value AS id, value % 1000 AS bucket \
               FROM generate_series(1, 5000)";
    sql(&ctx, src).await.unwrap();
    let options = "'ooode.clustering_key' 'id', 'ooode.indexes' 'bucket', 'ooode.page_size' '4KiB'";
    copy_src_to_t(&ctx, dir, options).await;
    ctx
}

/// Out of order, a small index scan reads its pages while the rest of the query is planned:
/// by the time it runs they are in the pool, each read once. In order, nothing is read before
/// the plan runs. The scan's reads are the index leaf and the five heap pages: the plan's
/// range counts read the root only (the leaf is estimated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_index_scans_read_ahead_while_planning() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = bucket_table(dir.path()).await;
    sql(&ctx, "SET ooode.index_join = 'always'").await.unwrap();
    // Rows 7, 1007, ..., 4007: five heap pages of a table clustered by id.
    let query = "SELECT id FROM t WHERE bucket = 7 ORDER BY id";
    let want =
        "+------+\n| id   |\n+------+\n| 7    |\n| 1007 |\n| 2007 |\n| 3007 |\n| 4007 |\n+------+";
    for mode in ["out_of_order", "in_order"] {
        sql(&ctx, &format!("SET ooode.execution_mode = '{mode}'"))
            .await
            .unwrap();
        let plan = cold_plan(&ctx, query).await;
        let ahead = if mode == "out_of_order" {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !matches!(scan_reads(&plan), (6.., 0)) && std::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            // The leaf and the five heap pages: the index's root was read by the range
            // counts, which count as the plan's reads, not the scan's.
            let (reads, _) = scan_reads(&plan);
            assert_eq!(reads, 6, "{mode}: reads ahead");
            reads
        } else {
            assert_eq!(scan_reads(&plan).0, 0, "{mode}: read before running");
            0
        };
        let batches = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx())
            .await
            .unwrap();
        assert_eq!(pretty_format_batches(&batches).unwrap().to_string(), want);
        let after = scan_reads(&plan).0;
        match mode {
            "out_of_order" => assert_eq!(after, ahead, "{mode}: the plan read nothing again"),
            _ => assert_eq!(after, 6, "{mode}: the leaf and every heap page read once"),
        }
    }
}

/// The index rule runs inside DataFusion's synchronous physical optimizer: it finds the range
/// counts of the index scans a table's filters make started by the table's async `scan` (made
/// there in order), and never counts itself. Also in joins, for `IN` lists and ranges, in both
/// modes and with the pool emptied before each query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_rule_finds_its_counts_started() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = bucket_table(dir.path()).await;
    // (query, rows the chosen index scan is estimated to find)
    let queries = [
        ("SELECT id FROM t WHERE bucket = 7", 5),
        (
            "SELECT id FROM t WHERE bucket IN (7, 8, 9) AND id > 100",
            15,
        ),
        ("SELECT id FROM t WHERE id BETWEEN 10 AND 19", 10),
        (
            "SELECT a.id, b.id FROM t a JOIN t b ON a.id = b.bucket WHERE a.bucket = 7",
            5,
        ),
    ];
    for (mode, choice) in [
        ("out_of_order", "auto"),
        ("in_order", "auto"),
        ("out_of_order", "always"),
        ("in_order", "always"),
    ] {
        let setting = format!("{mode}, {choice}");
        sql(&ctx, &format!("SET ooode.execution_mode = '{mode}'"))
            .await
            .unwrap();
        sql(&ctx, &format!("SET ooode.index_join = '{choice}'"))
            .await
            .unwrap();
        for (query, rows) in queries {
            let plan = cold_plan(&ctx, query).await;
            // The rule counted every candidate, chosen or not; all nodes share its query.
            let query_io = ooode_query(&plan).unwrap_or_else(|| {
                panic!(
                    "{setting}: {query}: {}",
                    datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
                )
            });
            assert_eq!(query_io.own_counts(), 0, "{setting}: {query}");
            // The time the rule blocked is counted with its waits, and only with them.
            assert_eq!(
                query_io.count_waits() == 0,
                query_io.count_wait_time().is_zero(),
                "{setting}: {query}"
            );
            if mode == "in_order" {
                assert_eq!(
                    query_io.count_waits(),
                    0,
                    "{setting}: {query}: made in scan"
                );
            }
            let mut scans = Vec::new();
            index_scans(&plan, &mut scans);
            if choice == "always" {
                assert_eq!(
                    scans.len(),
                    1,
                    "{setting}: {query}: one index scan expected"
                );
                let scan = scans[0]
                    .downcast_ref::<ooode::exec::IndexScanExec>()
                    .unwrap();
                // The counts are exact, wherever they were made (the sparse index of the
                // clustering key counts pages: at least the rows asked for).
                assert!(
                    scan.estimate().rows >= rows,
                    "{setting}: {query}: {:?}",
                    scan.estimate()
                );
            }
            datafusion::physical_plan::collect(plan, ctx.task_ctx())
                .await
                .unwrap();
        }
    }
}

/// `ooode.*` settings are DataFusion settings like any other: SHOW and information_schema list
/// them, under their prefix; runtime-wide ones (the buffer pool's size) take effect at the next
/// query; contexts with runtimes of their own share nothing; a memory limit bounds the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_visible_and_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_information_schema(true));
    let shown = sql(&ctx, "SHOW ooode.execution_mode").await.unwrap();
    assert!(
        shown.contains("| ooode.execution_mode | out_of_order |"),
        "{shown}"
    );
    sql(&ctx, "SET ooode.execution_mode = 'in_order'")
        .await
        .unwrap();
    let shown = sql(&ctx, "SHOW ooode.execution_mode").await.unwrap();
    assert!(shown.contains("in_order"), "{shown}");
    let listed = sql(
        &ctx,
        "SELECT name FROM information_schema.df_settings WHERE name LIKE 'ooode.%' ORDER BY name",
    )
    .await
    .unwrap();
    for name in [
        "ooode.buffer_pool_bytes",
        "ooode.buffer_pool_memory_fraction",
        "ooode.columnar_scan",
        "ooode.device_queue_depth",
        "ooode.direct_io",
        "ooode.execution_mode",
        "ooode.index_cost_ratio",
        "ooode.index_join",
        "ooode.long_queries_idle_priority",
        "ooode.max_long_queries",
        "ooode.max_outstanding_io",
        "ooode.max_outstanding_io_total",
        "ooode.short_query_io_reserve_percent",
        "ooode.short_query_reads",
    ] {
        assert!(listed.contains(name), "{name} missing from\n{listed}");
    }
    let err = sql(&ctx, "SET ooode.buffer_pool_bytes = 'lots'")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ooode.buffer_pool_bytes") && err.contains("lots"),
        "{err}"
    );
    let err = sql(&ctx, "SET ooode.short_query_io_reserve_percent = 95")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("from 0 to 90"), "{err}");

    sql(
        &ctx,
        "CREATE TABLE src AS SELECT value AS id FROM generate_series(1, 100)",
    )
    .await
    .unwrap();
    copy_src_to_t(&ctx, dir.path(), "'ooode.clustering_key' 'id'").await;
    let runtime = ooode_providers::ooode_runtime(&ctx);
    for (setting, bytes) in [("1MiB", 1 << 20), ("3MiB", 3 << 20)] {
        sql(&ctx, &format!("SET ooode.buffer_pool_bytes = '{setting}'"))
            .await
            .unwrap();
        sql(&ctx, "SELECT count(*) FROM t WHERE id = 5")
            .await
            .unwrap();
        assert_eq!(runtime.pool().budget(), bytes, "after SET {setting}");
    }

    // Another context, another runtime: its pool and budget are its own.
    let other = ooode_providers::ooode_context(SessionConfig::new());
    let other_runtime = ooode_providers::ooode_runtime(&other);
    assert!(!Arc::ptr_eq(&runtime, &other_runtime));
    assert_ne!(other_runtime.pool().budget(), 3 << 20);

    // Under a memory limit the pool takes at most its share of it.
    let env = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_limit(8 << 20, 1.0)
        .build_arc()
        .unwrap();
    let builder = datafusion::execution::SessionStateBuilder::new()
        .with_default_features()
        .with_runtime_env(env);
    let limited = SessionContext::new_with_state(ooode_providers::with_ooode(builder).build());
    sql(
        &limited,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            dir.path().join("t").display()
        ),
    )
    .await
    .unwrap();
    sql(&limited, "SELECT count(*) FROM t WHERE id = 5")
        .await
        .unwrap();
    assert_eq!(
        ooode_providers::ooode_runtime(&limited).pool().budget(),
        4 << 20
    );
}

/// Index scans over pages already in the buffer pool (their rows taken at once, no task)
/// return what they return cold, in both modes, through the clustering index (a range of
/// pages) and a dense one (slots), also when the predicate keeps no row of those pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_index_scans_equal_cold_ones() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    sql(&ctx, "CREATE TABLE src AS SELECT value AS id, value % 13 AS grp, value * 3 AS w FROM generate_series(1, 20000)").await.unwrap();
    copy_src_to_t(
        &ctx,
        dir.path(),
        "'ooode.clustering_key' 'id', 'ooode.indexes' 'grp', 'ooode.page_size' '4KiB'",
    )
    .await;
    sql(&ctx, "SET ooode.index_join = 'always'").await.unwrap();
    let queries = [
        "SELECT id, w FROM {} WHERE id BETWEEN 1000 AND 9000 ORDER BY id",
        "SELECT id, w FROM {} WHERE grp = 5 ORDER BY id",
        // The pages of the range hold no row passing the rest of the predicate.
        "SELECT id, w FROM {} WHERE id BETWEEN 1000 AND 9000 AND w < 0 ORDER BY id",
        "SELECT id, w FROM {} WHERE grp = 5 AND w < 0 ORDER BY id",
    ];
    for mode in ["out_of_order", "in_order"] {
        sql(&ctx, &format!("SET ooode.execution_mode = '{mode}'"))
            .await
            .unwrap();
        for q in queries {
            let want = sql(&ctx, &q.replace("{}", "src")).await.unwrap();
            let on_t = q.replace("{}", "t");
            let plan = sql(&ctx, &format!("EXPLAIN {on_t}")).await.unwrap();
            assert!(plan.contains("IndexScanExec"), "{plan}");
            let cold = sql(&ctx, &on_t).await.unwrap();
            let hot = sql(&ctx, &on_t).await.unwrap();
            assert_eq!(cold, want, "{mode}: {on_t}");
            assert_eq!(hot, want, "{mode} (hot): {on_t}");
        }
    }
}

/// The first `OoodeScanExec` of `plan`.
fn ooode_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&ooode::exec::OoodeScanExec> {
    if let Some(scan) = plan.downcast_ref::<ooode::exec::OoodeScanExec>() {
        return Some(scan);
    }
    plan.children().into_iter().find_map(ooode_scan)
}

/// A scan's Parquet copy is described when the table is scanned and built only for scans no
/// index plan replaces: before it is built, DataFusion's rules see the statistics the built
/// scan reports (one segment and several); a plan run without the index rule builds it when
/// executed; after the rule, a kept scan reads through the built Parquet scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_copy_is_built_only_for_kept_scans() {
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};

    let dir = tempfile::tempdir().unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    sql(&ctx, "CREATE TABLE src AS SELECT value AS id, value % 7 AS grp, concat('n', value) AS name FROM generate_series(1, 3000)").await.unwrap();
    copy_src_to_t(
        &ctx,
        dir.path(),
        "'ooode.clustering_key' 'id', 'ooode.indexes' 'grp'",
    )
    .await;
    // No physical optimizer rule: the plan as the table scanned it.
    let bare = SessionContext::new_with_state(
        SessionStateBuilder::new_from_existing(ctx.state())
            .with_physical_optimizer_rules(vec![])
            .build(),
    );
    let query = "SELECT name, id FROM t";
    for segments in [1, 2] {
        if segments == 2 {
            sql(
                &ctx,
                "INSERT INTO t VALUES (3001, 5, 'n3001'), (3002, 6, 'n3002')",
            )
            .await
            .unwrap();
            sql(
                &ctx,
                "INSERT INTO src VALUES (3001, 5, 'n3001'), (3002, 6, 'n3002')",
            )
            .await
            .unwrap();
        }
        let plan = bare
            .sql(query)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let scan = ooode_scan(&plan).expect("an ooode scan");
        assert!(scan.is_columnar() && scan.columnar().is_none(), "{scan:?}");
        assert_eq!(
            scan.properties().partitioning.partition_count(),
            segments,
            "one partition per segment's copy"
        );
        let built = scan
            .build_columnar()
            .unwrap()
            .expect("a Parquet scan to build");
        assert!(built.columnar().is_some());
        for partition in [None, Some(0), Some(segments - 1)] {
            let args = StatisticsArgs::new().with_partition(partition);
            let described = StatisticsContext::new().compute(scan, &args).unwrap();
            let from_built = StatisticsContext::new().compute(&built, &args).unwrap();
            assert_eq!(described, from_built, "{segments} segments, {partition:?}");
        }
        let rows = if segments == 1 { 3000 } else { 3002 };
        let stats = StatisticsContext::new()
            .compute(scan, &StatisticsArgs::new())
            .unwrap();
        assert_eq!(
            stats.num_rows,
            datafusion::common::stats::Precision::Exact(rows)
        );
        // Executed without the rule, the scan builds its Parquet scan itself (and nothing
        // merges its partitions: the rows are compared sorted).
        let batches = datafusion::physical_plan::collect(plan, bare.task_ctx())
            .await
            .unwrap();
        let got =
            datafusion::datasource::MemTable::try_new(batches[0].schema(), vec![batches]).unwrap();
        ctx.deregister_table("got").unwrap();
        ctx.register_table("got", Arc::new(got)).unwrap();
        let got = sql(&ctx, "SELECT name, id FROM got ORDER BY id")
            .await
            .unwrap();
        let want = sql(&ctx, "SELECT name, id FROM src ORDER BY id")
            .await
            .unwrap();
        assert!(got == want, "{segments} segments: rows differ");
    }

    // With the rules: the scan a filter's index plan replaced was never built (EXPLAIN
    // VERBOSE's initial plan shows it unbuilt); a kept scan reads through DataFusion's own.
    sql(&ctx, "SET ooode.index_join = 'always'").await.unwrap();
    let verbose = sql(&ctx, "EXPLAIN VERBOSE SELECT name FROM t WHERE id = 17")
        .await
        .unwrap();
    assert!(verbose.contains("reads=parquet copy"), "{verbose}");
    assert!(!verbose.contains("DataSourceExec"), "{verbose}");
    let kept = sql(&ctx, "EXPLAIN SELECT name FROM t WHERE name LIKE 'n1%'")
        .await
        .unwrap();
    assert!(
        kept.contains("reads=parquet copy") && kept.contains("DataSourceExec"),
        "{kept}"
    );
    assert_eq!(
        sql(&ctx, "SELECT count(*) FROM t WHERE name LIKE 'n1%'")
            .await
            .unwrap(),
        sql(&ctx, "SELECT count(*) FROM src WHERE name LIKE 'n1%'")
            .await
            .unwrap()
    );
}
