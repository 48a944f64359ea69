//! Tables that grow: insert throughput and queries over segments.
//!
//! ```text
//!   lineitem.parquet (the data set's) ──INSERT INTO t SELECT ... LIMIT n OFFSET k──> ooode t
//!                                     ──INSERT INTO p SELECT ... ──────────────────> Parquet p
//!   (n = 1 K x 20, 100 K x 5, up to 10 M x 1: rows/s and MB/s written, side by side)
//!   then t has 27 segments: a key range and a secondary-index lookup, hot and cold,
//!   before and after SELECT * FROM ooode_compact('t') (timed)
//! ```
//!
//! Bytes are what each engine wrote: the segment directory (heap, indexes, columnar copy)
//! for ooode, the Parquet file for DataFusion. Everything runs in `<data root>/inserts`,
//! removed at the end.

use std::path::Path;
use std::time::Instant;

use datafusion::execution::options::ParquetReadOptions;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::datagen::DataSet;
use crate::runner::{median, run_sql, sorted_rows};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One insert size, one engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InsertPoint {
    /// Rows per insert.
    pub rows_per_insert: u64,
    /// "ooode" or "datafusion parquet".
    pub engine: String,
    /// Inserts run.
    pub inserts: u64,
    /// Mean seconds per insert.
    pub secs_per_insert: f64,
    /// Rows per second.
    pub rows_per_sec: f64,
    /// Bytes written per second, in MB (10^6).
    pub mb_per_sec: f64,
}

/// One query over the grown table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SegmentQuery {
    /// What it looks up.
    pub query: String,
    /// Segments of the table.
    pub segments: usize,
    /// Median seconds, pool emptied before each run.
    pub cold_secs: f64,
    /// Median seconds, pages cached.
    pub hot_secs: f64,
}

/// The benchmark's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InsertsReport {
    /// Scale factor of the source.
    pub sf: f64,
    /// Throughput per insert size and engine.
    pub inserts: Vec<InsertPoint>,
    /// Queries before and after compaction.
    pub queries: Vec<SegmentQuery>,
    /// Seconds the compaction took.
    pub compact_secs: f64,
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}

const QUERIES: &[(&str, &str)] = &[
    (
        "key range (100 orders)",
        "SELECT count(*), sum(l_quantity) FROM t WHERE l_orderkey BETWEEN 1000000 AND 1000400",
    ),
    (
        "secondary index (one part)",
        "SELECT count(*), sum(l_quantity) FROM t WHERE l_partkey = 4242",
    ),
];

async fn time_queries(
    ctx: &SessionContext,
    segments: usize,
) -> Result<Vec<(SegmentQuery, Vec<String>)>, BoxError> {
    let runtime = ooode_providers::ooode_runtime(ctx);
    let mut out = Vec::new();
    for (name, sql) in QUERIES {
        let rows = sorted_rows(&run_sql(ctx, sql).await?)?;
        let (mut cold, mut hot) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            runtime.pool().clear();
            let t = Instant::now();
            run_sql(ctx, sql).await?;
            cold.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            run_sql(ctx, sql).await?;
            hot.push(t.elapsed().as_secs_f64());
        }
        out.push((
            SegmentQuery {
                query: name.to_string(),
                segments,
                cold_secs: median(cold),
                hot_secs: median(hot),
            },
            rows,
        ));
    }
    Ok(out)
}

