//! Many queries at once on one runtime, and cancellation with reads in flight.
//!
//! - 32 sessions sharing one `RuntimeEnv` (as a service's sessions do) run a mixed stream of
//!   queries (the Fig. 4 chain at random N, point lookups, TPC-H queries; index plans always or
//!   auto, out of order or in order) over a buffer pool far smaller than the data, under a
//!   DataFusion memory limit: every result equals stock DataFusion's, all finish in bounded
//!   time, and the process's memory stays bounded. A quarter of the sessions send the Fig. 4
//!   chain as a prepared query.
//! - A query cancelled while its reads are in flight (cold pool, the query's in-flight gauge
//!   above zero when its stream is dropped) leaves nothing behind: every gauge back to zero,
//!   every permit returned, no loading entry in the pool, no memory reserved; the next query
//!   runs. Also with its operators on the idle lane (a short query executing beside it).
//! - Long queries run on the idle lane beside short ones, and only then.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::ScalarValue;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use indicatif::ProgressBar;
use ooode::access::QueryIo;
use ooode::exec::{IndexJoinExec, IndexScanExec};
use ooode_providers::PreparedQuery;
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::fig4::fig4_sql;
use ooode_tpch::runner::{query_rows, run_sql, sorted_rows};
use ooode_tpch::tables::TABLES;

fn load(dir: &Path) -> DataSet {
    let data = DataSet::new(dir, 0.01);
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    data
}

async fn register(ctx: &SessionContext, data: &DataSet) {
    for t in &TABLES {
        let sql = format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{}'",
            t.name,
            data.ooode_table(t.name).display()
        );
        run_sql(ctx, &sql).await.unwrap();
    }
}

async fn stock(data: &DataSet) -> SessionContext {
    let ctx = SessionContext::new();
    for t in &TABLES {
        ctx.register_parquet(
            t.name,
            data.parquet_file(t.name).to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
    }
    ctx
}

/// A session of ooode on `env`.
fn session(env: &Arc<RuntimeEnv>) -> SessionContext {
    let builder = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new().with_target_partitions(2))
        .with_runtime_env(env.clone());
    SessionContext::new_with_state(ooode_providers::with_ooode(builder).build())
}

/// Resident memory of this process now, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn tpch_query(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("queries/q{n}.sql"));
    std::fs::read_to_string(path).unwrap()
}

