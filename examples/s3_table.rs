//! An ooode table in S3-compatible object storage: `COPY ... TO 's3://...' STORED AS OOODE`
//! uploads it (manifest last), `CREATE EXTERNAL TABLE ... LOCATION 's3://...'` reads it with
//! one ranged GET per page, thousands in flight, and `ooode.disk_cache_path` keeps fetched
//! pages on local flash.
//!
//! Run against any S3 endpoint, for instance the test server of this repository:
//!
//! ```sh
//! mkdir -p /tmp/s3/demo && cargo run -p ooode-tpch -- s3-server --root /tmp/s3 &
//! #   prints "listening on http://127.0.0.1:PORT"
//! OOODE_S3_ENDPOINT=http://127.0.0.1:PORT OOODE_S3_BUCKET=demo \
//!   AWS_ACCESS_KEY_ID=ooode-test AWS_SECRET_ACCESS_KEY=ooode-test-secret \
//!   cargo run -p ooode-providers --example s3_table
//! ```

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::{SessionConfig, SessionContext};

async fn show(ctx: &SessionContext, sql: &str) -> Result<String> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

/// Where the table goes.
pub struct S3Target {
    /// `http://host:port` (or an AWS endpoint).
    pub endpoint: String,
    /// An existing bucket.
    pub bucket: String,
    /// Credentials.
    pub access_key: String,
    /// Credentials.
    pub secret_key: String,
}

/// Loads a table into `target`, reads it back out of order, and returns the result.
pub async fn run(target: &S3Target, cache_dir: &std::path::Path) -> Result<String> {
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    let options = format!(
        "'aws.access_key_id' '{}', 'aws.secret_access_key' '{}', 'aws.endpoint' '{}', \
         'aws.allow_http' 'true', 'aws.region' 'us-east-1'",
        target.access_key, target.secret_key, target.endpoint
    );
    let url = format!("s3://{}/example/orders", target.bucket);
    show(
        &ctx,
        &format!(
            "COPY (SELECT value AS order_id, value % 1000 AS cust_id, value * 0.25 AS amount \
             FROM generate_series(1, 100000)) TO '{url}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'order_id', 'ooode.indexes' 'cust_id', \
             'ooode.replace' 'true', {options})"
        ),
    )
    .await?;
    show(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE orders STORED AS OOODE LOCATION '{url}' OPTIONS ({options})"
        ),
    )
    .await?;
    // Pages fetched from the store are kept on local flash for later queries.
    show(
        &ctx,
        &format!("SET ooode.disk_cache_path = '{}'", cache_dir.display()),
    )
    .await?;
    ctx.sql("SET ooode.index_join = 'always'")
        .await?
        .collect()
        .await?;
    let sql = "SELECT count(*) AS orders, sum(amount) AS total FROM orders WHERE cust_id = 7";
    let result = show(&ctx, sql).await?;
    let plan = show(&ctx, &format!("EXPLAIN {sql}")).await?;
    if !plan.contains("IndexScanExec") {
        return Err(DataFusionError::Execution(format!("no index scan: {plan}")));
    }
    Ok(result)
}

#[tokio::main]
pub async fn main() -> Result<()> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| {
            DataFusionError::Configuration(format!(
                "set {name} (see the comment at the top of examples/s3_table.rs)"
            ))
        })
    };
    let target = S3Target {
        endpoint: var("OOODE_S3_ENDPOINT")?,
        bucket: var("OOODE_S3_BUCKET")?,
        access_key: var("AWS_ACCESS_KEY_ID")?,
        secret_key: var("AWS_SECRET_ACCESS_KEY")?,
    };
    let cache = tempfile::tempdir()?;
    let result = run(&target, cache.path()).await?;
    println!("{result}");
    // 100 orders of customer 7, amounts (7 + 1000 k) / 4 for k = 0..99.
    assert!(result.contains("| 100    | 1237675.0 |"), "{result}");
    Ok(())
}
