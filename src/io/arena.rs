//! Page buffers carved from a few large regions of memory that io_uring rings register with
//! the kernel (fixed buffers).
//!
//! A read into a registered buffer skips pinning and unpinning the buffer's pages in the
//! kernel on every read (`fio --fixedbufs`, random 8 KiB O_DIRECT reads at depth 64 here:
//! 5.1-6.0 us of CPU per read against 6.3-7.4 without). Pages are used where they were read
//! (they stay in the buffer pool), so the regions hold the pool's pages themselves; a buffer
//! freed goes back to the recycler and serves a later read, never to the allocator. Only an
//! engine set up for registered buffers uses an arena (off by default: see
//! [`crate::io::uring::UringConfig::fixed_buffers`]).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::page::{AlignedBuf, PAGE_ALIGN};

/// Bytes of one region: a multiple of every page size (powers of two up to 64 KiB).
pub const REGION_BYTES: usize = 4 << 20;
/// Most regions of one arena (and the size of a ring's table of registered buffers).
pub const MAX_REGIONS: usize = 4096;
/// Regions are aligned for transparent huge pages.
const REGION_ALIGN: usize = 2 << 20;

/// Regions of page buffers, allocated as they are needed up to a limit.
#[derive(Debug)]
pub struct Arena {
    most_regions: usize,
    carving: Mutex<Carving>,
}

#[derive(Debug)]
struct Carving {
    regions: Vec<NonNull<u8>>,
    /// Bytes of the last region handed out.
    used_in_last: usize,
}

// SAFETY: the regions are allocations the arena owns; it hands each byte to one buffer at
// most and touches none itself, so sharing the arena between threads shares no bytes.
unsafe impl Send for Arena {}
// SAFETY: as above; `carving` is behind a mutex.
unsafe impl Sync for Arena {}

impl Arena {
    /// An arena of at most `bytes` (whole regions; None when that is not one region).
    pub fn new(bytes: usize) -> Option<Arc<Self>> {
        let most_regions = (bytes / REGION_BYTES).min(MAX_REGIONS);
        (most_regions > 0).then(|| {
            Arc::new(Self {
                most_regions,
                carving: Mutex::new(Carving {
                    regions: Vec::new(),
                    used_in_last: 0,
                }),
            })
        })
    }

    fn layout() -> Layout {
        Layout::from_size_align(REGION_BYTES, REGION_ALIGN).expect("arena region layout")
    }

    /// A new buffer of `len` bytes, or None when the arena is full, `len` is not a page size
    /// it can hold, or memory for a new region cannot be had.
    pub fn carve(self: &Arc<Self>, len: usize) -> Option<AlignedBuf> {
        if len == 0 || !len.is_multiple_of(PAGE_ALIGN) || !REGION_BYTES.is_multiple_of(len) {
            return None;
        }
        let mut c = self.carving.lock();
        if c.regions.is_empty() || c.used_in_last + len > REGION_BYTES {
            if c.regions.len() >= self.most_regions {
                return None;
            }
            // SAFETY: the layout has a non-zero size.
            let region = NonNull::new(unsafe { alloc_zeroed(Self::layout()) })?;
            c.regions.push(region);
            c.used_in_last = 0;
        }
        let index = c.regions.len() - 1;
        // SAFETY: `used_in_last + len <= REGION_BYTES`, so the slice is inside the region.
        let ptr = unsafe { c.regions[index].add(c.used_in_last) };
        c.used_in_last += len;
        let owner: Arc<dyn std::any::Any + Send + Sync> = self.clone();
        // SAFETY: zeroed at allocation; aligned (the region is, and `len` divides the
        // region's size, so every slice starts at a multiple of `len`, itself a multiple of
        // PAGE_ALIGN); the arena frees regions only when dropped, which `owner` prevents; the
        // bytes were never handed out before.
        Some(unsafe { AlignedBuf::from_region(ptr, len, index as u32, owner) })
    }

    /// Region `index`'s address and size, for registering it with a ring.
    pub fn region(&self, index: u32) -> Option<libc::iovec> {
        let c = self.carving.lock();
        let base = c.regions.get(index as usize)?;
        Some(libc::iovec {
            iov_base: base.as_ptr().cast(),
            iov_len: REGION_BYTES,
        })
    }

    /// Regions allocated so far.
    pub fn regions(&self) -> usize {
        self.carving.lock().regions.len()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for region in self.carving.get_mut().regions.drain(..) {
            // SAFETY: allocated in `carve` with this layout; no buffer is left (each holds
            // the arena) and a ring that registered the region keeps its own reference to
            // the pages, and uses the region only for reads into a live buffer.
            unsafe { dealloc(region.as_ptr(), Self::layout()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carves_aligned_disjoint_buffers_up_to_its_limit() {
        let arena = Arena::new(2 * REGION_BYTES).unwrap();
        let per_region = REGION_BYTES / 8192;
        let bufs: Vec<AlignedBuf> = (0..2 * per_region)
            .map(|_| arena.carve(8192).expect("room for two regions of pages"))
            .collect();
        assert!(arena.carve(8192).is_none(), "the limit is two regions");
        assert_eq!(arena.regions(), 2);
        let mut starts: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
        assert!(starts.iter().all(|a| a % PAGE_ALIGN == 0));
        starts.sort_unstable();
        assert!(starts.windows(2).all(|w| w[1] - w[0] >= 8192), "no overlap");
        assert_eq!(bufs[0].region(), Some(0));
        assert_eq!(bufs[per_region].region(), Some(1));
        let r1 = arena.region(1).unwrap();
        let last = bufs.last().unwrap().as_ptr() as usize;
        assert!((r1.iov_base as usize..r1.iov_base as usize + r1.iov_len).contains(&last));
        assert!(bufs.iter().all(|b| b.iter().all(|&x| x == 0)), "zeroed");
    }

    #[test]
    fn refuses_sizes_that_do_not_tile_a_region_and_small_limits() {
        assert!(Arena::new(REGION_BYTES - 1).is_none());
        let arena = Arena::new(REGION_BYTES).unwrap();
        assert!(arena.carve(0).is_none());
        assert!(arena.carve(3 * 4096).is_none());
        assert!(arena.carve(100).is_none());
        assert!(arena.carve(2 * REGION_BYTES).is_none());
        assert!(arena.carve(65536).is_some());
    }

    #[test]
    fn a_buffer_names_its_region_only_to_its_own_arena() {
        let (a, b) = (
            Arena::new(REGION_BYTES).unwrap(),
            Arena::new(REGION_BYTES).unwrap(),
        );
        let buf = a.carve(8192).unwrap();
        assert_eq!(buf.region_of(&a), Some(0));
        assert_eq!(buf.region_of(&b), None);
        assert_eq!(AlignedBuf::zeroed(8192).region_of(&a), None);
    }

    #[test]
    fn buffers_keep_the_arena_alive() {
        let arena = Arena::new(REGION_BYTES).unwrap();
        let mut buf = arena.carve(4096).unwrap();
        let weak = Arc::downgrade(&arena);
        drop(arena);
        assert!(weak.upgrade().is_some(), "the buffer holds the arena");
        buf[0] = 9;
        assert_eq!(buf[0], 9);
        drop(buf);
        assert!(weak.upgrade().is_none(), "the last buffer let it go");
    }
}
