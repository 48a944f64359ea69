//! What the main job writes beside its terminal tables: one JSON file with every measurement
//! and the machine's facts, and SVG plots in the spirit of the paper (Fig. 5, 7, 8/9).

use std::path::Path;

use crate::fig4::Fig4Report;
use crate::paper::{CACHES, ENGINES, PaperReport};
use crate::runner::QueryRun;
use crate::svg::{Axis, Series, bar_chart, line_chart};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The machine the numbers come from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MachineFacts {
    /// Cores available to the process.
    pub cores: usize,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// File fio read (the lineitem heap).
    pub fio_file: String,
    /// fio random 8 KiB O_DIRECT reads (io_uring engine) at queue depth 1, IOPS; None without fio.
    pub fio_iops_qd1: Option<f64>,
    /// The same at queue depth 64.
    pub fio_iops_qd64: Option<f64>,
    /// Why fio numbers are missing, if they are.
    pub fio_note: Option<String>,
}

/// Measures the machine: cores, memory, fio at depth 1 and 64 on `file` (2 s each).
pub fn machine_facts(file: &Path, page_size: usize) -> MachineFacts {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as u64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    let mut facts = MachineFacts {
        cores,
        memory_bytes: pages * page,
        fio_file: file.display().to_string(),
        fio_iops_qd1: None,
        fio_iops_qd64: None,
        fio_note: None,
    };
    if !crate::iobench::ensure_fio() {
        facts.fio_note = Some("fio is not installed and could not be installed".into());
        return facts;
    }
    for depth in [1, 64] {
        match crate::iobench::run_fio(file, page_size, depth, 2.0, "io_uring") {
            Ok((iops, _)) if depth == 1 => facts.fio_iops_qd1 = Some(iops),
            Ok((iops, _)) => facts.fio_iops_qd64 = Some(iops),
            Err(e) => facts.fio_note = Some(e.to_string()),
        }
    }
    facts
}

/// "QD1 / QD64 (ratio)" of `facts`, or why fio numbers are missing.
pub fn fio_summary(facts: &MachineFacts) -> String {
    match (facts.fio_iops_qd1, facts.fio_iops_qd64) {
        (Some(q1), Some(q64)) => format!("{q1:.0} / {q64:.0} ({:.2}x)", q64 / q1.max(1.0)),
        _ => facts.fio_note.clone().unwrap_or_else(|| "n/a".into()),
    }
}

/// Everything one run of the main job measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// Scale factor.
    pub sf: f64,
    /// fio right before the Fig. 4 sweep.
    pub fio_before_fig4: MachineFacts,
    /// The machine, with fio right after the Fig. 4 sweep.
    pub machine: MachineFacts,
    /// The 22 TPC-H queries: ooode `auto` vs stock DataFusion.
    pub tpch: Vec<QueryRun>,
    /// The Fig. 4 sweep.
    pub fig4: Fig4Report,
    /// Q3' ... Q17'.
    pub paper: PaperReport,
    /// The Fig. 4 query with pages from the OS cache (CPU per page), and hot.
    pub ceiling: crate::ceiling::CeilingReport,
    /// First queries of fresh processes.
    pub fresh: crate::fresh::FreshReport,
    /// Planning the many-clients queries, hot, by phase: ooode next to stock DataFusion.
    pub plans: Vec<crate::plans::PlanRow>,
    /// Many clients at once.
    pub concurrency: crate::concurrency::ConcurrencyReport,
    /// Random page reads through the engines next to fio (depth 1 and 64).
    pub iobench: Vec<crate::iobench::IoPoint>,
    /// The tables in object storage.
    pub remote: crate::remote::RemoteReport,
}

