//! Many clients at once: each a stream of selective queries (the Fig. 4 chain over a random
//! range of 1 to 150 customers at SF 1 (0.1 % of them; the range scales with the data), and
//! point lookups: a range of one) for a fixed time, from a cold start, on ooode (one runtime, a buffer pool far smaller than the data, `auto`) and on
//! stock DataFusion over Parquet with the same clients and the same queries.
//!
//! Per engine and client count: queries per second, latency (p50, p99; the point lookups'
//! own p99 too), the device's IOPS (from `/proc/diskstats`, so both engines are measured
//! alike), and CPU. Client `i` draws the same queries on both engines, so every query both
//! finished is checked equal. A run of point lookups alone gives their p99 without the load.
//! Each of ooode's runs gets a runtime of its own; unless told not to, its page buffers are
//! first settled in its arena (as in a service that has run a while), then its pool emptied.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use ooode::access::QueryIo;
use ooode::exec::{IndexJoinExec, IndexScanExec, OoodeScanExec};
use ooode::io::IoEngine;
use ooode::io::metrics::process_cpu_time;

use crate::datagen::DataSet;
use crate::depth::{Depth, DepthSampler, SHALLOW};
use crate::fig4::drop_os_cache;
use crate::runner::{query_rows, run_sql, settle_buffers};
use crate::tables::TABLES;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One engine at one number of clients.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConcurrencyPoint {
    /// "ooode" or "datafusion parquet".
    pub engine: String,
    /// "mixed" (ranges of 1-150 customers and point lookups) or "points alone".
    pub workload: String,
    /// Clients, each running one query after another.
    pub clients: usize,
    /// Queries finished.
    pub queries: u64,
    /// Seconds measured.
    pub secs: f64,
    /// Queries per second.
    pub qps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Point lookups' median latency, milliseconds.
    pub point_p50_ms: f64,
    /// Point lookups' 99th percentile latency, milliseconds.
    pub point_p99_ms: f64,
    /// The same without each client's first query. The clients start at one instant, so
    /// their first queries arrive together: all of them planned at once on the cores, all
    /// reading a cold pool, a burst the rest of the run does not see.
    pub point_p99_after_first_ms: f64,
    /// The slowest point lookup that was a client's first query, milliseconds.
    pub first_points_max_ms: f64,
    /// Of the point lookups' latency, planning (SQL to physical plan): median and 99th
    /// percentile, milliseconds. Execution is the rest.
    pub point_plan_p50_ms: f64,
    pub point_plan_p99_ms: f64,
    /// Reads per second the device completed (all readers of the machine) until the
    /// deadline, when the clients stop starting queries; the other device and engine rates
    /// and the depth are taken over the same seconds.
    pub device_iops: f64,
    /// The same until the last query finished, `drain_secs` after the deadline.
    pub device_iops_with_drain: f64,
    /// Seconds from the deadline until the last query finished.
    pub drain_secs: f64,
    /// Mean milliseconds a read spent in the kernel (the I/O scheduler's queue and the
    /// device), and mean I/Os in the kernel over the run (`/proc/diskstats`; None where it
    /// could not be read). Against fio's on the same disk they tell reads the engine keeps
    /// from reads the disk is slow on.
    pub disk_read_ms: Option<f64>,
    pub disk_depth: Option<f64>,
    /// Mean KiB a read at the device, and the share of arriving reads the I/O scheduler
    /// merged into adjacent ones (two pages read as one 16 KiB read count once in
    /// `device_iops`, and cost a 16 KiB read: fio's reads are all 8 KiB).
    pub disk_read_kib: Option<f64>,
    pub disk_merged_share: Option<f64>,
    /// Page reads per second ooode issued (None for Parquet).
    pub engine_iops: Option<f64>,
    /// Of ooode's reads, the share that waited in the engine's queue for the device (when
    /// `ooode.device_queue_depth` reads were there), and their mean wait, milliseconds.
    pub device_queued_share: Option<f64>,
    pub device_queue_ms: Option<f64>,
    /// Mean milliseconds from a read's submission until its completion was taken from the
    /// ring (ooode's engines, all reads of the run).
    pub reaped_read_ms: Option<f64>,
    /// Mean milliseconds from a read's submission until the task that wanted the page ran
    /// with it (the queries' own counts: reaped, then woken and scheduled), all queries and
    /// point lookups alone. Next to `disk_read_ms` they split a read's latency into the
    /// kernel's, the reaping's and the scheduler's.
    pub used_read_ms: Option<f64>,
    pub point_used_read_ms: Option<f64>,
    /// Process CPU, percent of one core.
    pub cpu_percent: f64,
    /// Process CPU per page read ooode issued, microseconds, both counted up to the deadline
    /// (None for Parquet or without reads).
    pub cpu_us_per_read: Option<f64>,
    /// fio's random 8 KiB reads at depth 64 on the lineitem heap, IOPS: the mean of two
    /// seconds right before the run and two right after (ooode's mixed runs; None without
    /// fio). The device drifts over minutes, so its share is taken against this.
    pub fio_qd64_beside: Option<f64>,
    /// fio replaying the reads ooode asked for in this run (files, offsets and lengths, in
    /// their order; at most [`RECORDED_READS`]) at depth 64, as fast as the device serves
    /// them, right after the run, IOPS (ooode's mixed runs; None without fio). Next to
    /// `fio_qd64_beside` it tells whether the device is slower on these reads themselves or
    /// on the way the engine keeps them in flight.
    pub fio_replay_qd64: Option<f64>,
    /// Where the slowest point lookups' time went (ooode only).
    pub point_tail: Option<PointTail>,
    /// The same without each client's first query (see `point_p99_after_first_ms`).
    pub point_tail_after_first: Option<PointTail>,
    /// Means over the point lookups that were a client's first query (the burst; ooode only).
    pub first_points: Option<PointTail>,
    /// How deep ooode kept the device: reads in flight and permits held (ooode only).
    pub depth: Option<Depth>,
    /// ooode's operator tasks of the run, by where they ran: long queries' on the idle lane
    /// (`ooode.long_queries_idle_priority`) or on the clients' runtime (ooode only).
    pub operator_tasks: Option<ooode::access::OperatorTasks>,
    /// Seconds of warm-up before the run that moved the runtime's page buffers into its
    /// arena, as in a process that has run a while (ooode only; None when not asked for).
    pub arena_settle_secs: Option<f64>,
}

