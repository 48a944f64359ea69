//! The first query of a fresh process, as every CLI invocation runs one: caches dropped, a new
//! process registers the tables and runs the Fig. 4 query once; then, in that same (now warm)
//! process, the same query cold again (ooode's pool emptied, the OS cache dropped). Next to
//! stock DataFusion doing the same on Parquet. The gap between ooode's two figures is what a
//! fresh process pays: engines set up, B+tree upper levels read once, and the program's own
//! code read back from disk as it first runs (dropping the OS cache drops it too). Each
//! engine is measured twice: so, and with the program's code kept resident (mapped before the
//! cache is dropped, as after an earlier run of the same binary), which leaves the data cold
//! but not the program.

use std::time::{Duration, Instant};

use ooode::io::metrics::{process_major_faults, process_minor_faults};

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
    /// Page faults that read nothing from disk, in the first query and in a cold run again
    /// (median): pages of code or data first touched by this process.
    #[serde(default)]
    pub first_minor_faults: u64,
    #[serde(default)]
    pub again_minor_faults: u64,
}

/// Medians over several processes, per engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FreshReport {
    /// Customers selected.
    pub n: u64,
    /// "ooode" (auto) and "datafusion parquet", the program's code dropped with the OS cache.
    pub engines: Vec<(String, FirstQuery)>,
    /// The same with the program's code kept resident ([`keep_code_resident`]); empty when that
    /// could not be done here (see `resident_skipped`).
    #[serde(default)]
    pub resident: Vec<(String, FirstQuery)>,
    /// Why the resident-code runs were skipped, if they were.
    #[serde(default)]
    pub resident_skipped: Option<String>,
    /// Processes per engine.
    pub processes: usize,
}

/// Maps every page of this process's program image (the read-only mappings of its executable
/// and libraries: code, constants, unwind tables) so that dropping the OS cache leaves them:
/// the kernel drops only pages no process maps. Call it before any data file is mapped.
/// Returns the bytes made resident; fails where the kernel cannot (before Linux 5.14).
pub fn keep_code_resident() -> std::io::Result<u64> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut bytes = 0;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let file_backed = fields.nth(3).is_some_and(|path| path.starts_with('/'));
        // Read-only (r-x or r--), never a writable one.
        if !(file_backed && perms.starts_with('r') && perms.as_bytes().get(1) == Some(&b'-')) {
            continue;
        }
        let bounds = range.split_once('-').and_then(|(a, b)| {
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        });
        let Some((start, end)) = bounds else {
            continue;
        };
        // SAFETY: [start, end) is a readable mapping of this process, just listed; populating
        // only faults its pages in, changing no byte of it.
        let r = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_READ,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        bytes += (end - start) as u64;
    }
    Ok(bytes)
}

/// In this (fresh) process: registers the tables, runs the query once, then cold again; with
/// `resident_code`, the program's code is first made resident ([`keep_code_resident`]).
pub async fn measure_here(
    data: &DataSet,
    engine: &str,
    n: u64,
    resident_code: bool,
) -> Result<FirstQuery, BoxError> {
    let limit = Duration::from_secs(600);
    let sql = fig4_sql(n);
    if resident_code {
        keep_code_resident()?;
    }
    drop_os_cache();
    let start = Instant::now();
    let (stock, ooode) = contexts(data).await?;
    let register_ms = start.elapsed().as_secs_f64() * 1e3;
    let ctx = match engine {
        "ooode" => ooode,
        _ => stock,
    };
    let faults = (process_major_faults(), process_minor_faults());
    let first = timed_rows(&ctx, &sql, limit).await?.0.ok_or("timed out")?;
    let first_major_faults = process_major_faults() - faults.0;
    let first_minor_faults = process_minor_faults() - faults.1;
    let mut again = Vec::new();
    let (mut again_faults, mut again_minor) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        if engine == "ooode" {
            ooode_providers::ooode_runtime(&ctx).pool().clear();
        }
        drop_os_cache();
        let faults = (process_major_faults(), process_minor_faults());
        again.push(timed_rows(&ctx, &sql, limit).await?.0.ok_or("timed out")?);
        again_faults.push((process_major_faults() - faults.0) as f64);
        again_minor.push((process_minor_faults() - faults.1) as f64);
    }
    Ok(FirstQuery {
        register_ms,
        first_ms: first * 1e3,
        cold_again_ms: median(again) * 1e3,
        first_major_faults,
        again_major_faults: median(again_faults) as u64,
        first_minor_faults,
        again_minor_faults: median(again_minor) as u64,
    })
}

