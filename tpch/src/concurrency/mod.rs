//! Many clients at once: each a stream of selective queries (the Fig. 4 chain over a random
//! range of 1 to 150 customers at SF 1 (0.1 % of them; the range scales with the data), and
//! point lookups: a range of one) for a fixed time, from a cold start, on ooode (one runtime,
//! a buffer pool far smaller than the data, `auto`) and on stock DataFusion over Parquet with
//! the same clients and the same queries.
//!
//! Parts: `clients` runs one engine's clients and measures them, `disk` reads the
//! device's counters, `print` writes a run's lines as it goes; this file holds the
//! figures, the sweep over client counts and the report.
//!
//! Per engine and client count: queries per second, latency (p50, p99; the point lookups'
//! own p99 too), the device's IOPS (from `/proc/diskstats`, so both engines are measured
//! alike), and CPU. Client `i` draws the same queries on both engines, so every query both
//! finished is checked equal. A run of point lookups alone gives their p99 without the load.
//! Each of ooode's runs gets a runtime of its own; unless told not to, its page buffers are
//! first settled in its arena (as in a service that has run a while), then its pool emptied.

mod clients;
mod disk;
mod print;

pub use clients::RECORDED_READS;
use clients::{Engine, Run, run_beside_fio, run_point, table_bytes};
use print::{print_run, tail_line};

use crate::datagen::DataSet;
use crate::depth::Depth;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One engine at one number of clients.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConcurrencyPoint {
    /// "ooode" or "datafusion parquet".
    pub engine: String,
    /// "mixed" (ranges of 1-150 customers and point lookups), "points alone", "no turns"
    /// (mixed, `ooode.max_long_queries = 0`), "prepared" / "prepared alone" (the mixed
    /// queries / the points alone, each session's query prepared once), or "plan cache" /
    /// "plan cache alone" (SQL text through a plan cache).
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
    between_sql(&first.to_string(), &(first + n - 1).to_string())
}

/// The Fig. 4 chain over customers `lo ..= hi`: numbers, or placeholders (`$1`, `$2`) for a
/// prepared query.
pub fn between_sql(lo: &str, hi: &str) -> String {
    format!(
        "SELECT COUNT(*), SUM(l_quantity) FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey \
         JOIN lineitem l ON o.o_orderkey = l.l_orderkey \
         WHERE c.c_custkey BETWEEN {lo} AND {hi}"
    )
}

/// Client `client`'s `k`-th query, whether a point lookup, and its first customer and count:
/// half point lookups, half ranges of 1 to 150 customers per 150,000 (0.1 %), at random places
/// among `customers` (the same on every engine).
fn draw(client: usize, k: u64, customers: u64, points_only: bool) -> (bool, u64, u64) {
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
    (point, first, n)
}

/// What the clients of a run send.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Workload {
    /// Only point lookups (else half of them ranges).
    pub points_only: bool,
    pub planning: Planning,
}

/// How a client's queries are planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Planning {
    /// SQL text, planned whole each time.
    Text,
    /// Each client's session prepares the query once ([`ooode_providers::PreparedQuery`])
    /// and binds each query's customers.
    Prepared,
    /// SQL text through one plan cache shared by the clients
    /// ([`ooode_providers::PlanCache`]): each session plans the query's shape once.
    Cached,
}

impl Workload {
    pub const MIXED: Self = Self {
        points_only: false,
        planning: Planning::Text,
    };

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match (self.points_only, self.planning) {
            (false, Planning::Text) => "mixed",
            (true, Planning::Text) => POINTS_ALONE,
            (false, Planning::Prepared) => PREPARED,
            (true, Planning::Prepared) => PREPARED_POINTS_ALONE,
            (false, Planning::Cached) => PLAN_CACHE,
            (true, Planning::Cached) => PLAN_CACHE_POINTS_ALONE,
        }
    }
}

/// The workload name of the point lookups alone.
pub const POINTS_ALONE: &str = "points alone";
/// The workload name of the mixed queries, prepared.
pub const PREPARED: &str = "prepared";
/// The workload name of the point lookups alone, prepared.
pub const PREPARED_POINTS_ALONE: &str = "prepared alone";
/// The workload name of the mixed queries as SQL text through a plan cache.
pub const PLAN_CACHE: &str = "plan cache";
/// The workload name of the point lookups alone through a plan cache.
pub const PLAN_CACHE_POINTS_ALONE: &str = "plan cache alone";

