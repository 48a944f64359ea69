//! Page buffers: aligned, owned by whoever holds them, recycled when the last holder lets go.
//!
//! An engine takes an [`AlignedBuf`] from the [`Recycler`], lends it to the kernel for the read
//! (the engine, not the waiting future, owns it until the kernel is done), and hands the filled
//! buffer out as a [`PageBuf`]. Clones of a `PageBuf` share the bytes (the buffer pool keeps one,
//! readers hold others); when the last one drops, the buffer goes back to the recycler.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use crate::io::arena::Arena;
use crate::storage::page::AlignedBuf;

/// Buffers of its own a recycler takes back before its arena's thread starts making regions
/// ready. Buffers come back in volume once the buffer pool is full (or emptied); a process
/// whose pool never fills (a single query, a short session) never pays for regions, and a
/// cold start's first reads take buffers of their own meanwhile.
pub const ARENA_AFTER_RETURNED: u64 = 1024;

/// Keeps freed page buffers for reuse, per buffer size, up to a number of bytes.
///
/// Pages evicted from the buffer pool (or all of them, when it is emptied) come back here and
/// serve the next reads, as the frames of a fixed buffer pool would: a cold query then does not
/// pay the kernel for fresh zeroed memory on every page it reads (12 % of the CPU samples of a
/// cold 10 % Fig. 4 run before, 4.5 % after). The bytes never exceed what the pool and the
/// reads in flight held.
///
/// One made [`Recycler::with_arena`] (the runtime's) carves new buffers from an [`Arena`] of
/// up to `keep_bytes` (whole regions, on huge pages, made ready ahead by a thread), which
/// io_uring rings can also register with the kernel; past it, for sizes it cannot hold, or
/// while no region is ready, they are allocated one by one. Arena buffers are always kept
/// when freed: their memory stays the arena's.
#[derive(Debug)]
pub struct Recycler {
    free: Mutex<Free>,
    keep_bytes: usize,
    /// Buffers allocated because none was free nor ready in the arena.
    fresh: AtomicU64,
    /// Buffers of its own given back while the arena had none ready.
    returned_own: AtomicU64,
    /// Bytes of the buffers it allocated itself that are still alive (free here or held):
    /// what has not moved into the arena yet. Signed: a buffer made elsewhere may be given.
    own_bytes: AtomicI64,
    arena: Option<Arc<Arena>>,
}

#[derive(Debug, Default)]
struct Free {
    /// Free buffers by length: one or two lengths in practice (the tables' page size), so a
    /// look along a short list, no hashing, under a lock every page read takes twice.
    by_len: Vec<(usize, Vec<AlignedBuf>)>,
    /// Bytes of the free buffers allocated one by one (arena buffers are not counted).
    bytes: usize,
}

impl Free {
    /// Where the list of buffers of `len` bytes is, moved to the front: the page size's list
    /// stays first however many other lengths (runs of pinned nodes) came back.
    fn find(&mut self, len: usize) -> Option<usize> {
        let at = self.by_len.iter().position(|(l, _)| *l == len)?;
        self.by_len.swap(0, at);
        Some(0)
    }

    /// A free buffer of `len` bytes, if there is one.
    fn pop(&mut self, len: usize) -> Option<AlignedBuf> {
        let at = self.find(len)?;
        self.by_len[at].1.pop()
    }

    /// The free list of buffers of `len` bytes (made empty if there was none).
    fn of_len(&mut self, len: usize) -> &mut Vec<AlignedBuf> {
        let at = self.find(len).unwrap_or_else(|| {
            self.by_len.push((len, Vec::new()));
            self.by_len.len() - 1
        });
        &mut self.by_len[at].1
    }
}

impl Recycler {
    /// A recycler keeping at most `keep_bytes` of free buffers.
    pub fn new(keep_bytes: usize) -> Arc<Self> {
        Self::carving_from(keep_bytes, None)
    }

    /// A recycler keeping at most `keep_bytes` of free buffers, carving new ones from an
    /// arena that large (none if that is less than one region).
    pub fn with_arena(keep_bytes: usize) -> Arc<Self> {
        Self::carving_from(keep_bytes, Arena::new(keep_bytes))
    }

