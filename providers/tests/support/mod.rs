//! What several test files set up the same way.

use datafusion::prelude::SessionContext;

/// Runs `sql` to the end; panics, naming it, where it fails.
pub async fn run(ctx: &SessionContext, sql: &str) {
    let frame = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{e}\n{sql}"));
    frame
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"));
}

/// Writes the memory table `{table}_mem` as an ooode table under `dir` with `options`
/// (`COPY ... OPTIONS (...)`) and registers it as `table`.
pub async fn copy_as_ooode(
    ctx: &SessionContext,
    dir: &std::path::Path,
    table: &str,
    options: &str,
) {
    let path = dir.join(table);
    run(
        ctx,
        &format!(
            "COPY (SELECT * FROM {table}_mem) TO '{}' STORED AS OOODE OPTIONS ({options})",
            path.display()
        ),
    )
    .await;
    run(
        ctx,
        &format!(
            "CREATE EXTERNAL TABLE {table} STORED AS OOODE LOCATION '{}'",
            path.display()
        ),
    )
    .await;
}
