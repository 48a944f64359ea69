//! The physical limit: random page reads over one file through each engine at several queue
//! depths, next to `fio` with the same file, block size, O_DIRECT and depth, in the same run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use ooode::io::metrics::process_cpu_time;
use ooode::io::{IoEngine, SyncEngine, UringConfig, UringEngine};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One measured point.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IoPoint {
    /// "io_uring", "sync polled", ...
    pub engine: String,
    /// Reads kept in flight.
    pub depth: usize,
    /// Reads per second.
    pub iops: f64,
    /// Megabytes per second.
    pub mb_per_sec: f64,
    /// Process CPU per read, microseconds.
    pub cpu_us_per_read: f64,
    /// fio's IOPS at the same depth (fio's io_uring engine), the mean
    /// of a run right before and one right after the engine's.
    pub fio_iops: Option<f64>,
    /// fio's CPU per read, microseconds.
    pub fio_cpu_us_per_read: Option<f64>,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Reads random pages of `file` through `engine` with `depth` reads in flight for `secs`.
pub async fn measure_engine(
    engine: Arc<dyn IoEngine>,
    file: &Path,
    page_size: usize,
    depth: usize,
    secs: f64,
) -> Result<(f64, f64), BoxError> {
    measure_engine_holding(engine, file, page_size, depth, secs, 0).await
}

/// [`measure_engine`] holding the last `hold` pages read, as a buffer pool does: the reads'
/// buffers then rotate through that much memory instead of a few being reused.
pub async fn measure_engine_holding(
    engine: Arc<dyn IoEngine>,
    file: &Path,
    page_size: usize,
    depth: usize,
    secs: f64,
    hold: usize,
) -> Result<(f64, f64), BoxError> {
    let id = engine.open(file)?;
    let before = engine.metrics().snapshot();
    let pages = std::fs::metadata(file)?.len() / page_size as u64;
    if pages == 0 {
        return Err(format!("{} holds no full page", file.display()).into());
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ depth as u64);
    let mut issue = || {
        let off = (rng.next() % pages) * page_size as u64;
        engine.read(id, off, page_size)
    };
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (start, cpu0) = (Instant::now(), process_cpu_time());
    let mut reads = 0u64;
    let mut in_flight: FuturesUnordered<_> = (0..depth).map(|_| issue()).collect();
    let mut held = std::collections::VecDeque::with_capacity(hold + 1);
    // Reads started while the completed ones are handled reach the kernel together.
    while let Some(r) = ooode::io::batch::Batched(in_flight.next()).await {
        let page = r?;
        if hold > 0 {
            held.push_back(page);
            if held.len() > hold {
                held.pop_front();
            }
        }
        reads += 1;
        if Instant::now() < deadline {
            in_flight.push(issue());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = process_cpu_time().saturating_sub(cpu0).as_secs_f64();
    let after = engine.metrics().snapshot();
    if std::env::var_os("OOODE_IOBENCH_DEBUG").is_some() {
        eprintln!(
            "  {} depth {depth}: mean in flight {:.1}, max {}, mean latency {:.0} us",
            engine.name(),
            after.mean_in_flight,
            after.max_in_flight,
            (after.read_time - before.read_time).as_secs_f64()
                / (after.reads - before.reads).max(1) as f64
                * 1e6
        );
    }
    Ok((reads as f64 / elapsed, cpu / reads.max(1) as f64 * 1e6))
}

/// Like [`measure_engine`], from `threads` threads at once (each keeping its share of `depth`
/// in flight, as the workers of a runtime do): the rings they use are measured together.
pub fn measure_engine_threads(
    engine: Arc<dyn IoEngine>,
    file: &Path,
    page_size: usize,
    depth: usize,
    secs: f64,
    threads: usize,
) -> Result<(f64, f64), BoxError> {
    let (start, cpu0) = (Instant::now(), process_cpu_time());
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (engine, file) = (engine.clone(), file.to_path_buf());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()?;
                let share = (depth / threads).max(1);
                let (iops, _) =
                    rt.block_on(measure_engine(engine, &file, page_size, share, secs))?;
                Ok::<f64, BoxError>(iops)
            })
        })
        .collect();
    let mut iops = 0.0;
    for h in handles {
        iops += h.join().map_err(|_| "a reading thread panicked")??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = process_cpu_time().saturating_sub(cpu0).as_secs_f64();
    Ok((iops, cpu / (iops * elapsed).max(1.0) * 1e6))
}

/// Makes sure `fio` is there: installs the Debian package when running as root.
pub fn ensure_fio() -> bool {
    let present = || Command::new("fio").arg("--version").output().is_ok();
    if present() {
        return true;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("fio is missing: installing the Debian package");
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-qq", "fio"])
            .status();
        if !present() {
            let _ = Command::new("apt-get").args(["update", "-qq"]).status();
            let _ = Command::new("apt-get")
                .args(["install", "-y", "-qq", "fio"])
                .status();
        }
    }
    present()
}

