//! Scale (`ooode-tpch scale`): the Fig. 4 sweep and Q3'...Q17' at several scale factors, at the
//! same selectivities, with each data set's generation and load times; shows how ooode's
//! ratios to stock DataFusion move as the data grows.
//!
//! Fig. 4 selects a fixed share of the customers at every scale factor (N grows with it); the
//! paper queries' conditions are written per scale factor in their files.

use std::path::Path;
use std::time::Duration;

use crate::datagen::{DataSet, TableLoadReport, ensure_dataset, recorded_loads};
use crate::fig4::Fig4Report;
use crate::paper::PaperReport;
use crate::report::{MachineFacts, ReportDir, fio_summary, machine_facts};
use crate::svg::{Axis, Series, bar_chart, line_chart};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Shares of the customers the sweep selects: one customer at SF 1, then 0.01 % ... 10 %.
pub const SHARES: [f64; 5] = [1.0 / 150_000.0, 1e-4, 1e-3, 1e-2, 1e-1];

/// One scale factor's runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaleRun {
    /// Scale factor.
    pub sf: f64,
    /// Load reports of its tables (empty when the data predates the record).
    pub load: Vec<TableLoadReport>,
    /// fio on this SF's lineitem heap right before the Fig. 4 sweep and right after Q3'...Q17'
    /// (the disk's rate drifts; cold ratios between SFs mean little without it).
    pub disk_before: MachineFacts,
    /// The same, after.
    pub disk_after: MachineFacts,
    /// The Fig. 4 sweep.
    pub fig4: Fig4Report,
    /// Q3' ... Q17'.
    pub paper: PaperReport,
}

/// Every scale factor's runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaleReport {
    /// In the order run.
    pub runs: Vec<ScaleRun>,
}

/// Customers selected at `share` of SF `sf`'s customers (at least one).
pub fn customers_at(share: f64, sf: f64) -> u64 {
    let customers = crate::tables::expected_rows("customer", sf).unwrap_or(150_000) as f64;
    ((customers * share).round() as u64).max(1)
}

/// Runs every scale factor in turn (generating data that is missing); progress on stderr.
pub fn run(sets: &[DataSet], queries_dir: &Path, limit: Duration) -> Result<ScaleReport, BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    for data in sets {
        let sf = data.sf;
        eprintln!("== SF {sf}: data");
        ensure_dataset(data, false)?;
        let ns: Vec<u64> = SHARES.iter().map(|&s| customers_at(s, sf)).collect();
        let heap = data.ooode_table("lineitem").join("heap.0.pages");
        eprintln!("== SF {sf}: fio before");
        let disk_before = machine_facts(&heap, 8192);
        eprintln!("== SF {sf}: Fig. 4 sweep, N = {ns:?}");
        let fig4 = runtime.block_on(crate::fig4::run(data, &ns, limit, &[], &[]))?;
        let mismatches = crate::fig4::mismatches(&fig4.points);
        if !mismatches.is_empty() {
            return Err(format!("SF {sf}: Fig. 4 results differ: {mismatches:?}").into());
        }
        eprintln!("== SF {sf}: Q3' ... Q17'");
        let queries = crate::paper::load_queries(&queries_dir.join("paper"), sf)?;
        let paper = runtime.block_on(crate::paper::run(data, &queries, limit))?;
        if let Some(p) = paper.points.iter().find(|p| !p.same_result) {
            return Err(format!("SF {sf}: {} on {} differs", p.query, p.engine).into());
        }
        eprintln!("== SF {sf}: fio after");
        let disk_after = machine_facts(&heap, 8192);
        runs.push(ScaleRun {
            sf,
            load: recorded_loads(data),
            disk_before,
            disk_after,
            fig4,
            paper,
        });
    }
    Ok(ScaleReport { runs })
}

fn fig4_secs(r: &ScaleRun, share: f64, engine: &str, cache: &str) -> Option<f64> {
    let n = customers_at(share, r.sf);
    r.fig4
        .points
        .iter()
        .find(|p| p.n == n && p.engine == engine && p.cache == cache)
        .and_then(|p| p.secs)
}

fn paper_secs(r: &ScaleRun, query: &str, engine: &str, cache: &str) -> Option<f64> {
    r.paper
        .points
        .iter()
        .find(|p| p.query == query && p.engine == engine && p.cache == cache)
        .and_then(|p| p.secs)
}

/// `slow / fast`.
fn ratio(slow: Option<f64>, fast: Option<f64>) -> Option<f64> {
    match (slow, fast) {
        (Some(s), Some(f)) if f > 0.0 => Some(s / f),
        _ => None,
    }
}

fn cell(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.1}x")).unwrap_or_else(|| "-".into())
}

const OOO: &str = "ooode out_of_order";
const IN_ORDER: &str = "ooode in_order";
const AUTO: &str = "ooode auto";
const PARQUET: &str = "datafusion parquet";

