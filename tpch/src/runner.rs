//! The main job: the 22 TPC-H queries on ooode tables (out of order, `auto`) and on the
//! Parquet copy with stock DataFusion, side by side, results checked equal.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use indicatif::{ProgressBar, ProgressStyle};

use crate::datagen::DataSet;
use crate::tables::TABLES;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One query's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryRun {
    /// Query name (q1 ... q22).
    pub query: String,
    /// Seconds on stock DataFusion over Parquet, hot (median of [`HOT_RUNS`] after a warm-up).
    pub parquet_secs: f64,
    /// Seconds on ooode (`ooode.index_join = auto`, out of order), measured the same way.
    pub ooode_secs: f64,
    /// Whether ooode planned index nodes.
    pub index_plan: bool,
    /// Whether both returned the same rows.
    pub same_result: bool,
}

/// The rows of `batches` as sorted text (for results whose order no ORDER BY fixes).
pub fn sorted_rows(batches: &[RecordBatch]) -> Result<Vec<String>, BoxError> {
    let mut out = ordered_rows(batches)?;
    out.sort();
    Ok(out)
}

/// The rows of `batches` as text, in the order they came.
pub fn ordered_rows(batches: &[RecordBatch]) -> Result<Vec<String>, BoxError> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    Ok(out)
}

/// Whether a query's rows come in an order it fixes: its plan ends in a sort (under
/// projections and limits).
pub fn ordered_plan(plan: &datafusion::logical_expr::LogicalPlan) -> bool {
    use datafusion::logical_expr::LogicalPlan;
    match plan {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Projection(p) => ordered_plan(&p.input),
        LogicalPlan::Limit(l) => ordered_plan(&l.input),
        LogicalPlan::SubqueryAlias(a) => ordered_plan(&a.input),
        _ => false,
    }
}

/// Runs every `;`-separated statement of `sql`; returns the last one's rows as text: in the
/// order they came when the query orders them (ORDER BY), else sorted.
pub async fn query_rows(ctx: &SessionContext, sql: &str) -> Result<Vec<String>, BoxError> {
    let statements: Vec<&str> = sql
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let Some((last, first)) = statements.split_last() else {
        return Ok(Vec::new());
    };
    for stmt in first {
        ctx.sql(stmt).await?.collect().await?;
    }
    let df = ctx.sql(last).await?;
    let ordered = ordered_plan(df.logical_plan());
    let batches = df.collect().await?;
    if ordered {
        ordered_rows(&batches)
    } else {
        sorted_rows(&batches)
    }
}

/// Runs every `;`-separated statement of `sql`; returns the last one's batches.
pub async fn run_sql(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>, BoxError> {
    let mut last = Vec::new();
    for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        last = ctx.sql(stmt).await?.collect().await?;
    }
    Ok(last)
}

/// Runs `sql` within `limit`: seconds and result rows (see [`query_rows`]), or None (and no
/// rows) when it ran past the limit.
pub async fn timed_rows(
    ctx: &SessionContext,
    sql: &str,
    limit: Duration,
) -> Result<(Option<f64>, Vec<String>), BoxError> {
    let start = Instant::now();
    match tokio::time::timeout(limit, query_rows(ctx, sql)).await {
        Ok(rows) => Ok((Some(start.elapsed().as_secs_f64()), rows?)),
        Err(_) => Ok((None, Vec::new())),
    }
}

/// How long the warm-up took to move the page buffers into the arena.
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    /// Runs of the query it took.
    pub runs: usize,
    /// Seconds it took.
    pub secs: f64,
    /// Bytes of page buffers still outside the arena at the end (free or held).
    pub outside_bytes: usize,
}

/// Runs `sql` on `ctx` (its ooode pool emptied each time) until the page buffers the runtime's
/// recycler allocated itself have all moved into its arena, so that what is measured next sees
/// the runtime's steady state: a process that keeps running (a service) moves them once, at
/// the arena thread's pace (a region per 100 ms), and in the meantime faulting those regions in
/// costs CPU (4.4 % of the samples of `ceiling` runs that overlapped it) and leaves the disk
/// reading into scattered 4 KiB pages. Stops after two minutes, or once nothing moved for a
/// second (the arena full: it holds what the pool's budget does). Ends with the pool empty.
pub async fn settle_buffers(
    ctx: &SessionContext,
    sql: &str,
    limit: Duration,
) -> Result<Settled, BoxError> {
    let runtime = ooode_providers::ooode_runtime(ctx);
    let (pool, recycler) = (runtime.pool(), runtime.recycler());
    let start = Instant::now();
    let (mut runs, mut outside, mut moved_at) = (0, usize::MAX, Instant::now());
    loop {
        pool.clear();
        let now_outside = recycler.own_bytes();
        if now_outside < outside {
            (outside, moved_at) = (now_outside, Instant::now());
        }
        let stalled = moved_at.elapsed() >= Duration::from_secs(1);
        if outside == 0 || stalled || start.elapsed() >= Duration::from_secs(120) {
            break;
        }
        timed_rows(ctx, sql, limit).await?;
        runs += 1;
    }
    Ok(Settled {
        runs,
        secs: start.elapsed().as_secs_f64(),
        outside_bytes: outside,
    })
}

