//! The plan cache for SQL text (`PlanCache`): a reused plan gives the rows (and the errors) the
//! text gives, for every pairing of literal and column type; a changed table, view, setting
//! or session is planned again; plans with `now()` are not reused; other statements run.

mod support;

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use ooode_providers::PlanCache;
use support::run;

/// Rows as text in their order, or the error's kind (the text's and the cache's messages may
/// name the same failure at different steps).
fn shown(result: Result<Vec<datafusion::arrow::record_batch::RecordBatch>>) -> String {
    match result {
        Ok(batches) => pretty_format_batches(&batches).unwrap().to_string(),
        Err(_) => "error".into(),
    }
}

async fn as_text(ctx: &SessionContext, q: &str) -> String {
    let result = match ctx.sql(q).await {
        Ok(frame) => frame.collect().await,
        Err(e) => Err(e),
    };
    shown(result)
}

/// `orders` with columns of each type a literal meets, as an ooode table (clustered by key,
/// indexed by customer and date) and as a memory table `orders_mem`; `customer` likewise.
async fn tables(dir: &std::path::Path) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    run(
        &ctx,
        "CREATE TABLE customer_mem AS SELECT value AS c_custkey, concat('c', value) AS c_name \
         FROM generate_series(1, 2000)",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE orders_mem AS SELECT value AS o_orderkey, (value * 7919) % 2000 + 1 AS \
         o_custkey, CAST(value % 100 AS INT) AS o_small, \
         CAST(value % 1000 AS DECIMAL(15, 2)) / 4 AS o_price, CAST(value AS DOUBLE) / 7 AS \
         o_ratio, arrow_cast(CAST(9000 + value % 400 AS INT), 'Date32') AS o_date \
         FROM generate_series(1, 8000)",
    )
    .await;
    for (table, options) in [
        ("customer", "'ooode.clustering_key' 'c_custkey'"),
        (
            "orders",
            "'ooode.clustering_key' 'o_orderkey', 'ooode.indexes' 'o_custkey,o_date'",
        ),
    ] {
        support::copy_as_ooode(&ctx, dir, table, options).await;
    }
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_plans_give_the_rows_and_errors_of_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = tables(dir.path()).await;
    let cache = PlanCache::new(64);
    // Each shape with values that bind, values that do not convert (planned as text) and
    // literals of another kind than the column's (a shape of their own, uncacheable).
    let cases: &[(&str, &[&str])] = &[
        (
            "SELECT count(*), sum(o_small) FROM {o} WHERE o_custkey = {v}",
            &["17", "1999", "-3", "2.5", "'17'", "0"],
        ),
        (
            "SELECT count(*) FROM {o} WHERE o_small < {v}",
            &["50", "3000000000", "-1", "7"],
        ),
        (
            "SELECT count(*), sum(o_price) FROM {o} WHERE o_price >= {v}",
            &["200", "999999999999999", "2.5", "249", "-7"],
        ),
        (
            "SELECT count(*) FROM {o} WHERE {v} < o_ratio",
            &["100.5", "3", "9007199254740993", "1e3"],
        ),
        (
            "SELECT count(*), min(o_orderkey) FROM {o} WHERE o_date BETWEEN '1994-08-10' AND {v}",
            &["'1994-09-01'", "'1994-08-10'", "'March'", "'1995-12-31'"],
        ),
        (
            "SELECT c.c_name, count(*), sum(o.o_small) FROM {c} c JOIN {o} o \
             ON c.c_custkey = o.o_custkey WHERE c.c_custkey BETWEEN 5 AND {v} \
             GROUP BY c.c_name ORDER BY c.c_name DESC",
            &["5", "40", "1", "3000", "4"],
        ),
        (
            "SELECT o_custkey, count(*) FROM {o} WHERE o_custkey < 30 GROUP BY o_custkey \
             HAVING count(*) > {v} ORDER BY o_custkey",
            &["3", "4", "0"],
        ),
        (
            "SELECT c_custkey FROM {c} WHERE c_name = {v} OR c_name = 'c9' ORDER BY c_custkey",
            &["'c17'", "'nobody'", "''"],
        ),
    ];
    for (template, values) in cases {
        // Twice: the second round reuses what the first planned.
        for round in 0..2 {
            for v in *values {
                for (c, o) in [("customer", "orders"), ("customer_mem", "orders_mem")] {
                    let sql = template
                        .replace("{c}", c)
                        .replace("{o}", o)
                        .replace("{v}", v);
                    let expected = as_text(&ctx, &sql).await;
                    let cached = shown(cache.collect(&ctx, &sql).await);
                    assert_eq!(cached, expected, "round {round}: {sql}");
                }
            }
        }
    }
    let stats = cache.stats();
    assert!(stats.reused > 40, "{stats:?}");
    assert!(stats.as_text > 0, "{stats:?}");
}