/// The comparison: load times, then per selectivity and per query the ratios at every SF.
pub fn format_report(report: &ScaleReport) -> String {
    let mut out = String::from("Load (generation, ooode loader, Parquet writer), seconds:\n");
    for r in &report.runs {
        let sum = |f: fn(&TableLoadReport) -> f64| r.load.iter().map(f).sum::<f64>();
        if r.load.is_empty() {
            out += &format!("  SF {}: not recorded (loaded before load.json)\n", r.sf);
        } else {
            out += &format!(
                "  SF {}: generate {:.0} s, ooode {:.0} s, parquet {:.0} s ({} tables)\n",
                r.sf,
                sum(|t| t.generate_secs),
                sum(|t| t.ooode_secs),
                sum(|t| t.parquet_secs),
                r.load.len()
            );
        }
    }
    out += "Disk, fio random 8 KiB reads of the lineitem heap, QD1 / QD64 IOPS, before / after:\n";
    for r in &report.runs {
        out += &format!(
            "  SF {}: {} / {}\n",
            r.sf,
            fio_summary(&r.disk_before),
            fio_summary(&r.disk_after)
        );
    }
    let head = |first: &str| {
        let mut h = format!("{first:<12} {:>5}", "cache");
        for r in &report.runs {
            for what in ["parq/auto", "parq/ooo", "inord/ooo"] {
                h += &format!(" {:>12}", format!("{what} SF{}", r.sf));
            }
        }
        h + "\n"
    };
    let row = |out: &mut String,
               label: &str,
               cache: &str,
               get: &dyn Fn(&ScaleRun, &str) -> Option<f64>| {
        *out += &format!("{label:<12} {cache:>5}");
        for r in &report.runs {
            for (slow, fast) in [(PARQUET, AUTO), (PARQUET, OOO), (IN_ORDER, OOO)] {
                *out += &format!(" {:>12}", cell(ratio(get(r, slow), get(r, fast))));
            }
        }
        *out += "\n";
    };
    out += "\nFig. 4 query, speedups (slower engine's time over faster's) at the same share of customers:\n";
    out += &head("customers");
    for share in SHARES {
        for cache in ["cold", "hot"] {
            let label = format!("{:.4} %", share * 100.0);
            row(&mut out, &label, cache, &|r, e| {
                fig4_secs(r, share, e, cache)
            });
        }
    }
    out += "\nQ3' ... Q17', speedups:\n";
    out += &head("query");
    for q in paper_queries(report) {
        for cache in ["cold", "hot"] {
            row(&mut out, &q, cache, &|r, e| paper_secs(r, &q, e, cache));
        }
    }
    out
}

fn paper_queries(report: &ScaleReport) -> Vec<String> {
    report
        .runs
        .first()
        .map(|r| r.paper.selectivity.iter().map(|(q, _)| q.clone()).collect())
        .unwrap_or_default()
}

/// Writes `scale.json` and the plots into `dir`; returns the paths written.
pub fn write(report: &ScaleReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    let mut files = ReportDir::create(dir)?;
    let mut put = |name: &str, text: String| files.put(name, text);
    put("scale.json", serde_json::to_string_pretty(report)?)?;
    for cache in ["cold", "hot"] {
        let mut series = Vec::new();
        for r in &report.runs {
            for (label, slow, fast) in [
                ("auto vs Parquet", PARQUET, AUTO),
                ("ooo vs in order", IN_ORDER, OOO),
            ] {
                series.push(Series {
                    name: format!("{label}, SF {}", r.sf),
                    points: SHARES
                        .iter()
                        .filter_map(|&s| {
                            let x =
                                ratio(fig4_secs(r, s, slow, cache), fig4_secs(r, s, fast, cache))?;
                            Some((s * 100.0, x))
                        })
                        .collect(),
                });
            }
        }
        put(
            &format!("scale_fig4_speedup_{cache}.svg"),
            line_chart(
                &format!("Fig. 4 query: speedup vs selectivity per scale factor ({cache})"),
                Axis {
                    label: "customers selected, %",
                    log: true,
                },
                Axis {
                    label: "speedup (x)",
                    log: true,
                },
                &series,
            ),
        )?;
    }
    let queries = paper_queries(report);
    let series: Vec<(String, Vec<Option<f64>>)> = report
        .runs
        .iter()
        .map(|r| {
            (
                format!("auto vs Parquet, cold, SF {}", r.sf),
                queries
                    .iter()
                    .map(|q| {
                        ratio(
                            paper_secs(r, q, PARQUET, "cold"),
                            paper_secs(r, q, AUTO, "cold"),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    put(
        "scale_paper_speedup.svg",
        bar_chart(
            "Q3' ... Q17': auto over stock DataFusion per scale factor (cold)",
            Axis {
                label: "speedup (x)",
                log: true,
            },
            &queries,
            &series,
        ),
    )?;
    Ok(files.written)
}