/// Runs measured per point: a single run of a few milliseconds swings 2x on a shared VM, and
/// with three runs the median of a 0.1 s query still swung 1.5x in one of four runs.
pub const HOT_RUNS: usize = 5;

/// The middle value of `times` (not empty).
pub fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Runs of a query that takes a few milliseconds: on a shared VM, five of them still leave its
/// median swinging 1.3x between invocations of the benchmark.
pub const SHORT_QUERY_RUNS: usize = 15;
/// Queries faster than this get [`SHORT_QUERY_RUNS`] runs instead of [`HOT_RUNS`].
const SHORT_QUERY_SECS: f64 = 0.05;

/// How many runs a query whose first run took `secs` gets.
fn runs_for(secs: f64) -> usize {
    if secs < SHORT_QUERY_SECS {
        SHORT_QUERY_RUNS
    } else {
        HOT_RUNS
    }
}

/// Runs `sql` once to warm the caches, then [`HOT_RUNS`] times ([`SHORT_QUERY_RUNS`] for a
/// query of a few milliseconds): the median seconds and the sorted rows of the last run, or
/// None when a run went past `limit`. `runs` counts the warm-up too.
pub async fn hot_rows(
    ctx: &SessionContext,
    sql: &str,
    limit: Duration,
) -> Result<Measured, BoxError> {
    let Some(warm) = timed_rows(ctx, sql, limit).await?.0 else {
        return Ok(Measured::timed_out(1));
    };
    let runs = runs_for(warm);
    let mut times = Vec::with_capacity(runs);
    let mut rows = Vec::new();
    for _ in 0..runs {
        let (secs, r) = timed_rows(ctx, sql, limit).await?;
        let Some(secs) = secs else {
            return Ok(Measured::timed_out(times.len() + 2));
        };
        times.push(secs);
        rows = r;
    }
    Ok(Measured {
        secs: Some(median(times)),
        rows,
        runs: runs + 1,
    })
}

/// What [`hot_rows`] or [`cold_rows`] measured.
pub struct Measured {
    /// Median seconds, None when a run went past the limit.
    pub secs: Option<f64>,
    /// Result rows of one run (hot: the last; cold: the first), see [`query_rows`].
    pub rows: Vec<String>,
    /// Runs made, for per-run counts.
    pub runs: usize,
}

impl Measured {
    fn timed_out(runs: usize) -> Self {
        Self {
            secs: None,
            rows: Vec::new(),
            runs,
        }
    }
}

/// Runs `sql` cold: `empty_caches`, then one run. When `repeat` and that run took under a
/// second (a single run of a few milliseconds is mostly noise), more such pairs up to
/// [`HOT_RUNS`] runs ([`SHORT_QUERY_RUNS`] for a query of a few milliseconds): the median.
pub async fn cold_rows(
    ctx: &SessionContext,
    sql: &str,
    limit: Duration,
    empty_caches: &dyn Fn(),
    repeat: bool,
) -> Result<Measured, BoxError> {
    empty_caches();
    let (first, rows) = timed_rows(ctx, sql, limit).await?;
    match first {
        Some(secs) if repeat && secs < 1.0 => {
            let runs = runs_for(secs);
            let mut times = vec![secs];
            for _ in 1..runs {
                empty_caches();
                match timed_rows(ctx, sql, limit).await?.0 {
                    Some(t) => times.push(t),
                    None => return Ok(Measured::timed_out(times.len() + 1)),
                }
            }
            Ok(Measured {
                secs: Some(median(times)),
                rows,
                runs,
            })
        }
        _ => Ok(Measured {
            secs: first,
            rows,
            runs: 1,
        }),
    }
}

/// The two engines a benchmark compares, and how a cold run empties the stock side's caches.
pub struct Contexts {
    /// Stock DataFusion on the Parquet copies.
    pub stock: SessionContext,
    /// ooode on the ooode tables.
    pub ooode: SessionContext,
    /// Empties the stock side's caches before a cold run; whether it could.
    pub stock_cold: Box<dyn Fn() -> bool + Send + Sync>,
    /// The out-of-order engine whose reads are drawn over time.
    pub sampled: Arc<ooode::io::IoMetrics>,
    /// A local file fio reads right beside the in-order cold runs (the disk's speed drifts
    /// over minutes: the baseline is compared with the disk of that moment); None for
    /// remote tables.
    pub fio_file: Option<std::path::PathBuf>,
}

