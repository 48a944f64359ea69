//! I/O counters: per engine, per query or per plan node, and a sampler of IOPS and CPU over time.

use std::borrow::Borrow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Counters of page reads. All methods are lock-free; one set can be shared by many tasks.
///
/// A node's and its query's counters are counted in by every read and every buffer pool hit
/// of the query, on every core. Sums go to a stripe of the core the thread runs on, so that
/// cores do not pass the same cache line back and forth (measured: about 3 % of the CPU per
/// page of a join from the OS cache, on two cores); only the reads in flight, whose every change
/// must see the others, stay shared.
#[derive(Debug, Default)]
pub struct IoMetrics {
    shared: InFlight,
    stripes: [Stripe; STRIPES],
}

/// Stripes of the summed counters: cores beyond this share them.
const STRIPES: usize = 8;

/// What every read's start and end must see as a whole.
#[derive(Debug, Default)]
#[repr(align(64))]
struct InFlight {
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    depth_sum: AtomicU64,
}

/// One core's share of the summed counters, on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Stripe {
    reads: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    hits: AtomicU64,
    read_nanos: AtomicU64,
    queued: AtomicU64,
    queued_nanos: AtomicU64,
}

/// A snapshot of [`IoMetrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct IoSnapshot {
    /// Reads issued to the device.
    pub reads: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Reads that failed.
    pub errors: u64,
    /// Pages served from the buffer pool (or joined to a read already in flight).
    pub hits: u64,
    /// Reads in flight now.
    pub in_flight: u64,
    /// Most reads in flight at once.
    pub max_in_flight: u64,
    /// Mean reads in flight, seen by each read as it was issued (itself included).
    pub mean_in_flight: f64,
    /// Total time reads were outstanding, summed over reads (queue time included).
    pub read_time: Duration,
    /// Reads that waited in the engine's queue for the device.
    pub queued: u64,
    /// Their time in that queue, summed.
    pub queue_time: Duration,
}

impl IoMetrics {
    /// New zeroed counters.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Marks a read as issued; returns a guard that marks it complete when dropped.
    pub fn start_read(self: &Arc<Self>) -> ReadGuard {
        ReadGuard::start([Some(self.clone()), None])
    }

    /// The stripe of the core this thread runs on.
    fn stripe(&self) -> &Stripe {
        &self.stripes[crate::io::cpus::current_cpu().unwrap_or(0) % STRIPES]
    }

    /// A counter summed over the stripes.
    fn sum(&self, counter: impl Fn(&Stripe) -> &AtomicU64) -> u64 {
        self.stripes.iter().map(|s| counter(s).load(Relaxed)).sum()
    }

    fn note_start(&self) {
        let shared = &self.shared;
        let depth = shared.in_flight.fetch_add(1, Relaxed) + 1;
        // Written only when passed: a locked instruction per read on a line both cores share.
        if depth > shared.max_in_flight.load(Relaxed) {
            shared.max_in_flight.fetch_max(depth, Relaxed);
        }
        shared.depth_sum.fetch_add(depth, Relaxed);
        self.stripe().reads.fetch_add(1, Relaxed);
    }

    /// Counts the end of a read started `nanos` ago.
    fn note_end(&self, nanos: u64) {
        self.shared.in_flight.fetch_sub(1, Relaxed);
        self.stripe().read_nanos.fetch_add(nanos, Relaxed);
    }

    /// Reads in flight now.
    pub fn snapshot_in_flight(&self) -> u64 {
        self.shared.in_flight.load(Relaxed)
    }

    /// Counts a read that waited `waited` in the engine's queue before it went to the device.
    pub fn note_queued(&self, waited: Duration) {
        let stripe = self.stripe();
        stripe.queued.fetch_add(1, Relaxed);
        (stripe.queued_nanos).fetch_add(waited.as_nanos() as u64, Relaxed);
    }

    /// Counts a buffer pool hit.
    pub fn hit(&self) {
        self.hits(1);
    }

    /// Counts `n` buffer pool hits.
    pub fn hits(&self, n: u64) {
        self.stripe().hits.fetch_add(n, Relaxed);
    }

    /// Current values.
    pub fn snapshot(&self) -> IoSnapshot {
        let reads = self.sum(|s| &s.reads);
        let shared = &self.shared;
        IoSnapshot {
            reads,
            bytes: self.sum(|s| &s.bytes),
            errors: self.sum(|s| &s.errors),
            hits: self.sum(|s| &s.hits),
            in_flight: shared.in_flight.load(Relaxed),
            max_in_flight: shared.max_in_flight.load(Relaxed),
            mean_in_flight: if reads == 0 {
                0.0
            } else {
                shared.depth_sum.load(Relaxed) as f64 / reads as f64
            },
            read_time: Duration::from_nanos(self.sum(|s| &s.read_nanos)),
            queued: self.sum(|s| &s.queued),
            queue_time: Duration::from_nanos(self.sum(|s| &s.queued_nanos)),
        }
    }

