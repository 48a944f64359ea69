//! The main job (`ooode-tpch run`): data if missing, then the 22 TPC-H queries, the Fig. 4
//! sweep and Q3'...Q17' on every engine, the runtime's ceiling, fresh processes' first
//! queries, many clients at once, the engines next to fio, the machine's facts, the tables on
//! the terminal and the JSON and SVG files. Any result that differs from stock DataFusion
//! fails the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::datagen::{DataSet, ensure_dataset, format_load_reports};
use crate::report::{RunReport, machine_facts};
use crate::runner::{HOT_RUNS, SHORT_QUERY_RUNS};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Time limit of one run over object storage: in order, a page per 20 ms round trip, would
/// take minutes at the larger points.
const REMOTE_LIMIT: Duration = Duration::from_secs(10);

/// Plans made of each many-clients query on each engine (a few seconds in all).
const PLANS_PER_QUERY: usize = 300;

/// Runs the main job on `data`, writing the report files into `out`.
pub fn run(data: &DataSet, out: &Path, limit: Duration) -> Result<RunReport, BoxError> {
    let sf = data.sf;
    let loaded = ensure_dataset(data, false)?;
    if !loaded.is_empty() {
        println!("Loaded TPC-H SF {sf}:\n{}", format_load_reports(&loaded));
    }
    let queries = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("queries");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    eprintln!("== 22 TPC-H queries: ooode (auto) vs stock DataFusion");
    let tpch = runtime.block_on(crate::runner::run(data, &queries, &[]))?;
    println!(
        "TPC-H SF {sf}, 22 queries; ooode out of order with ooode.index_join = auto; hot (each query\nran once before, then the median of {HOT_RUNS} runs, {SHORT_QUERY_RUNS} under 50 ms):\n{}",
        crate::runner::format_runs(&tpch)
    );

    // The paper's sweep, up to 10 % of the customers, with the disk measured right before and
    // after (its throughput drifts over minutes; the out-of-order goal is relative to it).
    let customers = crate::tables::expected_rows("customer", sf).unwrap_or(150_000);
    let ns: Vec<u64> = [1, 15, 150, 1500, 15000]
        .into_iter()
        .filter(|&n| n * 10 <= customers)
        .collect();
    let heap = data.ooode_table("lineitem").join("heap.0.pages");
    eprintln!("== fio at depth 1 and 64, before the Fig. 4 sweep");
    let fio_before = machine_facts(&heap, 8192);
    eprintln!("== Fig. 4 sweep, N = {ns:?}");
    let fig4 = runtime.block_on(crate::fig4::run(data, &ns, limit, &[], &[]))?;
    eprintln!("== fio at depth 1 and 64, after the Fig. 4 sweep");
    let machine = machine_facts(&heap, 8192);
    println!(
        "\nFig. 4 query, TPC-H SF {sf}:\n{}",
        crate::fig4::format_points(&fig4.points)
    );
    println!(
        "Disk, fio random 8 KiB reads of the lineitem heap, QD1 / QD64 IOPS (QD64/QD1): before {}, after {}",
        crate::report::fio_summary(&fio_before),
        crate::report::fio_summary(&machine),
    );

    print!(
        "{}",
        crate::fig4::format_cold_iops(
            &fig4.points,
            machine.fio_iops_qd1.zip(machine.fio_iops_qd64),
        )
    );

    eprintln!("== Q3' ... Q17': out of order vs in order vs DataFusion, cold / hot / cross");
    let paper_queries = crate::paper::load_queries(&queries.join("paper"), sf)?;
    let paper = runtime.block_on(crate::paper::run(data, &paper_queries, limit))?;
    println!(
        "\nThe paper's TPC-H-like queries, SF {sf} (ooo, in-order: ooode with index plans, `always`;\nauto: ooode's cost-based rule; select. = share of the driving table the query's condition\npicks, measured):\n{}",
        crate::paper::format_report(&paper)
    );
    if !paper.parquet_cold_is_cold {
        println!(
            "(not root: the OS page cache was not dropped, Parquet cold/cross runs were warm)"
        );
    }

    let customers_all = crate::tables::expected_rows("customer", sf).unwrap_or(150_000);
    eprintln!("== The runtime's ceiling: Fig. 4 at 10 % with pages from the OS cache");
    let ceiling = runtime.block_on(crate::ceiling::run(data, customers_all / 10, &[]))?;
    println!(
        "\nThe runtime's ceiling, SF {sf}:\n{}",
        crate::ceiling::format_report(&ceiling)
    );
    eprintln!("== First queries of fresh processes");
    let fresh = crate::fresh::run(data, (customers_all / 10_000).max(1), 5)?;
    println!(
        "First query of a fresh process (caches dropped), Fig. 4 at N = {}, medians of {} \
         processes:\n{}",
        fresh.n,
        fresh.processes,
        crate::fresh::format_report(&fresh)
    );
    eprintln!("== Planning the many-clients queries, hot");
    let plans = runtime.block_on(crate::plans::run(data, PLANS_PER_QUERY, &[]))?;
    println!("\n{}", crate::plans::format(&plans, PLANS_PER_QUERY));
    eprintln!("== Many clients at once");
    let clients = [1, 4, 16, 64];
    let concurrency = runtime.block_on(crate::concurrency::run(
        data,
        &clients,
        10.0,
        &[],
        true,
        true,
    ))?;
    println!(
        "\nClients at once, SF {sf}, 10 s each from a cold start (ooode auto, one runtime; \
         stock DataFusion on Parquet):\n{}",
        crate::concurrency::format_report(&concurrency, machine.fio_iops_qd64)
    );
    eprintln!("== Engines next to fio, random 8 KiB reads, depth 1 and 64");
    let iobench = runtime.block_on(crate::iobench::run(&crate::iobench::IoBenchOptions {
        file: heap.clone(),
        page_size: 8192,
        depths: vec![1, 64],
        secs: 3.0,
    }))?;
    println!(
        "\nEngines next to fio, random 8 KiB O_DIRECT reads of the lineitem heap:\n{}",
        crate::iobench::format_points(&iobench)
    );

    eprintln!("== Tables in object storage: a local S3 server, 20 ms ± 5 ms per request");
    let latency = crate::s3::Latency {
        mean_ms: 20.0,
        jitter_ms: 5.0,
    };
    let remote = crate::remote::run(data, latency, REMOTE_LIMIT)?;
    println!("\n{}", crate::remote::format_report(&remote));

    println!(
        "\nMachine: {} cores, {:.1} GiB",
        machine.cores,
        machine.memory_bytes as f64 / (1u64 << 30) as f64,
    );
    let report = RunReport {
        sf,
        fio_before_fig4: fio_before,
        machine,
        tpch,
        fig4,
        paper,
        ceiling,
        fresh,
        plans,
        concurrency,
        iobench,
        remote,
    };
    for f in crate::report::write(&report, out)? {
        println!("wrote {f}");
    }

    let mut bad: Vec<String> = report
        .tpch
        .iter()
        .filter(|r| !r.same_result)
        .map(|r| format!("{}: result differs from DataFusion", r.query))
        .collect();
    bad.extend(crate::fig4::mismatches(&report.fig4.points));
    bad.extend(crate::paper::mismatches(&report.paper));
    bad.extend(report.concurrency.mismatches.iter().cloned());
    bad.extend(crate::fig4::mismatches(&report.remote.fig4.points));
    bad.extend(crate::paper::mismatches(&report.remote.paper));
    if !bad.is_empty() {
        return Err(format!(
            "RESULTS DIFFER from stock DataFusion:\n  {}",
            bad.join("\n  ")
        )
        .into());
    }
    Ok(report)
}
