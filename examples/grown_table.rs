//! A table that grows: `INSERT INTO` adds segments, every query sees a consistent snapshot,
//! and `ooode_compact` merges the segments back into one.
//!
//! Run with `cargo run -p ooode-providers --example grown_table`.

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
    let events = dir.path().join("events");
    let ctx = ooode_providers::ooode_context(SessionConfig::new());

    // Day 1: a bulk load, clustered by event id, with an index on the user.
    show(
        &ctx,
        &format!(
            "COPY (SELECT value AS event_id, value % 500 AS user_id, 'day 1' AS day \
             FROM generate_series(1, 50000)) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'event_id', 'ooode.indexes' 'user_id')",
            events.display()
        ),
    )
    .await?;
    show(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE events STORED AS OOODE LOCATION '{}'",
            events.display()
        ),
    )
    .await?;

    // Days 2 and 3: each INSERT commits one immutable segment (sorted, indexed, checksummed).
    for day in 2..=3 {
        let first = 50_000 * (day - 1) + 1;
        show(
            &ctx,
            &format!(
                "INSERT INTO events SELECT value, value % 500, 'day {day}' \
                 FROM generate_series({first}, {})",
                first + 49_999
            ),
        )
        .await?;
    }

    // An index lookup walks every segment's B+tree at once.
    ctx.sql("SET ooode.index_join = 'always'")
        .await?
        .collect()
        .await?;
    let lookup = "SELECT day, count(*) AS events FROM events WHERE user_id = 42 \
                  GROUP BY day ORDER BY day";
    let before = show(&ctx, lookup).await?;
    println!("user 42 over three segments:\n{before}");

    // Compaction: a k-way merge of the sorted segments into one, atomic like an insert.
    let report = show(&ctx, "SELECT * FROM ooode_compact('events')").await?;
    println!("{report}");
    let after = show(&ctx, lookup).await?;

    // The example checks itself, so CI notices when it stops working.
    assert_eq!(before, after, "compaction changes no result");
    assert!(before.contains("| day 3 | 100    |"), "{before}");
    assert!(
        report.contains("| 3               | 1              |"),
        "{report}"
    );
    Ok(())
}
