//! A service's way in: statements prepared once at start-up ([`PreparedQuery`]) and shared by
//! every request handler, each request binding its own values. A lookup of one user's
//! orders goes through ooode's index (decided per request, with the values bound); orders
//! placed through a prepared `INSERT` are seen by the next lookup. Handlers that send SQL
//! text instead share a [`PlanCache`]: the text's shape is planned once, each request's value
//! bound.
//!
//! Run with `cargo run -p ooode-providers --example prepared_service`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::displayable;
use datafusion::prelude::SessionConfig;
use ooode_providers::{PlanCache, PreparedQuery};

/// What a request handler runs: the count and total of one user's orders.
async fn orders_of(lookup: &PreparedQuery, user: i64) -> Result<(i64, i64)> {
    count_and_total(lookup.collect(vec![ScalarValue::from(user)]).await?)
}

/// The same from SQL text, through the service's plan cache.
async fn orders_of_text(
    cache: &PlanCache,
    ctx: &datafusion::prelude::SessionContext,
    user: i64,
) -> Result<(i64, i64)> {
    let sql = format!("SELECT count(*), sum(amount) FROM orders WHERE user_id = {user}");
    count_and_total(cache.collect(ctx, &sql).await?)
}

fn count_and_total(
    batches: Vec<datafusion::arrow::record_batch::RecordBatch>,
) -> Result<(i64, i64)> {
    let batch = batches
        .first()
        .ok_or_else(|| DataFusionError::Execution("no result".into()))?;
    let count = batch.column(0).as_primitive::<Int64Type>().value(0);
    let total = match batch.column(1).as_primitive::<Int64Type>() {
        t if t.is_null(0) => 0,
        t => t.value(0),
    };
    Ok((count, total))
}

#[tokio::main]
pub async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let orders = dir.path().join("orders");
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    // 200,000 orders of 10,000 users, indexed by user.
    ctx.sql(&format!(
        "COPY (SELECT value AS order_id, value % 10000 AS user_id, value % 97 AS amount \
         FROM generate_series(1, 200000)) TO '{}' STORED AS OOODE \
         OPTIONS ('ooode.clustering_key' 'order_id', 'ooode.indexes' 'user_id')",
        orders.display()
    ))
    .await?
    .collect()
    .await?;
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders STORED AS OOODE LOCATION '{}'",
        orders.display()
    ))
    .await?
    .collect()
    .await?;

    // At start-up: parse, analyze and optimize once.
    let lookup = Arc::new(
        PreparedQuery::new(
            &ctx,
            "SELECT count(*), sum(amount) FROM orders WHERE user_id = $1",
        )
        .await?,
    );
    let place = Arc::new(PreparedQuery::new(&ctx, "INSERT INTO orders VALUES ($1, $2, $3)").await?);
    println!("lookup's parameters: {:?}", lookup.parameters());

    // Requests, 16 at once, each binding its user: every user has 20 orders.
    let mut handlers = Vec::new();
    for user in 0..16i64 {
        let lookup = lookup.clone();
        handlers.push(tokio::spawn(
            async move { orders_of(&lookup, user * 613).await },
        ));
    }
    for (user, handler) in handlers.into_iter().enumerate() {
        let (count, _) = handler
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
        assert_eq!(count, 20, "user {}", user * 613);
    }
    // The plan of one request: through the user index, with the value bound.
    let plan = lookup.plan(vec![ScalarValue::from(42i64)]).await?;
    let shown = displayable(plan.as_ref()).indent(true).to_string();
    println!("{shown}");
    assert!(
        shown.contains("IndexScanExec") && shown.contains("user_id@"),
        "{shown}"
    );

    // A request placing an order, then the next lookup sees it.
    let before = orders_of(&lookup, 42).await?;
    place
        .collect(vec![
            ScalarValue::from(200_001i64),
            ScalarValue::from(42i64),
            ScalarValue::from(1000i64),
        ])
        .await?;
    let after = orders_of(&lookup, 42).await?;
    println!("user 42: {before:?} (orders, total) before the insert, {after:?} after");
    assert_eq!(after, (before.0 + 1, before.1 + 1000));

    // Handlers sending SQL text share a plan cache: the first request plans the shape, the
    // next 16 (at once) reuse it with their own values, and see the order placed above.
    let cache = Arc::new(PlanCache::new(256));
    assert_eq!(orders_of_text(&cache, &ctx, 42).await?, after);
    let mut handlers = Vec::new();
    for user in 0..16i64 {
        let (cache, ctx) = (cache.clone(), ctx.clone());
        handlers.push(tokio::spawn(async move {
            orders_of_text(&cache, &ctx, user * 613).await
        }));
    }
    for (user, handler) in handlers.into_iter().enumerate() {
        let (count, _) = handler
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
        assert_eq!(count, 20, "user {}", user * 613);
    }
    let stats = cache.stats();
    println!("plan cache: {stats:?}");
    assert_eq!((stats.planned, stats.reused), (1, 16));
    Ok(())
}
