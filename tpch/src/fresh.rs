//! The first query of a fresh process, as every CLI invocation runs one: caches dropped, a new
//! process registers the tables and runs the Fig. 4 query once; then, in that same (now warm)
//! process, the same query cold again (ooode's pool emptied, the OS cache dropped). Next to
//! stock DataFusion doing the same on Parquet. The gap between ooode's two figures is what a
//! fresh process pays: engines set up, B+tree upper levels read once.

use std::time::{Duration, Instant};

use ooode::io::metrics::process_major_faults;

use crate::datagen::DataSet;
use crate::fig4::{drop_os_cache, fig4_sql};
use crate::runner::{contexts, median, timed_rows};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One child process's measurements, milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct FirstQuery {
    /// Registering the tables (CREATE EXTERNAL TABLE / register_parquet), caches dropped.
    pub register_ms: f64,
    /// The first query.
    pub first_ms: f64,
    /// The same query cold again in the same process (median of five).
    pub cold_again_ms: f64,
    /// Page faults that read from disk during the first query, and during a cold run again
    /// (median of the five): the program's own code, dropped with the OS cache, is read back
    /// as it first runs.
    #[serde(default)]
    pub first_major_faults: u64,
    #[serde(default)]
    pub again_major_faults: u64,
}

/// Medians over several processes, per engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FreshReport {
    /// Customers selected.
    pub n: u64,
    /// "ooode" (auto) and "datafusion parquet".
    pub engines: Vec<(String, FirstQuery)>,
    /// Processes per engine.
    pub processes: usize,
}

/// In this (fresh) process: registers the tables, runs the query once, then cold again.
pub async fn measure_here(data: &DataSet, engine: &str, n: u64) -> Result<FirstQuery, BoxError> {
    let limit = Duration::from_secs(600);
    let sql = fig4_sql(n);
    drop_os_cache();
    let start = Instant::now();
    let (stock, ooode) = contexts(data).await?;
    let register_ms = start.elapsed().as_secs_f64() * 1e3;
    let ctx = match engine {
        "ooode" => ooode,
        _ => stock,
    };
    let faults = process_major_faults();
    let first = timed_rows(&ctx, &sql, limit).await?.0.ok_or("timed out")?;
    let first_major_faults = process_major_faults() - faults;
    let mut again = Vec::new();
    let mut again_faults = Vec::new();
    for _ in 0..5 {
        if engine == "ooode" {
            ooode_providers::ooode_runtime(&ctx).pool().clear();
        }
        drop_os_cache();
        let faults = process_major_faults();
        again.push(timed_rows(&ctx, &sql, limit).await?.0.ok_or("timed out")?);
        again_faults.push((process_major_faults() - faults) as f64);
    }
    Ok(FirstQuery {
        register_ms,
        first_ms: first * 1e3,
        cold_again_ms: median(again) * 1e3,
        first_major_faults,
        again_major_faults: median(again_faults) as u64,
    })
}

/// Runs `processes` fresh processes per engine (this program, `first-query`); progress on
/// stderr.
pub fn run(data: &DataSet, n: u64, processes: usize) -> Result<FreshReport, BoxError> {
    let exe = std::env::current_exe()?;
    let mut engines = Vec::new();
    for engine in ["ooode", "datafusion parquet"] {
        let mut runs = Vec::new();
        for _ in 0..processes {
            let out = std::process::Command::new(&exe)
                .args([
                    "first-query",
                    "--sf",
                    &data.sf.to_string(),
                    "--dir",
                    &data.root.display().to_string(),
                    "--engine",
                    if engine == "ooode" {
                        "ooode"
                    } else {
                        "parquet"
                    },
                    "--n",
                    &n.to_string(),
                ])
                .output()?;
            if !out.status.success() {
                return Err(format!(
                    "first-query failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.lines().last().ok_or("first-query printed nothing")?;
            runs.push(serde_json::from_str::<FirstQuery>(line)?);
        }
        let pick = |f: fn(&FirstQuery) -> f64| median(runs.iter().map(f).collect());
        let m = FirstQuery {
            register_ms: pick(|r| r.register_ms),
            first_ms: pick(|r| r.first_ms),
            cold_again_ms: pick(|r| r.cold_again_ms),
            first_major_faults: pick(|r| r.first_major_faults as f64) as u64,
            again_major_faults: pick(|r| r.again_major_faults as f64) as u64,
        };
        eprintln!(
            "{engine:<20} fresh process: first query {:.1} ms ({} major page faults), cold \
             again {:.1} ms ({})",
            m.first_ms, m.first_major_faults, m.cold_again_ms, m.again_major_faults
        );
        engines.push((engine.to_string(), m));
    }
    Ok(FreshReport {
        n,
        engines,
        processes,
    })
}

/// The report's lines.
pub fn format_report(r: &FreshReport) -> String {
    let mut out = format!(
        "{:<20} {:>12} {:>15} {:>16} {:>14}\n",
        "engine", "register ms", "first query ms", "cold again ms", "major faults"
    );
    for (engine, m) in &r.engines {
        out += &format!(
            "{:<20} {:>12.1} {:>15.1} {:>16.1} {:>6} / {:<5}\n",
            engine,
            m.register_ms,
            m.first_ms,
            m.cold_again_ms,
            m.first_major_faults,
            m.again_major_faults
        );
    }
    if let [(_, o), (_, s)] = r.engines.as_slice() {
        out += &format!(
            "first query: ooode {:.1}x faster than stock DataFusion; ooode's first query costs \
             {:.1}x its cold run in a warm process, {} of its page faults read from disk (the \
             program's code, dropped with the OS cache; stock's: {})\n",
            s.first_ms / o.first_ms.max(1e-9),
            o.first_ms / o.cold_again_ms.max(1e-9),
            o.first_major_faults,
            s.first_major_faults
        );
    }
    out
}
