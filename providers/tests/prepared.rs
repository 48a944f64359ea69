//! Prepared queries (`PreparedQuery`): planned once, executed with values bound, equal to the
//! same SQL with the values written in; the index decided per execution; the errors a user
//! meets.

mod support;

use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use ooode_providers::PreparedQuery;

async fn rows(ctx: &SessionContext, q: &str) -> String {
    let batches = ctx.sql(q).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

async fn prepared_rows(q: &PreparedQuery, values: impl Into<ParamValues>) -> String {
    let batches = q.collect(values).await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

fn shows(plan: &Arc<dyn ExecutionPlan>, node: &str) -> bool {
    displayable(plan.as_ref())
        .indent(true)
        .to_string()
        .contains(node)
}

/// An ooode context with `customer` (10,000 rows, clustered by key) and `orders` (40,000,
/// indexed by customer) as ooode tables, and the same rows as `customer_mem` / `orders_mem`.
async fn tables(dir: &std::path::Path) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    rows(
        &ctx,
        "CREATE TABLE customer_mem AS SELECT value AS c_custkey, concat('c', value) AS c_name \
         FROM generate_series(1, 10000)",
    )
    .await;
    rows(
        &ctx,
        "CREATE TABLE orders_mem AS SELECT value AS o_orderkey, (value * 7919) % 10000 + 1 AS \
         o_custkey, value % 1000 AS o_total FROM generate_series(1, 40000)",
    )
    .await;
    for (table, options) in [
        ("customer", "'ooode.clustering_key' 'c_custkey'"),
        (
            "orders",
            "'ooode.clustering_key' 'o_orderkey', 'ooode.indexes' 'o_custkey'",
        ),
    ] {
        support::copy_as_ooode(&ctx, dir, table, options).await;
    }
    ctx
}

const JOIN: &str = "SELECT c.c_name, count(*), sum(o.o_total) FROM {c} c JOIN {o} o \
                    ON c.c_custkey = o.o_custkey WHERE c.c_custkey BETWEEN {lo} AND {hi} \
                    GROUP BY c.c_name ORDER BY c.c_name";

fn join_sql(customer: &str, orders: &str, lo: &str, hi: &str) -> String {
    JOIN.replace("{c}", customer)
        .replace("{o}", orders)
        .replace("{lo}", lo)
        .replace("{hi}", hi)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_joins_equal_the_sql_with_values_written_in_and_choose_per_execution() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = tables(dir.path()).await;
    let on_ooode = PreparedQuery::new(&ctx, &join_sql("customer", "orders", "$1", "$2"))
        .await
        .unwrap();
    let on_memory = PreparedQuery::new(&ctx, &join_sql("customer_mem", "orders_mem", "$1", "$2"))
        .await
        .unwrap();
    assert_eq!(on_ooode.parameters().len(), 2);
    for (lo, hi) in [
        (1, 1),
        (17, 29),
        (5000, 5003),
        (9990, 20000),
        (30, 10),
        (1, 10000),
    ] {
        let values = || vec![ScalarValue::from(lo as i64), ScalarValue::from(hi as i64)];
        let expected = rows(
            &ctx,
            &join_sql(
                "customer_mem",
                "orders_mem",
                &lo.to_string(),
                &hi.to_string(),
            ),
        )
        .await;
        assert_eq!(
            prepared_rows(&on_ooode, values()).await,
            expected,
            "{lo}..{hi}"
        );
        assert_eq!(
            prepared_rows(&on_memory, values()).await,
            expected,
            "{lo}..{hi}"
        );
        assert_eq!(
            rows(
                &ctx,
                &join_sql("customer", "orders", &lo.to_string(), &hi.to_string())
            )
            .await,
            expected
        );
    }
    // The index is decided with the values bound: the plan is the one of the SQL with the
    // values written in, through the customer index for a few customers, by scans for all.
    for (lo, hi, indexed) in [(17i64, 29i64, true), (1, 10000, false)] {
        let prepared = on_ooode
            .plan(vec![ScalarValue::from(lo), ScalarValue::from(hi)])
            .await
            .unwrap();
        let sql = join_sql("customer", "orders", &lo.to_string(), &hi.to_string());
        let written = ctx
            .sql(&sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let text = |p: &Arc<dyn ExecutionPlan>| displayable(p.as_ref()).indent(true).to_string();
        assert_eq!(text(&prepared), text(&written));
        assert_eq!(
            shows(&prepared, "IndexScanExec"),
            indexed,
            "{}",
            text(&prepared)
        );
    }
    // Settings are read when executing, not when preparing.
    rows(&ctx, "SET ooode.index_join = 'never'").await;
    let never = on_ooode
        .plan(vec![ScalarValue::from(17i64), ScalarValue::from(29i64)])
        .await
        .unwrap();
    assert!(!shows(&never, "IndexScanExec"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_declared_and_cast_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = tables(dir.path()).await;
    let named = PreparedQuery::new(
        &ctx,
        "SELECT count(*) AS n FROM orders WHERE o_custkey BETWEEN $lo AND $hi",
    )
    .await
    .unwrap();
    let ids: Vec<&str> = named
        .parameters()
        .iter()
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(ids, ["$hi", "$lo"]);
    let by_name = prepared_rows(
        &named,
        vec![
            ("lo", ScalarValue::from(100i64)),
            ("hi", ScalarValue::from(119i64)),
        ],
    )
    .await;
    assert_eq!(
        by_name,
        rows(
            &ctx,
            "SELECT count(*) AS n FROM orders WHERE o_custkey BETWEEN 100 AND 119"
        )
        .await
    );
    // Types given by PREPARE where use cannot infer them; an Int32 value cast to Int64.
    let declared = PreparedQuery::new(
        &ctx,
        "PREPARE q(BIGINT, VARCHAR) AS SELECT $1 + c_custkey AS k, concat($2, c_name) AS s \
         FROM customer WHERE c_custkey = $1",
    )
    .await
    .unwrap();
    let out = prepared_rows(
        &declared,
        vec![ScalarValue::from(42i32), ScalarValue::from("x-")],
    )
    .await;
    assert!(out.contains("| 84 | x-c42 |"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_inserts_are_seen_by_the_next_query() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = tables(dir.path()).await;
    let insert = PreparedQuery::new(&ctx, "INSERT INTO customer VALUES ($1, $2)")
        .await
        .unwrap();
    let count = PreparedQuery::new(
        &ctx,
        "SELECT count(*) AS n FROM customer WHERE c_custkey > $1",
    )
    .await
    .unwrap();
    assert!(
        prepared_rows(&count, vec![ScalarValue::from(10000i64)])
            .await
            .contains("| 0 |")
    );
    for key in 10001..10004i64 {
        insert
            .collect(vec![
                ScalarValue::from(key),
                ScalarValue::from(format!("new{key}")),
            ])
            .await
            .unwrap();
    }
    assert!(
        prepared_rows(&count, vec![ScalarValue::from(10000i64)])
            .await
            .contains("| 3 |")
    );
    assert!(
        rows(&ctx, "SELECT c_name FROM customer WHERE c_custkey = 10002")
            .await
            .contains("new10002")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_parameter_or_the_statement() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = tables(dir.path()).await;
    let q = PreparedQuery::new(
        &ctx,
        "SELECT count(*) FROM orders WHERE o_custkey BETWEEN $1 AND $2",
    )
    .await
    .unwrap();
    let err = |e: datafusion::common::DataFusionError| e.to_string();
    let short = q
        .collect(vec![ScalarValue::from(1i64)])
        .await
        .map_err(err)
        .unwrap_err();
    assert!(short.contains("2 parameter(s), 1 value(s)"), "{short}");
    let long = q
        .collect(vec![ScalarValue::from(1i64); 3])
        .await
        .map_err(err)
        .unwrap_err();
    assert!(long.contains("2 parameter(s), 3 value(s)"), "{long}");
    let wrong = q
        .collect(vec![ScalarValue::from("many"), ScalarValue::from(2i64)])
        .await
        .map_err(err)
        .unwrap_err();
    assert!(
        wrong.contains("parameter $1 is Int64") && wrong.contains("many"),
        "{wrong}"
    );
    let named = q
        .collect(vec![("1", ScalarValue::from(1i64))])
        .await
        .map_err(err)
        .unwrap_err();
    assert!(named.contains("$2"), "{named}");
    let untyped = PreparedQuery::new(&ctx, "SELECT $1")
        .await
        .map_err(err)
        .unwrap_err();
    assert!(
        untyped.contains("parameter $1 cannot be inferred"),
        "{untyped}"
    );
    // What the error advises works.
    let typed = PreparedQuery::new(&ctx, "PREPARE q(BIGINT) AS SELECT $1 AS v")
        .await
        .unwrap();
    let out = prepared_rows(&typed, vec![ScalarValue::from(7i64)]).await;
    assert!(out.contains("| 7 |"), "{out}");
    let unknown = q
        .collect(vec![
            ("1", ScalarValue::from(1i64)),
            ("2", ScalarValue::from(2i64)),
            ("3", ScalarValue::from(3i64)),
        ])
        .await
        .map_err(err)
        .unwrap_err();
    assert!(unknown.contains("no parameter $3"), "{unknown}");
    let ddl = PreparedQuery::new(&ctx, "CREATE TABLE x AS SELECT 1")
        .await
        .map_err(err)
        .unwrap_err();
    assert!(ddl.contains("must be a query"), "{ddl}");
    // After all that, the statement still runs.
    let ok = prepared_rows(&q, vec![ScalarValue::from(1i64), ScalarValue::from(2i64)]).await;
    assert_eq!(
        ok,
        rows(
            &ctx,
            "SELECT count(*) FROM orders WHERE o_custkey BETWEEN 1 AND 2"
        )
        .await
    );
}

/// EXPLAIN and EXPLAIN ANALYZE prepare too, and show the plan of the values bound
/// (DataFusion's `EXPLAIN EXECUTE` is not supported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_plan_of_the_values_bound() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = tables(dir.path()).await;
    let query = "SELECT count(*) FROM orders WHERE o_custkey = $1";
    let explain = PreparedQuery::new(&ctx, &format!("EXPLAIN {query}"))
        .await
        .unwrap();
    let out = prepared_rows(&explain, vec![ScalarValue::from(5i64)]).await;
    assert!(out.contains("o_custkey = Int64(5)"), "{out}");
    assert!(
        out.contains("IndexScanExec") && out.contains("o_custkey IN (5)"),
        "{out}"
    );
    let analyze = PreparedQuery::new(&ctx, &format!("EXPLAIN ANALYZE {query}"))
        .await
        .unwrap();
    let out = prepared_rows(&analyze, vec![ScalarValue::from(5i64)]).await;
    assert!(
        out.contains("IndexScanExec") && out.contains("output_rows=4"),
        "{out}"
    );
}

/// Random bounds, NULLs and empty or reversed ranges through three query shapes: a prepared
/// query returns the rows of the same SQL with the values written in (through the index or
/// not, as `auto` decides for each).
#[test]
fn random_values_give_the_rows_of_the_sql_with_them_written_in() {
    use proptest::prelude::*;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = runtime.block_on(tables(dir.path()));
    let shapes = [
        "SELECT o_orderkey, o_total FROM orders WHERE o_custkey = {a} ORDER BY o_orderkey",
        "SELECT count(*), sum(o_total) FROM orders WHERE o_custkey BETWEEN {a} AND {b}",
        "SELECT c.c_name, o.o_orderkey FROM customer c JOIN orders o ON c.c_custkey = \
         o.o_custkey WHERE c.c_custkey >= {a} AND c.c_custkey < {b} ORDER BY 2",
    ];
    let prepared: Vec<PreparedQuery> = shapes
        .iter()
        .map(|s| {
            let sql = s.replace("{a}", "$1").replace("{b}", "$2");
            runtime.block_on(PreparedQuery::new(&ctx, &sql)).unwrap()
        })
        .collect();
    let value = prop_oneof![
        1 => Just(None),
        8 => (-5i64..10_010).prop_map(Some),
        1 => prop_oneof![Just(i64::MIN), Just(i64::MAX)].prop_map(Some),
    ];
    let config = ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    };
    proptest::test_runner::TestRunner::new(config)
        .run(&(0..shapes.len(), value.clone(), value), |(shape, a, b)| {
            let text = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
            let sql = shapes[shape]
                .replace("{a}", &text(a))
                .replace("{b}", &text(b));
            let q = &prepared[shape];
            let values: Vec<ScalarValue> = [a, b][..q.parameters().len()]
                .iter()
                .map(|v| ScalarValue::Int64(*v))
                .collect();
            let (expected, got) = runtime
                .block_on(async { (rows(&ctx, &sql).await, prepared_rows(q, values).await) });
            prop_assert_eq!(got, expected, "{}", sql);
            Ok(())
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn now_is_the_time_of_each_execution_not_of_preparing() {
    let ctx = SessionContext::new();
    let q = PreparedQuery::new(&ctx, "PREPARE q(BIGINT) AS SELECT now() AS at, $1 AS v")
        .await
        .unwrap();
    let at = |batches: Vec<datafusion::arrow::record_batch::RecordBatch>| {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::TimestampNanosecondType;
        batches[0]
            .column(0)
            .as_primitive::<TimestampNanosecondType>()
            .value(0)
    };
    let mut last = 0;
    for _ in 0..2 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let before = chrono_like_now_nanos();
        let value = at(q.collect(vec![ScalarValue::from(1i64)]).await.unwrap());
        assert!(
            value >= before,
            "now() {value} is before the execution {before}"
        );
        assert!(value > last);
        last = value;
    }
}

/// Nanoseconds since the epoch, as `now()` gives them.
fn chrono_like_now_nanos() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_nanos()).unwrap()
}
