//! Proof that ooode runs out of order, read off the I/O counters (no timing involved): the
//! paper's Fig. 4 query at SF 0.1 keeps at least 128 reads in flight out of order and never
//! more than one in order, and reads of different join levels are in flight together; in
//! order the chain runs inside its consumer's polls (no task per node).

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, collect};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use indicatif::ProgressBar;
use ooode::access::QueryIo;
use ooode::access::admission::LEVELS;
use ooode::exec::{IndexJoinExec, IndexScanExec};
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::tables::table;

fn fig4(n: u64) -> String {
    format!(
        "SELECT COUNT(*), SUM(l_quantity) FROM customer c \
         JOIN orders o ON c.c_custkey = o.o_custkey \
         JOIN lineitem l ON o.o_orderkey = l.l_orderkey WHERE c.c_custkey <= {n}"
    )
}

async fn sql(ctx: &SessionContext, q: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    ctx.sql(q).await.unwrap().collect().await.unwrap()
}

async fn physical_plan(ctx: &SessionContext, q: &str) -> Arc<dyn ExecutionPlan> {
    ctx.sql(q)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap()
}

/// The index joins' queries, and the admission level of each index node (joins and scans),
/// from the output down.
fn find_joins(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<QueryIo>>, levels: &mut Vec<usize>) {
    if let Some(j) = plan.downcast_ref::<IndexJoinExec>() {
        out.push(j.query().clone());
        levels.push(j.level());
    }
    if let Some(s) = plan.downcast_ref::<IndexScanExec>() {
        levels.push(s.level());
    }
    for c in plan.children() {
        find_joins(c, out, levels);
    }
}

/// Runs the Fig. 4 query from a cold buffer pool; returns (result, query counters, index
/// joins).
async fn run_cold(ctx: &SessionContext, n: u64) -> (String, Arc<QueryIo>, usize) {
    ooode_providers::ooode_runtime(ctx).pool().clear();
    let plan = physical_plan(ctx, &fig4(n)).await;
    let (mut queries, mut levels) = (Vec::new(), Vec::new());
    find_joins(&plan, &mut queries, &mut levels);
    // Reads of the nodes nearer the output are admitted first: each index node one level
    // below the one above it, the outermost at the top level.
    let expected: Vec<usize> = (0..levels.len()).map(|i| LEVELS - 1 - i).collect();
    assert_eq!(
        levels, expected,
        "index nodes' levels, from the output down"
    );
    let batches = collect(plan, ctx.task_ctx()).await.unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let joins = queries.len();
    (
        text,
        queries.first().expect("index joins planned").clone(),
        joins,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig4_keeps_many_reads_in_flight_only_out_of_order() {
    if let Err(why) = ooode::io::uring_available() {
        panic!("this test needs io_uring, which is not available here: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let data = DataSet::new(dir.path(), 0.1);
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for name in ["customer", "orders", "lineitem"] {
        let t = table(name).unwrap();
        load_table(&data, &t, load_options(&t), &ProgressBar::hidden()).unwrap();
        sql(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {name} STORED AS OOODE LOCATION '{}'",
                data.ooode_table(name).display()
            ),
        )
        .await;
    }
    sql(&ctx, "SET ooode.index_join = 'always'").await;
    sql(&ctx, "SET ooode.max_outstanding_io = 256").await;
    // The paper's chain reads orders' heap pages, one per order: thousands of reads at the
    // middle level. Read index-only, orders' few leaves finish before lineitem's reads start.
    sql(&ctx, "SET ooode.index_only_scans = false").await;

    let (ooo_result, ooo, levels) = run_cold(&ctx, 150).await;
    assert_eq!(
        levels, 2,
        "customer -> orders -> lineitem should be two index joins"
    );
    let s = ooo.metrics.snapshot();
    eprintln!(
        "out of order: {s:?}, {} overlapped reads",
        ooo.overlapped_reads()
    );
    assert!(
        s.max_in_flight >= 128,
        "out of order reached only {} reads in flight",
        s.max_in_flight
    );
    assert!(
        s.max_in_flight <= 256,
        "the budget of 256 was exceeded: {}",
        s.max_in_flight
    );
    // With 150 customers the orders level issues its reads in one burst, and whether the
    // lineitem level starts before the last of them finish depends on scheduling; with 600
    // the lineitem level always starts on early orders while later ones are being read.
    let (_, chain, _) = run_cold(&ctx, 600).await;
    eprintln!("N=600: {} overlapped reads", chain.overlapped_reads());
    assert!(
        chain.overlapped_reads() > 0,
        "no read of one join level overlapped another level's"
    );

    sql(&ctx, "SET ooode.execution_mode = 'in_order'").await;
    let (in_order_result, ino, _) = run_cold(&ctx, 150).await;
    let s = ino.metrics.snapshot();
    eprintln!("in order: {s:?}");
    assert_eq!(
        s.max_in_flight, 1,
        "in order had {} reads in flight",
        s.max_in_flight
    );
    assert!(s.reads > 100, "in order read only {} pages", s.reads);
    assert_eq!(ino.overlapped_reads(), 0);
    assert_eq!(ooo_result, in_order_result);

    // In order the chain's nodes run inside their consumers' polls: the outermost join's
    // stream, polled on a thread with no tokio runtime, drives the whole chain itself (a node
    // with a task of its own would have no runtime to spawn it on).
    let want = sql(&ctx, &fig4(150)).await[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("COUNT(*) is an Int64")
        .value(0);
    ooode_providers::ooode_runtime(&ctx).pool().clear();
    let plan = physical_plan(&ctx, &fig4(150)).await;
    let join = outermost_join(&plan).expect("index joins planned");
    let task = ctx.task_ctx();
    let rows = std::thread::spawn(move || {
        assert!(tokio::runtime::Handle::try_current().is_err());
        futures::executor::block_on(async move {
            let mut rows = 0;
            for partition in 0..join.output_partitioning().partition_count() {
                let mut stream = join.execute(partition, task.clone()).unwrap();
                while let Some(batch) = stream.next().await {
                    rows += batch.unwrap().num_rows();
                }
            }
            rows
        })
    })
    .join()
    .expect("the in-order chain ran without a tokio runtime");
    assert_eq!(rows as i64, want);
}

fn outermost_join(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    if plan.is::<IndexJoinExec>() {
        return Some(plan.clone());
    }
    plan.children().into_iter().find_map(outermost_join)
}