/// Bytes of each read of [`fio_iops`]: the tables' page size.
pub const FIO_BLOCK_BYTES: usize = 8192;

/// fio's IOPS for random reads of [`FIO_BLOCK_BYTES`] of `file` at `depth` (io_uring) for
/// `secs`; None when fio is missing or fails. For measuring the disk right beside a run.
pub fn fio_iops(file: &Path, depth: usize, secs: f64) -> Option<f64> {
    ensure_fio()
        .then(|| run_fio(file, FIO_BLOCK_BYTES, depth, secs, "io_uring").ok())
        .flatten()
        .map(|(iops, _)| iops)
}

/// Writes `reads` (file, offset, length) as a fio I/O log (version 2), in their order.
pub fn write_iolog(reads: &[(PathBuf, u64, usize)], out: &mut impl Write) -> Result<(), BoxError> {
    let mut files: Vec<&Path> = Vec::new();
    for (path, ..) in reads {
        if !files.contains(&path.as_path()) {
            // fio reads a log line's file name up to white space, 256 bytes at most.
            let name = path
                .to_str()
                .filter(|n| n.len() <= 256 && !n.contains(char::is_whitespace));
            if name.is_none() {
                return Err(format!("fio cannot replay reads of {}", path.display()).into());
            }
            files.push(path);
        }
    }
    writeln!(out, "fio version 2 iolog")?;
    for action in ["add", "open"] {
        for f in &files {
            writeln!(out, "{} {action}", f.display())?;
        }
    }
    for (path, offset, len) in reads {
        writeln!(out, "{} read {offset} {len}", path.display())?;
    }
    for f in &files {
        writeln!(out, "{} close", f.display())?;
    }
    Ok(())
}

/// fio's IOPS replaying `reads` (as an engine recorded them) with `depth` in flight, O_DIRECT
/// through io_uring, as fast as the device serves them, for at most `secs`.
pub fn fio_replay_iops(
    reads: &[(PathBuf, u64, usize)],
    depth: usize,
    secs: f64,
) -> Result<f64, BoxError> {
    fio_replay(reads, depth, secs).map(|(iops, _)| iops)
}

/// [`fio_replay_iops`], and how many reads fio made.
fn fio_replay(
    reads: &[(PathBuf, u64, usize)],
    depth: usize,
    secs: f64,
) -> Result<(f64, u64), BoxError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let log =
        std::env::temp_dir().join(format!("ooode-replay-{}-{nanos}.iolog", std::process::id()));
    let written = std::fs::File::create(&log)
        .map_err(BoxError::from)
        .and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            write_iolog(reads, &mut w)?;
            w.flush()?;
            Ok(())
        });
    let out = written.and_then(|()| {
        Command::new("fio")
            .args([
                "--name=replay",
                &format!("--read_iolog={}", log.display()),
                "--replay_no_stall=1",
                "--direct=1",
                "--ioengine=io_uring",
                &format!("--iodepth={depth}"),
                &format!("--runtime={}ms", (secs * 1000.0).max(500.0) as u64),
                "--output-format=json",
            ])
            .output()
            .map_err(BoxError::from)
    });
    let _ = std::fs::remove_file(&log);
    let out = out?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let read = &json["jobs"][0]["read"];
    match (read["iops"].as_f64(), read["total_ios"].as_u64()) {
        (Some(iops), Some(n)) if n > 0 => Ok((iops, n)),
        _ => Err("fio's replay read nothing".into()),
    }
}

