//! The runtime's own ceiling: the Fig. 4 query at its largest point with every page coming from
//! the OS page cache (`ooode.direct_io = false`, the cache warm, ooode's pool emptied), so the
//! disk is out of the way and what is left is ooode's CPU per page; and the same query hot
//! (all pages in the pool), out of order next to in order.

use std::time::{Duration, Instant};

use ooode::io::metrics::{process_cpu_time, process_system_time};

use crate::alloc_count;
use crate::datagen::DataSet;
use crate::fig4::fig4_sql;
use crate::runner::{contexts, median, run_sql, settle_buffers, timed_rows};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the ceiling run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CeilingReport {
    /// Customers selected.
    pub n: u64,
    /// Pages read per run (from the OS cache).
    pub pages: u64,
    /// Seconds per run (median).
    pub secs: f64,
    /// Pages per second.
    pub pages_per_sec: f64,
    /// Process CPU per page, microseconds (user and system, all threads).
    pub cpu_us_per_page: f64,
    /// Of that, in the kernel (system time, median of the runs): the copy out of the OS
    /// cache most, about a fifth here; the rest (user time) is the runtime's own work.
    pub kernel_cpu_us_per_page: f64,
    /// Page buffers a measured run allocated new (the most of any run): none when the
    /// recycler served them all, so no run pays the kernel for fresh zeroed memory.
    pub fresh_buffers_per_run: u64,
    /// Warm-up before the measured runs until the page buffers sat in the arena, seconds.
    pub arena_settle_secs: f64,
    /// The process's CPU with no query running, just before the measured runs, percent of
    /// a core.
    pub idle_cpu_percent: f64,
    /// Hot (pages in the pool), out of order, seconds (median).
    pub hot_out_of_order_secs: f64,
    /// Hot, in order, seconds (median).
    pub hot_in_order_secs: f64,
    /// Hot, out of order: process CPU per page of the cold runs, microseconds (median). Cold
    /// less hot is what a page's read costs: the read path's share, apart from the query's.
    pub hot_out_of_order_cpu_us_per_page: f64,
    /// Hot, in order: the same.
    pub hot_in_order_cpu_us_per_page: f64,
}

