//! Sharded tables: two tables split over three workers, a join that looks rows up on the
//! workers holding them, the distributed plan, and an insert committed on every shard at
//! once.
//!
//! The three workers run inside this program so that it is self-contained; on real machines
//! each is `ooode worker --listen HOST:PORT --data DIR`, and the coordinator below is what
//! `ooode --workers HOST:PORT,...` runs.
//!
//! Run with `cargo run -p ooode-distributed --example sharded_table`.

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

async fn show(ctx: &SessionContext, sql: &str) -> Result<String> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
pub async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;

    // 1. Three workers, each with its own data directory (its "local flash").
    let mut workers = Vec::new();
    for i in 0..3 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        drop(listener);
        let data = dir.path().join(format!("worker{i}"));
        tokio::spawn(ooode_distributed::serve(addr, data, std::future::pending()));
        workers.push(addr.to_string());
    }
    for w in &workers {
        while tokio::net::TcpStream::connect(w).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    // 2. The coordinator: one call adds ooode and its distributed parts.
    let builder = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new());
    let state = ooode_distributed::with_ooode_distributed(builder, &workers)?.build();
    let ctx = SessionContext::new_with_state(state);

    // 3. Load two tables in three shards each (one per worker): rows go to the worker of
    //    their shard; the shard map is written last.
    let customers = dir.path().join("customers").display().to_string();
    let orders = dir.path().join("orders").display().to_string();
    ctx.sql(&format!(
        "COPY (SELECT value AS cust_id, value % 25 AS region FROM generate_series(1, 20000)) \
         TO '{customers}' STORED AS OOODE \
         OPTIONS ('ooode.clustering_key' 'cust_id', 'ooode.shards' '3')"
    ))
    .await?
    .collect()
    .await?;
    ctx.sql(&format!(
        "COPY (SELECT value AS order_id, value % 20000 + 1 AS cust_id, value % 1000 AS amount \
         FROM generate_series(1, 200000)) TO '{orders}' STORED AS OOODE \
         OPTIONS ('ooode.clustering_key' 'order_id', 'ooode.indexes' 'cust_id', \
                  'ooode.shards' '3')"
    ))
    .await?
    .collect()
    .await?;
    for (name, at) in [("customers", &customers), ("orders", &orders)] {
        ctx.sql(&format!(
            "CREATE EXTERNAL TABLE {name} STORED AS OOODE LOCATION '{at}'"
        ))
        .await?
        .collect()
        .await?;
    }

    // 4. A selective join: the three customers' orders are looked up through orders'
    //    cust_id index, each worker probing its own shard.
    let sql = "SELECT c.cust_id, COUNT(*) AS orders, SUM(o.amount) AS total \
               FROM customers c JOIN orders o ON c.cust_id = o.cust_id \
               WHERE c.cust_id BETWEEN 10 AND 12 GROUP BY c.cust_id ORDER BY c.cust_id";
    let result = show(&ctx, sql).await?;
    println!("{result}");
    assert!(result.contains("| 10      | 10     |"), "{result}");

    // 4b. The same join prepared (planned once, the range bound per execution): the same
    //     distributed plan and rows.
    let prepared = ooode_providers::PreparedQuery::new(
        &ctx,
        &sql.replace("BETWEEN 10 AND 12", "BETWEEN $1 AND $2"),
    )
    .await?;
    let bound = vec![ScalarValue::from(10i64), ScalarValue::from(12i64)];
    let plan = prepared.plan(bound.clone()).await?;
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(true)
        .to_string();
    assert!(shown.contains("ShardLookupJoinExec"), "{shown}");
    let batches = prepared.collect(bound).await?;
    assert_eq!(pretty_format_batches(&batches)?.to_string(), result);

    // 4c. The SQL text through a plan cache: its shape planned once, then reused with the
    //     values taken from the text, on the same distributed plan.
    let cache = ooode_providers::PlanCache::new(16);
    for _ in 0..2 {
        let planned = cache.plan(&ctx, sql).await?;
        let shown = datafusion::physical_plan::displayable(planned.physical.as_ref())
            .indent(true)
            .to_string();
        assert!(shown.contains("ShardLookupJoinExec"), "{shown}");
        let batches = datafusion::physical_plan::collect(planned.physical, ctx.task_ctx()).await?;
        assert_eq!(pretty_format_batches(&batches)?.to_string(), result);
    }
    assert_eq!(cache.stats().reused, 1);

    // 5. The distributed plan: stages, tasks, and the worker of every shard.
    let plan = show(&ctx, &format!("EXPLAIN {sql}")).await?;
    println!("{plan}");
    assert!(
        plan.contains("ShardLookupJoinExec") && plan.contains("Stage 1"),
        "{plan}"
    );

    // 6. New orders: each shard's rows become a new segment on its worker, and the new
    //    shard map (the commit) makes them visible on all three at once.
    ctx.sql("INSERT INTO orders SELECT 200000 + value, 11, 5 FROM generate_series(1, 4)")
        .await?
        .collect()
        .await?;
    let result = show(&ctx, sql).await?;
    println!("{result}");
    assert!(result.contains("| 11      | 14     |"), "{result}");
    Ok(())
}
