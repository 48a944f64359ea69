//! Which ring a read goes to.
//!
//! Threads that run at the same time should never share a ring: they would take turns at its
//! submission lock, and a submitter's reaping in passing (`Ring::reap(false)`) gives up while
//! another thread reaps. Numbering threads as they first read and handing them rings in turn
//! does not ensure it: at 64 clients five threads read (the main thread, two tokio workers,
//! two idle-lane threads), and ring 0 served three of them while ring 1 served two, on both
//! cores at once. So where the process may run on no more CPUs than there are rings, each of
//! those CPUs gets a ring of its own and a read goes to the ring of the CPU its thread runs on
//! (`sched_getcpu`, which glibc reads from the thread's rseq area, without a system call).
//! Where it may run on more CPUs than there are rings (a CPU quota rather than a CPU set),
//! CPUs would share rings by chance, so threads take rings in turn as they first read.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::io::cpus::{allowed_cpus, current_cpu};

/// How reads are spread over `rings` rings.
#[derive(Debug)]
pub struct RingChoice {
    rings: usize,
    /// Ring of each CPU the process may run on, indexed by CPU number (`NONE` elsewhere);
    /// `None`: by thread.
    by_cpu: Option<Box<[u16]>>,
}

const NONE: u16 = u16::MAX;

impl RingChoice {
    /// The choice for `rings` rings (at least one) and the CPUs this thread may run on.
    pub fn new(rings: usize) -> Self {
        let rings = rings.max(1);
        let allowed = allowed_cpus();
        let by_cpu = (!allowed.is_empty() && allowed.len() <= rings).then(|| {
            let mut table = vec![NONE; allowed.iter().max().map_or(0, |&c| c + 1)];
            for (ring, &cpu) in allowed.iter().enumerate() {
                table[cpu] = ring as u16;
            }
            table.into_boxed_slice()
        });
        Self { rings, by_cpu }
    }

    /// Whether reads go by CPU (else by thread).
    pub fn by_cpu(&self) -> bool {
        self.by_cpu.is_some()
    }

    /// The ring for a read started now by this thread.
    pub fn ring(&self) -> usize {
        if let Some(table) = &self.by_cpu {
            let ring = current_cpu().and_then(|c| table.get(c));
            if let Some(&ring) = ring.filter(|&&r| r != NONE) {
                return usize::from(ring);
            }
            // A CPU the process was not allowed when the engine was made: by thread.
        }
        thread_slot() % self.rings
    }
}

/// Threads numbered as they first ask.
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Relaxed);
    }
    SLOT.with(|s| *s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::cpus::pin;

    /// A thread moved from CPU to CPU sends its reads to each CPU's own ring in turn.
    #[test]
    fn with_a_ring_per_cpu_each_cpu_has_its_own() {
        std::thread::spawn(|| {
            let allowed = allowed_cpus();
            assert!(!allowed.is_empty(), "no CPU this thread may run on");
            let choice = RingChoice::new(allowed.len());
            assert!(choice.by_cpu());
            let mut seen = Vec::new();
            for &cpu in &allowed {
                pin(cpu);
                let ring = choice.ring();
                assert!(ring < allowed.len(), "CPU {cpu}: ring {ring}");
                assert_eq!(choice.ring(), ring, "CPU {cpu}: the same ring again");
                seen.push(ring);
            }
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), allowed.len(), "CPUs share a ring: {seen:?}");
        })
        .join()
        .unwrap();
    }

    /// With fewer rings than CPUs, a thread keeps its ring wherever it runs.
    #[test]
    fn with_fewer_rings_than_cpus_a_thread_keeps_its_ring() {
        std::thread::spawn(|| {
            let allowed = allowed_cpus();
            let rings = allowed.len().saturating_sub(1).max(1);
            let choice = RingChoice::new(rings);
            assert_eq!(choice.by_cpu(), allowed.len() <= rings);
            let first = choice.ring();
            assert!(first < rings);
            for &cpu in &allowed {
                pin(cpu);
                if !choice.by_cpu() {
                    assert_eq!(choice.ring(), first, "CPU {cpu}");
                }
            }
        })
        .join()
        .unwrap();
    }
}
