//! The paper's Fig. 4 experiment: `customer -> orders -> lineitem` with `c_custkey <= N`,
//! run by ooode out of order, ooode in order, and stock DataFusion on Parquet, cold and hot,
//! side by side in one run, with the results checked equal.

use std::time::Duration;

use crate::datagen::DataSet;
use crate::runner::{Contexts, cold_rows, hot_rows, median, timed_rows};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `auto` without index-only scans (`ooode.index_only_scans = false`).
pub const AUTO_HEAP: &str = "ooode auto heap";

/// The query for a given N.
pub fn fig4_sql(n: u64) -> String {
    format!(
        "SELECT COUNT(*), SUM(l_quantity) FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey \
         JOIN lineitem l ON o.o_orderkey = l.l_orderkey WHERE c.c_custkey <= {n}"
    )
}

/// One measurement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fig4Point {
    /// Customers selected.
    pub n: u64,
    /// Fraction of customers selected.
    pub selectivity: f64,
    /// "ooode out_of_order (always)", "ooode in_order (always)", "ooode auto", "datafusion parquet".
    pub engine: String,
    /// "cold" or "hot".
    pub cache: String,
    /// Seconds, or None when it ran past the time limit.
    pub secs: Option<f64>,
    /// Pages read by ooode (None for Parquet).
    pub pages_read: Option<u64>,
    /// For in-order cold runs: fio's random 8 KiB reads at depth 1 on the lineitem heap, IOPS,
    /// the mean of one second right before the run and one right after (None without fio).
    pub fio_qd1_beside: Option<f64>,
    /// For in-order cold runs: the query planned alone from emptied caches, median seconds
    /// and pages it read, to tell the baseline's read path from DataFusion's planning
    /// (0.5-2.6 ms measured, up to a sixth of the whole at N = 15).
    pub planning: Option<Planning>,
    /// Sorted result rows (checked equal across engines).
    #[serde(skip)]
    pub result: Vec<String>,
}

/// Planning alone, from emptied caches (see [`Fig4Point::planning`]).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Planning {
    /// Median seconds from SQL text to physical plan.
    pub secs: f64,
    /// Pages read per planning (range counts from B+tree nodes not in memory).
    pub pages_read: u64,
}

/// Plans of a query measured per point.
const PLANNING_RUNS: usize = 7;

/// Plans `sql` (no execution) [`PLANNING_RUNS`] times, each after `empty_caches`.
async fn cold_planning(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
    empty_caches: &dyn Fn(),
    pool: &ooode::io::BufferPool,
) -> Result<Planning, BoxError> {
    let before = ooode_reads(pool);
    let mut times = Vec::with_capacity(PLANNING_RUNS);
    for _ in 0..PLANNING_RUNS {
        empty_caches();
        let start = std::time::Instant::now();
        ctx.sql(sql).await?.create_physical_plan().await?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok(Planning {
        secs: median(times),
        pages_read: (ooode_reads(pool) - before) / PLANNING_RUNS as u64,
    })
}

/// Writes dirty pages and drops the OS page cache (root only); whether it worked.
pub fn drop_os_cache() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// The measurements and, for the cold out-of-order run of the largest N, IOPS and CPU over
/// time (the paper's Fig. 8 and 9).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fig4Report {
    /// All measurements.
    pub points: Vec<Fig4Point>,
    /// Samples every 10 ms of the cold out-of-order run of the largest N.
    pub io_samples: Vec<ooode::io::Sample>,
}

/// Runs the experiment over `ns`; progress on stderr.
///
/// `only`: when not empty, run just the engines whose name contains one of these strings
/// (for profiling one engine); `settings` are further `SET` statements for ooode's session.
/// Hot runs first run the same query once, untimed, on the same engine, so that "hot" means
/// the pages this query needs are cached; then the median of [`crate::runner::HOT_RUNS`] runs
/// (15 under 50 ms). Cold runs under a second are repeated as well (caches emptied before
/// each) and the median kept.
pub async fn run(
    data: &DataSet,
    ns: &[u64],
    limit: Duration,
    only: &[String],
    settings: &[String],
) -> Result<Fig4Report, BoxError> {
    let contexts = Contexts::local(data).await?;
    for s in settings {
        contexts.ooode.sql(s).await?.collect().await?;
    }
    let customers = crate::tables::expected_rows("customer", data.sf).unwrap_or(1) as f64;
    run_with(&contexts, customers, ns, limit, only).await
}