    /// Resets the high-water mark of reads in flight (between benchmark runs).
    pub fn reset_max_in_flight(&self) {
        let shared = &self.shared;
        (shared.max_in_flight).store(shared.in_flight.load(Relaxed), Relaxed);
    }
}

/// An outstanding read, counted in up to two sets of counters (say a node's and a query's)
/// and timed once for both; dropping it completes the read in them.
///
/// It holds the counters as `M`: shared (`Arc`, for a read that outlives its caller) or
/// borrowed (from a future that owns them).
#[derive(Debug)]
pub struct ReadGuard<M: Borrow<IoMetrics> = Arc<IoMetrics>> {
    metrics: [Option<M>; 2],
    /// None when nothing counts the read (no clock read then).
    started: Option<Instant>,
}

impl<M: Borrow<IoMetrics>> ReadGuard<M> {
    /// Marks a read as issued in each of `metrics`.
    pub fn start(metrics: [Option<M>; 2]) -> Self {
        metrics
            .iter()
            .flatten()
            .for_each(|m| m.borrow().note_start());
        let started = metrics.iter().any(Option::is_some).then(Instant::now);
        Self { metrics, started }
    }

    /// The guard of a read [`Self::into_started`] let go of, to complete it.
    pub fn resume(metrics: [Option<M>; 2], started: Option<Instant>) -> Self {
        Self { metrics, started }
    }

    /// Lets go of the read without completing it, for [`Self::resume`] elsewhere (where the
    /// counters are at hand without being held per read): when it started.
    pub fn into_started(mut self) -> Option<Instant> {
        self.started.take()
    }

    /// Completes the read at `ended`, a clock read once for many completions (else as
    /// [`Self::finish`]).
    pub fn finish_at(mut self, bytes: Option<usize>, ended: Instant) {
        self.end_at(ended);
        self.finish(bytes);
    }

    /// Ends the read's time in flight at `ended` (once: a guard ended is not timed again).
    fn end_at(&mut self, ended: Instant) {
        if let Some(started) = self.started.take() {
            let nanos = ended.saturating_duration_since(started).as_nanos() as u64;
            (self.metrics.iter().flatten()).for_each(|m| m.borrow().note_end(nanos));
        }
    }

    /// Completes the read: `Some(bytes)` on success, None on failure.
    pub fn finish(self, bytes: Option<usize>) {
        for m in self.metrics.iter().flatten() {
            let stripe = m.borrow().stripe();
            match bytes {
                Some(b) => stripe.bytes.fetch_add(b as u64, Relaxed),
                None => stripe.errors.fetch_add(1, Relaxed),
            };
        }
    }
}

impl<M: Borrow<IoMetrics>> Drop for ReadGuard<M> {
    fn drop(&mut self) {
        // None when nothing counts the read: no clock read then.
        if self.started.is_some() {
            self.end_at(Instant::now());
        }
    }
}

/// One sample of the [`Sampler`].
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sample {
    /// Seconds since the sampler started.
    pub t: f64,
    /// Reads per second over the last interval.
    pub iops: f64,
    /// Process CPU use over the last interval, in percent of one core.
    pub cpu_percent: f64,
    /// Reads in flight at the sample.
    pub in_flight: u64,
}

/// A thread that takes a sample every `interval` until finished: the loop under
/// [`Sampler`] and the benchmarks' own samplers.
#[derive(Debug)]
pub struct SamplingThread<T> {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<T>>>,
}

impl<T: Send + 'static> SamplingThread<T> {
    /// Starts a thread named `name` that calls `sample` every `interval`.
    pub fn start(
        name: &str,
        interval: Duration,
        mut sample: impl FnMut() -> T + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut samples = Vec::new();
                while !flag.load(Relaxed) {
                    std::thread::sleep(interval);
                    samples.push(sample());
                }
                samples
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops sampling; the samples (None if the sampling thread panicked).
    pub fn finish(mut self) -> Option<Vec<T>> {
        self.stop.store(true, Relaxed);
        self.thread.take()?.join().ok()
    }
}

impl<T> Drop for SamplingThread<T> {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// Samples IOPS (from an [`IoMetrics`]) and process CPU on a background thread.
#[derive(Debug)]
pub struct Sampler(SamplingThread<Sample>);

/// Resource usage of this process so far (None if the kernel refused).
fn process_usage() -> Option<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: getrusage returned 0, so the struct is initialized.
    (rc == 0).then(|| unsafe { usage.assume_init() })
}