/// Writes `report.json` and the plots into `dir`; returns the files written.
pub fn write(report: &RunReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    let mut files = ReportDir::create(dir)?;
    let mut put = |name: &str, text: String| files.put(name, text);
    put("report.json", serde_json::to_string_pretty(report)?)?;
    put("fig5_time_vs_selectivity.svg", fig5(&report.fig4, "cold"))?;
    put(
        "fig5_time_vs_selectivity_hot.svg",
        fig5(&report.fig4, "hot"),
    )?;
    put("fig7_speedup_per_query.svg", fig7(&report.paper))?;
    let (iops, cpu) = fig8_9(&report.paper.io_samples);
    put("fig8_iops_over_time.svg", iops)?;
    put("fig9_cpu_over_time.svg", cpu)?;
    let fio64 = report.machine.fio_iops_qd64;
    for (name, svg) in concurrency_plots(&report.concurrency, fio64) {
        put(name, svg)?;
    }
    if !report.plans.is_empty() {
        put("planning_ms.svg", crate::plans::plot(&report.plans))?;
    }
    let mut written = files.written;
    written.extend(crate::remote::write(&report.remote, dir)?);
    Ok(written)
}

/// A directory report files are written into, keeping the paths written.
pub struct ReportDir<'a> {
    dir: &'a Path,
    /// Paths written so far.
    pub written: Vec<String>,
}

impl<'a> ReportDir<'a> {
    /// Creates `dir` (and its parents) if missing.
    pub fn create(dir: &'a Path) -> Result<Self, BoxError> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir,
            written: Vec::new(),
        })
    }

    /// Writes `text` to `name` in the directory.
    pub fn put(&mut self, name: &str, text: String) -> Result<(), BoxError> {
        let path = self.dir.join(name);
        std::fs::write(&path, text)?;
        self.written.push(path.display().to_string());
        Ok(())
    }
}

/// Time vs selectivity, log-log, one line per engine.
pub fn fig5(fig4: &Fig4Report, cache: &str) -> String {
    let engines = [
        "ooode out_of_order",
        "ooode in_order",
        "ooode auto",
        crate::fig4::AUTO_HEAP,
        "datafusion parquet",
    ];
    let series: Vec<Series> = engines
        .iter()
        .map(|e| Series {
            name: e.to_string(),
            points: fig4
                .points
                .iter()
                .filter(|p| p.engine == *e && p.cache == cache)
                .filter_map(|p| Some((p.selectivity * 100.0, p.secs?)))
                .collect(),
        })
        .collect();
    line_chart(
        &format!("Fig. 4 query: time vs selectivity ({cache})"),
        Axis {
            label: "customers selected, %",
            log: true,
        },
        Axis {
            label: "seconds",
            log: true,
        },
        &series,
    )
}

/// Speedup per paper query, cold and cross: out of order over in order and over Parquet (index
/// plans), and `auto` over Parquet (what a user gets).
pub fn fig7(paper: &PaperReport) -> String {
    let queries: Vec<String> = paper.selectivity.iter().map(|(q, _)| q.clone()).collect();
    let secs = |q: &str, e: &str, c: &str| {
        paper
            .points
            .iter()
            .find(|p| p.query == q && p.engine == e && p.cache == c)
            .and_then(|p| p.secs)
    };
    let (ooo, in_order, parquet, auto) = (ENGINES[0], ENGINES[1], ENGINES[2], ENGINES[3]);
    let mut series = Vec::new();
    for cache in CACHES.iter().filter(|c| **c != "hot") {
        for (label, fast, slow) in [
            ("ooo vs in order", ooo, in_order),
            ("ooo vs Parquet", ooo, parquet),
            ("auto vs Parquet", auto, parquet),
        ] {
            series.push((
                format!("{label}, {cache}"),
                queries
                    .iter()
                    .map(|q| Some(secs(q, slow, cache)? / secs(q, fast, cache)?))
                    .collect(),
            ));
        }
    }
    bar_chart(
        "Speedup per query",
        Axis {
            label: "speedup (x)",
            log: true,
        },
        &queries,
        &series,
    )
}

/// IOPS and CPU over time during Q3', cold, out of order.
fn fig8_9(samples: &[ooode::io::Sample]) -> (String, String) {
    let line = |title: &str, label: &str, f: &dyn Fn(&ooode::io::Sample) -> f64| {
        line_chart(
            title,
            Axis {
                label: "seconds",
                log: false,
            },
            Axis { label, log: false },
            &[Series {
                name: "Q3' cold".into(),
                points: samples.iter().map(|s| (s.t, f(s))).collect(),
            }],
        )
    };
    (
        line("Q3', out of order, cold: IOPS", "reads per second", &|s| {
            s.iops
        }),
        line("Q3', out of order, cold: CPU", "CPU, % of one core", &|s| {
            s.cpu_percent
        }),
    )
}