/// An analyzer rule that makes every query return no rows (as a row filter would some).
#[derive(Debug)]
struct NoRows;

impl AnalyzerRule for NoRows {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        LogicalPlanBuilder::from(plan).limit(0, Some(0))?.build()
    }

    fn name(&self) -> &str {
        "no_rows"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_reused_only_with_its_tables_views_settings_and_session() {
    let ctx = SessionContext::new();
    let cache = PlanCache::new(64);
    let count = |ctx: &SessionContext, sql: &'static str| {
        let (ctx, cache) = (ctx.clone(), &cache);
        async move { shown(cache.collect(&ctx, sql).await) }
    };
    run(
        &ctx,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 10)",
    )
    .await;
    run(&ctx, "CREATE VIEW v AS SELECT id FROM t WHERE id > 2").await;
    let q = "SELECT count(*) AS n FROM t WHERE id > 4";
    let qv = "SELECT count(*) AS n FROM v WHERE id < 6";
    let before = count(&ctx, q).await;
    assert!(before.contains("| 6 |"), "{before}");
    assert!(count(&ctx, qv).await.contains("| 3 |"));
    assert_eq!(cache.stats().reused, 0);
    assert!(count(&ctx, q).await.contains("| 6 |"));
    assert_eq!(cache.stats().reused, 1);
    // The table dropped and made again with other rows.
    run(&ctx, "DROP TABLE t").await;
    run(
        &ctx,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 20)",
    )
    .await;
    assert!(count(&ctx, q).await.contains("| 16 |"));
    assert_eq!(cache.stats().reused, 1);
    // The view replaced.
    run(
        &ctx,
        "CREATE OR REPLACE VIEW v AS SELECT id FROM t WHERE id > 4",
    )
    .await;
    assert!(count(&ctx, qv).await.contains("| 1 |"));
    assert_eq!(cache.stats().reused, 1);
    // A setting changed: planned again, and reused under the new settings.
    run(&ctx, "SET datafusion.execution.batch_size = 3").await;
    assert!(count(&ctx, q).await.contains("| 16 |"));
    assert_eq!(cache.stats().reused, 1);
    assert!(count(&ctx, q).await.contains("| 16 |"));
    assert_eq!(cache.stats().reused, 2);
    // Another session with a table of the same name: its own plan, its own rows.
    let other = SessionContext::new();
    run(
        &other,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 5)",
    )
    .await;
    assert!(count(&other, q).await.contains("| 1 |"));
    assert_eq!(cache.stats().reused, 2);
    // A session's plans dropped when it ends; the other session's stay.
    let shapes = cache.stats().shapes;
    cache.clear_session(&other);
    assert_eq!(cache.stats().shapes, shapes - 1);
    assert!(count(&ctx, q).await.contains("| 16 |"));
    assert_eq!(cache.stats().reused, 3);
    // A session made from this one's state, with its id but a rule of its own: not its plans
    // (it has a settings object of its own too; the cache compares the rules as well).
    let limited = SessionStateBuilder::new_from_existing(ctx.state())
        .with_session_id(ctx.session_id())
        .with_analyzer_rule(Arc::new(NoRows))
        .build();
    let limited = SessionContext::new_with_state(limited);
    assert_eq!(limited.session_id(), ctx.session_id());
    assert_eq!(count(&limited, q).await, "++\n++");
    assert!(count(&ctx, q).await.contains("| 16 |"));
    // A table gone: the text's error.
    run(&ctx, "DROP TABLE t").await;
    assert_eq!(count(&ctx, q).await, "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_calling_now_are_not_reused_and_other_statements_run() {
    let ctx = SessionContext::new();
    let cache = PlanCache::new(8);
    // DDL and SET through the cache run as through `ctx.sql`.
    for sql in [
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 10)",
        "SET datafusion.execution.batch_size = 4",
    ] {
        cache.collect(&ctx, sql).await.unwrap();
    }
    assert!(ctx.table_exist("t").unwrap());
    let q = "SELECT now() AS at FROM t WHERE id = 3";
    let first = shown(cache.collect(&ctx, q).await);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = shown(cache.collect(&ctx, q).await);
    assert_ne!(first, second, "now() frozen in a reused plan");
    assert_eq!(cache.stats().reused, 0);
    // Evicted beyond its capacity, least recently used first.
    for k in 0..12 {
        let sql = format!("SELECT count(*) FROM t WHERE id > {k} AND id + {k} > 0");
        cache.collect(&ctx, &sql).await.unwrap();
    }
    assert!(cache.stats().shapes <= 8, "{:?}", cache.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_gives_the_texts_result_where_its_optimizer_drops_a_failing_expression() {
    let ctx = SessionContext::new();
    let cache = PlanCache::new(8);
    run(
        &ctx,
        "CREATE TABLE t AS SELECT value AS a FROM generate_series(1, 10)",
    )
    .await;
    // One shape, its division first: with 4 and 4 the text divides by zero and fails; with 5
    // and 6 its optimizer proves the predicate false and scans nothing, while the shape's
    // plan divides before it compares (a false left side would have spared it).
    let failing = "SELECT a FROM t WHERE 1 / (a - a) > 0 AND a = 4 AND a = 4";
    let empty = "SELECT a FROM t WHERE 1 / (a - a) > 0 AND a = 5 AND a = 6";
    assert_eq!(as_text(&ctx, failing).await, "error");
    assert_eq!(as_text(&ctx, empty).await, "++\n++");
    assert_eq!(shown(cache.collect(&ctx, failing).await), "error");
    assert_eq!(shown(cache.collect(&ctx, empty).await), "++\n++");
    assert_eq!(cache.stats().reused, 1);
    // A plan or a stream of the reused plan fails.
    let planned = cache.plan(&ctx, empty).await.unwrap();
    assert!(planned.reused);
    let ran = datafusion::physical_plan::collect(planned.physical, ctx.task_ctx()).await;
    assert_eq!(shown(ran), "error");
}

/// Random literals of every kind against columns of every type, each query through the cache
/// and as text: the same rows or both an error.
#[test]
fn random_literals_through_the_cache_equal_the_text() {
    use proptest::prelude::*;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = runtime.block_on(tables(dir.path()));
    let cache = PlanCache::new(64);
    let shapes = [
        "SELECT count(*), sum(o_small) FROM {o} WHERE o_custkey {op} {a}",
        "SELECT o_orderkey FROM {o} WHERE o_small BETWEEN {a} AND {b} ORDER BY 1 LIMIT 5",
        "SELECT count(*), max(o_price) FROM {o} WHERE o_price {op} {a} AND {b} > o_small",
        "SELECT count(*), min(o_ratio) FROM {o} WHERE {a} {op} o_ratio",
        "SELECT count(*) FROM {o} WHERE o_date {op} {a}",
    ];
    let literal = prop_oneof![
        4 => (-10i64..2_100).prop_map(|v| v.to_string()),
        1 => prop_oneof![
            Just(i64::MIN + 1),
            Just(i64::MAX),
            Just(i64::from(i32::MAX) + 1),
            Just(1 << 53),
            Just((1 << 53) + 1)
        ]
        .prop_map(|v| v.to_string()),
        2 => (-100.0f64..3000.0).prop_map(|v| format!("{v:.3}")),
        1 => prop_oneof![Just("1e3"), Just("2.5E-1"), Just("0.0")].prop_map(String::from),
        2 => prop_oneof![
            Just("'17'"),
            Just("'1995-01-15'"),
            Just("'1994-9-1'"),
            Just("'x'"),
            Just("''")
        ]
        .prop_map(String::from),
    ];
    let op = prop_oneof![Just("="), Just("<"), Just(">="), Just("<>")];
    let config = ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    };
    proptest::test_runner::TestRunner::new(config)
        .run(
            &(0..shapes.len(), op, literal.clone(), literal, any::<bool>()),
            |(shape, op, a, b, on_ooode)| {
                let sql = shapes[shape]
                    .replace("{o}", if on_ooode { "orders" } else { "orders_mem" })
                    .replace("{op}", op)
                    .replace("{a}", &a)
                    .replace("{b}", &b);
                let (expected, cached) = runtime.block_on(async {
                    (
                        as_text(&ctx, &sql).await,
                        shown(cache.collect(&ctx, &sql).await),
                    )
                });
                prop_assert_eq!(cached, expected, "{}", sql);
                Ok(())
            },
        )
        .unwrap();
    assert!(cache.stats().reused > 0, "{:?}", cache.stats());
}