/// [`run`] on given contexts (`customers`: the customer table's rows).
pub async fn run_with(
    contexts: &Contexts,
    customers: f64,
    ns: &[u64],
    limit: Duration,
    only: &[String],
) -> Result<Fig4Report, BoxError> {
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let (stock, ooode) = (&contexts.stock, &contexts.ooode);
    let engines: [(&str, &[&str]); 4] = [
        (
            "ooode out_of_order",
            &[
                "SET ooode.execution_mode = 'out_of_order'",
                "SET ooode.index_join = 'always'",
                "SET ooode.index_only_scans = true",
            ],
        ),
        (
            "ooode in_order",
            &[
                "SET ooode.execution_mode = 'in_order'",
                "SET ooode.index_join = 'always'",
                "SET ooode.index_only_scans = true",
            ],
        ),
        (
            "ooode auto",
            &[
                "SET ooode.execution_mode = 'out_of_order'",
                "SET ooode.index_join = 'auto'",
                "SET ooode.index_only_scans = true",
            ],
        ),
        // `auto` reading orders' rows from its heap, as before index-only scans: what they
        // are worth, side by side.
        (
            AUTO_HEAP,
            &[
                "SET ooode.execution_mode = 'out_of_order'",
                "SET ooode.index_join = 'auto'",
                "SET ooode.index_only_scans = false",
            ],
        ),
    ];
    // The first ooode query of a process sets up the I/O engines; keep that out of the runs.
    timed_rows(ooode, &fig4_sql(1), limit).await?;
    let can_drop = (contexts.stock_cold)();
    if !can_drop {
        eprintln!("cannot drop the OS page cache (not root): Parquet 'cold' runs are warm");
    }
    let runtime = ooode_providers::ooode_runtime(ooode);
    let pool = runtime.pool().clone();
    let mut points = Vec::new();
    let mut io_samples = Vec::new();
    let largest = ns.iter().copied().max().unwrap_or(0);
    let engine_metrics = contexts.sampled.clone();
    let mut prefaulted = false;
    for &n in ns {
        let sql = fig4_sql(n);
        for cache in ["cold", "hot"] {
            for (name, settings) in engines {
                if !wanted(name) {
                    continue;
                }
                for s in settings {
                    ooode.sql(s).await?.collect().await?;
                }
                let sample = n == largest && cache == "cold" && name == "ooode out_of_order";
                // The first cold run of the largest size is a single run that would fault in a
                // gigabyte of fresh page buffers (1-4 s of system time on this project's VM;
                // with `--only in_order`, 23 % of that run's CPU samples), which the engines
                // keep and every later run reuses. An unmeasured cold run before it puts it on
                // the footing of every later run.
                if n == largest && cache == "cold" && !prefaulted {
                    prefaulted = true;
                    pool.clear();
                    timed_rows(ooode, &sql, limit).await?;
                }
                // The baseline's reads are set next to the disk of the same minute.
                let beside = (cache == "cold" && name == "ooode in_order")
                    .then_some(contexts.fio_file.as_deref())
                    .flatten();
                let fio_qd1 = |file| crate::iobench::fio_iops(file, 1, 1.0);
                let fio_before = beside.and_then(fio_qd1);
                let before = ooode_reads(&pool);
                let sampler = sample.then(|| {
                    ooode::io::Sampler::start(engine_metrics.clone(), Duration::from_millis(10))
                });
                // The sampled run is one run: its I/O over time is drawn.
                let (secs, result, runs) = if cache == "cold" {
                    let c = cold_rows(ooode, &sql, limit, &|| pool.clear(), !sample).await?;
                    (c.secs, c.rows, c.runs)
                } else {
                    let h = hot_rows(ooode, &sql, limit).await?;
                    (h.secs, h.rows, h.runs)
                };
                if let Some(s) = sampler {
                    io_samples = s.finish();
                }
                let pages_read = (ooode_reads(&pool) - before) / runs as u64;
                let fio_qd1_beside = fio_before
                    .zip(beside.and_then(fio_qd1))
                    .map(|(a, b)| (a + b) / 2.0);
                let planning = match beside {
                    Some(_) => Some(cold_planning(ooode, &sql, &|| pool.clear(), &pool).await?),
                    None => None,
                };
                eprintln!("N={n:<6} {cache} {name:<20} {}", fmt_secs(secs));
                points.push(Fig4Point {
                    n,
                    selectivity: n as f64 / customers,
                    engine: name.into(),
                    cache: cache.into(),
                    secs,
                    pages_read: Some(pages_read),
                    fio_qd1_beside,
                    planning,
                    result,
                });
            }
            if !wanted("datafusion parquet") {
                continue;
            }
            let (secs, result) = if cache == "cold" {
                let empty = || {
                    (contexts.stock_cold)();
                };
                let c = cold_rows(stock, &sql, limit, &empty, true).await?;
                (c.secs, c.rows)
            } else {
                let h = hot_rows(stock, &sql, limit).await?;
                (h.secs, h.rows)
            };
            eprintln!(
                "N={n:<6} {cache} {:<20} {}",
                "datafusion parquet",
                fmt_secs(secs)
            );
            points.push(Fig4Point {
                n,
                selectivity: n as f64 / customers,
                engine: "datafusion parquet".into(),
                cache: cache.into(),
                secs,
                pages_read: None,
                fio_qd1_beside: None,
                planning: None,
                result,
            });
        }
    }
    // Later parts of a run share the session: leave it with the default.
    ooode
        .sql("SET ooode.index_only_scans = true")
        .await?
        .collect()
        .await?;
    Ok(Fig4Report { points, io_samples })
}