/// Queries per second, p99 latency and device IOPS against the number of clients, ooode next to
/// stock DataFusion (and on the IOPS plot fio at depth 64, its random reads and its replay of
/// each run's own reads).
fn concurrency_plots(
    r: &crate::concurrency::ConcurrencyReport,
    fio_qd64: Option<f64>,
) -> Vec<(&'static str, String)> {
    let engines = ["ooode", "datafusion parquet"];
    let series = |f: &dyn Fn(&crate::concurrency::ConcurrencyPoint) -> f64| -> Vec<Series> {
        engines
            .iter()
            .map(|e| Series {
                name: e.to_string(),
                points: r
                    .points
                    .iter()
                    .filter(|p| p.engine == *e && p.workload == "mixed")
                    .map(|p| (p.clients as f64, f(p)))
                    .collect(),
            })
            .collect()
    };
    let clients = Axis {
        label: "clients",
        log: true,
    };
    let mut iops = series(&|p| p.device_iops);
    if let Some(f) = fio_qd64 {
        let xs: Vec<f64> = iops
            .first()
            .map(|s| s.points.iter().map(|p| p.0).collect())
            .unwrap_or_default();
        iops.push(Series {
            name: "fio, depth 64".into(),
            points: xs.into_iter().map(|x| (x, f)).collect(),
        });
    }
    let replayed: Vec<(f64, f64)> = r
        .points
        .iter()
        .filter(|p| p.engine == "ooode" && p.workload == "mixed")
        .filter_map(|p| p.fio_replay_qd64.map(|f| (p.clients as f64, f)))
        .collect();
    if !replayed.is_empty() {
        iops.push(Series {
            name: "fio replaying ooode's reads, depth 64".into(),
            points: replayed,
        });
    }
    let mut latency = series(&|p| p.p99_ms);
    let points_p99 =
        |e: &str, name: &str, p99: fn(&crate::concurrency::ConcurrencyPoint) -> f64| Series {
            name: format!("{e}, {name}"),
            points: r
                .points
                .iter()
                .filter(|p| p.engine == e && p.workload == "mixed")
                .map(|p| (p.clients as f64, p99(p)))
                .collect(),
        };
    latency.extend(engines.iter().flat_map(|e| {
        [
            points_p99(e, "point lookups", |p| p.point_p99_ms),
            points_p99(e, "point lookups, first queries left out", |p| {
                p.point_p99_after_first_ms
            }),
        ]
    }));
    // The prepared and plan-cache runs (at the largest client count only) as points beside
    // the lines.
    let mut throughput = series(&|p| p.qps);
    for (label, workload) in [
        ("prepared", crate::concurrency::PREPARED),
        ("plan cache", crate::concurrency::PLAN_CACHE),
    ] {
        throughput.extend(engines.iter().map(|e| {
            Series {
                name: format!("{e}, {label}"),
                points: r
                    .points
                    .iter()
                    .filter(|p| p.engine == *e && p.workload == workload)
                    .map(|p| (p.clients as f64, p.qps))
                    .collect(),
            }
        }));
    }
    throughput.retain(|s| !s.points.is_empty());
    vec![
        (
            "concurrency_queries_per_second.svg",
            line_chart(
                "Selective queries, many clients: throughput (cold start)",
                clients,
                Axis {
                    label: "queries per second",
                    log: true,
                },
                &throughput,
            ),
        ),
        (
            "concurrency_p99_latency.svg",
            line_chart(
                "Selective queries, many clients: p99 latency",
                clients,
                Axis {
                    label: "milliseconds",
                    log: true,
                },
                &latency,
            ),
        ),
        (
            "concurrency_device_iops.svg",
            line_chart(
                "Selective queries, many clients: device reads per second",
                clients,
                Axis {
                    label: "reads per second",
                    log: true,
                },
                &iops,
            ),
        ),
    ]
}
