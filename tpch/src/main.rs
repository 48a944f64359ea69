//! `ooode-tpch`: generate and load TPC-H data for ooode and the stock DataFusion baseline.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ooode_tpch::datagen::{DataSet, default_root, ensure_dataset, format_load_reports};
use ooode_tpch::iobench::{self, IoBenchOptions};

// glibc's malloc degrades under the engine's pattern (many 8 KiB aligned page buffers held by
// the buffer pool while small allocations churn): memalign walks long free lists.
#[global_allocator]
static GLOBAL: ooode_tpch::alloc_count::CountingMiMalloc =
    ooode_tpch::alloc_count::CountingMiMalloc;

#[derive(Parser)]
#[command(name = "ooode-tpch", about = "TPC-H data and benchmarks for ooode")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: generate and load TPC-H if missing; run the 22 queries, the paper's
    /// Fig. 4 sweep and Q3'...Q17' on ooode (out of order, in order, auto) and on stock
    /// DataFusion over Parquet; print the comparison; write report.json and SVG plots.
    /// Fails if any result differs from stock DataFusion.
    Run {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Data directory (default: data/sf<SF>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Where report.json and the plots go (default: results/sf<SF>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Time limit per query run, seconds.
        #[arg(long, default_value_t = 300)]
        limit: u64,
    },
    /// The 22 TPC-H queries alone: ooode (`auto`, out of order) vs stock DataFusion on Parquet.
    Tpch {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Query numbers to run (default: all 22).
        #[arg(long, value_delimiter = ',')]
        queries: Vec<usize>,
    },
    /// Generate TPC-H at a scale factor; write ooode tables and Parquet files, timing both.
    Gen {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Data directory (default: data/sf<SF>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Regenerate tables that already exist.
        #[arg(long)]
        force: bool,
        /// Also write the load report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The paper's Fig. 4 sweep: ooode out of order / in order / auto vs DataFusion on Parquet.
    Fig4 {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Customer counts N (c_custkey <= N).
        #[arg(long, value_delimiter = ',', default_value = "1,15,150,1500,15000")]
        n: Vec<u64>,
        /// Time limit per query, seconds.
        #[arg(long, default_value_t = 120)]
        limit: u64,
        /// Run only engines whose name contains one of these (e.g. "out_of_order,parquet").
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Other settings for ooode's session, as name=value (repeatable).
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Also write the measurements as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The Fig. 4 sweep and Q3'...Q17' at several scale factors (same selectivities), with load
    /// times: how ooode's ratios to stock DataFusion move as the data grows. Writes scale.json
    /// and plots.
    Scale {
        /// Scale factors, in the order run (data generated where missing).
        #[arg(long, value_delimiter = ',', default_value = "1,10")]
        sfs: Vec<f64>,
        /// Time limit per query, seconds.
        #[arg(long, default_value_t = 600)]
        limit: u64,
        /// Where scale.json and the plots go.
        #[arg(long, default_value = "results/scale")]
        out: PathBuf,
    },
    /// Many clients at once, each a stream of selective queries for a fixed time from a cold
    /// start: ooode vs stock DataFusion on Parquet (queries per second, latency, device IOPS).
    Concurrency {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Client counts.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        clients: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// ooode.max_outstanding_io_total for ooode's runtime (default: the setting's own).
        #[arg(long)]
        io_total: Option<usize>,
        /// ooode.device_queue_depth for ooode's runtime (default: the setting's own).
        #[arg(long)]
        device_depth: Option<usize>,
        /// Other ooode settings for ooode's sessions, as name=value (repeatable), e.g.
        /// `--set ooode.short_query_reads=256`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Also write the measurements as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Only ooode (no stock DataFusion runs, no run without turns): for comparing
        /// ooode's settings.
        #[arg(long)]
        ooode_only: bool,
        /// Measure each of ooode's runs right after its runtime is made, its page buffers not
        /// yet settled in the arena (as in a fresh process); by default they are settled first.
        #[arg(long)]
        unsettled: bool,
    },
    /// The runtime's ceiling: the Fig. 4 query with pages from the OS cache (CPU per page),
    /// and hot out of order vs in order.
    Ceiling {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Customers selected (default: 10 % of them).
        #[arg(long)]
        n: Option<u64>,
        /// Other ooode settings, as name=value (repeatable), e.g.
        /// `--set ooode.max_outstanding_io=1024`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
    },
    /// The first query of fresh processes (this program, run again per measurement): ooode vs
    /// stock DataFusion.
    Fresh {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Customers selected.
        #[arg(long, default_value_t = 15)]
        n: u64,
        /// Processes per engine.
        #[arg(long, default_value_t = 5)]
        processes: usize,
    },
    /// The tables in object storage: the Fig. 4 sweep and Q3'...Q17' with the tables in a
    /// local S3 server behind an injected latency, ooode next to stock DataFusion on Parquet.
    Remote {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Delay per request, milliseconds.
        #[arg(long, default_value_t = 20.0)]
        latency_ms: f64,
        /// Uniform jitter around it, milliseconds.
        #[arg(long, default_value_t = 5.0)]
        jitter_ms: f64,
        /// Seconds one run may take before it counts as a timeout.
        #[arg(long, default_value_t = 30)]
        limit: u64,
        /// Report directory.
        #[arg(long, default_value = "results/remote")]
        out: PathBuf,
    },
    /// Tables that grow: INSERT throughput (1 K, 100 K, up to 10 M rows per insert) next to
    /// DataFusion inserting into Parquet, and queries over the segments before and after
    /// compaction.
    Inserts {
        /// Scale factor of the lineitem source.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Most rows per insert.
        #[arg(long, default_value_t = 10_000_000)]
        max_rows: u64,
        /// Report directory.
        #[arg(long, default_value = "results/inserts")]
        out: PathBuf,
    },
    /// What segments cost: the Fig. 4 chain (N = 1 and 150) with orders and lineitem grown
    /// by INSERT into 1, 10 and 100 segments, then compacted.
    Segments {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Segment counts to build.
        #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
        counts: Vec<usize>,
        /// Report directory.
        #[arg(long, default_value = "results/segments")]
        out: PathBuf,
    },
    /// An S3-compatible server (s3s-fs) over a directory on a loopback port, for the object
    /// storage tests and benchmark; prints `listening on <endpoint>`, stops when stdin closes.
    #[command(hide = true)]
    S3Server {
        #[arg(long)]
        root: PathBuf,
        /// Delay added in front of every request, milliseconds.
        #[arg(long, default_value_t = 0.0)]
        latency_ms: f64,
        /// Uniform jitter around that delay, milliseconds.
        #[arg(long, default_value_t = 0.0)]
        jitter_ms: f64,
    },
    /// Sharded tables on 1 and 3 workers (separate processes on loopback): the Fig. 4 sweep
    /// and Q3'...Q17', cold and hot, next to ooode on one node; per-worker reads and IOPS,
    /// bytes between stages and brought back by lookups; writes cluster.json and plots.
    Cluster {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Worker counts to run.
        #[arg(long, value_delimiter = ',', default_value = "1,3")]
        workers: Vec<usize>,
        /// Seconds a query may take.
        #[arg(long, default_value_t = 60)]
        limit: u64,
        /// Report directory.
        #[arg(long, default_value = "results/cluster")]
        out: PathBuf,
    },
    /// A worker of `cluster`: serves the shards in DATA on LISTEN until killed.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        data: PathBuf,
    },
    /// One fresh process's first query (used by `fresh`); prints one JSON line.
    #[command(hide = true)]
    FirstQuery {
        #[arg(long)]
        sf: f64,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        engine: String,
        #[arg(long)]
        n: u64,
        /// Keep the program's read-only image (code, constants) resident before dropping the
        /// OS cache.
        #[arg(long)]
        resident_code: bool,
    },
    /// Print ooode's plan (EXPLAIN, or EXPLAIN ANALYZE) of one TPC-H query.
    Explain {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Query number (1 to 22).
        #[arg(long, required_unless_present = "sql")]
        query: Option<usize>,
        /// SQL text to explain instead of a TPC-H query.
        #[arg(long, conflicts_with = "query")]
        sql: Option<String>,
        /// Run it and show the metrics.
        #[arg(long)]
        analyze: bool,
        /// Settings to apply first, e.g. "SET ooode.index_join = 'always'".
        #[arg(long)]
        set: Vec<String>,
    },
    /// What planning the many-clients benchmark's queries costs, by phase and by rule, hot:
    /// ooode (`auto`) next to stock DataFusion on Parquet, alternating.
    Plans {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Plans per query and engine.
        #[arg(long, default_value_t = 300)]
        count: usize,
        /// ooode settings for ooode's session, as name=value (repeatable), e.g.
        /// `--set ooode.columnar_scan=false`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
    },
    /// What checksumming a page costs with each CRC-32C implementation, side by side.
    Checksum {
        /// MiB of pages the copies and checksums go over (more than the CPU's caches).
        #[arg(long, default_value_t = 1024)]
        spread_mib: usize,
        /// Rounds, alternating between the implementations; the best of each is kept.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Random page reads through each I/O engine at several queue depths, next to fio.
    Iobench {
        /// File to read (default: the lineitem heap of data/sf<SF>).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Scale factor of the default file.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Block size in bytes (the table's page size).
        #[arg(long, default_value_t = 8192)]
        page_size: usize,
        /// Queue depths for io_uring.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256,1024")]
        depths: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Also write the points as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    ooode_tpch::delay_memory_purge();
    ooode_tpch::alloc_count::count_if_asked();
    match ooode::io::buf::huge_pages_only_where_advised() {
        Ok(ooode::io::buf::HugePages::WhereAdvised) => {}
        Ok(ooode::io::buf::HugePages::Never) => {
            eprintln!(
                "ooode-tpch: page buffers on 4 KiB pages (this kernel keeps no huge pages only where advised)"
            )
        }
        Err(e) => eprintln!("ooode-tpch: transparent huge pages stay on: {e}"),
    }
    match Cli::parse().command {
        Command::Run {
            sf,
            dir,
            out,
            limit,
        } => {
            let root = dir.unwrap_or_else(|| default_root(&PathBuf::from("data"), sf));
            let out = out.unwrap_or_else(|| PathBuf::from(format!("results/sf{sf}")));
            ooode_tpch::job::run(
                &DataSet::new(root, sf),
                &out,
                std::time::Duration::from_secs(limit),
            )?;
        }
        Command::Tpch { sf, queries } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let queries_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("queries");
            let runs = runtime.block_on(ooode_tpch::runner::run(&data, &queries_dir, &queries))?;
            println!("{}", ooode_tpch::runner::format_runs(&runs));
            if runs.iter().any(|r| !r.same_result) {
                return Err("some results differ from stock DataFusion".into());
            }
        }
        Command::Gen {
            sf,
            dir,
            force,
            json,
        } => {
            let root = dir.unwrap_or_else(|| default_root(&PathBuf::from("data"), sf));
            let data = DataSet::new(root, sf);
            let reports = ensure_dataset(&data, force)?;
            if reports.is_empty() {
                println!("TPC-H SF {sf} is already in {}", data.root.display());
            } else {
                println!(
                    "TPC-H SF {sf} in {}:\n{}",
                    data.root.display(),
                    format_load_reports(&reports)
                );
            }
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&reports)?)?;
            }
        }
        Command::Scale { sfs, limit, out } => {
            let sets: Vec<DataSet> = sfs
                .iter()
                .map(|&sf| DataSet::new(default_root(&PathBuf::from("data"), sf), sf))
                .collect();
            let queries_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("queries");
            let report =
                ooode_tpch::scale::run(&sets, &queries_dir, std::time::Duration::from_secs(limit))?;
            println!("{}", ooode_tpch::scale::format_report(&report));
            for path in ooode_tpch::scale::write(&report, &out)? {
                println!("wrote {path}");
            }
        }
        Command::Fig4 {
            sf,
            n,
            limit,
            only,
            set,
            json,
        } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(ooode_tpch::fig4::run(
                &data,
                &n,
                std::time::Duration::from_secs(limit),
                &only,
                &set_statements(&set)?,
            ))?;
            println!(
                "Fig. 4 query, TPC-H SF {sf}:\n{}",
                ooode_tpch::fig4::format_points(&report.points)
            );
            print!(
                "{}",
                ooode_tpch::fig4::format_cold_iops(&report.points, None)
            );
            for m in ooode_tpch::fig4::mismatches(&report.points) {
                println!("MISMATCH: {m}");
            }
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
            }
        }
        Command::Concurrency {
            sf,
            clients,
            seconds,
            io_total,
            device_depth,
            set,
            json,
            ooode_only,
            unsettled,
        } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let heap = data.ooode_table("lineitem").join("heap.0.pages");
            let fio = ooode_tpch::report::machine_facts(&heap, 8192);
            let mut settings = Vec::new();
            if let Some(n) = io_total {
                settings.push(format!("SET ooode.max_outstanding_io_total = {n}"));
            }
            if let Some(n) = device_depth {
                settings.push(format!("SET ooode.device_queue_depth = {n}"));
            }
            settings.extend(set_statements(&set)?);
            let report = runtime.block_on(ooode_tpch::concurrency::run(
                &data,
                &clients,
                seconds,
                &settings,
                !ooode_only,
                !unsettled,
            ))?;
            println!(
                "Clients at once, TPC-H SF {sf}, {seconds} s each, cold start:\n{}",
                ooode_tpch::concurrency::format_report(&report, fio.fio_iops_qd64)
            );
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
            }
            if !report.mismatches.is_empty() {
                return Err(format!("RESULTS DIFFER: {:?}", report.mismatches).into());
            }
        }
        Command::Ceiling { sf, n, set } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let customers = ooode_tpch::tables::expected_rows("customer", sf).unwrap_or(150_000);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(ooode_tpch::ceiling::run(
                &data,
                n.unwrap_or(customers / 10),
                &set_statements(&set)?,
            ))?;
            println!("{}", ooode_tpch::ceiling::format_report(&report));
        }
        Command::Inserts { sf, max_rows, out } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(ooode_tpch::inserts::run(&data, max_rows))?;
            println!("{}", ooode_tpch::inserts::format_report(&report));
            for f in ooode_tpch::inserts::write(&report, &out)? {
                println!("wrote {f}");
            }
        }
        Command::Segments { sf, counts, out } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(ooode_tpch::segments::run(&data, &counts))?;
            println!("{}", ooode_tpch::segments::format_report(&report));
            for f in ooode_tpch::segments::write(&report, &out)? {
                println!("wrote {f}");
            }
        }
        Command::Cluster {
            sf,
            workers,
            limit,
            out,
        } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let report = runtime.block_on(ooode_tpch::cluster::run(
                &data,
                &workers,
                std::time::Duration::from_secs(limit),
            ))?;
            println!("{}", ooode_tpch::cluster::format_report(&report));
            for f in ooode_tpch::cluster::write(&report, &out)? {
                println!("wrote {f}");
            }
            let bad: Vec<String> = report
                .points
                .iter()
                .filter(|p| !p.equal && p.secs.is_some())
                .map(|p| format!("{} on {} worker(s), {}", p.query, p.workers, p.cache))
                .collect();
            if !bad.is_empty() {
                return Err(format!("results differ: {}", bad.join("; ")).into());
            }
        }
        Command::Worker { listen, data } => ooode_tpch::cluster::serve_worker(listen, data)?,
        Command::Fresh { sf, n, processes } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let report = ooode_tpch::fresh::run(&data, n, processes)?;
            println!("{}", ooode_tpch::fresh::format_report(&report));
        }
        Command::Remote {
            sf,
            latency_ms,
            jitter_ms,
            limit,
            out,
        } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let latency = ooode_tpch::s3::Latency {
                mean_ms: latency_ms,
                jitter_ms,
            };
            let report =
                ooode_tpch::remote::run(&data, latency, std::time::Duration::from_secs(limit))?;
            println!("{}", ooode_tpch::remote::format_report(&report));
            for f in ooode_tpch::remote::write(&report, &out)? {
                println!("wrote {f}");
            }
            let bad = ooode_tpch::fig4::mismatches(&report.fig4.points)
                .into_iter()
                .chain(ooode_tpch::paper::mismatches(&report.paper))
                .collect::<Vec<_>>();
            if !bad.is_empty() {
                return Err(format!("results differ: {}", bad.join("; ")).into());
            }
        }
        Command::S3Server {
            root,
            latency_ms,
            jitter_ms,
        } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let latency = ooode_tpch::s3::Latency {
                mean_ms: latency_ms,
                jitter_ms,
            };
            runtime.block_on(ooode_tpch::s3::serve(&root, latency))?;
        }
        Command::FirstQuery {
            sf,
            dir,
            engine,
            n,
            resident_code,
        } => {
            let data = DataSet::new(dir, sf);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let m = runtime.block_on(ooode_tpch::fresh::measure_here(
                &data,
                &engine,
                n,
                resident_code,
            ))?;
            println!("{}", serde_json::to_string(&m)?);
        }
        Command::Explain {
            sf,
            query,
            sql,
            analyze,
            set,
        } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let sql = match (sql, query) {
                (Some(sql), _) => sql,
                (None, q) => std::fs::read_to_string(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                        .join(format!("queries/q{}.sql", q.unwrap_or(1))),
                )?,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let (_, ctx) = ooode_tpch::runner::contexts(&data).await?;
                for s in &set {
                    ooode_tpch::runner::run_sql(&ctx, s).await?;
                }
                // Earlier statements (q15's view) run as they are; the last one is explained.
                let stmts: Vec<&str> = sql
                    .split(';')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                let (last, before) = stmts.split_last().ok_or("empty query file")?;
                for s in before {
                    ooode_tpch::runner::run_sql(&ctx, s).await?;
                }
                let verb = if analyze {
                    "EXPLAIN ANALYZE"
                } else {
                    "EXPLAIN"
                };
                let plan = ctx.sql(&format!("{verb} {last}")).await?.collect().await?;
                println!(
                    "{}",
                    datafusion::arrow::util::pretty::pretty_format_batches(&plan)?
                );
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })?;
        }
        Command::Plans { sf, count, set } => {
            let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
            ensure_dataset(&data, false)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let results =
                runtime.block_on(ooode_tpch::plans::run(&data, count, &set_statements(&set)?))?;
            print!("{}", ooode_tpch::plans::format(&results, count));
        }
        Command::Checksum { spread_mib, rounds } => {
            let results = ooode_tpch::checksum::run(spread_mib, rounds);
            print!("{}", ooode_tpch::checksum::format(&results, spread_mib));
        }
        Command::Iobench {
            file,
            sf,
            page_size,
            depths,
            seconds,
            json,
        } => {
            let file = match file {
                Some(f) => f,
                None => {
                    let data = DataSet::new(default_root(&PathBuf::from("data"), sf), sf);
                    ensure_dataset(&data, false)?;
                    data.ooode_table("lineitem").join("heap.0.pages")
                }
            };
            let opts = IoBenchOptions {
                file,
                page_size,
                depths,
                secs: seconds,
            };
            // With an I/O driver: engines that take completions on the reactor need one.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let points = runtime.block_on(iobench::run(&opts))?;
            println!(
                "Random {page_size}-byte reads of {} (O_DIRECT, cold):\n{}",
                opts.file.display(),
                iobench::format_points(&points)
            );
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&points)?)?;
            }
        }
    }
    Ok(())
}

/// `SET` statements of `--set NAME=VALUE` arguments.
fn set_statements(
    sets: &[String],
) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
    sets.iter()
        .map(|setting| match setting.split_once('=') {
            Some((name, value)) => Ok(format!("SET {} = '{}'", name.trim(), value.trim())),
            None => Err(format!("--set {setting}: expected NAME=VALUE").into()),
        })
        .collect()
}