/// Runs `processes` fresh processes per engine (this program, `first-query`), the program's
/// code dropped with the OS cache and then kept resident; progress on stderr.
pub fn run(data: &DataSet, n: u64, processes: usize) -> Result<FreshReport, BoxError> {
    let engines = measure_engines(data, n, processes, false)?;
    let (resident, resident_skipped) = match keep_code_resident() {
        Ok(_) => (measure_engines(data, n, processes, true)?, None),
        Err(e) => {
            let why = format!("the program's code cannot be kept resident here: {e}");
            eprintln!("fresh process, code resident: skipped ({why})");
            (Vec::new(), Some(why))
        }
    };
    Ok(FreshReport {
        n,
        engines,
        resident,
        resident_skipped,
        processes,
    })
}

/// Medians of `processes` child processes for ooode and for stock DataFusion.
fn measure_engines(
    data: &DataSet,
    n: u64,
    processes: usize,
    resident_code: bool,
) -> Result<Vec<(String, FirstQuery)>, BoxError> {
    let exe = std::env::current_exe()?;
    // The child's arguments as text, the same for every process.
    let (sf, root, customers) = (
        data.sf.to_string(),
        data.root.display().to_string(),
        n.to_string(),
    );
    let mut engines = Vec::new();
    for engine in ["ooode", "datafusion parquet"] {
        let mut runs = Vec::new();
        for _ in 0..processes {
            let engine_arg = if engine == "ooode" {
                "ooode"
            } else {
                "parquet"
            };
            let mut args = vec![
                "first-query",
                "--sf",
                &sf,
                "--dir",
                &root,
                "--n",
                &customers,
                "--engine",
                engine_arg,
            ];
            if resident_code {
                args.push("--resident-code");
            }
            let out = std::process::Command::new(&exe).args(&args).output()?;
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
            first_minor_faults: pick(|r| r.first_minor_faults as f64) as u64,
            again_minor_faults: pick(|r| r.again_minor_faults as f64) as u64,
        };
        eprintln!(
            "{engine:<20} fresh process{}: first query {:.1} ms ({} major page faults), cold \
             again {:.1} ms ({})",
            if resident_code { ", code resident" } else { "" },
            m.first_ms,
            m.first_major_faults,
            m.cold_again_ms,
            m.again_major_faults
        );
        engines.push((engine.to_string(), m));
    }
    Ok(engines)
}

/// The report's lines.
pub fn format_report(r: &FreshReport) -> String {
    let mut out = format!(
        "{:<36} {:>12} {:>15} {:>16} {:>14} {:>17}\n",
        "engine", "register ms", "first query ms", "cold again ms", "major faults", "minor faults"
    );
    let variants = [("", &r.engines), (", code resident", &r.resident)];
    for (label, engines) in variants {
        for (engine, m) in engines {
            out += &format!(
                "{:<36} {:>12.1} {:>15.1} {:>16.1} {:>6} / {:<5} {:>8} / {:<6}\n",
                format!("{engine}{label}"),
                m.register_ms,
                m.first_ms,
                m.cold_again_ms,
                m.first_major_faults,
                m.again_major_faults,
                m.first_minor_faults,
                m.again_minor_faults
            );
        }
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
    if let [(_, o), (_, s)] = r.resident.as_slice() {
        out += &format!(
            "with the program's code resident: ooode's first query {:.1}x its cold run in a warm \
             process ({:+.1} ms), {:.1}x faster than stock DataFusion's first query\n",
            o.first_ms / o.cold_again_ms.max(1e-9),
            o.first_ms - o.cold_again_ms,
            s.first_ms / o.first_ms.max(1e-9)
        );
    }
    if let Some(why) = &r.resident_skipped {
        out += &format!("code resident: skipped ({why})\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_made_resident_is_this_program() {
        // Where the kernel has MADV_POPULATE_READ (5.14+) this must succeed and cover at least
        // this test's own code; elsewhere it fails with the kernel's reason, never silently.
        match keep_code_resident() {
            Ok(bytes) => assert!(bytes >= 4096, "only {bytes} bytes of code mapped"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}"),
        }
    }
}