/// Runs fio: random reads of `file`, O_DIRECT, block `bs`, `depth` in flight; returns IOPS and
/// CPU microseconds per read.
pub fn run_fio(
    file: &Path,
    bs: usize,
    depth: usize,
    secs: f64,
    ioengine: &str,
) -> Result<(f64, f64), BoxError> {
    let out = Command::new("fio")
        .args([
            "--name=ooode",
            &format!("--filename={}", file.display()),
            "--rw=randread",
            &format!("--bs={bs}"),
            "--direct=1",
            &format!("--ioengine={ioengine}"),
            &format!("--iodepth={depth}"),
            &format!("--runtime={}ms", (secs * 1000.0).max(500.0) as u64),
            "--time_based",
            "--norandommap",
            "--randrepeat=0",
            "--output-format=json",
        ])
        .output()?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let job = &json["jobs"][0];
    let iops = job["read"]["iops"]
        .as_f64()
        .ok_or("fio output has no read IOPS")?;
    let reads = job["read"]["total_ios"].as_f64().unwrap_or(0.0).max(1.0);
    let runtime = job["read"]["runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    let cpu_pct = job["usr_cpu"].as_f64().unwrap_or(0.0) + job["sys_cpu"].as_f64().unwrap_or(0.0);
    Ok((iops, cpu_pct / 100.0 * runtime / reads * 1e6))
}

/// Settings of [`run`].
#[derive(Debug, Clone)]
pub struct IoBenchOptions {
    /// File to read (a table's heap file).
    pub file: PathBuf,
    /// Block size: the table's page size.
    pub page_size: usize,
    /// Queue depths.
    pub depths: Vec<usize>,
    /// Seconds per point.
    pub secs: f64,
}

/// Measures every engine and fio; progress goes to stderr.
pub async fn run(opts: &IoBenchOptions) -> Result<Vec<IoPoint>, BoxError> {
    let fio = ensure_fio();
    if !fio {
        eprintln!("fio is not available: engine numbers only");
    }
    let mut points = Vec::new();
    let total = 2 * opts.depths.len()
        + 2
        + 2 * opts.depths.iter().filter(|d| **d >= 16).count()
        + 4 * opts.depths.iter().filter(|d| **d == 1 || **d == 64).count()
        + 2 * opts.depths.iter().filter(|d| **d == 64).count();
    let mut step = 0;
    let mut point =
        |engine: &str, depth: usize, (iops, cpu): (f64, f64), fio: Option<(f64, f64)>| {
            step += 1;
            eprintln!(
                "[{step}/{total}] {engine} depth {depth}: {iops:.0} IOPS (fio {:?})",
                fio.map(|f| f.0 as u64)
            );
            points.push(IoPoint {
                engine: engine.to_string(),
                depth,
                iops,
                mb_per_sec: iops * opts.page_size as f64 / 1e6,
                cpu_us_per_read: cpu,
                fio_iops: fio.map(|f| f.0),
                fio_cpu_us_per_read: fio.map(|f| f.1),
            });
        };
    // The in-order engine as it waits by default (polling its completion first) and
    // sleeping at once, each next to fio at depth 1 on io_uring (which sleeps).
    for (name, poll_us) in [
        ("sync polled", ooode::io::sync_engine::DEFAULT_POLL_US),
        ("sync sleeping", 0),
    ] {
        let sync = SyncEngine::new(true);
        sync.set_poll_budget(poll_us);
        let m = measure_engine(Arc::new(sync), &opts.file, opts.page_size, 1, opts.secs).await?;
        let f = if fio {
            Some(run_fio(
                &opts.file,
                opts.page_size,
                1,
                opts.secs,
                "io_uring",
            )?)
        } else {
            None
        };
        point(name, 1, m, f);
    }
    for &depth in &opts.depths {
        // Completions taken by a thread per ring, then on the reactor of this runtime.
        let engine: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig {
            max_in_flight: depth,
            reap_on_reactor: false,
            ..Default::default()
        })?);
        let m = measure_engine(engine, &opts.file, opts.page_size, depth, opts.secs).await?;
        let reactor: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig {
            max_in_flight: depth,
            ..Default::default()
        })?);
        let r = measure_engine(reactor, &opts.file, opts.page_size, depth, opts.secs).await?;
        let f = if fio {
            Some(run_fio(
                &opts.file,
                opts.page_size,
                depth,
                opts.secs,
                "io_uring",
            )?)
        } else {
            None
        };
        point("io_uring", depth, m, f);
        point("uring reactor", depth, r, None);
    }
    // The kernel polling the submission queue (a thread of its own per ring), and polled
    // completions (only for devices with polled queues): kept if they serve more reads.
    for &depth in opts.depths.iter().filter(|d| **d == 1 || **d == 64) {
        // And one ring's reads into registered buffers next to plain ones (the default).
        for (name, sqpoll, iopoll, fixed_buffers) in [
            ("uring sqpoll", Some(2), false, false),
            ("uring iopoll", None, true, false),
            ("uring 1 ring", None, false, false),
            ("uring regbuf", None, false, true),
        ] {
            let engine = UringEngine::new(UringConfig {
                max_in_flight: depth,
                rings: 1,
                sqpoll_idle_ms: sqpoll,
                iopoll,
                reap_on_reactor: false,
                fixed_buffers,
                ..Default::default()
            });
            let measured = match engine {
                Ok(e) => {
                    let e: Arc<dyn IoEngine> = Arc::new(e);
                    measure_engine(e, &opts.file, opts.page_size, depth, opts.secs).await
                }
                Err(e) => Err(e.into()),
            };
            match measured {
                Ok(m) => point(name, depth, m, None),
                Err(e) => eprintln!("{name} depth {depth}: not available here: {e}"),
            }
        }
    }
    // Buffers on 4 KiB pages against buffers on huge pages (the runtime's, `io::arena`), each
    // read held as the pool holds pages, so that buffers rotate through 110 MiB: a buffer on
    // two 4 KiB pages apart in memory is a read of two segments for the disk.
    for &depth in opts.depths.iter().filter(|d| **d == 64) {
        const HOLD: usize = 14_000;
        let keep = (HOLD + 2 * depth) * opts.page_size;
        for (name, recycler) in [
            ("uring held 4k", ooode::io::buf::Recycler::new(keep)),
            ("uring held 2m", ooode::io::buf::Recycler::with_arena(keep)),
        ] {
            if let Some(arena) = recycler.arena() {
                // Ready before the measurement, not by the arena's thread during it.
                let regions = keep.div_ceil(ooode::io::arena::REGION_BYTES);
                arena.prepare(regions)?;
            }
            let engine: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig {
                max_in_flight: depth,
                rings: 1,
                reap_on_reactor: false,
                recycler: Some(recycler),
                ..Default::default()
            })?);
            let m =
                measure_engine_holding(engine, &opts.file, opts.page_size, depth, opts.secs, HOLD)
                    .await?;
            point(name, depth, m, None);
        }
    }
    // Two threads reading at once: one ring they share, or one ring each (what the runtime's
    // workers get); which rings serve more reads for less CPU.
    for &depth in opts.depths.iter().filter(|d| **d >= 16) {
        for (rings, name) in [(1, "uring 2t 1r"), (2, "uring 2t 2r")] {
            let engine: Arc<dyn IoEngine> = Arc::new(UringEngine::new(UringConfig {
                max_in_flight: depth,
                rings,
                // The threads below block this runtime's only thread: no reactor here.
                reap_on_reactor: false,
                ..Default::default()
            })?);
            let m =
                measure_engine_threads(engine, &opts.file, opts.page_size, depth, opts.secs, 2)?;
            point(name, depth, m, None);
        }
    }
    Ok(points)
}

