//! Sharded tables on several workers (`ooode-tpch cluster`): the Fig. 4 sweep and
//! Q3'...Q17' with TPC-H loaded in as many shards as workers, on 1 and on 3 `ooode worker`
//! processes on loopback (one disk here), next to ooode on one node (`auto` in all three).
//! Per point: time cold (every worker's buffer pool emptied, the OS page cache dropped) and
//! hot, each worker's page reads and IOPS, the bytes that crossed between stages, and the
//! bytes lookups brought back. Results are checked equal to one node's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_distributed::{DistributedMetricsFormat, rewrite_distributed_plan_with_metrics};
use serde::Serialize;

use crate::datagen::DataSet;
use crate::fig4::{drop_os_cache, fig4_sql};
use crate::runner::{cold_rows, hot_rows, query_rows};
use crate::tables::TABLES;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Fig. 4 points measured (customers selected).
const FIG4_NS: [u64; 4] = [1, 15, 150, 1500];

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterPoint {
    /// Workers (0: ooode on one node, no workers).
    pub workers: usize,
    /// "Fig. 4 N = 15", "Q3'", ...
    pub query: String,
    /// "cold" or "hot".
    pub cache: String,
    /// Median seconds; None past the limit.
    pub secs: Option<f64>,
    /// Page reads of each worker, per run.
    pub worker_reads: Vec<u64>,
    /// Those reads per second of the run, per worker.
    pub worker_iops: Vec<f64>,
    /// Bytes of the batches that crossed between stages (one instrumented run).
    pub network_bytes: u64,
    /// Bytes of inner rows lookups brought back (same run).
    pub lookup_bytes: u64,
    /// Whether the rows equal one node's.
    pub equal: bool,
}

/// The benchmark's results.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    /// Scale factor.
    pub sf: f64,
    /// Seconds to load every table sharded, per worker count.
    pub load_secs: Vec<(usize, f64)>,
    /// All measurements.
    pub points: Vec<ClusterPoint>,
}

/// `ooode-tpch worker` processes, killed when dropped.
struct Workers {
    addrs: Vec<String>,
    children: Vec<Child>,
}

impl Workers {
    fn start(count: usize, dir: &Path) -> Result<Self, BoxError> {
        let exe = std::env::current_exe()?;
        let mut addrs = Vec::new();
        let mut children = Vec::new();
        for i in 0..count {
            // Fixed ports: the shard maps name their workers, so a loaded cluster is reused.
            let addr = format!("127.0.0.1:{}", 47300 + 10 * count + i);
            let child = Command::new(&exe)
                .args(["worker", "--listen", &addr, "--data"])
                .arg(dir.join(format!("worker{i}")))
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()?;
            children.push(child);
            let deadline = Instant::now() + Duration::from_secs(30);
            while std::net::TcpStream::connect(&addr).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("worker {addr} did not start").into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            addrs.push(addr);
        }
        Ok(Self { addrs, children })
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn coordinator(workers: &[String]) -> Result<SessionContext, BoxError> {
    let builder = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new());
    let state = ooode_distributed::with_ooode_distributed(builder, workers)?.build();
    Ok(SessionContext::new_with_state(state))
}

/// Loads every table in `count` shards under `dir` unless a complete load is there.
async fn load(
    ctx: &SessionContext,
    data: &DataSet,
    dir: &Path,
    count: usize,
) -> Result<Option<f64>, BoxError> {
    let tables = dir.join("tables");
    let loaded = TABLES
        .iter()
        .all(|t| ooode_distributed::ShardMap::exists(&tables.join(t.name)));
    let start = Instant::now();
    for t in &TABLES {
        let at = tables.join(t.name);
        if !loaded {
            let src = data.parquet_file(t.name).display().to_string();
            ctx.register_parquet(
                format!("src_{}", t.name),
                &src,
                ParquetReadOptions::default(),
            )
            .await?;
            let mut options = vec![
                format!("'ooode.clustering_key' '{}'", t.clustering_key.join(",")),
                format!("'ooode.shards' '{count}'"),
                "'ooode.replace' 'true'".to_string(),
            ];
            if !t.indexes.is_empty() {
                let indexes: Vec<String> = t.indexes.iter().map(|c| c.join(",")).collect();
                options.push(format!("'ooode.indexes' '{}'", indexes.join(";")));
            }
            eprintln!("  loading {} in {count} shard(s)", t.name);
            ctx.sql(&format!(
                "COPY (SELECT * FROM src_{}) TO '{}' STORED AS OOODE OPTIONS ({})",
                t.name,
                at.display(),
                options.join(", ")
            ))
            .await?
            .collect()
            .await?;
        }
        ctx.sql(&format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
            t.name,
            at.display()
        ))
        .await?
        .collect()
        .await?;
    }
    Ok((!loaded).then(|| start.elapsed().as_secs_f64()))
}