    fn carving_from(keep_bytes: usize, arena: Option<Arc<Arena>>) -> Arc<Self> {
        Arc::new(Self {
            free: Mutex::new(Free::default()),
            keep_bytes,
            fresh: AtomicU64::new(0),
            returned_own: AtomicU64::new(0),
            own_bytes: AtomicI64::new(0),
            arena,
        })
    }

    /// A buffer of `len` bytes (contents unspecified: zeroed when new, an old page's bytes
    /// when reused; a read fills it whole or fails).
    pub fn get(&self, len: usize) -> AlignedBuf {
        let mut free = self.free.lock();
        if let Some(buf) = free.pop(len) {
            if buf.region().is_none() {
                free.bytes -= len;
            }
            return buf;
        }
        drop(free);
        self.arena
            .as_ref()
            .and_then(|a| a.carve(len))
            .unwrap_or_else(|| {
                self.fresh.fetch_add(1, Relaxed);
                self.own_bytes.fetch_add(len as i64, Relaxed);
                AlignedBuf::zeroed(len)
            })
    }

    /// The arena new buffers are carved from, if any.
    pub fn arena(&self) -> Option<&Arc<Arena>> {
        self.arena.as_ref()
    }

    /// Returns a buffer for reuse. One of its own (not the arena's) is exchanged for a buffer
    /// carved from the arena while the arena has one ready (on huge pages; the buffer of its
    /// own is freed), so that over time the pages read move into the arena, one for one,
    /// paced by the arena's thread, which starts once [`ARENA_AFTER_RETURNED`] such buffers
    /// came back.
    pub fn put(&self, buf: AlignedBuf) {
        let len = buf.len();
        let buf = match &self.arena {
            Some(arena) if buf.region().is_none() => match arena.carve(len) {
                Some(carved) => {
                    self.own_bytes.fetch_sub(len as i64, Relaxed);
                    carved
                }
                None => {
                    if self.returned_own.fetch_add(1, Relaxed) + 1 >= ARENA_AFTER_RETURNED {
                        arena.make_ready();
                    }
                    buf
                }
            },
            _ => buf,
        };
        let mut free = self.free.lock();
        if buf.region().is_some() {
            free.of_len(len).push(buf);
        } else if free.bytes + len <= self.keep_bytes {
            free.bytes += len;
            free.of_len(len).push(buf);
        } else {
            self.own_bytes.fetch_sub(len as i64, Relaxed);
        }
    }

    /// Buffers allocated so far because none of their size was free nor ready in the arena
    /// (fresh memory from the allocator).
    pub fn fresh_buffers(&self) -> u64 {
        self.fresh.load(Relaxed)
    }

    /// Bytes of free buffers kept.
    pub fn free_bytes(&self) -> usize {
        self.free.lock().bytes
    }

    /// Bytes of the buffers it allocated itself (not the arena's) still alive, free here or
    /// held by the pool and readers: the page buffers that have not moved into the arena.
    pub fn own_bytes(&self) -> usize {
        self.own_bytes.load(Relaxed).max(0) as usize
    }
}

/// Where the process may have transparent huge pages (see [`huge_pages_only_where_advised`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// Only in memory advised for them: the page buffers' arena regions.
    WhereAdvised,
    /// Nowhere (a kernel before 6.18 cannot keep them where advised only).
    Never,
}

