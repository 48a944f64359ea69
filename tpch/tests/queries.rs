//! All 22 TPC-H queries on ooode tables return the same rows as stock DataFusion on the Parquet
//! copy, with the ooode rule never / always / auto and in both execution modes, and through a
//! plan cache; rows of a query with ORDER BY in the same order.

use std::path::Path;

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use indicatif::ProgressBar;
use ooode_providers::PlanCache;
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::runner::{ordered_plan, ordered_rows, query_rows, run_sql, sorted_rows};
use ooode_tpch::tables::TABLES;

const SF: f64 = 0.01;

fn rows(batches: &[RecordBatch]) -> Vec<String> {
    sorted_rows(batches).unwrap()
}

async fn result(ctx: &SessionContext, sql: &str) -> Vec<String> {
    query_rows(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"))
}

async fn run(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    run_sql(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"))
}

/// The rows of `sql` (its statements in turn) through `cache`, as [`result`] gives them.
async fn cached_result(ctx: &SessionContext, cache: &PlanCache, sql: &str) -> Vec<String> {
    let statements: Vec<&str> = sql
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let (last, first) = statements.split_last().unwrap();
    for statement in first {
        cache.collect(ctx, statement).await.unwrap();
    }
    let planned = cache
        .plan(ctx, last)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{last}"));
    let batches = datafusion::physical_plan::collect(planned.physical, ctx.task_ctx())
        .await
        .unwrap();
    match ordered_plan(&planned.logical) {
        true => ordered_rows(&batches).unwrap(),
        false => sorted_rows(&batches).unwrap(),
    }
}

fn query(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("queries/q{n}.sql"));
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_results_match_stock_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataSet::new(dir.path(), SF);
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    let stock = SessionContext::new();
    for t in &TABLES {
        stock
            .register_parquet(
                t.name,
                data.parquet_file(t.name).to_str().unwrap(),
                ParquetReadOptions::default(),
            )
            .await
            .unwrap();
    }
    let ooode = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for t in &TABLES {
        let sql = format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
            t.name,
            data.ooode_table(t.name).display()
        );
        run(&ooode, &sql).await;
    }
    let mut index_plans = 0;
    let cache = PlanCache::new(64);
    for n in 1..=22 {
        let sql = query(n);
        let want = result(&stock, &sql).await;
        for mode in ["out_of_order", "in_order"] {
            for rule in ["never", "always", "auto"] {
                run(&ooode, &format!("SET ooode.execution_mode = '{mode}'")).await;
                run(&ooode, &format!("SET ooode.index_join = '{rule}'")).await;
                let got = result(&ooode, &sql).await;
                assert_eq!(
                    got, want,
                    "q{n} differs with ooode.index_join={rule}, execution_mode={mode}"
                );
                if rule == "never" {
                    // Full scans of the heap pages instead of the Parquet copy.
                    run(&ooode, "SET ooode.columnar_scan = false").await;
                    let heap = result(&ooode, &sql).await;
                    run(&ooode, "SET ooode.columnar_scan = true").await;
                    assert_eq!(heap, want, "q{n} differs scanning heap pages, mode {mode}");
                }
                if rule == "always" && mode == "out_of_order" {
                    let last = sql
                        .split(';')
                        .map(str::trim)
                        .rfind(|s| !s.is_empty())
                        .unwrap()
                        .to_string();
                    let plan = rows(&run(&ooode, &format!("EXPLAIN {last}")).await).join("\n");
                    if plan.contains("IndexJoinExec") || plan.contains("IndexScanExec") {
                        index_plans += 1;
                    }
                }
            }
        }
        // Through the plan cache (`auto`, out of order): planned, then the plan with
        // placeholders reused with the values bound.
        run(&ooode, "SET ooode.execution_mode = 'out_of_order'").await;
        for round in 0..2 {
            let got = cached_result(&ooode, &cache, &sql).await;
            assert_eq!(
                got, want,
                "q{n} differs through the plan cache, round {round}"
            );
        }
    }
    // Most TPC-H queries compare columns with literals in WHERE or HAVING.
    let stats = cache.stats();
    assert!(stats.reused >= 13, "{stats:?}");
    // Most TPC-H queries join through keys ooode indexes.
    assert!(
        index_plans >= 15,
        "only {index_plans} queries used index nodes under 'always'"
    );
}
