//! Which CPU a thread runs on, and which it may run on: what spreads the runtime's shared
//! state (io_uring rings, counters) so that cores running at once do not share it.

/// The CPU the calling thread runs on now, if known (`sched_getcpu`, which glibc reads from
/// the thread's rseq area, without a system call).
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's CPU.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// The CPUs the calling thread may run on, in increasing order (empty if unknown).
pub fn allowed_cpus() -> Vec<usize> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is a plain bit set; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of `size` bytes, which the call only writes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: every `cpu` is below CPU_SETSIZE, within the set's bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`, one of [`allowed_cpus`] (for tests that move a thread
/// from CPU to CPU).
#[cfg(test)]
pub fn pin(cpu: usize) {
    // SAFETY: all zeroes is the empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` comes from `allowed_cpus`, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `one` is a valid cpu_set_t of `size` bytes; only the calling thread is pinned.
    let pinned = unsafe { libc::sched_setaffinity(0, size, &one) };
    assert_eq!(pinned, 0, "sched_setaffinity to CPU {cpu}");
}