/// `PR_THP_DISABLE_EXCEPT_ADVISED` (Linux 6.18), which the libc crate does not name yet.
const THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// Turns transparent huge pages off for this process and the processes it starts, except in
/// memory advised for them (`MADV_HUGEPAGE`: the page buffers' regions, [`crate::io::arena`]);
/// where the kernel cannot except advised memory, off everywhere (Linux).
///
/// For the `ooode` command and the benchmarks, called first thing in `main`. On this project's
/// VM (memory backed lazily by the host) a fresh 2 MiB huge page took ~14 ms to fault in,
/// zeroed 4 KiB at a time behind host faults, against ~2 us for a 4 KiB page: the allocator's
/// memory of a cold start (a few hundred MiB) then held both cores for two seconds, and every
/// query running then waited (points' p99 at 64 clients 195-251 ms in three of four runs,
/// against 61-79 without). The page buffers' regions are faulted in ahead of use by a thread
/// of their own, off the queries' path.
pub fn huge_pages_only_where_advised() -> std::io::Result<HugePages> {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches no memory.
    if unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            1,
            THP_DISABLE_EXCEPT_ADVISED,
            0,
            0,
        )
    } == 0
    {
        return Ok(HugePages::WhereAdvised);
    }
    // SAFETY: as above.
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
        0 => Ok(HugePages::Never),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[derive(Debug)]
struct Inner {
    buf: Option<AlignedBuf>,
    recycler: Option<Arc<Recycler>>,
}

// An Arrow buffer of a page holds its `Inner` (see `PageBuf::to_arrow`), which Arrow asks to
// be unwind safe: the bytes are immutable, and the recycler's lock does not poison and keeps
// its free lists whole if a panic passes.
impl std::panic::RefUnwindSafe for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let (Some(buf), Some(r)) = (self.buf.take(), &self.recycler) {
            r.put(buf);
        }
    }
}

/// The bytes of one page read, shared and immutable.
#[derive(Debug, Clone)]
pub struct PageBuf(Arc<Inner>);

impl PageBuf {
    /// Wraps a filled buffer; it returns to `recycler` (if any) when the last clone drops.
    pub fn new(buf: AlignedBuf, recycler: Option<Arc<Recycler>>) -> Self {
        Self(Arc::new(Inner {
            buf: Some(buf),
            recycler,
        }))
    }

    /// Asks the CPU to bring in the line of the holders' count, ahead of a clone.
    pub fn prefetch_count(&self) {
        // The count sits just before the shared value, in its line or the one before.
        let inner = Arc::as_ptr(&self.0).cast::<u8>();
        crate::storage::page::prefetch_at(inner.wrapping_sub(16));
    }

    /// Number of holders of these bytes.
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// The bytes as an Arrow buffer that is one more holder (no copy). The holder is this
    /// page's own shared part, so the buffer costs one allocation (Arrow's), not three (a
    /// `bytes::Bytes` owner in between took two more, for every page decoded).
    pub fn to_arrow(&self) -> arrow::buffer::Buffer {
        let bytes: &[u8] = self;
        let ptr = NonNull::from(bytes).cast::<u8>();
        let owner: Arc<dyn arrow::alloc::Allocation> = self.0.clone();
        // SAFETY: `ptr` and `bytes.len()` are the page's bytes, which `owner` (one more holder
        // of the shared part) keeps allocated and unchanged until the Arrow buffer drops it:
        // a page's bytes are never written once it is a `PageBuf`.
        unsafe { arrow::buffer::Buffer::from_custom_allocation(ptr, bytes.len(), owner) }
    }
}