/// Means over some point lookups of one run (the slowest 5 %, or the clients' first ones),
/// milliseconds: where a point's time goes under load. Sums over a query's reads (admission,
/// device) overlap one another where its reads run at once, so they can add up to more than
/// its execution.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PointTail {
    /// Point lookups averaged.
    pub queries: usize,
    /// Latency.
    pub total_ms: f64,
    /// Planning (SQL to physical plan).
    pub plan_ms: f64,
    /// Of planning, the optimizer rule blocked on range counts' reads.
    pub count_wait_ms: f64,
    /// Reads.
    pub reads: f64,
    /// Reads' time queued for admission, summed.
    pub admission_ms: f64,
    /// From a read's admission until its task ran, summed (scheduling delay).
    pub wake_ms: f64,
    /// Reads' time from submission until their task ran with the page, summed (the device,
    /// the reaping and the scheduler; see `used_read_ms`).
    pub device_ms: f64,
    /// Size class (log2 of the estimated page reads) admission queued them in.
    pub class: f64,
    /// From the end of the query's last ooode operator to the end of the query: the
    /// operators above ooode's and the client's task waiting to be scheduled.
    pub after_ooode_ms: f64,
    /// When the queries started, after the run's start (the clients' tasks first ran then).
    pub started_ms: f64,
}

/// One finished query: latency, planning, and (ooode) what its reads waited for.
#[derive(Debug, Clone, Copy, Default)]
struct Timing {
    total_ms: f64,
    plan_ms: f64,
    /// Of planning, the optimizer rule blocked on range counts' reads.
    count_wait_ms: f64,
    reads: u64,
    admission_ms: f64,
    wake_ms: f64,
    device_ms: f64,
    class: usize,
    after_ooode_ms: f64,
    started_ms: f64,
}

impl PointTail {
    /// Means over the slowest 5 % of `points` (None when there are none).
    fn of(points: &[Timing]) -> Option<Self> {
        let mut sorted = points.to_vec();
        sorted.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
        sorted.truncate(points.len().div_ceil(20));
        Self::means(&sorted)
    }

    /// Means over all of `points` (None when there are none).
    fn means(points: &[Timing]) -> Option<Self> {
        let n = points.len();
        if n == 0 {
            return None;
        }
        let mean = |f: fn(&Timing) -> f64| points.iter().map(f).sum::<f64>() / n as f64;
        Some(Self {
            queries: n,
            total_ms: mean(|t| t.total_ms),
            plan_ms: mean(|t| t.plan_ms),
            count_wait_ms: mean(|t| t.count_wait_ms),
            reads: mean(|t| t.reads as f64),
            admission_ms: mean(|t| t.admission_ms),
            wake_ms: mean(|t| t.wake_ms),
            device_ms: mean(|t| t.device_ms),
            class: mean(|t| t.class as f64),
            after_ooode_ms: mean(|t| t.after_ooode_ms),
            started_ms: mean(|t| t.started_ms),
        })
    }
}

/// The whole experiment.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConcurrencyReport {
    /// All measurements.
    pub points: Vec<ConcurrencyPoint>,
    /// ooode's buffer pool size, bytes (the ooode tables hold `data_bytes`).
    pub pool_bytes: usize,
    /// Bytes of the ooode tables read (heap and index files of customer, orders, lineitem).
    pub data_bytes: u64,
    /// Queries both engines finished, compared.
    pub compared: u64,
    /// Queries whose results differed (must be 0).
    pub mismatches: Vec<String>,
}

/// The query a client runs: the Fig. 4 chain over customers `first ..= first + n - 1`.
pub fn range_sql(first: u64, n: u64) -> String {
    format!(
        "SELECT COUNT(*), SUM(l_quantity) FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey \
         JOIN lineitem l ON o.o_orderkey = l.l_orderkey \
         WHERE c.c_custkey BETWEEN {first} AND {}",
        first + n - 1
    )
}

/// Client `client`'s `k`-th query: half point lookups, half ranges of 1 to 150 customers per
/// 150,000 (0.1 %), at random places among `customers` (the same on every engine).
fn draw(client: usize, k: u64, customers: u64, points_only: bool) -> (bool, String) {
    let widest = (customers / 1000).max(1);
    let mut x = (client as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(k.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let point = points_only || next(2) == 0;
    let n = if point { 1 } else { 1 + next(widest) };
    let first = 1 + next(customers.saturating_sub(n).max(1));
    (point, range_sql(first, n))
}

/// Counters of the block device holding a path, from `/proc/diskstats`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DiskCounters {
    /// Reads completed.
    reads: u64,
    /// Reads the I/O scheduler merged into adjacent ones before they reached the device.
    merged: u64,
    /// 512-byte sectors read.
    sectors: u64,
    /// Milliseconds reads spent in the kernel, from their arrival at the block layer to their
    /// completion (the I/O scheduler's queue and the device), summed over reads.
    read_ms: u64,
    /// Milliseconds of I/O in flight weighted by how many were (its mean over a time is the
    /// mean number of I/Os in the kernel then).
    weighted_ms: u64,
}

impl DiskCounters {
    /// Of the device holding `path`.
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(path).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        Self::parse(
            &std::fs::read_to_string("/proc/diskstats").ok()?,
            major,
            minor,
        )
    }

    /// From the text of `/proc/diskstats`, the line of device `major:minor`.
    fn parse(stats: &str, major: u32, minor: u32) -> Option<Self> {
        stats.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 14 || f[0] != major.to_string() || f[1] != minor.to_string() {
                return None;
            }
            let field = |i: usize| f[i].parse::<u64>().ok();
            Some(Self {
                reads: field(3)?,
                merged: field(4)?,
                sectors: field(5)?,
                read_ms: field(6)?,
                weighted_ms: field(13)?,
            })
        })
    }

    /// Over the `secs` from `before` to `self`.
    fn since(&self, before: &Self, secs: f64) -> DiskRates {
        let reads = self.reads.saturating_sub(before.reads);
        let merged = self.merged.saturating_sub(before.merged);
        let sectors = self.sectors.saturating_sub(before.sectors);
        let read_ms = self.read_ms.saturating_sub(before.read_ms);
        let weighted = self.weighted_ms.saturating_sub(before.weighted_ms);
        DiskRates {
            iops: reads as f64 / secs,
            read_ms: (reads > 0).then(|| read_ms as f64 / reads as f64),
            depth: (secs > 0.0).then(|| weighted as f64 / (secs * 1e3)),
            read_kib: (reads > 0).then(|| sectors as f64 / 2.0 / reads as f64),
            merged_share: (reads > 0).then(|| merged as f64 / (reads + merged) as f64),
        }
    }
}