fn ooode_reads(pool: &ooode::io::BufferPool) -> u64 {
    pool.stats().misses
}

fn fmt_secs(s: Option<f64>) -> String {
    s.map(|s| format!("{s:.3}s"))
        .unwrap_or_else(|| "timeout".into())
}

/// Checks that every engine that finished returned the same result per N; returns mismatches.
pub fn mismatches(points: &[Fig4Point]) -> Vec<String> {
    let mut bad = Vec::new();
    for p in points {
        let reference = points
            .iter()
            .find(|q| q.n == p.n && q.engine == "datafusion parquet" && q.secs.is_some());
        if let (Some(r), Some(_)) = (reference, p.secs)
            && r.result != p.result
        {
            bad.push(format!(
                "N={} {} {}: result differs from DataFusion",
                p.n, p.engine, p.cache
            ));
        }
    }
    bad
}

/// A text table: one row per N and cache state, seconds per engine, speedups.
pub fn format_points(points: &[Fig4Point]) -> String {
    // None: not run; Some(None): ran past the time limit.
    let get = |n: u64, cache: &str, engine: &str| {
        points
            .iter()
            .find(|p| p.n == n && p.cache == cache && p.engine == engine)
            .map(|p| p.secs)
    };
    let mut ns: Vec<u64> = points.iter().map(|p| p.n).collect();
    ns.dedup();
    let mut out = format!(
        "{:>6} {:>9} {:>5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}\n",
        "N",
        "select.",
        "cache",
        "ooo s",
        "in-order s",
        "auto s",
        "auto-heap s",
        "parquet s",
        "ooo/in-ord",
        "parq/auto",
        "heap/auto"
    );
    let f = |s: Option<Option<f64>>| match s {
        Some(Some(s)) => format!("{s:.3}"),
        Some(None) => "timeout".into(),
        None => "-".into(),
    };
    let ratio = |a: Option<Option<f64>>, b: Option<Option<f64>>| match (a.flatten(), b.flatten()) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x", a / b),
        _ => "-".into(),
    };
    for n in ns {
        for cache in ["cold", "hot"] {
            let sel = points
                .iter()
                .find(|p| p.n == n)
                .map(|p| p.selectivity)
                .unwrap_or(0.0);
            let (ooo, ino, auto, heap, parq) = (
                get(n, cache, "ooode out_of_order"),
                get(n, cache, "ooode in_order"),
                get(n, cache, "ooode auto"),
                get(n, cache, AUTO_HEAP),
                get(n, cache, "datafusion parquet"),
            );
            out += &format!(
                "{:>6} {:>8.4}% {:>5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}\n",
                n,
                sel * 100.0,
                cache,
                f(ooo),
                f(ino),
                f(auto),
                f(heap),
                f(parq),
                ratio(ino, ooo),
                ratio(parq, auto),
                ratio(heap, auto)
            );
        }
    }
    out
}

