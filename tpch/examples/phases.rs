//! Where the time of a short Fig. 4 query goes: planning (parse, logical and physical
//! optimization) and execution, as medians over many runs, for ooode `auto` (cold and hot)
//! and stock DataFusion on Parquet (cold). A point query's few milliseconds are mostly fixed
//! costs; this splits them, where the benchmark only times the whole.
//!
//! `cargo run --release -p ooode-tpch --example phases -- <sf> <N> <runs>` (data from
//! `ooode-tpch gen --sf <sf>` in `data/`). Environment:
//! - `PLAN=1` prints ooode's physical plan first;
//! - `SETS="SET ...;SET ..."` applies settings to the ooode session first (e.g.
//!   `SET ooode.direct_io = false`: reads from the OS cache, without the disk's noise);
//! - `RULES=1` prints mean hot times of each logical optimizer rule and of each part of the
//!   physical plan (its initial plan, each physical optimizer rule), ooode next to stock;
//! - `PROFILE=<runs>` runs only ooode (hot; cold with `COLD=1`), for a profiler. getppid(2)
//!   calls mark the start of planning, of execution and the end, for a tracer such as
//!   `perf record -e syscalls:sys_enter_getppid -e io_uring:io_uring_complete ...`.

use std::time::Instant;

use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::SessionContext;
use ooode_tpch::datagen::{DataSet, default_root};
use ooode_tpch::fig4::fig4_sql;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (plan ms, exec ms) medians over `runs` runs, `empty` before each.
async fn phases(
    ctx: &SessionContext,
    sql: &str,
    runs: usize,
    empty: &dyn Fn(),
) -> Result<(f64, f64), BoxError> {
    let (mut plan, mut exec) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        empty();
        // getppid(2) marks the phases for a tracer (`perf record -e syscalls:sys_enter_getppid`).
        // SAFETY: getppid has no preconditions.
        unsafe { libc::getppid() };
        let t0 = Instant::now();
        let physical = ctx.sql(sql).await?.create_physical_plan().await?;
        // SAFETY: as above.
        unsafe { libc::getppid() };
        let t1 = Instant::now();
        collect(physical, ctx.task_ctx()).await?;
        // SAFETY: as above.
        unsafe { libc::getppid() };
        let t2 = Instant::now();
        plan.push((t1 - t0).as_secs_f64() * 1e3);
        exec.push((t2 - t1).as_secs_f64() * 1e3);
    }
    Ok((median(plan), median(exec)))
}

/// Each logical optimizer rule and each part of the physical plan, hot, over `runs` plans,
/// ooode next to stock (RULES=1).
async fn rule_times(
    ooode: &SessionContext,
    stock: &SessionContext,
    sql: &str,
    runs: usize,
) -> Result<(), BoxError> {
    use ooode_tpch::rule_times::{format, measure, measure_logical};
    let (ooode_logical, stock_logical) = (
        measure_logical(ooode, sql, runs).await?,
        measure_logical(stock, sql, runs).await?,
    );
    let (ooode_physical, stock_physical) = (
        measure(ooode, sql, runs).await?,
        measure(stock, sql, runs).await?,
    );
    print!(
        "{}",
        format("Logical optimizer", &ooode_logical, &stock_logical, 1.0)
    );
    print!(
        "{}",
        format("Physical plan", &ooode_physical, &stock_physical, 1.0)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // As the binaries do: a profile of a cold run would otherwise show page faults they do
    // not have.
    ooode_tpch::delay_memory_purge();
    let args: Vec<String> = std::env::args().collect();
    let sf: f64 = args.get(1).map_or(Ok(1.0), |s| s.parse())?;
    let n: u64 = args.get(2).map_or(Ok(1), |s| s.parse())?;
    let runs: usize = args.get(3).map_or(Ok(51), |s| s.parse())?;
    let data = DataSet::new(default_root(std::path::Path::new("data"), sf), sf);
    let (stock, ooode) = ooode_tpch::runner::contexts(&data).await?;
    let sql = fig4_sql(n);
    // SETS="stmt;stmt": settings for the ooode session first.
    for set in std::env::var("SETS").unwrap_or_default().split(';') {
        if !set.trim().is_empty() {
            ooode.sql(set).await?.collect().await?;
        }
    }
    if std::env::var_os("PLAN").is_some() {
        let plan = ooode.sql(&sql).await?.create_physical_plan().await?;
        println!("{}", displayable(plan.as_ref()).indent(true));
    }
    let pool = ooode_providers::ooode_runtime(&ooode).pool().clone();
    if std::env::var_os("RULES").is_some() {
        return rule_times(&ooode, &stock, &sql, runs).await;
    }
    // PROFILE=<runs>: only ooode runs, hot (cold with COLD=1), for a profiler.
    if let Some(loops) = std::env::var("PROFILE").ok().and_then(|s| s.parse().ok()) {
        let cold = std::env::var_os("COLD").is_some();
        phases(&ooode, &sql, 3, &|| pool.clear()).await?;
        let (p, e) = phases(&ooode, &sql, loops, &|| {
            if cold {
                pool.clear()
            }
        })
        .await?;
        println!("cold {cold}: plan {p:.3} ms exec {e:.3} ms");
        return Ok(());
    }
    // Warm-up: engines, metadata caches, first-touch of buffers.
    phases(&ooode, &sql, 3, &|| pool.clear()).await?;
    phases(&stock, &sql, 1, &|| ()).await?;
    let (op, oe) = phases(&ooode, &sql, runs, &|| pool.clear()).await?;
    let drop_cache = || {
        let _ = ooode_tpch::fig4::drop_os_cache();
    };
    let (sp, se) = phases(&stock, &sql, runs.min(21), &drop_cache).await?;
    let (hp, he) = phases(&ooode, &sql, runs, &|| ()).await?;
    println!(
        "N={n} cold medians of {runs} runs (stock: {}):",
        runs.min(21)
    );
    println!(
        "  ooode auto   plan {op:.3} ms  exec {oe:.3} ms  total {:.3} ms",
        op + oe
    );
    println!(
        "  stock        plan {sp:.3} ms  exec {se:.3} ms  total {:.3} ms  ({:.1}x)",
        sp + se,
        (sp + se) / (op + oe)
    );
    println!(
        "  ooode hot    plan {hp:.3} ms  exec {he:.3} ms  total {:.3} ms",
        hp + he
    );
    Ok(())
}