/// Measured runs (median kept); `OOODE_CEILING_RUNS` sets more, for a profiler.
fn runs() -> usize {
    std::env::var("OOODE_CEILING_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Measures at `n` customers; progress on stderr.
/// `settings` are further `SET` statements for ooode's session.
pub async fn run(data: &DataSet, n: u64, settings: &[String]) -> Result<CeilingReport, BoxError> {
    let limit = Duration::from_secs(600);
    let (_, ctx) = contexts(data).await?;
    let runtime = ooode_providers::ooode_runtime(&ctx);
    let (pool, recycler) = (runtime.pool().clone(), runtime.recycler().clone());
    for s in [
        "SET ooode.direct_io = false",
        "SET ooode.index_join = 'always'",
        "SET ooode.execution_mode = 'out_of_order'",
    ] {
        run_sql(&ctx, s).await?;
    }
    for s in settings {
        run_sql(&ctx, s).await?;
    }
    let sql = fig4_sql(n);
    // The OS cache holds the tables' files as a sequential read (or the load that wrote
    // them) leaves them, whatever ran before: in large folios. Filled by the query's own
    // random reads instead, the kernel finds each page in smaller ones, and its page-cache
    // lookups cost about 0.3 us more per page (docs/log.md, 2026-12-05, evening).
    eprintln!("  dropping the tables' page files from the OS cache and reading them through");
    let (bytes, secs) = read_through(data)?;
    eprintln!(
        "  the tables' page files read through the OS cache: {} MiB in {secs:.1} s",
        bytes >> 20
    );
    // Then the query once, for what else it touches.
    timed_rows(&ctx, &sql, limit).await?;
    let settle = settle_buffers(&ctx, &sql, limit).await?;
    eprintln!(
        "  page buffers settled in the arena after {} runs ({:.1} s); {} MiB outside it",
        settle.runs,
        settle.secs,
        settle.outside_bytes >> 20
    );
    // The process's CPU with no query running: what the measured runs' figure includes
    // besides them (threads of earlier work in the same process, when the main job runs this).
    let (idle_from, idle_cpu) = (Instant::now(), process_cpu_time());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_percent = process_cpu_time().saturating_sub(idle_cpu).as_secs_f64()
        / idle_from.elapsed().as_secs_f64()
        * 100.0;
    eprintln!("  the process's CPU with no query running: {idle_percent:.1} % of a core");
    let (mut times, mut cpus, mut pages) = (Vec::new(), Vec::new(), Vec::new());
    let mut systems = Vec::new();
    let mut fresh_buffers = 0;
    for _ in 0..runs() {
        pool.clear();
        let misses = pool.stats().misses;
        let fresh = recycler.fresh_buffers();
        let allocated = alloc_count::allocations();
        let (start, cpu, system) = (Instant::now(), process_cpu_time(), process_system_time());
        timed_rows(&ctx, &sql, limit).await?;
        systems.push(process_system_time().saturating_sub(system).as_secs_f64());
        let allocated = alloc_count::allocations()
            .zip(allocated)
            .map(|(b, a)| b - a);
        fresh_buffers = fresh_buffers.max(recycler.fresh_buffers() - fresh);
        times.push(start.elapsed().as_secs_f64());
        cpus.push(process_cpu_time().saturating_sub(cpu).as_secs_f64());
        pages.push((pool.stats().misses - misses) as f64);
        // Each run, for comparisons that want more than the median (the VM is noisy).
        let (cpu, pages) = (cpus[cpus.len() - 1], pages[pages.len() - 1]);
        let system = systems[systems.len() - 1];
        eprint!(
            "  run: {:.2} us CPU per page ({:.2} in the kernel)",
            cpu / pages.max(1.0) * 1e6,
            system / pages.max(1.0) * 1e6
        );
        match allocated {
            Some(n) => eprintln!(", {:.2} allocations per page", n as f64 / pages.max(1.0)),
            None => eprintln!(),
        }
    }
    let (secs, cpu, pages) = (median(times), median(cpus), median(pages));
    let system = median(systems);
    eprintln!(
        "N={n} from the OS cache: {pages:.0} pages in {secs:.3} s, {:.1} us CPU per page, \
         {:.1} of it in the kernel",
        cpu / pages.max(1.0) * 1e6,
        system / pages.max(1.0) * 1e6
    );
    let (mut hot, mut hot_cpu) = (Vec::new(), Vec::new());
    // `OOODE_CEILING_COLD_ONLY=1` stops here, for a profiler of the cold runs alone.
    let cold_only = std::env::var("OOODE_CEILING_COLD_ONLY").is_ok_and(|v| v == "1");
    for mode in ["out_of_order", "in_order"]
        .into_iter()
        .filter(|_| !cold_only)
    {
        run_sql(&ctx, &format!("SET ooode.execution_mode = '{mode}'")).await?;
        timed_rows(&ctx, &sql, limit).await?;
        let (mut t, mut c) = (Vec::new(), Vec::new());
        for _ in 0..runs() {
            let before = process_cpu_time();
            t.push(timed_rows(&ctx, &sql, limit).await?.0.unwrap_or(f64::NAN));
            c.push(process_cpu_time().saturating_sub(before).as_secs_f64());
        }
        hot.push(median(t));
        hot_cpu.push(median(c) / pages.max(1.0) * 1e6);
    }
    hot.resize(2, f64::NAN);
    hot_cpu.resize(2, f64::NAN);
    eprintln!(
        "N={n} hot: out of order {:.3} s, in order {:.3} s; {:.1} / {:.1} us CPU per page",
        hot[0], hot[1], hot_cpu[0], hot_cpu[1]
    );
    Ok(CeilingReport {
        n,
        pages: pages as u64,
        secs,
        pages_per_sec: pages / secs.max(1e-9),
        cpu_us_per_page: cpu / pages.max(1.0) * 1e6,
        kernel_cpu_us_per_page: system / pages.max(1.0) * 1e6,
        fresh_buffers_per_run: fresh_buffers,
        arena_settle_secs: settle.secs,
        idle_cpu_percent: idle_percent,
        hot_out_of_order_secs: hot[0],
        hot_in_order_secs: hot[1],
        hot_out_of_order_cpu_us_per_page: hot_cpu[0],
        hot_in_order_cpu_us_per_page: hot_cpu[1],
    })
}

/// The tables the query reads.
const TABLES_READ: [&str; 3] = ["customer", "orders", "lineitem"];

/// Drops every page file of the query's tables from the OS cache, then reads it once, front
/// to back, through the cache; returns the bytes and the seconds taken.
fn read_through(data: &DataSet) -> Result<(u64, f64), BoxError> {
    use std::os::fd::AsRawFd;
    let start = Instant::now();
    let mut bytes = 0u64;
    for table in TABLES_READ {
        let dir = data.ooode_table(table);
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "pages") {
                continue;
            }
            let file = std::fs::File::open(&path)?;
            // SAFETY: advice on an open descriptor's whole range; it only drops clean
            // cached pages of the file.
            let advised =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if advised != 0 {
                let e = std::io::Error::from_raw_os_error(advised);
                return Err(format!("{}: posix_fadvise: {e}", path.display()).into());
            }
            let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
            bytes += std::io::copy(&mut reader, &mut std::io::sink())?;
        }
    }
    Ok((bytes, start.elapsed().as_secs_f64()))
}

/// The report's lines.
pub fn format_report(r: &CeilingReport) -> String {
    format!(
        "Fig. 4 at N = {}, pages from the OS cache (pool emptied): {} pages in {:.3} s, \
         {:.0} pages/s, {:.1} us of CPU per page, {:.1} of it in the kernel ({} page buffers \
         allocated new in a run)\n\
         hot (pages in the pool): out of order {:.3} s, in order {:.3} s ({:.2}x); \
         {:.1} / {:.1} us of CPU per page (the read path: {:.1} us of the cold run's)\n",
        r.n,
        r.pages,
        r.secs,
        r.pages_per_sec,
        r.cpu_us_per_page,
        r.kernel_cpu_us_per_page,
        r.fresh_buffers_per_run,
        r.hot_out_of_order_secs,
        r.hot_in_order_secs,
        r.hot_in_order_secs / r.hot_out_of_order_secs.max(1e-9),
        r.hot_out_of_order_cpu_us_per_page,
        r.hot_in_order_cpu_us_per_page,
        r.cpu_us_per_page - r.hot_out_of_order_cpu_us_per_page,
    )
}
