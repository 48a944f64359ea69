//! The lines a run prints as it goes.

use crate::depth::SHALLOW;

use super::{ConcurrencyPoint, PointTail};

/// Where the slowest point lookups' time went, as one line.
pub(super) fn tail_line(t: &PointTail) -> String {
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
pub(super) fn first_points_line(t: &PointTail) -> String {
    format!(
        "points that were a client's first query ({}), on average: started {:.1} ms after the \
         run, {}",
        t.queries,
        t.started_ms,
        breakdown(t)
    )
}

/// One measurement's lines on stderr.
pub(super) fn print_run(p: &ConcurrencyPoint) {
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
