//! The block device's counters from `/proc/diskstats`, read before and after a run.

use std::path::Path;

/// Counters of the block device holding a path, from `/proc/diskstats`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct DiskCounters {
    /// Reads completed.
    pub(super) reads: u64,
    /// Reads the I/O scheduler merged into adjacent ones before they reached the device.
    pub(super) merged: u64,
    /// 512-byte sectors read.
    pub(super) sectors: u64,
    /// Milliseconds reads spent in the kernel, from their arrival at the block layer to their
    /// completion (the I/O scheduler's queue and the device), summed over reads.
    pub(super) read_ms: u64,
    /// Milliseconds of I/O in flight weighted by how many were (its mean over a time is the
    /// mean number of I/Os in the kernel then).
    pub(super) weighted_ms: u64,
}

impl DiskCounters {
    /// Of the device holding `path`.
    pub(super) fn of(path: &Path) -> Option<Self> {
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
    pub(super) fn parse(stats: &str, major: u32, minor: u32) -> Option<Self> {
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
    pub(super) fn since(&self, before: &Self, secs: f64) -> DiskRates {
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
pub(super) struct DiskRates {
    /// Reads completed per second.
    pub(super) iops: f64,
    /// Mean milliseconds a read spent in the kernel.
    pub(super) read_ms: Option<f64>,
    /// Mean I/Os in the kernel.
    pub(super) depth: Option<f64>,
    /// Mean KiB a read.
    pub(super) read_kib: Option<f64>,
    /// Of the reads that arrived, the share merged into another before the device.
    pub(super) merged_share: Option<f64>,
}