/// A deterministic pseudo-random sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const SESSIONS: usize = 32;
const QUERIES_PER_SESSION: usize = 4;
const MEMORY_LIMIT: usize = 256 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_sessions_of_mixed_queries_on_one_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let data = load(dir.path());
    let stock = stock(&data).await;
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(MEMORY_LIMIT));
    let env = RuntimeEnvBuilder::new()
        .with_memory_pool(pool.clone())
        .build_arc()
        .unwrap();

    // Each session's queries and settings; expected rows from stock DataFusion.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let tpch = [3, 5, 10, 12, 18];
    let mut plans = Vec::new();
    for s in 0..SESSIONS {
        let mut queries = Vec::new();
        for _ in 0..QUERIES_PER_SESSION {
            // With the Fig. 4 chain its customer count, for the sessions that prepare it.
            let query = match rng.next(3) {
                0 => {
                    let n = 1 + rng.next(150);
                    (fig4_sql(n), Some(n as i64))
                }
                1 => (
                    format!(
                        "SELECT o_orderkey, o_totalprice, o_orderdate FROM orders \
                         WHERE o_orderkey = {} ORDER BY o_orderkey",
                        1 + 4 * rng.next(15_000)
                    ),
                    None,
                ),
                _ => (tpch_query(tpch[rng.next(tpch.len() as u64) as usize]), None),
            };
            queries.push(query);
        }
        let settings = [
            format!(
                "SET ooode.index_join = '{}'",
                if s % 2 == 0 { "always" } else { "auto" }
            ),
            format!(
                "SET ooode.execution_mode = '{}'",
                if s % 8 == 7 {
                    "in_order"
                } else {
                    "out_of_order"
                }
            ),
            // Far smaller than the data (about 20 MiB of heap and index pages).
            "SET ooode.buffer_pool_bytes = '2MiB'".to_string(),
            "SET ooode.max_outstanding_io = 64".to_string(),
            "SET ooode.max_outstanding_io_total = 512".to_string(),
            // Most reads wait in the engine's queue for the device, ordered by query size.
            "SET ooode.device_queue_depth = 16".to_string(),
            // Two long queries at a time (most here are long): the others wait their turn.
            "SET ooode.max_long_queries = 2".to_string(),
            "SET ooode.short_query_reads = 16".to_string(),
            // Long queries leave half the cap to short ones.
            "SET ooode.short_query_io_reserve_percent = 50".to_string(),
        ];
        plans.push((settings, queries));
    }
    let mut expected = std::collections::HashMap::new();
    for (_, queries) in &plans {
        for (q, _) in queries {
            if !expected.contains_key(q) {
                expected.insert(q.clone(), query_rows(&stock, q).await.unwrap());
            }
        }
    }
    let expected = Arc::new(expected);

    // Resident memory, sampled while the sessions run.
    let before = rss();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(before));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Fewest turns of long queries free, sampled alike.
    let fewest_free = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let sampler = {
        let (peak, done, fewest_free) = (peak.clone(), done.clone(), fewest_free.clone());
        let runtime = ooode::access::OoodeRuntime::for_env(&env);
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss(), std::sync::atomic::Ordering::Relaxed);
                if let Some(slots) = runtime.long_slots() {
                    fewest_free.fetch_min(slots.free(), std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    let prepared_runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (i, (settings, queries)) in plans.into_iter().enumerate() {
        let ctx = session(&env);
        register(&ctx, &data).await;
        let expected = expected.clone();
        let prepared_runs = prepared_runs.clone();
        tasks.push(tokio::spawn(async move {
            for s in &settings {
                run_sql(&ctx, s).await.unwrap();
            }
            // A quarter of the sessions send the Fig. 4 chain prepared (planned once, the
            // customer count bound per query), as a service would.
            let prepared = match i % 4 {
                1 => Some(
                    PreparedQuery::new(&ctx, &fig4_sql(0).replace("<= 0", "<= $1"))
                        .await
                        .unwrap(),
                ),
                _ => None,
            };
            let mut longest = Duration::ZERO;
            for (q, customers) in queries {
                let t = Instant::now();
                let run = async {
                    match (&prepared, customers) {
                        (Some(p), Some(n)) => {
                            prepared_runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let batches = p.collect(vec![ScalarValue::from(n)]).await?;
                            sorted_rows(&batches)
                        }
                        _ => query_rows(&ctx, &q).await,
                    }
                };
                let rows = tokio::time::timeout(Duration::from_secs(240), run)
                    .await
                    .unwrap_or_else(|_| panic!("session {i}: a query ran past 240 s: {q}"))
                    .unwrap_or_else(|e| panic!("session {i}: {e}\n{q}"));
                assert_eq!(&rows, &expected[&q], "session {i} ({settings:?}): {q}");
                longest = longest.max(t.elapsed());
            }
            longest
        }));
    }
    let mut longest = Duration::ZERO;
    for t in tasks {
        longest = longest.max(t.await.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let prepared_runs = prepared_runs.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        prepared_runs > 0,
        "no session ran the Fig. 4 chain prepared"
    );
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let runtime = ooode::access::OoodeRuntime::for_env(&env);
    eprintln!(
        "{} queries ({prepared_runs} prepared) in {:.1} s (longest {:.2} s); resident memory {} \
         MiB before, peak {} MiB; pool {:?}",
        SESSIONS * QUERIES_PER_SESSION,
        started.elapsed().as_secs_f64(),
        longest.as_secs_f64(),
        before >> 20,
        peak >> 20,
        runtime.pool().stats()
    );
    assert!(runtime.pool().stats().used_bytes <= 2 << 20);
    // The memory limit bounds what queries and the pool reserve; what else the process holds
    // (code, DataFusion's own buffers outside the pool) stays far below another such limit.
    assert!(
        peak.saturating_sub(before) <= 2 * MEMORY_LIMIT as u64,
        "resident memory grew by {} MiB",
        (peak - before) >> 20
    );
    assert_eq!(runtime.admission().in_use(), 0);
    assert_eq!(runtime.admission().waiting(), 0);
    assert_eq!(runtime.admission().reserve(), 256, "half of 512");
    let slots = runtime.long_slots().expect("max_long_queries was set");
    assert_eq!(
        fewest_free.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "long queries took turns"
    );
    assert_eq!(slots.free(), slots.slots(), "every turn given back");
    assert_eq!(
        pool.reserved() as u64,
        runtime.pool().stats().reserved_bytes,
        "only the buffer pool still holds memory"
    );
}

/// The plan's topmost index join or index scan.
fn top_index_node(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    if plan.downcast_ref::<IndexJoinExec>().is_some()
        || plan.downcast_ref::<IndexScanExec>().is_some()
    {
        return Some(plan.clone());
    }
    plan.children().into_iter().find_map(top_index_node)
}

fn query_io(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<QueryIo>> {
    if let Some(j) = plan.downcast_ref::<IndexJoinExec>() {
        return Some(j.query().clone());
    }
    if let Some(s) = plan.downcast_ref::<IndexScanExec>() {
        return Some(s.query().clone());
    }
    plan.children().into_iter().find_map(query_io)
}

/// The physical plan of `sql` and the budget of its index plan.
async fn index_plan(ctx: &SessionContext, sql: &str) -> (Arc<dyn ExecutionPlan>, Arc<QueryIo>) {
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let query = query_io(&plan).expect("an index plan");
    (plan, query)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_with_reads_in_flight_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = load(dir.path());
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
    let env = RuntimeEnvBuilder::new()
        .with_memory_pool(pool.clone())
        .build_arc()
        .unwrap();
    let ctx = session(&env);
    register(&ctx, &data).await;
    run_sql(&ctx, "SET ooode.index_join = 'always'")
        .await
        .unwrap();
    let runtime = ooode_providers::ooode_runtime(&ctx);
    let sql =
        "SELECT * FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE o_custkey < 1000";
    let want = query_rows(&stock(&data).await, sql).await.unwrap();
    // The last rounds beside a short query executing: the long one runs on the idle lane.
    let mut short = None;
    for round in 0..5 {
        runtime.pool().clear();
        if round == 3 {
            let (point_plan, _) = index_plan(&ctx, &fig4_sql(1)).await;
            let node = top_index_node(&point_plan).unwrap();
            short = Some((node.execute(0, ctx.task_ctx()).unwrap(), point_plan));
            let deadline = Instant::now() + Duration::from_secs(30);
            while !runtime.short_query_within(Duration::from_secs(5)) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let lane_tasks = || runtime.operator_tasks().long_on_idle_lane;
        let lane_before = lane_tasks();
        let (plan, query) = index_plan(&ctx, sql).await;
        let mut stream = execute_stream(plan, ctx.task_ctx()).unwrap();
        // Take batches until reads are in flight at the moment of cancelling.
        let mut in_flight = 0;
        for _ in 0..10_000 {
            let batch = stream.next().await.expect("rows").unwrap();
            assert!(batch.num_rows() > 0);
            in_flight = query.metrics.snapshot().in_flight;
            if in_flight > 0 {
                break;
            }
        }
        assert!(in_flight > 0, "round {round}: never saw a read in flight");
        assert_eq!(
            lane_tasks() > lane_before,
            short.is_some(),
            "round {round}: on the idle lane only beside the short query"
        );
        drop(stream);
        let deadline = Instant::now() + Duration::from_secs(10);
        let engines = runtime.engines();
        let idle = || {
            query.metrics.snapshot().in_flight == 0
                && query.permits_in_use() == 0
                && runtime.admission().in_use() == 0
                && runtime.admission().waiting() == 0
                && runtime.pool().stats().loading == 0
                && engines
                    .iter()
                    .all(|e| e.metrics().snapshot().in_flight == 0)
                && pool.reserved() as u64 == runtime.pool().stats().reserved_bytes
                && runtime.executing_queries() == usize::from(short.is_some())
        };
        while !idle() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            idle(),
            "round {round}: the cancelled query left state behind: query {:?}, permits {}, \
             admission {}/{}, pool {:?}, memory reserved {} (pool's {})",
            query.metrics.snapshot(),
            query.permits_in_use(),
            runtime.admission().in_use(),
            runtime.admission().waiting(),
            runtime.pool().stats(),
            pool.reserved(),
            runtime.pool().stats().reserved_bytes
        );
        eprintln!(
            "round {round}: cancelled with {in_flight} reads in flight; pool {:?}",
            runtime.pool().stats()
        );
    }
    drop(short);
    // The next query runs, and right.
    runtime.pool().clear();
    assert_eq!(query_rows(&ctx, sql).await.unwrap(), want);
    assert_eq!(runtime.executing_queries(), 0);
}

/// Stock DataFusion and an ooode session over the data loaded in `dir`: index joins always,
/// one turn for long queries, every query the rule estimated long, in `mode`.
async fn one_turn_session(dir: &Path, mode: &str) -> (SessionContext, SessionContext) {
    let data = load(dir);
    let env = RuntimeEnvBuilder::new().build_arc().unwrap();
    let ctx = session(&env);
    register(&ctx, &data).await;
    for s in [
        "SET ooode.index_join = 'always'".to_string(),
        format!("SET ooode.execution_mode = '{mode}'"),
        "SET ooode.max_long_queries = 1".to_string(),
        "SET ooode.short_query_reads = 0".to_string(),
    ] {
        run_sql(&ctx, &s).await.unwrap();
    }
    (stock(&data).await, ctx)
}

/// With one turn for long queries, a long query whose client takes one batch and stops
/// reading gives its turn up once its operators have nothing in flight (their output queues
/// full): another long query then runs to the end, and the first finishes when read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_query_whose_client_stops_reading_gives_up_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (stock, ctx) = one_turn_session(dir.path(), "out_of_order").await;
    let runtime = ooode_providers::ooode_runtime(&ctx);
    // About 40 K rows of every column: far more than an operator queues for its consumer.
    let stalled_sql =
        "SELECT * FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE o_custkey < 1000";
    let (plan, query) = index_plan(&ctx, stalled_sql).await;
    assert!(
        query.share().estimated_reads().is_some_and(|r| r > 0),
        "the rule estimated the query's reads"
    );
    let mut stalled = execute_stream(plan, ctx.task_ctx()).unwrap();
    let first = stalled.next().await.expect("rows").unwrap();
    let slots = runtime.long_slots().expect("max_long_queries was set");
    assert_eq!(slots.slots(), 1);
    // Its operators fill their output queues, then hold nothing in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while slots.free() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        slots.free(),
        1,
        "a query nobody reads still holds the only turn"
    );
    // Another long query takes the turn and runs to the end.
    let other = fig4_sql(150);
    let rows = tokio::time::timeout(Duration::from_secs(60), query_rows(&ctx, &other))
        .await
        .expect("the second long query finished")
        .unwrap();
    assert_eq!(rows, query_rows(&stock, &other).await.unwrap());
    // The first is read to its end, and right.
    let mut batches = vec![first];
    while let Some(batch) = stalled.next().await {
        batches.push(batch.unwrap());
    }
    assert_eq!(
        ooode_tpch::runner::sorted_rows(&batches).unwrap(),
        query_rows(&stock, stalled_sql).await.unwrap()
    );
    assert_eq!(slots.free(), 1, "the turn given back");
}

/// In order, a node's work runs inside its consumer's polls and takes no turn among long
/// queries: with the only turn held by another query, a long query in order still runs to
/// the end, and right (a turn handed to a pipeline its consumer is not polling could keep
/// the query's other pipelines waiting for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_query_in_order_takes_no_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (stock, ctx) = one_turn_session(dir.path(), "in_order").await;
    let runtime = ooode_providers::ooode_runtime(&ctx);
    let sql = fig4_sql(150);
    // Planning applies the settings to the runtime.
    let (_, query) = index_plan(&ctx, &sql).await;
    assert!(
        query.share().estimated_reads().is_some_and(|r| r > 0),
        "the rule estimated the query's reads: it is long"
    );
    let slots = runtime.long_slots().expect("max_long_queries was set");
    assert_eq!(slots.slots(), 1);
    let other = Arc::new(ooode::access::slots::QuerySlot::default());
    let held = other.enter(&slots).await;
    assert_eq!(slots.free(), 0, "the only turn is held");
    let rows = tokio::time::timeout(Duration::from_secs(30), query_rows(&ctx, &sql))
        .await
        .expect("the query in order ran while another held the only turn")
        .unwrap();
    assert_eq!(rows, query_rows(&stock, &sql).await.unwrap());
    drop(held);
    assert_eq!(slots.free(), 1);
}