/// Reads per second of a cold run once planned: its pages less planning's over its seconds
/// less planning's (None without a planning measurement, or when planning took as long).
pub fn executing_iops(p: &Fig4Point) -> Option<f64> {
    let planning = p.planning?;
    let secs = p.secs? - planning.secs;
    let pages = p.pages_read?.saturating_sub(planning.pages_read);
    (secs > 0.0).then(|| pages as f64 / secs)
}

/// Lines of cold reads per second next to fio: in order against depth 1 (beside the run, and
/// `fio_after` after the sweep, as QD1 / QD64), out of order against depth 64 after the sweep.
pub fn format_cold_iops(points: &[Fig4Point], fio_after: Option<(f64, f64)>) -> String {
    let mut out = String::new();
    for (engine, label) in [
        ("ooode in_order", "in order"),
        ("ooode out_of_order", "out of order"),
    ] {
        let in_order = engine == "ooode in_order";
        // Pages read over seconds of each cold run that finished, with fio at depth 1 beside
        // the in-order ones: the baseline's rate, set next to fio's.
        let iops: Vec<String> = points
            .iter()
            .filter(|p| p.engine == engine && p.cache == "cold")
            .filter_map(|p| {
                let iops = p.pages_read? as f64 / p.secs?;
                Some((p.n, iops, p.fio_qd1_beside, executing_iops(p)))
            })
            .map(|(n, iops, beside, executing)| {
                let mut of = Vec::new();
                if let Some(b) = beside {
                    of.push(format!("{:.0} % of fio QD1 beside it", iops / b * 100.0));
                }
                if let Some(e) = executing {
                    of.push(match beside {
                        Some(b) => format!("planned: {e:.0}, {:.0} % of it", e / b * 100.0),
                        None => format!("planned: {e:.0}"),
                    });
                }
                match fio_after {
                    Some((qd1, _)) if in_order => of.push(format!(
                        "{:.0} % of fio QD1 after the sweep",
                        iops / qd1 * 100.0
                    )),
                    Some((_, qd64)) => of.push(format!(
                        "{:.0} % of fio QD64 after the sweep",
                        iops / qd64 * 100.0
                    )),
                    None => {}
                }
                match of.is_empty() {
                    true => format!("N={n} {iops:.0}"),
                    false => format!("N={n} {iops:.0} ({})", of.join(", ")),
                }
            })
            .collect();
        if !iops.is_empty() {
            out += &format!("{label}, cold, reads per second: {}\n", iops.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(engine: &str, pages: u64, secs: f64, beside: Option<f64>) -> Fig4Point {
        Fig4Point {
            n: 150,
            selectivity: 0.001,
            engine: engine.into(),
            cache: "cold".into(),
            secs: Some(secs),
            pages_read: Some(pages),
            fio_qd1_beside: beside,
            planning: None,
            result: Vec::new(),
        }
    }

    #[test]
    fn planning_is_taken_out_of_the_executing_rate() {
        let mut p = point("ooode in_order", 1000, 1.0, Some(2000.0));
        assert_eq!(executing_iops(&p), None);
        p.planning = Some(Planning {
            secs: 0.5,
            pages_read: 100,
        });
        assert_eq!(executing_iops(&p), Some(1800.0));
        assert_eq!(
            format_cold_iops(&[p.clone()], None),
            "in order, cold, reads per second: N=150 1000 (50 % of fio QD1 beside it, \
             planned: 1800, 90 % of it)\n"
        );
        p.planning = Some(Planning {
            secs: 1.0,
            pages_read: 0,
        });
        assert_eq!(executing_iops(&p), None, "no time left to read in");
    }

    #[test]
    fn cold_reads_are_set_against_the_right_fio() {
        let points = [
            point("ooode in_order", 1000, 1.0, Some(2000.0)),
            point("ooode out_of_order", 5000, 1.0, None),
            point("ooode in_order", 0, 1.0, None),
        ];
        let text = format_cold_iops(&points[..2], Some((4000.0, 10_000.0)));
        assert_eq!(
            text,
            "in order, cold, reads per second: N=150 1000 (50 % of fio QD1 beside it, 25 % of \
             fio QD1 after the sweep)\nout of order, cold, reads per second: N=150 5000 (50 % \
             of fio QD64 after the sweep)\n"
        );
        assert_eq!(
            format_cold_iops(&points[2..], None),
            "in order, cold, reads per second: N=150 0\n"
        );
    }
}
