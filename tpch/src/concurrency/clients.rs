//! The clients of one engine at one count: their sessions, their queries, and what the
//! engine, the device and the process did meanwhile.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::ScalarValue;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use ooode::access::QueryIo;
use ooode::exec::{IndexJoinExec, IndexScanExec, OoodeScanExec};
use ooode::io::IoEngine;
use ooode::io::metrics::process_cpu_time;
use ooode_providers::{PlanCache, PreparedQuery};

use crate::datagen::DataSet;
use crate::depth::DepthSampler;
use crate::fig4::drop_os_cache;
use crate::runner::{query_rows, run_sql, settle_buffers};
use crate::tables::TABLES;

use super::Planning;
use super::disk::DiskCounters;
use super::{
    BoxError, ConcurrencyPoint, PointTail, Timing, Workload, between_sql, draw, range_sql,
};

/// The `p` quantile (0 to 1) of `sorted`, nearest rank; 0 if empty.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What one engine's clients did.
pub(super) struct Run {
    pub(super) point: ConcurrencyPoint,
    /// (client, k) -> result rows.
    pub(super) results: HashMap<(usize, u64), Vec<String>>,
    /// The reads ooode's engines were asked for (file, offset, length), mixed runs only.
    pub(super) recorded: Vec<(PathBuf, u64, usize)>,
    /// The buffer pool's budget in force during the run (ooode's runs), in bytes.
    pub(super) pool_budget: Option<usize>,
}

/// Most reads of one run recorded for fio to replay (16 bytes each).
pub const RECORDED_READS: usize = 1 << 21;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Engine {
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
pub(super) async fn run_beside_fio(
    data: &DataSet,
    engine: Engine,
    clients: usize,
    secs: f64,
    ooode_settings: &[String],
    workload: Workload,
    settle: bool,
) -> Result<Run, BoxError> {
    let heap = data.ooode_table("lineitem").join("heap.0.pages");
    let fio = || {
        (engine == Engine::Ooode)
            .then(|| crate::iobench::fio_iops(&heap, 64, 2.0))
            .flatten()
    };
    let before = fio();
    let mut run = run_point(
        data,
        engine,
        clients,
        secs,
        ooode_settings,
        workload,
        settle,
    )
    .await?;
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

pub(super) async fn run_point(
    data: &DataSet,
    engine: Engine,
    clients: usize,
    secs: f64,
    ooode_settings: &[String],
    workload: Workload,
    settle: bool,
) -> Result<Run, BoxError> {
    let points_only = workload.points_only;
    let customers = crate::tables::expected_rows("customer", data.sf).unwrap_or(150_000);
    let contexts = sessions(data, engine, clients, ooode_settings).await?;
    // Prepared before the clock starts, as a service prepares its statements at start-up.
    let mut statements = Vec::new();
    if workload.planning == Planning::Prepared {
        for ctx in &contexts {
            statements.push(Some(
                PreparedQuery::new(ctx, &between_sql("$1", "$2")).await?,
            ));
        }
    }
    statements.resize(contexts.len(), None);
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
    // One cache for all clients, empty at the start: each session plans its shape once.
    let cache = (workload.planning == Planning::Cached).then(|| Arc::new(PlanCache::new(256)));
    let mut tasks = Vec::new();
    for (client, (ctx, statement)) in contexts.iter().cloned().zip(statements).enumerate() {
        let cache = cache.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            let mut k = 0u64;
            while Instant::now() < deadline {
                let (point, first, n) = draw(client, k, customers, points_only);
                let t = Instant::now();
                let query = match (&statement, &cache) {
                    (Some(prepared), _) => ClientQuery::Prepared(prepared, first, first + n - 1),
                    (None, Some(cache)) => ClientQuery::Cached(cache, &ctx, range_sql(first, n)),
                    (None, None) => ClientQuery::Sql(&ctx, range_sql(first, n)),
                };
                let (mut timing, rows) = planned_rows(query).await?;
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
    if let Some(cache) = &cache {
        let stats = cache.stats();
        eprintln!(
            "plan cache ({}): {} queries reused a plan, {} planned their shape, {} planned as \
             text",
            engine_name(engine),
            stats.reused,
            stats.planned,
            stats.as_text
        );
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
            engine: engine_name(engine).into(),
            workload: workload.name().into(),
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
pub(super) struct ReadTimes {
    pub(super) reads: u64,
    pub(super) ms: f64,
}

impl ReadTimes {
    pub(super) fn mean(&self) -> Option<f64> {
        (self.reads > 0).then(|| self.ms / self.reads as f64)
    }
}

/// [`ReadTimes`] of all queries of a run and of its point lookups.
#[derive(Debug, Default)]
pub(super) struct UsedReads {
    pub(super) all: ReadTimes,
    pub(super) points: ReadTimes,
}

impl UsedReads {
    pub(super) fn add(&mut self, t: &Timing, point: bool) {
        let sides = [Some(&mut self.all), point.then_some(&mut self.points)];
        for side in sides.into_iter().flatten() {
            side.reads += t.reads;
            side.ms += t.device_ms;
        }
    }
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

/// The engine's name in the report.
fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Ooode => "ooode",
        Engine::Parquet => "datafusion parquet",
    }
}

/// A client's query: SQL text, its prepared query and the customers to bind, or SQL text
/// through a plan cache.
enum ClientQuery<'a> {
    Sql(&'a SessionContext, String),
    Prepared(&'a PreparedQuery, u64, u64),
    Cached(&'a PlanCache, &'a SessionContext, String),
}

/// The rows of `query` (as [`query_rows`] gives them), the time it took to plan and what its
/// reads waited for (the caller sets the latency).
async fn planned_rows(query: ClientQuery<'_>) -> Result<(Timing, Vec<String>), BoxError> {
    let start = Instant::now();
    let (ordered, task, plan) = match query {
        ClientQuery::Sql(ctx, sql) => {
            let df = ctx.sql(&sql).await?;
            let ordered = crate::runner::ordered_plan(df.logical_plan());
            let task = Arc::new(df.task_ctx());
            (ordered, task, df.create_physical_plan().await?)
        }
        ClientQuery::Prepared(prepared, lo, hi) => {
            let values = vec![ScalarValue::from(lo as i64), ScalarValue::from(hi as i64)];
            let plan = prepared.plan(values).await?;
            let ordered = crate::runner::ordered_plan(prepared.logical_plan());
            (ordered, prepared.task_ctx(), plan)
        }
        ClientQuery::Cached(cache, ctx, sql) => {
            let planned = cache.plan(ctx, &sql).await?;
            let ordered = crate::runner::ordered_plan(&planned.logical);
            (ordered, ctx.task_ctx(), planned.physical)
        }
    };
    let plan_ms = start.elapsed().as_secs_f64() * 1e3;
    let batches = datafusion::physical_plan::collect(plan.clone(), task).await?;
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
pub(super) fn table_bytes(data: &DataSet) -> u64 {
    ["customer", "orders", "lineitem"]
        .iter()
        .filter_map(|t| std::fs::read_dir(data.ooode_table(t)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}
