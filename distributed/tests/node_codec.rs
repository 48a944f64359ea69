//! ooode's one-node plan nodes (`OoodeScanExec` over the heap and over the columnar copy,
//! `IndexScanExec`, `IndexJoinExec` of every kind, with and without a join filter, over a
//! table of one segment and of several) go through `OoodeCodec` inside whole physical plans
//! encoded by datafusion-proto: the decoded plan shows the same and returns the same rows;
//! a worker that sees other files than the coordinator planned with refuses the plan.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use ooode_distributed::OoodeCodec;
use ooode_providers::ooode_context;
use prost::Message;

fn context() -> SessionContext {
    ooode_context(SessionConfig::new().with_target_partitions(2))
}

/// A context on a worker's runtime (its object stores: see `ooode_distributed::stores`).
fn worker_context() -> SessionContext {
    let runtime = ooode_distributed::stores::worker_runtime(&RuntimeEnv::default());
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new().with_target_partitions(2))
        .with_runtime_env(runtime);
    SessionContext::new_with_state(ooode_providers::with_ooode(state).build())
}

async fn run(ctx: &SessionContext, sql: &str) {
    ctx.sql(sql).await.unwrap().collect().await.unwrap();
}

/// Loads `t` (k unique and clustering, g indexed, s text) and a small outer table `o`.
async fn load(ctx: &SessionContext, dir: &Path) {
    run(
        ctx,
        &format!(
            "COPY (SELECT value AS k, value % 50 AS g, 'row ' || value AS s \
             FROM generate_series(1, 30000)) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'k', 'ooode.indexes' 'g')",
            dir.join("t").display()
        ),
    )
    .await;
    register(ctx, dir).await;
}

async fn register(ctx: &SessionContext, dir: &Path) {
    run(
        ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            dir.join("t").display()
        ),
    )
    .await;
    run(
        ctx,
        "CREATE TABLE o AS SELECT value * 7 AS x, 'row ' || (value * 7) AS y \
         FROM generate_series(1, 40)",
    )
    .await;
}

async fn plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
    ctx.sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap()
}

fn encode(plan: &Arc<dyn ExecutionPlan>) -> Vec<u8> {
    PhysicalPlanNode::try_from_physical_plan(plan.clone(), &OoodeCodec::coordinator())
        .unwrap()
        .encode_to_vec()
}

fn decode(
    bytes: &[u8],
    ctx: &SessionContext,
) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
    let node = PhysicalPlanNode::decode(bytes).unwrap();
    // A fresh codec: what a worker has (no table opened yet).
    let task: Arc<TaskContext> = ctx.task_ctx();
    node.try_into_physical_plan(&task, &OoodeCodec::coordinator())
}

fn text(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

fn names(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<String>) {
    out.push(plan.name().to_string());
    for c in plan.children() {
        names(c, out);
    }
}

async fn sorted_rows(plan: Arc<dyn ExecutionPlan>, ctx: &SessionContext) -> Vec<String> {
    let batches = collect(plan, ctx.task_ctx()).await.unwrap();
    let text = pretty_format_batches(&batches).unwrap().to_string();
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
    rows.sort();
    rows
}

/// Plans `sql`, checks the plan has `node`, sends it through the codec and compares.
async fn round_trip(ctx: &SessionContext, sql: &str, node: &str) {
    let original = plan(ctx, sql).await;
    let mut found = Vec::new();
    names(&original, &mut found);
    assert!(
        found.iter().any(|n| n == node),
        "{sql}: no {node} in\n{}",
        text(&original)
    );
    let back = decode(&encode(&original), ctx).unwrap();
    assert_eq!(text(&back), text(&original), "{sql}");
    let expected = sorted_rows(original, ctx).await;
    assert!(expected.len() > 4, "{sql} returns rows");
    assert_eq!(sorted_rows(back, ctx).await, expected, "{sql}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_one_node_plan_node_round_trips_in_a_whole_plan() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context();
    load(&ctx, dir.path()).await;

    for segments in [1, 2] {
        if segments == 2 {
            // A second segment: nodes name both, and the decoded ones read both.
            run(
                &ctx,
                "INSERT INTO t SELECT value AS k, value % 50 AS g, 'new ' || value AS s \
                 FROM generate_series(30001, 31000)",
            )
            .await;
        }
        run(&ctx, "SET ooode.columnar_scan = true").await;
        round_trip(
            &ctx,
            "SELECT g, COUNT(*), MAX(s) FROM t GROUP BY g",
            "OoodeScanExec",
        )
        .await;
        run(&ctx, "SET ooode.columnar_scan = false").await;
        round_trip(
            &ctx,
            "SELECT g, COUNT(*), MAX(s) FROM t GROUP BY g",
            "OoodeScanExec",
        )
        .await;
        // Index scans wherever one applies.
        run(&ctx, "SET ooode.index_cost_ratio = 100").await;
        round_trip(
            &ctx,
            "SELECT k, s FROM t WHERE g = 7 AND k < 9000",
            "IndexScanExec",
        )
        .await;
        round_trip(
            &ctx,
            "SELECT k, s FROM t WHERE k BETWEEN 100 AND 180",
            "IndexScanExec",
        )
        .await;
        run(&ctx, "SET ooode.index_join = 'always'").await;
        for join in [
            "SELECT o.x, t.s FROM o JOIN t ON o.x = t.k",
            "SELECT o.x, t.s FROM o JOIN t ON o.x = t.k AND t.s <> o.y || 'z' WHERE t.g > 3",
            "SELECT o.x, t.k FROM o LEFT JOIN t ON o.x = t.k AND t.g < 20",
            "SELECT o.x FROM o WHERE EXISTS (SELECT 1 FROM t WHERE t.k = o.x AND t.g < 30)",
            "SELECT o.x FROM o WHERE NOT EXISTS \
             (SELECT 1 FROM t WHERE t.k = o.x AND t.g < 30)",
        ] {
            round_trip(&ctx, join, "IndexJoinExec").await;
        }
        run(&ctx, "SET ooode.index_join = 'auto'").await;
        run(&ctx, "SET ooode.index_cost_ratio = 0.5").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_seeing_other_files_than_the_coordinator_refuses_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = context();
    load(&coordinator, dir.path()).await;
    let bytes = encode(&plan(&coordinator, "SELECT k, s FROM t WHERE g = 7").await);

    // The table is loaded again (other rows) before the plan arrives at a process that has
    // not opened it yet.
    run(
        &coordinator,
        &format!(
            "COPY (SELECT value AS k, value % 40 AS g, 'other ' || value AS s \
             FROM generate_series(1, 1000)) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'k', 'ooode.indexes' 'g', 'ooode.replace' 'true')",
            dir.path().join("t").display()
        ),
    )
    .await;
    let worker = worker_context();
    let err = decode(&bytes, &worker).unwrap_err().to_string();
    assert!(
        err.contains("not the one the coordinator planned with"),
        "{err}"
    );
}