/// Runs the benchmark on the data set's lineitem, inserts of at most `max_rows` rows.
pub async fn run(data: &DataSet, max_rows: u64) -> Result<InsertsReport, BoxError> {
    let work = data.root.join("inserts");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("parquet"))?;
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    ctx.register_parquet(
        "src",
        data.parquet_file("lineitem").to_str().ok_or("path")?,
        ParquetReadOptions::default(),
    )
    .await?;
    let source_rows = {
        let b = run_sql(&ctx, "SELECT count(*) FROM src").await?;
        let col = b[0].column(0);
        let c = col
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .ok_or("count")?;
        c.value(0) as u64
    };
    let t = work.join("t");
    let lineitem = crate::tables::table("lineitem").ok_or("lineitem")?;
    let indexes: Vec<String> = lineitem.indexes.iter().map(|c| c.join(",")).collect();
    // One statement (the index list holds ';', which run_sql would split on).
    ctx.sql(&format!(
        "COPY (SELECT * FROM src LIMIT 1000) TO '{}' STORED AS OOODE OPTIONS \
         ('ooode.clustering_key' '{}', 'ooode.indexes' '{}')",
        t.display(),
        lineitem.clustering_key.join(","),
        indexes.join(";")
    ))
    .await?
    .collect()
    .await?;
    run_sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            t.display()
        ),
    )
    .await?;
    // The Parquet table starts with the same 1,000 rows, in a file of its own.
    run_sql(
        &ctx,
        &format!(
            "COPY (SELECT * FROM src LIMIT 1000) TO '{}' STORED AS PARQUET",
            work.join("parquet/first.parquet").display()
        ),
    )
    .await?;
    run_sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE p STORED AS PARQUET LOCATION '{}/'",
            work.join("parquet").display()
        ),
    )
    .await?;
    let sizes: Vec<(u64, u64)> = [(1_000, 20), (100_000, 5), (10_000_000, 1)]
        .into_iter()
        .map(|(n, k)| (n.min(max_rows).min(source_rows), k))
        .collect();
    let mut points = Vec::new();
    let mut offset = 1000;
    for (n, k) in sizes {
        for (engine, table, dir) in [
            ("ooode", "t", t.clone()),
            ("datafusion parquet", "p", work.join("parquet")),
        ] {
            let before = dir_bytes(&dir);
            let mut secs = 0.0;
            for i in 0..k {
                let at = (offset + i * n) % source_rows.saturating_sub(n).max(1);
                let sql = format!("INSERT INTO {table} SELECT * FROM src LIMIT {n} OFFSET {at}");
                let started = Instant::now();
                run_sql(&ctx, &sql).await?;
                secs += started.elapsed().as_secs_f64();
            }
            let bytes = dir_bytes(&dir) - before;
            eprintln!("{engine}: {k} inserts of {n} rows in {secs:.2} s");
            points.push(InsertPoint {
                rows_per_insert: n,
                engine: engine.into(),
                inserts: k,
                secs_per_insert: secs / k as f64,
                rows_per_sec: (n * k) as f64 / secs,
                mb_per_sec: bytes as f64 / 1e6 / secs,
            });
        }
        offset += n * k;
    }
    let segments = ooode::storage::segments::SegmentList::read(&t)?
        .segments
        .len();
    let before = time_queries(&ctx, segments).await?;
    let started = Instant::now();
    ooode_providers::compact_table(&ctx, "t").await?;
    let compact_secs = started.elapsed().as_secs_f64();
    let after = time_queries(&ctx, 1).await?;
    for ((b, rows_b), (_, rows_a)) in before.iter().zip(&after) {
        if rows_b != rows_a {
            return Err(format!("{}: results differ after compaction", b.query).into());
        }
    }
    let queries = before.into_iter().chain(after).map(|(q, _)| q).collect();
    drop(ctx);
    let _ = std::fs::remove_dir_all(&work);
    Ok(InsertsReport {
        sf: data.sf,
        inserts: points,
        queries,
        compact_secs,
    })
}

/// The report as text tables.
pub fn format_report(r: &InsertsReport) -> String {
    let mut out = format!(
        "Inserts into lineitem (SF {} source), release build, warm OS cache for the source:\n\
         rows/insert  engine               inserts  s/insert    rows/s      MB/s\n",
        r.sf
    );
    for p in &r.inserts {
        out += &format!(
            "{:>11}  {:<20} {:>7}  {:>8.3}  {:>10.0}  {:>8.1}\n",
            p.rows_per_insert, p.engine, p.inserts, p.secs_per_insert, p.rows_per_sec, p.mb_per_sec
        );
    }
    out += "Queries over the grown table (medians of 5; cold: buffer pool emptied, O_DIRECT):\n";
    for q in &r.queries {
        out += &format!(
            "{:<28} {:>3} segment(s)  cold {:>8.2} ms  hot {:>8.2} ms\n",
            q.query,
            q.segments,
            q.cold_secs * 1e3,
            q.hot_secs * 1e3
        );
    }
    out += &format!("compaction: {:.2} s\n", r.compact_secs);
    out
}

/// Writes `inserts.json` and `inserts_throughput.svg` into `dir`.
pub fn write(r: &InsertsReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("inserts.json");
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let mut sizes: Vec<u64> = r.inserts.iter().map(|p| p.rows_per_insert).collect();
    sizes.dedup();
    let categories: Vec<String> = sizes.iter().map(|n| format!("{n} rows/insert")).collect();
    let series: Vec<(String, Vec<Option<f64>>)> = ["ooode", "datafusion parquet"]
        .iter()
        .map(|engine| {
            let values = sizes
                .iter()
                .map(|n| {
                    r.inserts
                        .iter()
                        .find(|p| p.rows_per_insert == *n && p.engine == *engine)
                        .map(|p| p.rows_per_sec)
                })
                .collect();
            (engine.to_string(), values)
        })
        .collect();
    let svg = crate::svg::bar_chart(
        "INSERT throughput (rows/s)",
        crate::svg::Axis {
            label: "rows/s",
            log: true,
        },
        &categories,
        &series,
    );
    let plot = dir.join("inserts_throughput.svg");
    std::fs::write(&plot, svg)?;
    Ok(vec![json.display().to_string(), plot.display().to_string()])
}