/// What a disk did over a run, from two readings of its counters.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DiskRates {
    /// Reads completed per second.
    iops: f64,
    /// Mean milliseconds a read spent in the kernel.
    read_ms: Option<f64>,
    /// Mean I/Os in the kernel.
    depth: Option<f64>,
    /// Mean KiB a read.
    read_kib: Option<f64>,
    /// Of the reads that arrived, the share merged into another before the device.
    merged_share: Option<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What one engine's clients did.
struct Run {
    point: ConcurrencyPoint,
    /// (client, k) -> result rows.
    results: HashMap<(usize, u64), Vec<String>>,
    /// The reads ooode's engines were asked for (file, offset, length), mixed runs only.
    recorded: Vec<(PathBuf, u64, usize)>,
    /// The buffer pool's budget in force during the run (ooode's runs), in bytes.
    pool_budget: Option<usize>,
}

/// Most reads of one run recorded for fio to replay (16 bytes each).
pub const RECORDED_READS: usize = 1 << 21;

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Ooode,
    Parquet,
}

/// Sessions for `clients` clients of `engine`, sharing one runtime (as a service's do).
async fn sessions(
    data: &DataSet,
    engine: Engine,
    clients: usize,
    ooode_settings: &[String],
) -> Result<Vec<SessionContext>, BoxError> {
    let env = RuntimeEnvBuilder::new().build_arc()?;
    let mut out = Vec::with_capacity(clients);
    for _ in 0..clients {
        let config = SessionConfig::new();
        let builder = SessionStateBuilder::new()
            .with_default_features()
            .with_config(config)
            .with_runtime_env(env.clone());
        let ctx = match engine {
            Engine::Ooode => {
                SessionContext::new_with_state(ooode_providers::with_ooode(builder).build())
            }
            Engine::Parquet => SessionContext::new_with_state(builder.build()),
        };
        for t in TABLES
            .iter()
            .filter(|t| ["customer", "orders", "lineitem"].contains(&t.name))
        {
            match engine {
                Engine::Ooode => {
                    let sql = format!(
                        "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
                        t.name,
                        data.ooode_table(t.name).display()
                    );
                    run_sql(&ctx, &sql).await?;
                }
                Engine::Parquet => {
                    ctx.register_parquet(
                        t.name,
                        data.parquet_file(t.name).to_string_lossy().as_ref(),
                        ParquetReadOptions::default(),
                    )
                    .await?;
                }
            }
        }
        if engine == Engine::Ooode {
            for sql in ooode_settings {
                run_sql(&ctx, sql).await?;
            }
        }
        out.push(ctx);
    }
    Ok(out)
}

/// Runs `clients` clients of `engine` for `secs` seconds from a cold start.
/// [`run_point`] of a mixed workload; ooode's with fio at depth 64 right before and after.
async fn run_beside_fio(
    data: &DataSet,
    engine: Engine,
    clients: usize,
    secs: f64,
    ooode_settings: &[String],
    settle: bool,
) -> Result<Run, BoxError> {
    let heap = data.ooode_table("lineitem").join("heap.0.pages");
    let fio = || {
        (engine == Engine::Ooode)
            .then(|| crate::iobench::fio_iops(&heap, 64, 2.0))
            .flatten()
    };
    let before = fio();
    let mut run = run_point(data, engine, clients, secs, ooode_settings, false, settle).await?;
    run.point.fio_qd64_beside = before.zip(fio()).map(|(a, b)| (a + b) / 2.0);
    if engine == Engine::Ooode && !run.recorded.is_empty() && crate::iobench::ensure_fio() {
        run.point.fio_replay_qd64 = match crate::iobench::fio_replay_iops(&run.recorded, 64, 3.0) {
            Ok(iops) => Some(iops),
            Err(e) => {
                eprintln!("fio could not replay the run's reads: {e}");
                None
            }
        };
    }
    Ok(run)
}

