//! What segments cost: the Fig. 4 chain (`customer -> orders -> lineitem`, N = 1 and 150)
//! with orders and lineitem grown by INSERT into 1, 10 and 100 segments, and again after
//! compacting them.
//!
//! ```text
//!   orders.parquet, lineitem.parquet ──split by order key into S ranges──>
//!       COPY (range 1) TO t STORED AS OOODE; INSERT INTO t (range 2); ... (range S)
//!   (new orders arrive with new keys: each segment holds a key range, as daily loads would)
//!   ──> Fig. 4 at N = 1 and 150, index plans, out of order, cold and hot (medians of 5)
//!   ──> SELECT * FROM ooode_compact(...) on both ──> the same queries again
//! ```
//!
//! Every result is checked against the data set's own (one-segment) tables. Everything runs
//! in `<data root>/segments`, one S at a time, removed at the end.

use std::path::Path;
use std::time::Instant;

use datafusion::execution::options::ParquetReadOptions;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::datagen::DataSet;
use crate::fig4::fig4_sql;
use crate::runner::{median, run_sql, sorted_rows};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One query on one table layout.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SegmentsPoint {
    /// Segments orders and lineitem were built in.
    pub segments: usize,
    /// Whether they were compacted (into one) before the query.
    pub compacted: bool,
    /// Customers selected.
    pub n: u64,
    /// Median seconds, buffer pool emptied before each run (reads are O_DIRECT).
    pub cold_secs: f64,
    /// Median seconds, pages cached.
    pub hot_secs: f64,
    /// Pages a cold run read.
    pub cold_pages: u64,
}

/// Building and compacting one layout.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SegmentsBuild {
    /// Segments.
    pub segments: usize,
    /// Seconds to load orders and lineitem as that many segments.
    pub build_secs: f64,
    /// Seconds to compact both.
    pub compact_secs: Option<f64>,
}

/// The benchmark's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SegmentsReport {
    /// Scale factor.
    pub sf: f64,
    /// Query timings.
    pub points: Vec<SegmentsPoint>,
    /// Build and compaction times.
    pub builds: Vec<SegmentsBuild>,
}

/// Customers of the two Fig. 4 points.
const NS: [u64; 2] = [1, 150];

/// The grown tables: (name, key column to split on, clustering key, indexes).
fn grown_tables() -> Vec<crate::tables::TpchTable> {
    ["orders", "lineitem"]
        .iter()
        .filter_map(|n| crate::tables::table(n))
        .collect()
}

async fn scalar_u64(ctx: &SessionContext, sql: &str) -> Result<u64, BoxError> {
    let batches = run_sql(ctx, sql).await?;
    let col = datafusion::arrow::compute::cast(
        batches[0].column(0),
        &datafusion::arrow::datatypes::DataType::UInt64,
    )?;
    let col = col
        .as_any()
        .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        .ok_or("a number")?;
    Ok(col.value(0))
}