/// The points as a text table.
pub fn format_points(points: &[IoPoint]) -> String {
    let mut out = format!(
        "{:<13} {:>6} {:>10} {:>8} {:>12} {:>10} {:>12} {:>11}\n",
        "engine", "depth", "IOPS", "MB/s", "CPU us/read", "fio IOPS", "fio us/read", "engine/fio"
    );
    for p in points {
        let (fi, fc, ratio) = match (p.fio_iops, p.fio_cpu_us_per_read) {
            (Some(i), Some(c)) => (
                format!("{i:.0}"),
                format!("{c:.1}"),
                format!("{:.2}", p.iops / i),
            ),
            _ => ("-".into(), "-".into(), "-".into()),
        };
        out += &format!(
            "{:<13} {:>6} {:>10.0} {:>8.1} {:>12.1} {:>10} {:>12} {:>11}\n",
            p.engine, p.depth, p.iops, p.mb_per_sec, p.cpu_us_per_read, fi, fc, ratio
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iolog_lists_each_file_once_then_the_reads_in_order() {
        let (a, b) = (PathBuf::from("/d/a.pages"), PathBuf::from("/d/b.pages"));
        let reads = vec![(a.clone(), 8192, 8192), (b, 0, 16384), (a, 0, 8192)];
        let mut out = Vec::new();
        write_iolog(&reads, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "fio version 2 iolog\n/d/a.pages add\n/d/b.pages add\n/d/a.pages open\n\
             /d/b.pages open\n/d/a.pages read 8192 8192\n/d/b.pages read 0 16384\n\
             /d/a.pages read 0 8192\n/d/a.pages close\n/d/b.pages close\n"
        );
        let spaced = vec![(PathBuf::from("/d/a b"), 0, 8192)];
        assert!(write_iolog(&spaced, &mut Vec::new()).is_err());
    }

    #[test]
    fn fio_replays_an_engines_recorded_reads() {
        assert!(
            ensure_fio(),
            "fio is required by this test (the Debian package; .ci/run installs it)"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pages");
        std::fs::write(&path, vec![5u8; 64 * 8192]).unwrap();
        let engine = UringEngine::new(UringConfig::default())
            .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        let file = engine.open(&path).unwrap();
        assert!(engine.record_reads(1000));
        let reads = (0..200u64).map(|i| engine.read(file, (i * 7 % 64) * 8192, 8192));
        futures::executor::block_on(futures::future::try_join_all(reads)).unwrap();
        let recorded = engine.recorded_reads();
        assert_eq!(recorded.len(), 200);
        let (iops, n) = fio_replay(&recorded, 8, 10.0).unwrap();
        assert_eq!(n, 200, "fio made every recorded read, no more");
        assert!(iops > 0.0);
    }
}
