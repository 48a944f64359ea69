//! sqllogictest files (`tests/slt/*.slt`) run against ooode tables at SF 0.01 with the rule
//! never / always / auto in both execution modes. Expected results come from stock DataFusion
//! on the Parquet copy: `OOODE_SLT_COMPLETE=1` rewrites them from it. `tpch_explain.slt` holds
//! the plans with index nodes (ooode.index_join = 'always', out of order) as golden files.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::DataFusionError;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use indicatif::ProgressBar;
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::tables::TABLES;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

/// A session, and the data directory whose path is shown as `DATA` (plans name the files of
/// scans, and the directory is a fresh temporary one per run).
struct Db(SessionContext, String);

#[async_trait]
impl AsyncDB for Db {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.0.sql(sql).await?;
        let columns = df.schema().fields().len();
        let batches = df.collect().await?;
        if columns == 0 {
            return Ok(DBOutput::StatementComplete(0));
        }
        let opts = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for b in &batches {
            let fmts = b
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
                .collect::<Result<Vec<_>, _>>()?;
            for r in 0..b.num_rows() {
                rows.push(
                    fmts.iter()
                        .map(|f| {
                            let v = f
                                .value(r)
                                .to_string()
                                .replace(self.1.trim_start_matches('/'), "DATA");
                            if v.is_empty() {
                                "(empty)".to_string()
                            } else {
                                v
                            }
                        })
                        .collect(),
                );
            }
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; columns],
            rows,
        })
    }

    async fn shutdown(&mut self) {}
}

/// Compares rows with runs of white space folded (plan indentation and cell padding vary with
/// how the file was written, not with the plan).
fn folded_validator(
    _normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    // Plan cells hold newlines, so compare the whole output as one folded text.
    let fold = |s: String| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let actual = fold(
        actual
            .iter()
            .map(|r| r.join(" "))
            .collect::<Vec<_>>()
            .join(" "),
    );
    fold(expected.join(" ")) == actual
}

fn slt(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/slt")
        .join(name)
}

async fn ooode_session(data: &DataSet, settings: &[String]) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for t in &TABLES {
        let sql = format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
            t.name,
            data.ooode_table(t.name).display()
        );
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    for s in settings {
        ctx.sql(s).await.unwrap().collect().await.unwrap();
    }
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataSet::new(dir.path(), 0.01);
    let data_dir = dir.path().display().to_string();
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    let complete = std::env::var_os("OOODE_SLT_COMPLETE").is_some();
    if complete {
        let stock = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
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
        let dir_shown = data_dir.clone();
        let mut runner = sqllogictest::Runner::new(move || {
            let (ctx, dir) = (stock.clone(), dir_shown.clone());
            async move { Ok(Db(ctx, dir)) }
        });
        runner
            .update_test_file(
                slt("tpch.slt"),
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            )
            .await
            .unwrap();
        let always = vec!["SET ooode.index_join = 'always'".to_string()];
        let ctx = ooode_session(&data, &always).await;
        let dir_shown = data_dir.clone();
        let mut runner = sqllogictest::Runner::new(move || {
            let (ctx, dir) = (ctx.clone(), dir_shown.clone());
            async move { Ok(Db(ctx, dir)) }
        });
        runner
            .update_test_file(
                slt("tpch_explain.slt"),
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            )
            .await
            .unwrap();
    }
    for mode in ["out_of_order", "in_order"] {
        for rule in ["never", "always", "auto"] {
            let settings = vec![
                format!("SET ooode.execution_mode = '{mode}'"),
                format!("SET ooode.index_join = '{rule}'"),
            ];
            let ctx = ooode_session(&data, &settings).await;
            let data_dir = data_dir.clone();
            let mut runner = sqllogictest::Runner::new(move || {
                let (ctx, dir) = (ctx.clone(), data_dir.clone());
                async move { Ok(Db(ctx, dir)) }
            });
            runner
                .run_file_async(slt("tpch.slt"))
                .await
                .unwrap_or_else(|e| {
                    panic!("tpch.slt with index_join={rule}, execution_mode={mode}: {e}")
                });
        }
    }
    let ctx = ooode_session(&data, &["SET ooode.index_join = 'always'".to_string()]).await;
    let mut runner = sqllogictest::Runner::new(move || {
        let (ctx, dir) = (ctx.clone(), data_dir.clone());
        async move { Ok(Db(ctx, dir)) }
    });
    runner.with_validator(folded_validator);
    runner
        .run_file_async(slt("tpch_explain.slt"))
        .await
        .unwrap_or_else(|e| panic!("tpch_explain.slt: {e}"));
}
