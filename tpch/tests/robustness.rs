//! Several queries at once, on one session and on several; a cancelled query releases its
//! reads; a damaged page fails only the query that reads it, with an error naming the page.

use std::sync::Arc;
use std::time::Duration;

use datafusion::physical_plan::{ExecutionPlan, collect, execute_stream};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use indicatif::ProgressBar;
use ooode::access::QueryIo;
use ooode::exec::IndexJoinExec;
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::runner::{run_sql, sorted_rows};
use ooode_tpch::tables::TABLES;

const QUERIES: [&str; 4] = [
    "SELECT count(*), sum(l_quantity) FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey \
     JOIN lineitem l ON o.o_orderkey = l.l_orderkey WHERE c.c_custkey <= 300",
    "SELECT o_orderpriority, count(*) FROM orders WHERE o_orderdate >= DATE '1995-01-01' \
     AND o_orderdate < DATE '1995-02-01' GROUP BY o_orderpriority",
    "SELECT s_name, count(*) FROM supplier JOIN lineitem ON s_suppkey = l_suppkey \
     WHERE s_suppkey < 20 GROUP BY s_name",
    "SELECT c_name FROM customer WHERE c_custkey IN (7, 77, 777) AND EXISTS \
     (SELECT 1 FROM orders WHERE o_custkey = c_custkey)",
];

async fn session(data: &DataSet) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for t in &TABLES {
        let sql = format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
            t.name,
            data.ooode_table(t.name).display()
        );
        run_sql(&ctx, &sql).await.unwrap();
    }
    run_sql(&ctx, "SET ooode.index_join = 'always'")
        .await
        .unwrap();
    ctx
}

fn load(dir: &std::path::Path) -> DataSet {
    let data = DataSet::new(dir, 0.01);
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    data
}

fn query_ios(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<QueryIo>>) {
    if let Some(j) = plan.downcast_ref::<IndexJoinExec>() {
        out.push(j.query().clone());
    }
    plan.children().into_iter().for_each(|c| query_ios(c, out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queries_cancellation_and_faults() {
    let dir = tempfile::tempdir().unwrap();
    let data = load(&dir.path().join("good"));
    let (a, b) = (session(&data).await, session(&data).await);

    // Sequential answers first.
    let mut want = Vec::new();
    for q in QUERIES {
        want.push(sorted_rows(&run_sql(&a, q).await.unwrap()).unwrap());
    }
    // All four at once on one session, and again on two sessions together.
    let runs = QUERIES.iter().map(|q| run_sql(&a, q));
    let got = futures::future::join_all(runs).await;
    for (i, g) in got.into_iter().enumerate() {
        assert_eq!(
            sorted_rows(&g.unwrap()).unwrap(),
            want[i],
            "query {i} on one session"
        );
    }
    let runs = QUERIES
        .iter()
        .enumerate()
        .map(|(i, q)| run_sql(if i % 2 == 0 { &a } else { &b }, q));
    let got = futures::future::join_all(runs).await;
    for (i, g) in got.into_iter().enumerate() {
        assert_eq!(
            sorted_rows(&g.unwrap()).unwrap(),
            want[i],
            "query {i} on two sessions"
        );
    }

    // Cancel: take one batch of a large join, drop the stream, and the reads drain.
    let sql =
        "SELECT * FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE o_custkey < 1000";
    let plan = a
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let mut ios = Vec::new();
    query_ios(&plan, &mut ios);
    assert!(!ios.is_empty(), "an index join was planned");
    let mut stream = execute_stream(plan, a.task_ctx()).unwrap();
    assert!(stream.next().await.unwrap().unwrap().num_rows() > 0);
    drop(stream);
    let io = &ios[0];
    let mut idle = false;
    for _ in 0..200 {
        if io.metrics.snapshot().in_flight == 0 && io.permits_in_use() == 0 {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        idle,
        "cancelled query still holds reads: {:?}",
        io.metrics.snapshot()
    );
    // The session still answers.
    assert_eq!(
        sorted_rows(&run_sql(&a, QUERIES[0]).await.unwrap()).unwrap(),
        want[0]
    );

    // Damaged pages of a second copy of orders (its heap, and the index the first query
    // reads index-only): the join reading them fails, naming the file and page; queries on
    // the intact copy still run.
    let bad = load(&dir.path().join("bad"));
    for file in ["heap.0.pages", "index_o_custkey_o_orderkey.0.pages"] {
        let path = bad.ooode_table("orders").join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        for page in 0..bytes.len() / 8192 {
            bytes[page * 8192 + 4000] ^= 0x55;
        }
        std::fs::write(&path, bytes).unwrap();
    }
    let c = session(&bad).await;
    let (broken, intact) = tokio::join!(run_sql(&c, QUERIES[0]), run_sql(&a, QUERIES[0]));
    let err = broken.unwrap_err().to_string();
    assert!(
        err.contains("index_o_custkey_o_orderkey.0.pages")
            && err.contains("corrupted page")
            && err.contains("checksum"),
        "{err}"
    );
    assert_eq!(sorted_rows(&intact.unwrap()).unwrap(), want[0]);
    // A month of orders is a small index scan, read ahead while it is planned: the damaged
    // page fails the query, not the read-ahead alone, and is not cached for the next run.
    for run in 0..2 {
        let plan = c
            .sql(QUERIES[1])
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let err = collect(plan, c.task_ctx()).await.unwrap_err().to_string();
        assert!(
            err.contains("orders") && err.contains("checksum"),
            "run {run}: {err}"
        );
    }
}