/// The workload name of the run without turns of long queries (`ooode.max_long_queries = 0`).
pub const NO_TURNS: &str = "no turns";

/// Fewest clients of the largest count for which the run without turns is made.
const TURNS_FROM_CLIENTS: usize = 16;

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
                    let (_, first, n) = draw(key.0, key.1, customers, false);
                    let sql = range_sql(first, n);
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
            let run =
                run_beside_fio(data, engine, c, secs, &settings, Workload::MIXED, settle).await?;
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
            let mut run = run_beside_fio(
                data,
                Engine::Ooode,
                c,
                secs,
                &all_at_once,
                Workload::MIXED,
                settle,
            )
            .await?;
            run.point.workload = NO_TURNS.to_string();
            print_run(&run.point);
            compare(&run, &runs[1]);
            runs.push(run);
        }
        if c == max_clients && c >= TURNS_FROM_CLIENTS {
            // The same clients sending the query prepared, as a service would: planned once
            // per session, bound per query; then as SQL text through a plan cache, which
            // does the same for text (both engines through the same APIs).
            for planning in [Planning::Prepared, Planning::Cached] {
                let workload = Workload {
                    points_only: false,
                    planning,
                };
                let mut these = Vec::new();
                for &engine in engines {
                    let run =
                        run_beside_fio(data, engine, c, secs, &settings, workload, settle).await?;
                    print_run(&run.point);
                    these.push(run);
                }
                if let [ooode, stock] = &these[..] {
                    compare(ooode, stock);
                }
                compare(&these[0], &runs[0]);
                runs.extend(these);
            }
        }
        points.extend(runs.into_iter().map(|r| r.point));
    }
    let alone = [Planning::Text, Planning::Prepared, Planning::Cached].map(|planning| Workload {
        points_only: true,
        planning,
    });
    let prepared_too = max_clients >= TURNS_FROM_CLIENTS;
    for workload in alone
        .into_iter()
        .filter(|w| prepared_too || w.planning == Planning::Text)
    {
        for &engine in engines {
            let run = run_point(data, engine, 1, secs, &settings, workload, settle).await?;
            eprintln!(
                "{:<20} {}: p50 {:.2} ms, p99 {:.2} ms (planning p50 {:.2} / p99 {:.2} ms)",
                run.point.engine,
                match workload.planning {
                    Planning::Text => "point lookups alone",
                    Planning::Prepared => "point lookups alone, prepared",
                    Planning::Cached => "point lookups alone, plan cache",
                },
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
        "{:<20} {:<16} {:>7} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8} {:>8} {:>6}\n",
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
            "{:<20} {:<16} {:>7} {:>9.1} {:>9.2} {:>9.2} {:>10.2} {:>9.0} {:>8} {:>8} {:>6.0}\n",
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
        if let (Some(mixed), Some(alone)) =
            (find("ooode", "mixed", max), find("ooode", POINTS_ALONE, 1))
        {
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
        for (workload, alone_workload, what, stock_alike) in [
            (
                PREPARED,
                PREPARED_POINTS_ALONE,
                "prepared (each session plans the query once, binds each query's customers)",
                "prepared alike",
            ),
            (
                PLAN_CACHE,
                PLAN_CACHE_POINTS_ALONE,
                "plan cache (SQL text, each session's shape planned once, PlanCache)",
                "with the cache",
            ),
        ] {
            let (Some(o), Some(s), Some(alone), Some(plain)) = (
                find("ooode", workload, max),
                find("datafusion parquet", workload, max),
                find("ooode", alone_workload, 1),
                find("ooode", "mixed", max),
            ) else {
                continue;
            };
            let ratio = |p99: f64| p99 / alone.point_p99_ms.max(1e-9);
            out += &format!(
                "{what}: ooode {:.1} q/s ({:.2}x its SQL text's), {:.1}x stock DataFusion \
                 {stock_alike}; points p99 {:.2} ms vs {:.2} ms alone, {workload} ({:.1}x; \
                 without each client's first query {:.2} ms, {:.1}x)\n",
                o.qps,
                o.qps / plain.qps.max(1e-9),
                o.qps / s.qps.max(1e-9),
                o.point_p99_ms,
                alone.point_p99_ms,
                ratio(o.point_p99_ms),
                o.point_p99_after_first_ms,
                ratio(o.point_p99_after_first_ms)
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
    use super::clients::UsedReads;
    use super::disk::DiskCounters;
    use super::print::first_points_line;
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
