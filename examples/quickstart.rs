//! The smallest ooode program: register ooode on a SessionContext, make two ooode tables (one
//! from Parquet, one from a query), and run a join that ooode turns into an index nested-loop
//! join.
//!
//! Run with `cargo run -p ooode-providers --example quickstart`.

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::error::Result;
use datafusion::prelude::{SessionConfig, SessionContext};

async fn show(ctx: &SessionContext, sql: &str) -> Result<String> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

#[tokio::main]
pub async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = |name: &str| dir.path().join(name).display().to_string();

    // 1. One call: the OOODE table factory and file format, the `ooode.*` settings, the rule.
    let ctx = ooode_providers::ooode_context(SessionConfig::new());

    // 2a. A table from Parquet: any DataFusion source works as the query of COPY.
    ctx.sql(&format!(
        "COPY (SELECT value AS cust_id, concat('customer ', value) AS name, value % 25 AS region \
         FROM generate_series(1, 20000)) TO '{}' STORED AS PARQUET",
        path("customers.parquet")
    ))
    .await?
    .collect()
    .await?;
    ctx.register_parquet(
        "customers_parquet",
        path("customers.parquet"),
        Default::default(),
    )
    .await?;
    show(
        &ctx,
        &format!(
            "COPY (SELECT * FROM customers_parquet) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'cust_id')",
            path("customers")
        ),
    )
    .await?;

    // 2b. A table from a query, clustered by its key, with a secondary index on cust_id.
    show(
        &ctx,
        &format!(
            "COPY (SELECT value AS order_id, value % 20000 + 1 AS cust_id, value * 0.5 AS amount \
             FROM generate_series(1, 200000)) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'order_id', 'ooode.indexes' 'cust_id')",
            path("orders")
        ),
    )
    .await?;

    // 3. Register them: the schema comes from the table's manifest.
    for t in ["customers", "orders"] {
        ctx.sql(&format!(
            "CREATE EXTERNAL TABLE {t} STORED AS OOODE LOCATION '{}'",
            path(t)
        ))
        .await?
        .collect()
        .await?;
    }

    // 4. A selective join: a few customers, their orders found through the cust_id index.
    // `auto` (the default) keeps DataFusion's hash join where a scan costs less, as it does on
    // tables this small; `always` uses an index wherever one fits.
    ctx.sql("SET ooode.index_join = 'always'")
        .await?
        .collect()
        .await?;
    let sql = "SELECT c.name, COUNT(*) AS orders, SUM(o.amount) AS total \
               FROM customers c JOIN orders o ON c.cust_id = o.cust_id \
               WHERE c.name LIKE 'customer 10_' GROUP BY c.name ORDER BY c.name";
    let result = show(&ctx, sql).await?;
    println!("{result}");
    let plan = show(&ctx, &format!("EXPLAIN {sql}")).await?;
    let ooode_nodes: Vec<&str> = plan
        .lines()
        .filter(|l| l.contains("IndexJoinExec") || l.contains("IndexScanExec"))
        .collect();
    println!("ooode plan nodes:\n{}", ooode_nodes.join("\n"));

    // The example checks itself, so CI notices when it stops working.
    assert!(
        result.contains("customer 100") && result.contains("| 10 "),
        "{result}"
    );
    assert!(plan.contains("IndexJoinExec"), "{plan}");
    Ok(())
}