impl AsRef<[u8]> for PageBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.buf.as_deref().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_go_off_except_where_advised() {
        // The flag is the whole test process's; the arena's test sets the same.
        let mode = huge_pages_only_where_advised().expect("prctl(PR_SET_THP_DISABLE)");
        // SAFETY: PR_GET_THP_DISABLE takes no pointer and returns the flags.
        let flags = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        match mode {
            HugePages::WhereAdvised => assert_eq!(flags, 1 | THP_DISABLE_EXCEPT_ADVISED as i32),
            HugePages::Never => assert_eq!(flags, 1),
        }
    }

    #[test]
    fn an_arrow_buffer_of_a_page_holds_it_and_copies_nothing() {
        let r = Recycler::new(8192);
        let page = PageBuf::new(r.get(8192), Some(r.clone()));
        let arrow = page.to_arrow();
        assert_eq!(arrow.as_ptr(), page.as_ptr());
        assert_eq!(page.holders(), 2);
        drop(page);
        assert_eq!(r.free_bytes(), 0, "the arrow buffer still holds the page");
        drop(arrow);
        assert_eq!(r.free_bytes(), 8192);
    }

    #[test]
    fn recycler_reuses_buffers_up_to_its_bytes() {
        let r = Recycler::new(2 * 8192);
        let a = PageBuf::new(r.get(8192), Some(r.clone()));
        let b = PageBuf::new(r.get(8192), Some(r.clone()));
        let c = PageBuf::new(r.get(8192), Some(r.clone()));
        let addr = a.as_ptr();
        drop(a);
        assert_eq!(r.free_bytes(), 8192);
        // Another size is not served from it.
        assert_eq!(r.get(4096).len(), 4096);
        assert_eq!(r.free_bytes(), 8192);
        let again = r.get(8192);
        assert_eq!(again.as_ptr(), addr, "the freed buffer is reused");
        assert_eq!(r.free_bytes(), 0);
        assert_eq!(r.own_bytes(), 3 * 8192 + 4096, "held and free alike");
        drop((b, c));
        assert_eq!(r.free_bytes(), 2 * 8192);
        r.put(again);
        assert_eq!(
            r.free_bytes(),
            2 * 8192,
            "beyond its bytes a buffer is freed"
        );
        assert_eq!(r.own_bytes(), 2 * 8192 + 4096);
    }

    #[test]
    fn each_length_is_served_from_its_own_free_list() {
        let r = Recycler::new(1 << 20);
        let lens = [8192, 3 * 4096, 4096, 16 * 8192];
        let addrs: Vec<_> = lens
            .iter()
            .map(|&len| {
                let buf = r.get(len);
                let addr = buf.as_ptr();
                r.put(buf);
                addr
            })
            .collect();
        assert_eq!(r.free_bytes(), lens.iter().sum::<usize>());
        // Asked in another order than they came back (each ask moves its list to the front).
        for i in [2, 0, 3, 0, 1] {
            let buf = r.get(lens[i]);
            assert_eq!((buf.len(), buf.as_ptr()), (lens[i], addrs[i]));
            r.put(buf);
        }
        assert_eq!(r.free_bytes(), lens.iter().sum::<usize>());
        assert_eq!(r.fresh_buffers(), lens.len() as u64, "no buffer made twice");
    }

    #[test]
    fn buffers_move_into_the_arena_once_enough_come_back() {
        use crate::io::arena::REGION_BYTES;
        let r = Recycler::with_arena(4 * REGION_BYTES);
        let arena = r.arena().unwrap().clone();
        // Nothing ready: a read gets a buffer of its own at once, kept when given back.
        let own = r.get(8192);
        assert_eq!(own.region(), None);
        assert_eq!(r.fresh_buffers(), 1);
        r.put(own);
        assert_eq!(r.free_bytes(), 8192);
        // The arena's thread starts once enough buffers of its own came back.
        let many: Vec<AlignedBuf> = (0..ARENA_AFTER_RETURNED).map(|_| r.get(8192)).collect();
        assert!(many.iter().all(|b| b.region().is_none()));
        many.into_iter().for_each(|b| r.put(b));
        let start = std::time::Instant::now();
        while arena.regions() == 0 {
            assert!(
                start.elapsed().as_secs() < 10,
                "no region ready within 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Given back while the arena has one ready: exchanged, one for one.
        let (kept, fresh) = (r.free_bytes(), r.fresh_buffers());
        let own = r.own_bytes();
        assert_eq!(own, kept, "every buffer of its own is free here");
        let given = r.get(8192);
        r.put(given);
        assert_eq!(
            r.free_bytes(),
            kept - 8192,
            "the buffer of its own was freed"
        );
        assert_eq!(r.own_bytes(), own - 8192, "and counts no more");
        let carved = r.get(8192);
        assert!(
            carved.region().is_some(),
            "the next read's buffer is the arena's"
        );
        assert_eq!(
            r.fresh_buffers(),
            fresh,
            "a carved buffer is not fresh memory"
        );
        // The arena's buffers come back to the recycler and are reused.
        let addr = carved.as_ptr();
        r.put(carved);
        assert_eq!(r.get(8192).as_ptr(), addr);
    }
}