/// Bytes that crossed between stages and bytes lookups brought back, in one run of `sql`.
async fn traffic(ctx: &SessionContext, sql: &str) -> Result<(u64, u64), BoxError> {
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    collect(plan.clone(), ctx.task_ctx()).await?;
    // Under the node that names lost workers.
    let distributed = match plan.children().first() {
        Some(child) if plan.name() == "NamesLostWorkers" => Arc::clone(child),
        _ => plan,
    };
    let with_metrics =
        rewrite_distributed_plan_with_metrics(distributed, DistributedMetricsFormat::Aggregated)
            .await?;
    let (mut network, mut lookups) = (0, 0);
    let mut stack: Vec<Arc<dyn ExecutionPlan>> = vec![with_metrics];
    while let Some(node) = stack.pop() {
        if let Some(m) = node.metrics() {
            // By hand: `sum_by_name` skips custom metrics (datafusion-distributed's bytes).
            let sum = |name: &str| -> u64 {
                m.iter()
                    .filter(|x| x.value().name() == name)
                    .map(|x| x.value().as_usize() as u64)
                    .sum()
            };
            if node.name().starts_with("Network") {
                network += sum("bytes_transferred");
            }
            lookups += sum("lookup_bytes");
        }
        stack.extend(node.children().into_iter().cloned());
    }
    Ok((network, lookups))
}

async fn empty_worker_pools(workers: &[String]) -> Result<(), BoxError> {
    for w in workers {
        ooode_distributed::client::empty_pool(w).await?;
    }
    Ok(())
}

async fn worker_reads(workers: &[String]) -> Result<Vec<u64>, BoxError> {
    let mut out = Vec::new();
    for w in workers {
        out.push(ooode_distributed::client::reads(w).await?.reads);
    }
    Ok(out)
}

/// The queries: Fig. 4 points, then Q3'...Q17'.
fn queries(data: &DataSet) -> Result<Vec<(String, String)>, BoxError> {
    let mut out: Vec<(String, String)> = FIG4_NS
        .iter()
        .map(|n| (format!("Fig. 4 N = {n}"), fig4_sql(*n)))
        .collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/paper");
    for q in crate::paper::load_queries(&dir, data.sf)? {
        out.push((q.label(), q.sql));
    }
    Ok(out)
}

/// Measures one engine (`workers` empty: one node) on every query.
async fn measure(
    ctx: &SessionContext,
    workers: &[String],
    want: &[(String, Vec<String>)],
    queries: &[(String, String)],
    limit: Duration,
) -> Result<Vec<ClusterPoint>, BoxError> {
    let mut points = Vec::new();
    for ((label, sql), (_, want)) in queries.iter().zip(want) {
        eprintln!("  {label} on {} worker(s)", workers.len());
        let handle = tokio::runtime::Handle::current();
        let empty = || {
            tokio::task::block_in_place(|| {
                handle
                    .block_on(empty_worker_pools(workers))
                    .expect("workers empty their pools")
            });
            if workers.is_empty() {
                ooode_providers::ooode_runtime(ctx).pool().clear();
            }
            drop_os_cache();
        };
        let before = worker_reads(workers).await?;
        let cold = cold_rows(ctx, sql, limit, &empty, true).await?;
        let cold_reads = worker_reads(workers).await?;
        let (network, lookups) = match workers.is_empty() {
            true => (0, 0),
            false => traffic(ctx, sql).await?,
        };
        let hot_before = worker_reads(workers).await?;
        let hot = hot_rows(ctx, sql, limit).await?;
        let hot_reads = worker_reads(workers).await?;
        for (cache, measured, before, after) in [
            ("cold", &cold, &before, &cold_reads),
            ("hot", &hot, &hot_before, &hot_reads),
        ] {
            let per_run: Vec<u64> = after
                .iter()
                .zip(before)
                .map(|(a, b)| (a - b) / measured.runs as u64)
                .collect();
            points.push(ClusterPoint {
                workers: workers.len(),
                query: label.clone(),
                cache: cache.into(),
                secs: measured.secs,
                worker_iops: per_run
                    .iter()
                    .map(|&r| measured.secs.map_or(0.0, |s| r as f64 / s.max(1e-9)))
                    .collect(),
                worker_reads: per_run,
                network_bytes: network,
                lookup_bytes: lookups,
                equal: measured.rows == *want,
            });
        }
    }
    Ok(points)
}