impl Contexts {
    /// The data set's local tables: the stock side's cold runs drop the OS page cache.
    pub async fn local(data: &DataSet) -> Result<Self, BoxError> {
        let (stock, ooode) = contexts(data).await?;
        let sampled = ooode_providers::ooode_runtime(&ooode)
            .engine(ooode::config::ExecutionMode::OutOfOrder, true)
            .metrics()
            .clone();
        Ok(Self {
            stock,
            ooode,
            stock_cold: Box::new(crate::fig4::drop_os_cache),
            sampled,
            fio_file: Some(data.ooode_table("lineitem").join("heap.0.pages")),
        })
    }
}

/// Registers the data set's tables in a stock context and an ooode context.
pub async fn contexts(data: &DataSet) -> Result<(SessionContext, SessionContext), BoxError> {
    let stock = SessionContext::new();
    let ooode = ooode_providers::ooode_context(SessionConfig::new());
    for t in &TABLES {
        let parquet = data.parquet_file(t.name);
        stock
            .register_parquet(
                t.name,
                parquet.to_string_lossy().as_ref(),
                ParquetReadOptions::default(),
            )
            .await?;
        let sql = format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
            t.name,
            data.ooode_table(t.name).display()
        );
        run_sql(&ooode, &sql).await?;
    }
    Ok((stock, ooode))
}

/// Time limit of one run of a TPC-H query.
const QUERY_LIMIT: Duration = Duration::from_secs(600);

/// Runs the queries `numbers` (all 22 when empty) found in `queries_dir` (q1.sql ...
/// q22.sql) on both engines.
pub async fn run(
    data: &DataSet,
    queries_dir: &Path,
    numbers: &[usize],
) -> Result<Vec<QueryRun>, BoxError> {
    let (stock, ooode) = contexts(data).await?;
    let numbers: Vec<usize> = match numbers {
        [] => (1..=22).collect(),
        some => some.to_vec(),
    };
    let bar = ProgressBar::new(numbers.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{prefix:>9} [{bar:30}] {pos}/{len} {msg}",
    )?);
    bar.set_prefix("queries");
    let mut runs = Vec::new();
    for n in numbers {
        let name = format!("q{n}");
        bar.set_message(name.clone());
        let sql = std::fs::read_to_string(queries_dir.join(format!("{name}.sql")))?;
        let stock_run = hot_rows(&stock, &sql, QUERY_LIMIT).await?;
        let ooode_run = hot_rows(&ooode, &sql, QUERY_LIMIT).await?;
        let (parquet_secs, want) = (stock_run.secs, stock_run.rows);
        let (ooode_secs, got) = (ooode_run.secs, ooode_run.rows);
        let (Some(parquet_secs), Some(ooode_secs)) = (parquet_secs, ooode_secs) else {
            return Err(format!("{name} ran past {QUERY_LIMIT:?}").into());
        };
        let last = sql
            .split(';')
            .map(str::trim)
            .rfind(|s| !s.is_empty())
            .unwrap_or("");
        let plan = sorted_rows(&run_sql(&ooode, &format!("EXPLAIN {last}")).await?)?.join("\n");
        runs.push(QueryRun {
            query: name,
            parquet_secs,
            ooode_secs,
            index_plan: plan.contains("IndexJoinExec") || plan.contains("IndexScanExec"),
            same_result: got == want,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(runs)
}

/// The comparison table.
pub fn format_runs(runs: &[QueryRun]) -> String {
    let mut out = format!(
        "{:<5} {:>11} {:>9} {:>8} {:>11} {:>7}\n",
        "query", "parquet s", "ooode s", "speedup", "index plan", "same"
    );
    for r in runs {
        out += &format!(
            "{:<5} {:>11.3} {:>9.3} {:>7.2}x {:>11} {:>7}\n",
            r.query,
            r.parquet_secs,
            r.ooode_secs,
            r.parquet_secs / r.ooode_secs.max(1e-9),
            if r.index_plan { "yes" } else { "no" },
            if r.same_result { "yes" } else { "NO" }
        );
    }
    let (p, o): (f64, f64) = runs
        .iter()
        .map(|r| (r.parquet_secs, r.ooode_secs))
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    out += &format!(
        "{:<5} {:>11.3} {:>9.3} {:>7.2}x\n",
        "total",
        p,
        o,
        p / o.max(1e-9)
    );
    out
}
