//! Out of order vs in order on the same plan: `SET ooode.execution_mode` switches between
//! ooode's out-of-order executor (many reads in flight) and the in-order baseline (one read at
//! a time, the paper's IODE), and EXPLAIN ANALYZE shows what each did.
//!
//! Run with `cargo run -p ooode-providers --example modes`.

use std::time::Instant;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::error::Result;
use datafusion::prelude::{SessionConfig, SessionContext};

async fn show(ctx: &SessionContext, sql: &str) -> Result<String> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

/// The value of `name=` in the metrics of the plan line that mentions `node`.
fn metric(plan: &str, node: &str, name: &str) -> Option<u64> {
    let line = plan.lines().find(|l| l.contains(node))?;
    let at = line.find(&format!("{name}="))? + name.len() + 1;
    let digits: String = line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

#[tokio::main]
pub async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let orders = dir.path().join("orders").display().to_string();
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    show(
        &ctx,
        &format!(
            "COPY (SELECT value AS order_id, (value * 7919) % 50000 AS cust_id, value * 0.5 AS amount \
             FROM generate_series(1, 300000)) TO '{orders}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'order_id', 'ooode.indexes' 'cust_id')"
        ),
    )
    .await?;
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders STORED AS OOODE LOCATION '{orders}'"
    ))
    .await?
    .collect()
    .await?;
    ctx.sql("CREATE TABLE wanted AS SELECT value * 37 AS cust_id FROM generate_series(1, 400)")
        .await?
        .collect()
        .await?;
    // Index plans wherever an index fits, as in the paper's comparison.
    ctx.sql("SET ooode.index_join = 'always'")
        .await?
        .collect()
        .await?;
    let sql = "SELECT COUNT(*), SUM(o.amount) FROM wanted w JOIN orders o ON w.cust_id = o.cust_id";

    let mut results = Vec::new();
    for mode in ["out_of_order", "in_order"] {
        ctx.sql(&format!("SET ooode.execution_mode = '{mode}'"))
            .await?
            .collect()
            .await?;
        // Cold: empty ooode's buffer pool (its reads bypass the OS page cache).
        ooode_providers::ooode_runtime(&ctx).pool().clear();
        let start = Instant::now();
        let analyzed = show(&ctx, &format!("EXPLAIN ANALYZE {sql}")).await?;
        let secs = start.elapsed().as_secs_f64();
        let result = show(&ctx, sql).await?;
        let node = analyzed
            .lines()
            .find(|l| l.contains("IndexJoinExec"))
            .unwrap_or("(no IndexJoinExec in the plan)")
            .trim()
            .trim_matches('|')
            .trim();
        println!("== {mode}, cold: {secs:.3} s\n{result}\n{node}\n");
        let max_in_flight = metric(&analyzed, "IndexJoinExec", "max_reads_in_flight");
        results.push((mode, result, max_in_flight));
    }
    // Same rows either way; many reads in flight out of order, never more than one in order.
    assert_eq!(results[0].1, results[1].1);
    assert!(
        results[0].2.unwrap_or(0) > 1,
        "out of order kept at most one read in flight"
    );
    assert_eq!(
        results[1].2,
        Some(1),
        "in order: not exactly one read in flight"
    );
    Ok(())
}
