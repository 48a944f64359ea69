//! Heap allocations counted, for a figure of work per page that the VM's noise does not move
//! (the ceiling's CPU per page swings by a fifth between hours on the same build).
//!
//! Off unless `OOODE_COUNT_ALLOCS=1` at start: counting makes every allocation an atomic
//! addition on a line both cores write, which would itself show in the CPU figures.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// mimalloc, counting allocations when asked to.
pub struct CountingMiMalloc;

impl CountingMiMalloc {
    fn count(&self) {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to mimalloc, a correct global allocator; the
// counter touches no memory the allocator hands out.
unsafe impl GlobalAlloc for CountingMiMalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// Starts counting if `OOODE_COUNT_ALLOCS=1` (call once, at start).
pub fn count_if_asked() {
    if std::env::var("OOODE_COUNT_ALLOCS").is_ok_and(|v| v == "1") {
        COUNTING.store(true, Relaxed);
    }
}

/// Allocations (and reallocations) so far, if counting.
pub fn allocations() -> Option<u64> {
    COUNTING.load(Relaxed).then(|| ALLOCATIONS.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_once_asked_and_forwards_memory_intact() {
        let a = CountingMiMalloc;
        let layout = Layout::from_size_align(64, 8).unwrap();
        COUNTING.store(false, Relaxed);
        let before = ALLOCATIONS.load(Relaxed);
        // SAFETY: a non-zero layout; the block is written within it and freed with it.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(7, 64);
            a.dealloc(p, layout);
        }
        assert_eq!(ALLOCATIONS.load(Relaxed), before, "counted while off");
        assert_eq!(allocations(), None);
        COUNTING.store(true, Relaxed);
        // SAFETY: as above; realloc keeps the first 64 bytes.
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert_eq!(*p.add(63), 0);
            p.write_bytes(9, 64);
            let q = a.realloc(p, layout, 128);
            assert_eq!(*q.add(63), 9);
            a.dealloc(q, Layout::from_size_align(128, 8).unwrap());
        }
        COUNTING.store(false, Relaxed);
        assert_eq!(ALLOCATIONS.load(Relaxed) - before, 2);
    }
}
