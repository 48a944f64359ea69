//! How deep ooode keeps the device during a run: its engines' reads in flight and the
//! admission permits held, sampled every [`INTERVAL`] on a thread of their own.
//!
//! Device IOPS alone cannot tell a disk that is slow from one that is left idle. At 64
//! clients (SF 1, 2 cores) ooode held all its permits nearly all the time while its reads in
//! flight fell below [`SHALLOW`] in about a tenth of the samples: the permits were held by
//! pages read and not yet used, or granted to tasks that had not run, so the device waited
//! for the CPU, not for admission. fio reaches about 95 % of its depth-64 IOPS at depth 16
//! on this disk, so below `SHALLOW` the device is surely underfed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ooode::access::OoodeRuntime;
use ooode::io::metrics::SamplingThread;

/// Time between samples.
pub const INTERVAL: Duration = Duration::from_millis(2);

/// Reads in flight below which the device is counted underfed.
pub const SHALLOW: u64 = 32;

/// Reads in flight and permits held over a run (means of the samples).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Depth {
    /// Samples taken.
    pub samples: usize,
    /// Reads the engines had in flight (submitted and not yet reaped).
    pub mean_in_flight: f64,
    /// Share of the samples with fewer than [`SHALLOW`] reads in flight.
    pub shallow_share: f64,
    /// Admission permits held (reads in flight, or read and not yet used).
    pub mean_permits: f64,
    /// The runtime's cap on permits.
    pub permit_cap: usize,
}

impl Depth {
    /// The summary of `(in flight, permits)` samples under a cap of `permit_cap`.
    pub fn of(samples: &[(u64, u64)], permit_cap: usize) -> Self {
        let n = samples.len().max(1) as f64;
        let mean = |f: fn(&(u64, u64)) -> u64| samples.iter().map(f).sum::<u64>() as f64 / n;
        Self {
            samples: samples.len(),
            mean_in_flight: mean(|s| s.0),
            shallow_share: samples.iter().filter(|s| s.0 < SHALLOW).count() as f64 / n,
            mean_permits: mean(|s| s.1),
            permit_cap,
        }
    }
}

/// Samples a runtime until finished; the summary keeps the samples taken before a deadline.
pub struct DepthSampler {
    thread: SamplingThread<(u64, u64, bool)>,
    runtime: Arc<OoodeRuntime>,
}

impl DepthSampler {
    /// Starts sampling `runtime`; samples from `until` on are left out of the summary (a run's
    /// last queries finishing after its clients stopped starting new ones).
    pub fn start(runtime: Arc<OoodeRuntime>, until: Instant) -> std::io::Result<Self> {
        let rt = runtime.clone();
        let thread = SamplingThread::start("depth-sampler", INTERVAL, move || {
            let in_flight = rt
                .engines()
                .iter()
                .map(|e| e.metrics().snapshot_in_flight())
                .sum();
            let before = Instant::now() < until;
            (in_flight, rt.admission().in_use() as u64, before)
        })?;
        Ok(Self { thread, runtime })
    }

    /// Stops sampling; the summary (None if the sampling thread failed).
    pub fn finish(self) -> Option<Depth> {
        let samples: Vec<(u64, u64)> = (self.thread.finish()?.into_iter())
            .filter(|s| s.2)
            .map(|s| (s.0, s.1))
            .collect();
        Some(Depth::of(&samples, self.runtime.admission().cap()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_and_the_shallow_share() {
        let d = Depth::of(&[(0, 256), (31, 256), (32, 200), (201, 256)], 256);
        assert_eq!(d.samples, 4);
        assert_eq!(d.mean_in_flight, 66.0);
        assert_eq!(d.shallow_share, 0.5, "0 and 31 are below 32");
        assert_eq!(d.mean_permits, 242.0);
        assert_eq!(Depth::of(&[], 8).shallow_share, 0.0);
    }
}