/// Runs the benchmark on each worker count of `counts`; progress on stderr.
pub async fn run(
    data: &DataSet,
    counts: &[usize],
    limit: Duration,
) -> Result<ClusterReport, BoxError> {
    let queries = queries(data)?;
    let one_node = ooode_providers::ooode_context(SessionConfig::new());
    for t in &TABLES {
        one_node
            .sql(&format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
                t.name,
                data.ooode_table(t.name).display()
            ))
            .await?
            .collect()
            .await?;
    }
    let mut want = Vec::new();
    for (label, sql) in &queries {
        want.push((label.clone(), query_rows(&one_node, sql).await?));
    }
    eprintln!("one node");
    let mut points = measure(&one_node, &[], &want, &queries, limit).await?;
    let mut load_secs = Vec::new();
    for &count in counts {
        let dir: PathBuf = data.root.join(format!("cluster-{count}"));
        let workers = Workers::start(count, &dir)?;
        let ctx = coordinator(&workers.addrs)?;
        eprintln!("{count} worker(s)");
        if let Some(secs) = load(&ctx, data, &dir, count).await? {
            load_secs.push((count, secs));
        }
        points.extend(measure(&ctx, &workers.addrs, &want, &queries, limit).await?);
    }
    Ok(ClusterReport {
        sf: data.sf,
        load_secs,
        points,
    })
}

fn engine(workers: usize) -> String {
    match workers {
        0 => "ooode, one node".into(),
        1 => "1 worker".into(),
        n => format!("{n} workers"),
    }
}

/// The report as text.
pub fn format_report(r: &ClusterReport) -> String {
    let mut out = format!("Sharded tables, SF {}\n", r.sf);
    for (count, secs) in &r.load_secs {
        out += &format!("  load in {count} shard(s): {secs:.1} s\n");
    }
    out += &format!(
        "{:<16} {:<16} {:<5} {:>10} {:>24} {:>24} {:>12} {:>12} {}\n",
        "query",
        "engine",
        "cache",
        "time",
        "reads per worker",
        "IOPS per worker",
        "stages B",
        "lookups B",
        "equal"
    );
    for p in &r.points {
        let list = |v: Vec<String>| v.join("/");
        out += &format!(
            "{:<16} {:<16} {:<5} {:>10} {:>24} {:>24} {:>12} {:>12} {}\n",
            p.query,
            engine(p.workers),
            p.cache,
            p.secs.map_or("-".into(), |s| format!("{:.1} ms", s * 1e3)),
            list(p.worker_reads.iter().map(|r| r.to_string()).collect()),
            list(p.worker_iops.iter().map(|r| format!("{r:.0}")).collect()),
            p.network_bytes,
            p.lookup_bytes,
            p.equal
        );
    }
    out
}

/// Writes `cluster.json` and a plot per cache state into `dir`; returns the files written.
pub fn write(r: &ClusterReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    let mut files = crate::report::ReportDir::create(dir)?;
    files.put("cluster.json", serde_json::to_string_pretty(r)?)?;
    let mut labels: Vec<String> = Vec::new();
    for p in &r.points {
        if !labels.contains(&p.query) {
            labels.push(p.query.clone());
        }
    }
    let mut engines: Vec<usize> = r.points.iter().map(|p| p.workers).collect();
    engines.dedup();
    for cache in ["cold", "hot"] {
        let series: Vec<(String, Vec<Option<f64>>)> = engines
            .iter()
            .map(|&w| {
                let values = labels
                    .iter()
                    .map(|q| {
                        r.points
                            .iter()
                            .find(|p| p.workers == w && p.query == *q && p.cache == cache)
                            .and_then(|p| p.secs)
                    })
                    .collect();
                (engine(w), values)
            })
            .collect();
        files.put(
            &format!("cluster_time_{cache}.svg"),
            crate::svg::bar_chart(
                &format!("Sharded TPC-H SF {}, {cache}: time per query", r.sf),
                crate::svg::Axis {
                    label: "seconds",
                    log: true,
                },
                &labels,
                &series,
            ),
        )?;
    }
    Ok(files.written)
}

/// Runs `ooode-tpch worker`: a worker over `data` until killed.
pub fn serve_worker(listen: std::net::SocketAddr, data: PathBuf) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(ooode_distributed::serve(
        listen,
        data,
        std::future::pending(),
    ))?;
    Ok(())
}