/// Beside a short query executing, a long query's operators run on the runtime's idle lane,
/// whose threads the kernel schedules at idle priority; alone (even right after a short query
/// and with its plan still held), or with the setting off, they run on the caller's runtime.
/// Results are the same everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_queries_run_at_idle_priority_beside_short_ones() {
    let dir = tempfile::tempdir().unwrap();
    let data = load(dir.path());
    let env = RuntimeEnvBuilder::new().build_arc().unwrap();
    let ctx = session(&env);
    register(&ctx, &data).await;
    let stock = stock(&data).await;
    for s in [
        "SET ooode.index_join = 'always'",
        // The Fig. 4 chain over one customer reads a few pages; over 150 many more.
        "SET ooode.short_query_reads = 100",
    ] {
        run_sql(&ctx, s).await.unwrap();
    }
    let runtime = ooode_providers::ooode_runtime(&ctx);
    let (long_sql, point_sql) = (fig4_sql(150), fig4_sql(1));
    let lane_tasks = || runtime.operator_tasks().long_on_idle_lane;

    // Alone: the caller's runtime.
    let want = query_rows(&stock, &long_sql).await.unwrap();
    let (plan, query) = index_plan(&ctx, &long_sql).await;
    assert!(
        query.is_long(),
        "estimated {:?}",
        query.share().estimated_reads()
    );
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    assert_eq!(ooode_tpch::runner::sorted_rows(&batches).unwrap(), want);
    assert_eq!(lane_tasks(), 0, "a long query alone ran on the idle lane");
    assert_eq!(runtime.executing_queries(), 0, "its streams are dropped");
    drop(query);

    // A short query executing.
    let (point_plan, point) = index_plan(&ctx, &point_sql).await;
    assert!(
        !point.is_long(),
        "estimated {:?}",
        point.share().estimated_reads()
    );
    // Its top index node's output, opened and not read yet: the query is executing.
    let point_node = top_index_node(&point_plan).unwrap();
    let point_stream = point_node.execute(0, ctx.task_ctx()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !runtime.short_query_within(Duration::from_secs(1)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(runtime.short_query_within(Duration::from_secs(1)));
    assert_eq!(runtime.executing_queries(), 1, "the short query executes");
    let rows = tokio::time::timeout(Duration::from_secs(60), query_rows(&ctx, &long_sql))
        .await
        .expect("the long query finished on the idle lane")
        .unwrap();
    assert_eq!(rows, want);
    let lane = runtime.started_idle_lane().expect("the lane started");
    assert!(
        lane_tasks() > 0,
        "the long query's operators ran on the lane"
    );
    let (idle, threads) = lane.threads_at_idle_priority();
    assert!(
        threads > 0 && idle == threads,
        "{idle} of {threads} at idle priority"
    );

    // The setting off: the caller's runtime again.
    run_sql(&ctx, "SET ooode.long_queries_idle_priority = false")
        .await
        .unwrap();
    let before = lane_tasks();
    let (plan, query) = index_plan(&ctx, &long_sql).await;
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    assert_eq!(ooode_tpch::runner::sorted_rows(&batches).unwrap(), want);
    assert_eq!(
        lane_tasks(),
        before,
        "the setting off, yet the lane ran operators"
    );
    drop(query);

    // The short query's node gives its rows; dropped, a long query right after runs alone.
    let rows: usize = point_stream
        .map(|b| b.unwrap().num_rows())
        .collect::<Vec<_>>()
        .await
        .iter()
        .sum();
    assert!(rows > 0, "the point's customer has orders");
    assert_eq!(
        query_rows(&ctx, &point_sql).await.unwrap(),
        query_rows(&stock, &point_sql).await.unwrap()
    );
    // Its plan is still held: planned, not executing.
    run_sql(&ctx, "SET ooode.long_queries_idle_priority = true")
        .await
        .unwrap();
    let before = lane_tasks();
    assert_eq!(query_rows(&ctx, &long_sql).await.unwrap(), want);
    assert!(runtime.short_query_within(Duration::from_secs(1)));
    assert_eq!(
        lane_tasks(),
        before,
        "alone after a short query, yet on the lane"
    );
    assert_eq!(runtime.executing_queries(), 0);
    drop((point_plan, point));
}