/// Loads orders and lineitem under `dir` as `segments` segments each, split by order key.
async fn build(
    ctx: &SessionContext,
    dir: &Path,
    segments: usize,
    max_key: u64,
) -> Result<(), BoxError> {
    for t in grown_tables() {
        let key = &t.clustering_key[0];
        let dest = dir.join(t.name);
        let indexes: Vec<String> = t.indexes.iter().map(|c| c.join(",")).collect();
        let step = max_key.div_ceil(segments as u64);
        for i in 0..segments as u64 {
            let rows = format!(
                "SELECT * FROM src_{} WHERE {key} > {} AND {key} <= {}",
                t.name,
                i * step,
                (i + 1) * step
            );
            // One statement each: the index list holds ';', which run_sql would split on.
            let sql = if i == 0 {
                format!(
                    "COPY ({rows}) TO '{}' STORED AS OOODE OPTIONS ('ooode.clustering_key' \
                     '{}', 'ooode.indexes' '{}')",
                    dest.display(),
                    t.clustering_key.join(","),
                    indexes.join(";")
                )
            } else {
                format!("INSERT INTO grown_{} {rows}", t.name)
            };
            ctx.sql(&sql).await?.collect().await?;
            if i == 0 {
                run_sql(
                    ctx,
                    &format!(
                        "CREATE EXTERNAL TABLE grown_{} STORED AS OOODE LOCATION '{}'",
                        t.name,
                        dest.display()
                    ),
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// A session reading customer from the data set and orders and lineitem from `dir`.
async fn query_context(data: &DataSet, dir: &Path) -> Result<SessionContext, BoxError> {
    let ctx = ooode_providers::ooode_context(SessionConfig::new());
    for (name, path) in [
        ("customer", data.ooode_table("customer")),
        ("orders", dir.join("orders")),
        ("lineitem", dir.join("lineitem")),
    ] {
        run_sql(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {name} STORED AS OOODE LOCATION '{}'",
                path.display()
            ),
        )
        .await?;
    }
    run_sql(&ctx, "SET ooode.index_join = 'always'").await?;
    Ok(ctx)
}

/// Times the Fig. 4 points on `ctx`, checking each result against `want`.
async fn time_points(
    ctx: &SessionContext,
    segments: usize,
    compacted: bool,
    want: &[Vec<String>],
) -> Result<Vec<SegmentsPoint>, BoxError> {
    let runtime = ooode_providers::ooode_runtime(ctx);
    let mut out = Vec::new();
    for (n, want) in NS.iter().zip(want) {
        let sql = fig4_sql(*n);
        let got = sorted_rows(&run_sql(ctx, &sql).await?)?;
        if &got != want {
            return Err(format!(
                "Fig. 4 N = {n} over {segments} segments (compacted: {compacted}): {got:?}, \
                 expected {want:?}"
            )
            .into());
        }
        let (mut cold, mut hot, mut pages) = (Vec::new(), Vec::new(), 0);
        for _ in 0..5 {
            runtime.pool().clear();
            let before = runtime.pool().stats().misses;
            let t = Instant::now();
            run_sql(ctx, &sql).await?;
            cold.push(t.elapsed().as_secs_f64());
            pages = runtime.pool().stats().misses - before;
            let t = Instant::now();
            run_sql(ctx, &sql).await?;
            hot.push(t.elapsed().as_secs_f64());
        }
        out.push(SegmentsPoint {
            segments,
            compacted,
            n: *n,
            cold_secs: median(cold),
            hot_secs: median(hot),
            cold_pages: pages,
        });
    }
    Ok(out)
}

/// Runs the benchmark for each count of segments in `counts`.
pub async fn run(data: &DataSet, counts: &[usize]) -> Result<SegmentsReport, BoxError> {
    let work = data.root.join("segments");
    let _ = std::fs::remove_dir_all(&work);
    // The reference: the data set's own tables, one segment each.
    let reference = ooode_providers::ooode_context(SessionConfig::new());
    for t in ["customer", "orders", "lineitem"] {
        run_sql(
            &reference,
            &format!(
                "CREATE EXTERNAL TABLE {t} STORED AS OOODE LOCATION '{}'",
                data.ooode_table(t).display()
            ),
        )
        .await?;
    }
    let mut want = Vec::new();
    for n in NS {
        want.push(sorted_rows(&run_sql(&reference, &fig4_sql(n)).await?)?);
    }
    let max_key = scalar_u64(&reference, "SELECT max(o_orderkey) FROM orders").await?;
    drop(reference);
    let mut points = Vec::new();
    let mut builds = Vec::new();
    for &segments in counts {
        let dir = work.join(segments.to_string());
        let loader = ooode_providers::ooode_context(SessionConfig::new());
        for t in grown_tables() {
            loader
                .register_parquet(
                    format!("src_{}", t.name),
                    data.parquet_file(t.name).to_str().ok_or("path")?,
                    ParquetReadOptions::default(),
                )
                .await?;
        }
        let started = Instant::now();
        build(&loader, &dir, segments, max_key).await?;
        let build_secs = started.elapsed().as_secs_f64();
        drop(loader);
        eprintln!("{segments} segment(s): built in {build_secs:.1} s");
        let ctx = query_context(data, &dir).await?;
        points.extend(time_points(&ctx, segments, false, &want).await?);
        let mut compact_secs = None;
        if segments > 1 {
            let started = Instant::now();
            for t in ["orders", "lineitem"] {
                ooode_providers::compact_table(&ctx, t).await?;
            }
            compact_secs = Some(started.elapsed().as_secs_f64());
            eprintln!(
                "{segments} segment(s): compacted in {:.1} s",
                compact_secs.unwrap_or(0.0)
            );
            // A new session, as after a restart: the compacted tables alone.
            drop(ctx);
            let ctx = query_context(data, &dir).await?;
            points.extend(time_points(&ctx, segments, true, &want).await?);
        }
        builds.push(SegmentsBuild {
            segments,
            build_secs,
            compact_secs,
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(SegmentsReport {
        sf: data.sf,
        points,
        builds,
    })
}

fn layout(p: &SegmentsPoint) -> String {
    match (p.segments, p.compacted) {
        (1, _) => "1 segment".into(),
        (s, false) => format!("{s} segments"),
        (s, true) => format!("{s} -> compacted"),
    }
}

/// The report as a text table.
pub fn format_report(r: &SegmentsReport) -> String {
    let mut out = format!(
        "Fig. 4 over grown tables (SF {}, orders and lineitem in S segments split by order \
         key; index plans, out of order; medians of 5, {} build):\n\
         layout                 N    cold ms  pages   hot ms\n",
        r.sf,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for p in &r.points {
        out += &format!(
            "{:<20} {:>3}  {:>9.2} {:>6}  {:>7.2}\n",
            layout(p),
            p.n,
            p.cold_secs * 1e3,
            p.cold_pages,
            p.hot_secs * 1e3
        );
    }
    for b in &r.builds {
        out += &format!(
            "{} segment(s): built in {:.1} s{}\n",
            b.segments,
            b.build_secs,
            b.compact_secs
                .map(|c| format!(", compacted in {c:.1} s"))
                .unwrap_or_default()
        );
    }
    out
}

/// Writes `segments.json` and `segments.svg` into `dir`.
pub fn write(r: &SegmentsReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("segments.json");
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let mut categories: Vec<String> = r.points.iter().map(layout).collect();
    categories.dedup();
    let mut series = Vec::new();
    for n in NS {
        for (cache, cold) in [("cold", true), ("hot", false)] {
            let values = categories
                .iter()
                .map(|c| {
                    r.points
                        .iter()
                        .find(|p| p.n == n && &layout(p) == c)
                        .map(|p| if cold { p.cold_secs } else { p.hot_secs } * 1e3)
                })
                .collect();
            series.push((format!("N = {n}, {cache}"), values));
        }
    }
    let svg = crate::svg::bar_chart(
        "Fig. 4 over tables of S segments (ms)",
        crate::svg::Axis {
            label: "ms",
            log: true,
        },
        &categories,
        &series,
    );
    let plot = dir.join("segments.svg");
    std::fs::write(&plot, svg)?;
    Ok(vec![json.display().to_string(), plot.display().to_string()])
}