/// CPU time of this process (user + system).
pub fn process_cpu_time() -> Duration {
    let Some(usage) = process_usage() else {
        return Duration::ZERO;
    };
    duration(usage.ru_utime) + duration(usage.ru_stime)
}

/// CPU time this process has spent in the kernel (system time) so far, all threads.
pub fn process_system_time() -> Duration {
    process_usage().map_or(Duration::ZERO, |usage| duration(usage.ru_stime))
}

fn duration(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

/// Page faults of this process so far that had to read from disk.
pub fn process_major_faults() -> u64 {
    process_usage().map_or(0, |usage| usage.ru_majflt as u64)
}

/// Page faults of this process so far that read nothing from disk (a page mapped from the OS
/// cache, or fresh memory).
pub fn process_minor_faults() -> u64 {
    process_usage().map_or(0, |usage| usage.ru_minflt as u64)
}

impl Sampler {
    /// Starts sampling `metrics` every `interval`.
    pub fn start(metrics: Arc<IoMetrics>, interval: Duration) -> Self {
        let start = Instant::now();
        let (mut last_t, mut last_reads, mut last_cpu) =
            (start, metrics.snapshot().reads, process_cpu_time());
        let thread = SamplingThread::start("ooode-io-sampler", interval, move || {
            let now = Instant::now();
            let snap = metrics.snapshot();
            let cpu = process_cpu_time();
            let dt = (now - last_t).as_secs_f64().max(1e-9);
            let sample = Sample {
                t: (now - start).as_secs_f64(),
                iops: (snap.reads - last_reads) as f64 / dt,
                cpu_percent: (cpu.saturating_sub(last_cpu)).as_secs_f64() / dt * 100.0,
                in_flight: snap.in_flight,
            };
            (last_t, last_reads, last_cpu) = (now, snap.reads, cpu);
            sample
        })
        .expect("spawn sampler thread");
        Self(thread)
    }

    /// Stops sampling; returns the samples.
    pub fn finish(self) -> Vec<Sample> {
        self.0.finish().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads started on one core and finished on another, by threads pinned to each CPU in
    /// turn, add up over the stripes; the reads in flight return to zero.
    #[test]
    fn counts_from_every_core_add_up() {
        use crate::io::cpus::{allowed_cpus, pin};
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "no CPU allowed");
        let m = IoMetrics::new();
        let per_cpu = 100u64;
        let guards: Vec<ReadGuard> = std::thread::scope(|scope| {
            (cpus.iter())
                .map(|&cpu| {
                    let m = m.clone();
                    scope.spawn(move || {
                        pin(cpu);
                        m.hits(2);
                        (0..per_cpu).map(|_| m.start_read()).collect::<Vec<_>>()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let started = cpus.len() as u64 * per_cpu;
        assert_eq!(m.snapshot().in_flight, started);
        // Finished on other cores than they started on.
        std::thread::scope(|scope| {
            let mut guards = guards;
            for &cpu in cpus.iter().rev() {
                let mine: Vec<ReadGuard> = guards.drain(..per_cpu as usize).collect();
                scope.spawn(move || {
                    pin(cpu);
                    mine.into_iter().for_each(|g| g.finish(Some(8192)));
                });
            }
        });
        let s = m.snapshot();
        assert_eq!(
            (s.reads, s.bytes, s.hits, s.in_flight, s.max_in_flight),
            (started, started * 8192, 2 * cpus.len() as u64, 0, started)
        );
    }

    #[test]
    fn counters_and_sampler() {
        let m = IoMetrics::new();
        let sampler = Sampler::start(m.clone(), Duration::from_millis(5));
        let guards: Vec<_> = (0..3).map(|_| m.start_read()).collect();
        assert_eq!(m.snapshot().in_flight, 3);
        std::thread::sleep(Duration::from_millis(30));
        for g in guards {
            g.finish(Some(4096));
        }
        m.hit();
        let s = m.snapshot();
        assert_eq!(
            (s.reads, s.bytes, s.hits, s.in_flight, s.max_in_flight),
            (3, 3 * 4096, 1, 0, 3)
        );
        assert!((s.mean_in_flight - 2.0).abs() < 1e-9, "depths 1, 2, 3");
        let samples = sampler.finish();
        assert!(samples.len() >= 3, "{} samples", samples.len());
        assert!(samples.iter().any(|x| x.in_flight == 3));
        assert!(samples.iter().all(|x| x.t > 0.0 && x.iops >= 0.0));
    }
}