async fn run_point(
    data: &DataSet,
    engine: Engine,
    clients: usize,
    secs: f64,
    ooode_settings: &[String],
    points_only: bool,
    settle: bool,
) -> Result<Run, BoxError> {
    let customers = crate::tables::expected_rows("customer", data.sf).unwrap_or(150_000);
    let contexts = sessions(data, engine, clients, ooode_settings).await?;
    if engine == Engine::Ooode {
        // Settings take effect as a query is planned: one untimed query sizes the pool,
        // which then starts empty.
        query_rows(&contexts[0], &range_sql(1, 1)).await?;
        ooode_providers::ooode_runtime(&contexts[0]).pool().clear();
    }
    let arena_settle_secs = match (engine, settle) {
        (Engine::Ooode, true) => {
            // 5 % of the customers through index joins (`auto` would scan there) reads about
            // 13 % of the tables' bytes, twice what the pool holds (1/16 of them), so each run
            // hands the recycler a pool's worth of buffers (1 % read less than the pool).
            let index_join =
                ooode_providers::provider::ooode_config(&contexts[0].state()).index_join;
            run_sql(&contexts[0], "SET ooode.index_join = 'always'").await?;
            let sql = range_sql(1, (customers / 20).max(1));
            let settled = settle_buffers(&contexts[0], &sql, Duration::from_secs(600)).await?;
            run_sql(
                &contexts[0],
                &format!("SET ooode.index_join = '{index_join}'"),
            )
            .await?;
            let runtime = ooode_providers::ooode_runtime(&contexts[0]);
            let arena_regions = runtime.recycler().arena().map_or(0, |a| a.regions());
            eprintln!(
                "{:<20} {clients:>3} clients: page buffers settled in the arena first, after {} \
                 runs ({:.1} s): {} MiB in it, {} MiB outside it",
                "ooode",
                settled.runs,
                settled.secs,
                (arena_regions * ooode::io::arena::REGION_BYTES) >> 20,
                settled.outside_bytes >> 20
            );
            Some(settled.secs)
        }
        _ => None,
    };
    let pool_budget = (engine == Engine::Ooode)
        .then(|| ooode_providers::ooode_runtime(&contexts[0]).pool().budget());
    drop_os_cache();
    let heap = data.ooode_table("lineitem");
    let engines = match engine {
        Engine::Ooode => ooode_providers::ooode_runtime(&contexts[0]).engines(),
        Engine::Parquet => Vec::new(),
    };
    if !points_only {
        for e in &engines {
            e.record_reads(RECORDED_READS);
        }
    }
    let operator_tasks = || {
        (engine == Engine::Ooode)
            .then(|| ooode_providers::ooode_runtime(&contexts[0]).operator_tasks())
    };
    let tasks0 = operator_tasks();
    // By value: the thread reading the counts at the deadline takes it too.
    let ooode_reads = move |engines: &[Arc<dyn IoEngine>]| {
        (engine == Engine::Ooode).then(|| EngineTotals::of(engines))
    };
    let (dev0, cpu0, reads0) = (
        DiskCounters::of(&heap),
        process_cpu_time(),
        ooode_reads(&engines),
    );
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let sampler = match engine {
        Engine::Ooode => Some(DepthSampler::start(
            ooode_providers::ooode_runtime(&contexts[0]),
            deadline,
        )?),
        Engine::Parquet => None,
    };
    // The device's and the engines' counts are read again at the deadline, when clients
    // stop starting queries: the last ones' drain after it (up to a long query's second)
    // feeds the device less and would count against it.
    let at_deadline = {
        let (heap, engines) = (heap.clone(), engines.clone());
        std::thread::spawn(move || {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            (
                DiskCounters::of(&heap),
                ooode_reads(&engines),
                process_cpu_time(),
                Instant::now(),
            )
        })
    };
    let mut tasks = Vec::new();
    for (client, ctx) in contexts.iter().cloned().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            let mut k = 0u64;
            while Instant::now() < deadline {
                let (point, sql) = draw(client, k, customers, points_only);
                let t = Instant::now();
                let (mut timing, rows) = planned_rows(&ctx, &sql).await?;
                timing.total_ms = t.elapsed().as_secs_f64() * 1e3;
                timing.started_ms = (t - start).as_secs_f64() * 1e3;
                done.push((k, point, timing, rows));
                k += 1;
            }
            Ok::<_, BoxError>((client, done))
        }));
    }
    let mut latencies = Vec::new();
    let mut point_latencies = Vec::new();
    let mut later_point_latencies = Vec::new();
    let mut first_points_max_ms = 0f64;
    let mut point_plans = Vec::new();
    let mut point_timings = Vec::new();
    let mut later_point_timings = Vec::new();
    let mut first_point_timings = Vec::new();
    let mut other_classes = Vec::new();
    let mut results = HashMap::new();
    // Reads of all queries and their time until used, then the same of point lookups.
    let mut used = UsedReads::default();
    for t in tasks {
        let (client, done) = t.await??;
        for (k, point, timing, rows) in done {
            if !point {
                other_classes.push(timing.class);
            }
            latencies.push(timing.total_ms);
            used.add(&timing, point);
            if point {
                point_latencies.push(timing.total_ms);
                match k {
                    0 => {
                        first_points_max_ms = first_points_max_ms.max(timing.total_ms);
                        first_point_timings.push(timing);
                    }
                    _ => {
                        later_point_latencies.push(timing.total_ms);
                        later_point_timings.push(timing);
                    }
                }
                point_plans.push(timing.plan_ms);
                point_timings.push(timing);
            }
            results.insert((client, k), rows);
        }
    }
    if engine == Engine::Ooode && !other_classes.is_empty() {
        other_classes.sort();
        let mean = |c: &[usize]| c.iter().sum::<usize>() as f64 / c.len().max(1) as f64;
        let points: Vec<usize> = point_timings.iter().map(|t| t.class).collect();
        eprintln!(
            "size classes: points {:.1} (max {}), others {:.1} (median {}, min {})",
            mean(&points),
            points.iter().max().unwrap_or(&0),
            mean(&other_classes),
            other_classes[other_classes.len() / 2],
            other_classes[0]
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = process_cpu_time().saturating_sub(cpu0).as_secs_f64();
    let recorded = match points_only {
        true => Vec::new(),
        false => engines.iter().flat_map(|e| e.recorded_reads()).collect(),
    };
    let depth = sampler.and_then(DepthSampler::finish);
    let (dev_at, reads_at, cpu_at, at) = at_deadline
        .join()
        .map_err(|_| "the thread reading the counters at the deadline panicked")?;
    let window = (at - start).as_secs_f64();
    let disk = match (dev0, dev_at) {
        (Some(a), Some(b)) => Some(b.since(&a, window)),
        _ => None,
    };
    let device = disk.map_or(0.0, |d| d.iops);
    let device_iops_with_drain = match (dev0, DiskCounters::of(&heap)) {
        (Some(a), Some(b)) => b.since(&a, elapsed).iops,
        _ => 0.0,
    };
    let engine_reads = match (reads0, reads_at) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let engine_iops = engine_reads.map(|t| t.reads as f64 / window);
    let cpu_us_per_read = engine_reads
        .filter(|t| t.reads > 0)
        .map(|t| cpu_at.saturating_sub(cpu0).as_secs_f64() * 1e6 / t.reads as f64);
    let operator_tasks = tasks0
        .zip(operator_tasks())
        .map(|(a, b)| ooode::access::OperatorTasks {
            short: b.short - a.short,
            long_on_caller: b.long_on_caller - a.long_on_caller,
            long_on_idle_lane: b.long_on_idle_lane - a.long_on_idle_lane,
        });
    let device_queued_share = engine_reads.map(|t| t.queued as f64 / t.reads.max(1) as f64);
    let device_queue_ms =
        engine_reads.map(|t| t.queued_nanos as f64 / 1e6 / t.queued.max(1) as f64);
    let reaped_read_ms = engine_reads
        .filter(|t| t.reads > 0)
        .map(|t| t.reaped_nanos as f64 / 1e6 / t.reads as f64);
    latencies.sort_by(f64::total_cmp);
    point_latencies.sort_by(f64::total_cmp);
    later_point_latencies.sort_by(f64::total_cmp);
    point_plans.sort_by(f64::total_cmp);
    Ok(Run {
        point: ConcurrencyPoint {
            engine: match engine {
                Engine::Ooode => "ooode".into(),
                Engine::Parquet => "datafusion parquet".into(),
            },
            workload: if points_only { "points alone" } else { "mixed" }.into(),
            clients,
            queries: latencies.len() as u64,
            secs: elapsed,
            qps: latencies.len() as f64 / elapsed,
            p50_ms: percentile(&latencies, 0.5),
            p99_ms: percentile(&latencies, 0.99),
            point_p50_ms: percentile(&point_latencies, 0.5),
            point_p99_ms: percentile(&point_latencies, 0.99),
            point_p99_after_first_ms: percentile(&later_point_latencies, 0.99),
            first_points_max_ms,
            point_plan_p50_ms: percentile(&point_plans, 0.5),
            point_plan_p99_ms: percentile(&point_plans, 0.99),
            device_iops: device,
            device_iops_with_drain,
            drain_secs: elapsed - window,
            disk_read_ms: disk.and_then(|d| d.read_ms),
            disk_depth: disk.and_then(|d| d.depth),
            disk_read_kib: disk.and_then(|d| d.read_kib),
            disk_merged_share: disk.and_then(|d| d.merged_share),
            engine_iops,
            device_queued_share,
            device_queue_ms,
            reaped_read_ms,
            used_read_ms: used.all.mean(),
            point_used_read_ms: used.points.mean(),
            cpu_percent: cpu / elapsed * 100.0,
            cpu_us_per_read,
            fio_qd64_beside: None,
            fio_replay_qd64: None,
            point_tail: match engine {
                Engine::Ooode => PointTail::of(&point_timings),
                Engine::Parquet => None,
            },
            point_tail_after_first: match engine {
                Engine::Ooode => PointTail::of(&later_point_timings),
                Engine::Parquet => None,
            },
            // One client's first query is no burst.
            first_points: match engine {
                Engine::Ooode if clients > 1 => PointTail::means(&first_point_timings),
                _ => None,
            },
            depth,
            operator_tasks,
            arena_settle_secs,
        },
        results,
        recorded,
        pool_budget,
    })
}

/// ooode's engines' counts over all their reads.
#[derive(Debug, Clone, Copy)]
struct EngineTotals {
    reads: u64,
    /// Reads that waited in the engine's device queue, and their time there (ns).
    queued: u64,
    queued_nanos: u128,
    /// Reads' time from submission until reaped (ns).
    reaped_nanos: u128,
}

impl EngineTotals {
    fn of(engines: &[Arc<dyn IoEngine>]) -> Self {
        let zero = Self {
            reads: 0,
            queued: 0,
            queued_nanos: 0,
            reaped_nanos: 0,
        };
        engines
            .iter()
            .map(|e| e.metrics().snapshot())
            .fold(zero, |t, s| Self {
                reads: t.reads + s.reads,
                queued: t.queued + s.queued,
                queued_nanos: t.queued_nanos + s.queue_time.as_nanos(),
                reaped_nanos: t.reaped_nanos + s.read_time.as_nanos(),
            })
    }

    /// Counts from `before` to `self`.
    fn since(&self, before: &Self) -> Self {
        Self {
            reads: self.reads - before.reads,
            queued: self.queued - before.queued,
            queued_nanos: self.queued_nanos - before.queued_nanos,
            reaped_nanos: self.reaped_nanos - before.reaped_nanos,
        }
    }
}

/// Reads of finished queries and their time from submission until used, summed.
#[derive(Debug, Default)]
struct ReadTimes {
    reads: u64,
    ms: f64,
}

impl ReadTimes {
    fn mean(&self) -> Option<f64> {
        (self.reads > 0).then(|| self.ms / self.reads as f64)
    }
}

/// [`ReadTimes`] of all queries of a run and of its point lookups.
#[derive(Debug, Default)]
struct UsedReads {
    all: ReadTimes,
    points: ReadTimes,
}

impl UsedReads {
    fn add(&mut self, t: &Timing, point: bool) {
        let sides = [Some(&mut self.all), point.then_some(&mut self.points)];
        for side in sides.into_iter().flatten() {
            side.reads += t.reads;
            side.ms += t.device_ms;
        }
    }
}

/// Where the slowest point lookups' time went, as one line.
fn tail_line(t: &PointTail) -> String {
    format!("slowest 5 % of points ({}): {}", t.queries, breakdown(t))
}

/// Where `t`'s time went, in words.
fn breakdown(t: &PointTail) -> String {
    format!(
        "{:.1} ms = planning {:.1} (blocked on range counts' reads {:.1}) + execution; summed \
         over their {:.0} reads: admission {:.1} \
         ms, granted to running {:.1} ms, submitted to used {:.1} ms; size class {:.1}; after \
         ooode's operators {:.1} ms",
        t.total_ms,
        t.plan_ms,
        t.count_wait_ms,
        t.reads,
        t.admission_ms,
        t.wake_ms,
        t.device_ms,
        t.class,
        t.after_ooode_ms
    )
}

/// The first queries' point lookups, in words.
fn first_points_line(t: &PointTail) -> String {
    format!(
        "points that were a client's first query ({}), on average: started {:.1} ms after the \
         run, {}",
        t.queries,
        t.started_ms,
        breakdown(t)
    )
}

/// The ooode query budget of `plan`, if it has ooode nodes.
fn query_io(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<QueryIo>> {
    if let Some(n) = plan.downcast_ref::<IndexJoinExec>() {
        return Some(n.query().clone());
    }
    if let Some(n) = plan.downcast_ref::<IndexScanExec>() {
        return Some(n.query().clone());
    }
    if let Some(n) = plan.downcast_ref::<OoodeScanExec>() {
        return Some(n.query().clone());
    }
    plan.children().into_iter().find_map(query_io)
}

/// The rows of `sql` (as [`query_rows`] gives them), the time it took to plan and what its
/// reads waited for (the caller sets the latency).
async fn planned_rows(ctx: &SessionContext, sql: &str) -> Result<(Timing, Vec<String>), BoxError> {
    let start = Instant::now();
    let df = ctx.sql(sql).await?;
    let ordered = crate::runner::ordered_plan(df.logical_plan());
    let task = df.task_ctx();
    let plan = df.create_physical_plan().await?;
    let plan_ms = start.elapsed().as_secs_f64() * 1e3;
    let batches = datafusion::physical_plan::collect(plan.clone(), Arc::new(task)).await?;
    let end = Instant::now();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut timing = Timing {
        plan_ms,
        ..Timing::default()
    };
    if let Some(query) = query_io(&plan) {
        let (waits, io) = (query.admission_waits(), query.metrics.snapshot());
        timing.reads = io.reads;
        timing.count_wait_ms = ms(query.count_wait_time());
        timing.admission_ms = ms(waits.queued_time);
        timing.wake_ms = ms(waits.wake_time);
        timing.device_ms = ms(io.read_time);
        timing.class = query.share().class();
        if let Some(done) = query.work_done_at() {
            timing.after_ooode_ms = ms(end.saturating_duration_since(done));
        }
    }
    let rows = if ordered {
        crate::runner::ordered_rows(&batches)?
    } else {
        crate::runner::sorted_rows(&batches)?
    };
    Ok((timing, rows))
}

/// Bytes of the files of the tables the queries read.
fn table_bytes(data: &DataSet) -> u64 {
    ["customer", "orders", "lineitem"]
        .iter()
        .filter_map(|t| std::fs::read_dir(data.ooode_table(t)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The workload name of the run without turns of long queries (`ooode.max_long_queries = 0`).
pub const NO_TURNS: &str = "no turns";

/// Fewest clients of the largest count for which the run without turns is made.
const TURNS_FROM_CLIENTS: usize = 16;

/// One measurement's lines on stderr.
fn print_run(p: &ConcurrencyPoint) {
    let c = p.clients;
    eprintln!(
        "{:<20} {c:>3} clients: {:>7.1} q/s, p50 {:>7.1} ms, p99 {:>7.1} ms, \
         points p99 {:>7.1} ms (planning p50 {:.1} / p99 {:.1} ms), device {:>6.0} IOPS, \
         CPU {:>4.0} % ({})",
        p.engine,
        p.qps,
        p.p50_ms,
        p.p99_ms,
        p.point_p99_ms,
        p.point_plan_p50_ms,
        p.point_plan_p99_ms,
        p.device_iops,
        p.cpu_percent,
        p.workload
    );
    eprintln!(
        "{:<20} {c:>3} clients: points p99 {:.1} ms without each client's first query; the \
         first ones' slowest {:.1} ms",
        "", p.point_p99_after_first_ms, p.first_points_max_ms
    );
    if let Some(fio) = p.fio_qd64_beside {
        eprintln!(
            "{:<20} {c:>3} clients: fio at depth 64 beside the run {fio:.0} IOPS (device at {:.0} %)",
            "",
            p.device_iops / fio * 100.0
        );
        eprintln!(
            "{:<20} {c:>3} clients: device until the deadline; with the last queries' {:.2} s \
             after it {:.0} IOPS ({:.0} % of fio)",
            "",
            p.drain_secs,
            p.device_iops_with_drain,
            p.device_iops_with_drain / fio * 100.0
        );
        // The scheduler merges some adjacent reads into one request: the engine's own page
        // reads, each like fio's, are the other side of the comparison.
        if let Some(reads) = p.engine_iops {
            eprintln!(
                "{:<20} {c:>3} clients: ooode's page reads {reads:.0} a second, {:.0} % of fio's \
                 beside the run",
                "",
                reads / fio * 100.0
            );
            // The process's whole CPU (planning, DataFusion's operators, the kernel's side of
            // each read) over its page reads: what the cores bound the device to at this mix.
            if let Some(us_per_read) = p.cpu_us_per_read.filter(|&us| us > 0.0) {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
                let most = cores * 1e6 / us_per_read;
                eprintln!(
                    "{:<20} {c:>3} clients: {us_per_read:.1} us of the process's CPU per page \
                     read: {cores:.0} cores kept busy would read at most {most:.0} a second, \
                     {:.0} % of fio's beside the run",
                    "",
                    most / fio * 100.0
                );
            }
        }
    }
    if let Some(replay) = p.fio_replay_qd64 {
        eprintln!(
            "{:<20} {c:>3} clients: fio replaying the run's own reads at depth 64 {replay:.0} \
             IOPS (device at {:.0} % of that)",
            "",
            p.device_iops / replay * 100.0
        );
    }
    if let (Some(ms), Some(depth)) = (p.disk_read_ms, p.disk_depth) {
        eprintln!(
            "{:<20} {c:>3} clients: in the kernel {depth:.0} I/Os on average, {ms:.2} ms a read \
             (I/O scheduler's queue and device)",
            ""
        );
    }
    if let Some(t) = p.operator_tasks {
        eprintln!(
            "{:<20} {c:>3} clients: operator tasks: {} of short queries, of long ones {} on the \
             idle lane and {} on the clients' runtime",
            "", t.short, t.long_on_idle_lane, t.long_on_caller
        );
    }
    if let (Some(reaped), Some(used)) = (p.reaped_read_ms, p.used_read_ms) {
        let kernel = p
            .disk_read_ms
            .map(|ms| format!("{ms:.2} ms in the kernel, "))
            .unwrap_or_default();
        let points = p
            .point_used_read_ms
            .map(|ms| format!(" (point lookups' reads {ms:.2} ms)"))
            .unwrap_or_default();
        eprintln!(
            "{:<20} {c:>3} clients: a read {kernel}{reaped:.2} ms until reaped, {used:.2} ms \
             until its task ran with the page{points}",
            ""
        );
    }
    if let (Some(kib), Some(merged)) = (p.disk_read_kib, p.disk_merged_share) {
        let bytes = p
            .fio_qd64_beside
            .map(|fio| {
                let fio_kib = crate::iobench::FIO_BLOCK_BYTES as f64 / 1024.0;
                format!(
                    "; bytes per second at {:.0} % of fio's ({fio_kib} KiB reads)",
                    p.device_iops * kib / (fio * fio_kib) * 100.0
                )
            })
            .unwrap_or_default();
        eprintln!(
            "{:<20} {c:>3} clients: {kib:.1} KiB a read at the device, {:.1} % of reads merged \
             into an adjacent one{bytes}",
            "",
            merged * 100.0
        );
    }
    if let Some(tail) = &p.point_tail {
        eprintln!("{:<20} {c:>3} clients: {}", "", tail_line(tail));
    }
    if let Some(tail) = &p.point_tail_after_first {
        eprintln!(
            "{:<20} {c:>3} clients: without each client's first query, {}",
            "",
            tail_line(tail)
        );
    }
    if let Some(first) = &p.first_points {
        eprintln!("{:<20} {c:>3} clients: {}", "", first_points_line(first));
    }
    if let Some(d) = &p.depth {
        eprintln!(
            "{:<20} {c:>3} clients: reads in flight {:.0} on average, under {SHALLOW} in {:.0} % \
             of the time; permits held {:.0} of {}",
            "",
            d.mean_in_flight,
            d.shallow_share * 100.0,
            d.mean_permits,
            d.permit_cap
        );
    }
    if let (Some(share), Some(ms)) = (p.device_queued_share, p.device_queue_ms)
        && share > 0.0
    {
        eprintln!(
            "{:<20} {c:>3} clients: {:.0} % of reads waited for the device, {ms:.2} ms each",
            "",
            share * 100.0
        );
    }
}

/// Runs every client count on both engines (at the largest, also ooode without turns of long
/// queries), and the point lookups alone; progress on stderr.
pub async fn run(
    data: &DataSet,
    clients: &[usize],
    secs: f64,
    extra_settings: &[String],
    with_stock: bool,
    settle: bool,
) -> Result<ConcurrencyReport, BoxError> {
    let customers = crate::tables::expected_rows("customer", data.sf).unwrap_or(150_000);
    let data_bytes = table_bytes(data);
    // A pool far smaller than the data: the queries keep reading from the device.
    let pool_bytes = ((data_bytes / 16) as usize).max(16 << 20);
    let mut settings = vec![format!("SET ooode.buffer_pool_bytes = {pool_bytes}")];
    settings.extend_from_slice(extra_settings);
    let mut points = Vec::new();
    let (mut compared, mut mismatches) = (0, Vec::new());
    let mut compare = |a: &Run, b: &Run| {
        for (key, rows) in &a.results {
            if let Some(other) = b.results.get(key) {
                compared += 1;
                if rows != other {
                    let (_, sql) = draw(key.0, key.1, customers, false);
                    mismatches.push(format!("client {} query {}: {sql}", key.0, key.1));
                }
            }
        }
    };
    let max_clients = clients.iter().copied().max().unwrap_or(0);
    let mut pool_in_force = None;
    let engines: &[Engine] = match with_stock {
        true => &[Engine::Ooode, Engine::Parquet],
        false => &[Engine::Ooode],
    };
    for &c in clients {
        let mut runs = Vec::new();
        for &engine in engines {
            let run = run_beside_fio(data, engine, c, secs, &settings, settle).await?;
            // The settings given may replace the benchmark's own pool size: report the one in force.
            pool_in_force = pool_in_force.or(run.pool_budget);
            print_run(&run.point);
            runs.push(run);
        }
        if let [ooode, stock] = &runs[..] {
            compare(ooode, stock);
        }
        if with_stock && c == max_clients && c >= TURNS_FROM_CLIENTS {
            // The same clients with every long query reading at once (turns off).
            let mut all_at_once = settings.clone();
            all_at_once.push("SET ooode.max_long_queries = 0".to_string());
            let mut run =
                run_beside_fio(data, Engine::Ooode, c, secs, &all_at_once, settle).await?;
            run.point.workload = NO_TURNS.to_string();
            print_run(&run.point);
            compare(&run, &runs[1]);
            runs.push(run);
        }
        points.extend(runs.into_iter().map(|r| r.point));
    }
    for &engine in engines {
        let run = run_point(data, engine, 1, secs, &settings, true, settle).await?;
        eprintln!(
            "{:<20} point lookups alone: p50 {:.2} ms, p99 {:.2} ms (planning p50 {:.2} / p99 \
             {:.2} ms)",
            run.point.engine,
            run.point.point_p50_ms,
            run.point.point_p99_ms,
            run.point.point_plan_p50_ms,
            run.point.point_plan_p99_ms
        );
        if let Some(tail) = &run.point.point_tail {
            eprintln!("{:<20} point lookups alone: {}", "", tail_line(tail));
        }
        points.push(run.point);
    }
    Ok(ConcurrencyReport {
        points,
        pool_bytes: pool_in_force.unwrap_or(pool_bytes),
        data_bytes,
        compared,
        mismatches,
    })
}

/// The table of a report; `% fio64` is against fio's random reads measured beside the run
/// where it was, else against `fio_qd64`; `% replay` against fio replaying the run's own reads.
pub fn format_report(r: &ConcurrencyReport, fio_qd64: Option<f64>) -> String {
    let share = |of: Option<f64>, iops: f64| {
        of.map_or("n/a".into(), |f| format!("{:.0}", iops / f * 100.0))
    };
    let mut out = format!(
        "{:<20} {:<13} {:>7} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8} {:>8} {:>6}\n",
        "engine",
        "workload",
        "clients",
        "q/s",
        "p50 ms",
        "p99 ms",
        "point p99",
        "dev IOPS",
        "% fio64",
        "% replay",
        "CPU %"
    );
    for p in &r.points {
        out += &format!(
            "{:<20} {:<13} {:>7} {:>9.1} {:>9.2} {:>9.2} {:>10.2} {:>9.0} {:>8} {:>8} {:>6.0}\n",
            p.engine,
            p.workload,
            p.clients,
            p.qps,
            p.p50_ms,
            p.p99_ms,
            p.point_p99_ms,
            p.device_iops,
            share(p.fio_qd64_beside.or(fio_qd64), p.device_iops),
            share(p.fio_replay_qd64, p.device_iops),
            p.cpu_percent
        );
    }
    let find = |engine: &str, workload: &str, clients: usize| {
        r.points
            .iter()
            .find(|p| p.engine == engine && p.workload == workload && p.clients == clients)
    };
    if let Some(max) = r.points.iter().map(|p| p.clients).max() {
        if let (Some(o), Some(s)) = (
            find("ooode", "mixed", max),
            find("datafusion parquet", "mixed", max),
        ) {
            out += &format!(
                "at {max} clients: ooode {:.1}x stock DataFusion's queries per second\n",
                o.qps / s.qps.max(1e-9)
            );
        }
        if let (Some(n), Some(o), Some(s)) = (
            find("ooode", NO_TURNS, max),
            find("ooode", "mixed", max),
            find("datafusion parquet", "mixed", max),
        ) {
            let cpu_per_query = |p: &ConcurrencyPoint| p.cpu_percent * 10.0 / p.qps.max(1e-9);
            out += &format!(
                "without turns of long queries (ooode.max_long_queries = 0): {:.1}x stock's \
                 queries per second, p99 {:.0} ms vs {:.0} with turns, CPU {:.1} ms per query \
                 vs {:.1}, points p99 {:.1} ms\n",
                n.qps / s.qps.max(1e-9),
                n.p99_ms,
                o.p99_ms,
                cpu_per_query(n),
                cpu_per_query(o),
                n.point_p99_ms
            );
        }
        if let (Some(mixed), Some(alone)) = (
            find("ooode", "mixed", max),
            find("ooode", "points alone", 1),
        ) {
            let ratio = |p99: f64| p99 / alone.point_p99_ms.max(1e-9);
            out += &format!(
                "ooode point lookups: p99 {:.2} ms among {max} clients vs {:.2} ms alone \
                 ({:.1}x); without each client's first query (all {max} arrive at once) \
                 {:.2} ms ({:.1}x), the first ones' slowest {:.1} ms\n",
                mixed.point_p99_ms,
                alone.point_p99_ms,
                ratio(mixed.point_p99_ms),
                mixed.point_p99_after_first_ms,
                ratio(mixed.point_p99_after_first_ms),
                mixed.first_points_max_ms
            );
        }
    }
    out += &format!(
        "pool {} MiB for {} MiB of tables; {} queries compared between the engines, {} differed\n",
        r.pool_bytes >> 20,
        r.data_bytes >> 20,
        r.compared,
        r.mismatches.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_the_devices_share_of_fio_beside_and_of_the_replay() {
        let point = |workload: &str, replay| ConcurrencyPoint {
            engine: "ooode".into(),
            workload: workload.into(),
            clients: 64,
            device_iops: 50_000.0,
            fio_qd64_beside: Some(62_500.0),
            fio_replay_qd64: replay,
            ..Default::default()
        };
        let report = ConcurrencyReport {
            points: vec![point("mixed", Some(71_430.0)), point("points alone", None)],
            pool_bytes: 0,
            data_bytes: 0,
            compared: 0,
            mismatches: vec![],
        };
        let table = format_report(&report, None);
        let columns = |workload: &str| -> Vec<String> {
            let line = table.lines().find(|l| l.contains(workload)).unwrap();
            line.replace(workload, "w")
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        assert!(
            table.lines().next().unwrap().contains("% fio64 % replay"),
            "{table}"
        );
        // engine, workload, clients, q/s, p50, p99, point p99, dev IOPS, % fio64, % replay.
        assert_eq!(columns("mixed")[8..10], ["80", "70"]);
        assert_eq!(columns("points alone")[8..10], ["80", "n/a"]);
    }

    #[test]
    fn the_points_p99_is_given_with_and_without_the_clients_first_queries() {
        let report = ConcurrencyReport {
            points: vec![
                ConcurrencyPoint {
                    engine: "ooode".into(),
                    workload: "mixed".into(),
                    clients: 64,
                    point_p99_ms: 60.0,
                    point_p99_after_first_ms: 12.0,
                    first_points_max_ms: 90.0,
                    ..Default::default()
                },
                ConcurrencyPoint {
                    engine: "ooode".into(),
                    workload: "points alone".into(),
                    clients: 1,
                    point_p99_ms: 4.0,
                    ..Default::default()
                },
            ],
            pool_bytes: 0,
            data_bytes: 0,
            compared: 0,
            mismatches: vec![],
        };
        let table = format_report(&report, None);
        let line = table
            .lines()
            .find(|l| l.starts_with("ooode point lookups"))
            .unwrap_or_else(|| panic!("{table}"));
        assert!(
            line.contains("60.00 ms among 64 clients vs 4.00 ms alone (15.0x)"),
            "{line}"
        );
        assert!(
            line.contains("first query (all 64 arrive at once) 12.00 ms (3.0x)"),
            "{line}"
        );
        assert!(line.contains("the first ones' slowest 90.0 ms"), "{line}");
    }

    #[test]
    fn the_first_points_are_averaged_apart_from_the_slowest_five_percent() {
        let timing = |total_ms: f64, started_ms: f64| Timing {
            total_ms,
            plan_ms: 2.0,
            reads: 10,
            after_ooode_ms: total_ms / 2.0,
            started_ms,
            ..Timing::default()
        };
        let points: Vec<Timing> = (1..=40).map(|i| timing(i as f64, 0.0)).collect();
        let slowest = PointTail::of(&points).unwrap();
        assert_eq!((slowest.queries, slowest.total_ms), (2, 39.5));
        let first = PointTail::means(&[timing(80.0, 10.0), timing(20.0, 60.0)]).unwrap();
        assert_eq!(first.queries, 2);
        assert_eq!(first.total_ms, 50.0);
        assert_eq!(first.started_ms, 35.0);
        assert_eq!(first.after_ooode_ms, 25.0);
        let line = first_points_line(&first);
        assert!(
            line.starts_with("points that were a client's first query (2), on average: started 35.0 ms after the run, 50.0 ms = planning 2.0"),
            "{line}"
        );
        assert!(line.contains("after ooode's operators 25.0 ms"), "{line}");
        assert!(PointTail::means(&[]).is_none());
    }

    #[test]
    fn used_reads_average_all_queries_and_points_apart() {
        let mut used = UsedReads::default();
        assert_eq!(used.all.mean(), None);
        let timing = |reads: u64, device_ms: f64| Timing {
            reads,
            device_ms,
            ..Timing::default()
        };
        used.add(&timing(10, 50.0), false);
        used.add(&timing(2, 4.0), true);
        used.add(&timing(0, 0.0), true);
        assert_eq!(used.all.mean(), Some(54.0 / 12.0));
        assert_eq!(used.points.mean(), Some(2.0));
    }

    #[test]
    fn disk_counters_give_rate_time_per_read_and_depth() {
        let line = |reads: u64, read_ms: u64, weighted: u64| {
            format!(
                "   7       0 loop0 1 0 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n 254       0 vda {reads} \
                 {} {} {read_ms} 40 1 80 7 0 1000 {weighted} 0 0 0 0 2 3\n",
                reads / 20,
                reads * 17
            )
        };
        let a = DiskCounters::parse(&line(1000, 500, 2000), 254, 0).unwrap();
        assert_eq!(
            a,
            DiskCounters {
                reads: 1000,
                merged: 50,
                sectors: 17_000,
                read_ms: 500,
                weighted_ms: 2000
            }
        );
        let b = DiskCounters::parse(&line(51_000, 75_500, 142_000), 254, 0).unwrap();
        let rates = b.since(&a, 2.0);
        assert_eq!(rates.iops, 25_000.0);
        assert_eq!(rates.read_ms, Some(1.5));
        assert_eq!(rates.depth, Some(70.0));
        assert_eq!(rates.read_kib, Some(8.5));
        assert_eq!(rates.merged_share, Some(2_500.0 / 52_500.0));
        assert_eq!(
            DiskCounters::parse(&line(1, 1, 1), 254, 1),
            None,
            "no such device"
        );
        let idle = b.since(&b, 1.0);
        assert_eq!(idle.read_ms, None, "no reads: no time per read");
        assert_eq!(idle.read_kib, None);
    }
}
