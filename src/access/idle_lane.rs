//! The idle lane (`ooode.long_queries_idle_priority`): threads of a runtime's own, at the
//! OS's idle priority (`SCHED_IDLE`), that run the operators of long queries beside short
//! ones.
//!
//! ```text
//!   operator task of a query ──> short, or alone, or no short query lately ──> caller's runtime
//!        └─ long, another query executing, a short one started within 5 s ──> the idle lane
//!           (a tokio runtime whose threads are SCHED_IDLE)
//! ```
//!
//! Why: tokio has no task priorities, and its run queues are first in, first out. Under load
//! a point lookup's few steps waited for a core behind the long queries' decoding, once per
//! dependent read. On the idle lane the kernel runs the long queries' threads only when the
//! caller's threads have nothing to do, and preempts them the moment a short query's task
//! wakes. Measured at 64 clients (SF 1, release, 2 cores, alternating with the lane off):
//! median latency 11.3-13.1 ms against 19.1-24.1, points' reads 1.7-1.8 ms from submission
//! to use against 3.3-3.5, the same queries per second and points' p99 (docs/log.md).
//! A long query alone does not use the lane: its hand-offs to a consumer on other threads
//! cost a hot Fig. 4 query at 1 % of customers 40 % (28 ms against 20).
//!
//! The lane's threads read at the idle I/O class, set explicitly (see
//! `set_io_priority_idle`): the kernel's queue then sends short queries' reads first.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::runtime::{Builder, Handle, Runtime};

/// A multi-threaded tokio runtime whose workers run at the OS's idle priority.
#[derive(Debug)]
pub struct IdleLane {
    /// Taken on drop, to shut down without blocking (the last owner may be a task).
    runtime: Option<Runtime>,
    /// The kernel's thread ids of the workers.
    threads: Arc<Mutex<Vec<libc::pid_t>>>,
}

impl IdleLane {
    /// A lane of `threads` workers (at least one).
    pub fn start(threads: usize) -> std::io::Result<Self> {
        let tids = Arc::new(Mutex::new(Vec::new()));
        let on_start = tids.clone();
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("ooode-idle")
            .enable_all()
            .on_thread_start(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: `param` lives on this stack; pid 0 is the calling thread. Any
                // thread may lower its own priority, so this needs no privilege.
                if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
                    log::warn!(
                        "ooode: the idle lane's thread {tid} keeps its priority: {}",
                        std::io::Error::last_os_error()
                    );
                }
                if let Err(e) = set_io_priority_idle() {
                    log::warn!("ooode: the idle lane's thread {tid} keeps its I/O priority: {e}");
                }
                on_start.lock().push(tid);
            })
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
            threads: tids,
        })
    }

    /// Where to spawn tasks on the lane.
    pub fn handle(&self) -> &Handle {
        self.runtime
            .as_ref()
            .expect("runtime until dropped")
            .handle()
    }

    /// Of the lane's worker threads started so far, those the kernel schedules at idle
    /// priority (asked of the kernel, not remembered), and all of them.
    pub fn threads_at_idle_priority(&self) -> (usize, usize) {
        let tids = self.threads.lock();
        let idle = tids
            .iter()
            // SAFETY: sched_getscheduler only reads the policy of a thread id; a thread
            // that has ended returns -1.
            .filter(|&&tid| unsafe { libc::sched_getscheduler(tid) } == libc::SCHED_IDLE)
            .count();
        (idle, tids.len())
    }
}

/// `ioprio_set`'s `which` for one thread (`IOPRIO_WHO_PROCESS`, with a thread id).
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
/// The idle I/O class: `IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)`.
const IOPRIO_IDLE: libc::c_int = 3 << 13;

/// Puts the calling thread's reads in the idle I/O class. The kernel derives that class
/// from `SCHED_IDLE` when a thread has no I/O priority of its own; set here, it no longer
/// depends on that rule. Why idle: the clients' threads read at best effort, and the
/// kernel's queue (mq-deadline) sends a higher class's reads first, ageing a lower one's
/// after 10 s, so a point lookup's reads pass the long queries' queued ones. Measured at 64
/// clients (SF 1), points' reads from submission to use: 0.93-1.22 ms with the lane's reads
/// idle (seven runs) against 1.52-1.73 ms with them best effort (four runs); the device
/// no different (74-84 % of fio beside idle, 79-84 % best effort, the VM's drift). Under
/// BFQ the idle class would get the disk only when no other class wants it.
fn set_io_priority_idle() -> std::io::Result<()> {
    // SAFETY: ioprio_set takes three integers and touches no memory of ours; thread id 0 is
    // the calling thread, and no privilege is needed for the idle class.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_IDLE) };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The I/O priority of thread `tid` as `ioprio_get` tells it (-1 on error).
#[cfg(test)]
fn io_priority(tid: libc::pid_t) -> libc::c_long {
    // SAFETY: ioprio_get only reads a thread's priority.
    unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid) }
}

impl Drop for IdleLane {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // A runtime dropped inside another's task would panic waiting for its workers.
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_workers_run_at_idle_priority() {
        let lane = IdleLane::start(2).unwrap();
        let handle = lane.handle().clone();
        // Both workers run a task (a worker is started before it runs one).
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let tx = tx.clone();
            handle.spawn(async move {
                // SAFETY: reads the calling thread's policy.
                let policy = unsafe { libc::sched_getscheduler(0) };
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                tx.send((policy, io_priority(tid))).unwrap();
            });
        }
        for _ in 0..2 {
            let (policy, io_priority) = rx.recv().unwrap();
            assert_eq!(policy, libc::SCHED_IDLE);
            // Its reads' class is its own, not left to the kernel's rule for SCHED_IDLE.
            assert_eq!(io_priority, IOPRIO_IDLE as libc::c_long);
        }
        // Both workers start with the runtime; wait for the second to note itself.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while lane.threads_at_idle_priority().1 < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(lane.threads_at_idle_priority(), (2, 2));
    }

    #[tokio::test]
    async fn dropping_it_inside_a_task_does_not_panic() {
        let lane = IdleLane::start(1).unwrap();
        let running = lane.handle().spawn(async { 7 });
        assert_eq!(running.await.unwrap(), 7);
        drop(lane);
    }
}
