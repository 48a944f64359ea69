//! Page buffers carved from large regions of memory on 2 MiB pages, made ready ahead of use.
//!
//! Why 2 MiB pages: an 8 KiB buffer on two 4 KiB pages that are not next to each other in
//! physical memory is a read of two segments for the disk. On this project's VM (a virtio
//! disk) random 8 KiB O_DIRECT reads at depth 64 ran at 70-73 K IOPS into buffers on huge
//! pages against 61-64 K into buffers on 4 KiB pages, touched in order or scattered; at 64
//! clients the device then served ooode at 74-83 % of fio beside it against 66-73 %, and
//! 13-23 % more queries a second (three pairs, docs/log.md). The process's huge pages are off
//! except where advised
//! ([`crate::io::buf::huge_pages_only_where_advised`]), and regions are advised.
//!
//! Why ahead: a fresh 2 MiB page can take milliseconds to fault in (a VM's host backs guest
//! memory lazily). A thread of the arena's maps and faults in regions ahead of use (a few at
//! most) at the OS's idle priority; a buffer asked for when no region is ready is not waited
//! for: the caller allocates one of its own (see [`crate::io::buf::Recycler`]).
//!
//! Pages are used where they were read (they stay in the buffer pool), so the regions hold
//! the pool's pages themselves; a buffer freed goes back to the recycler and serves a later
//! read, never to the allocator. io_uring rings may register the regions with the kernel
//! (fixed buffers, [`crate::io::uring::UringConfig::fixed_buffers`]).

use std::ptr::NonNull;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::storage::page::{AlignedBuf, PAGE_ALIGN};

/// Bytes of one region: a multiple of every page size (powers of two up to 64 KiB).
pub const REGION_BYTES: usize = 4 << 20;
/// Most regions of one arena (and the size of a ring's table of registered buffers).
pub const MAX_REGIONS: usize = 4096;
/// Regions start on a huge page.
const REGION_ALIGN: usize = 2 << 20;
/// Regions kept ready beyond the one being carved (8 MiB): they are exchanged for buffers
/// of the recycler's own as those come back, and carved when none is free.
pub const READY_AHEAD: usize = 2;

/// Regions of page buffers, made ready as they are needed up to a limit.
#[derive(Debug)]
pub struct Arena {
    shared: Arc<Shared>,
    /// The thread that makes regions ready (see [`Arena::make_ready`]).
    readier: Mutex<Option<JoinHandle<()>>>,
    /// Whether it was started (checked without the lock: the recycler asks on every buffer of
    /// its own given back).
    readier_started: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Shared {
    most_regions: usize,
    state: Mutex<State>,
    /// Wakes the readier: a region was started, or the arena is going away.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Regions mapped and faulted in, in the order they are carved.
    regions: Vec<Region>,
    /// The region being carved (`regions.len()` while none is ready).
    carving: usize,
    /// Bytes of that region handed out.
    used: usize,
    shutdown: bool,
    /// Set when mapping failed: no more regions are made (buffers come from elsewhere).
    failed: bool,
}

/// One mapping: `start` is its first huge-page boundary, `REGION_BYTES` long.
#[derive(Debug)]
struct Region {
    map: NonNull<u8>,
    start: NonNull<u8>,
}

// SAFETY: the regions are mappings the arena owns; it hands each byte to one buffer at most
// and touches bytes only before handing them out, so sharing the arena shares no bytes.
unsafe impl Send for Region {}

impl Region {
    /// Bytes mapped: room to start a region on a huge page wherever the mapping lands.
    const MAP_BYTES: usize = REGION_BYTES + REGION_ALIGN;

    /// Maps a region, advises huge pages for it and faults every page of it in (zeroed).
    fn ready() -> std::io::Result<Self> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choice touches
        // no existing memory.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::MAP_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let map = NonNull::new(map.cast::<u8>()).ok_or(std::io::ErrorKind::OutOfMemory)?;
        let offset = map.as_ptr().align_offset(REGION_ALIGN);
        // SAFETY: `offset < REGION_ALIGN`, so the region lies inside the mapping.
        let start = unsafe { map.add(offset) };
        let region = Self { map, start };
        // SAFETY: the range is inside the mapping; advice changes no contents. Refused
        // advice (huge pages off) leaves 4 KiB pages, which work the same.
        unsafe { libc::madvise(start.as_ptr().cast(), REGION_BYTES, libc::MADV_HUGEPAGE) };
        for page in (0..REGION_BYTES).step_by(4096) {
            // SAFETY: inside the region; a write of the zero the page holds faults it in
            // (a read would map the shared zero page) and changes nothing.
            unsafe { start.add(page).write_volatile(0) };
        }
        Ok(region)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `ready`, unmapped once; no buffer is left in it (each
        // holds the arena, which drops its regions last).
        unsafe { libc::munmap(self.map.as_ptr().cast(), Self::MAP_BYTES) };
    }
}

impl State {
    /// The region and offset of the next `len` bytes of ready memory, if any.
    fn next_slice(&mut self, len: usize) -> Option<(usize, NonNull<u8>)> {
        while let Some(region) = self.regions.get(self.carving) {
            if self.used + len <= REGION_BYTES {
                // SAFETY: `used + len <= REGION_BYTES`: inside the region.
                let ptr = unsafe { region.start.add(self.used) };
                self.used += len;
                return Some((self.carving, ptr));
            }
            self.carving += 1;
            self.used = 0;
        }
        None
    }

    /// Whether the readier should make another region ready.
    fn wants_region(&self, most_regions: usize) -> bool {
        !self.shutdown
            && !self.failed
            && self.regions.len() < most_regions
            && self.regions.len() - self.carving.min(self.regions.len()) <= READY_AHEAD
    }
}

impl Arena {
    /// An arena of at most `bytes` (whole regions; None when that is not one region).
    pub fn new(bytes: usize) -> Option<Arc<Self>> {
        let most_regions = (bytes / REGION_BYTES).min(MAX_REGIONS);
        (most_regions > 0).then(|| {
            Arc::new(Self {
                shared: Arc::new(Shared {
                    most_regions,
                    state: Mutex::new(State::default()),
                    wake: Condvar::new(),
                }),
                readier: Mutex::new(None),
                readier_started: std::sync::atomic::AtomicBool::new(false),
            })
        })
    }

    /// A new buffer of `len` bytes from a ready region; None when none is ready (see
    /// [`Arena::make_ready`]), when the arena is full, or when `len` is not a page size it
    /// holds.
    pub fn carve(self: &Arc<Self>, len: usize) -> Option<AlignedBuf> {
        if len == 0 || !len.is_multiple_of(PAGE_ALIGN) || !REGION_BYTES.is_multiple_of(len) {
            return None;
        }
        let mut state = self.shared.state.lock();
        let slice = state.next_slice(len);
        if state.wants_region(self.shared.most_regions) {
            // The readier, if started, tops up behind the carving.
            self.shared.wake.notify_one();
        }
        drop(state);
        let (index, ptr) = slice?;
        let owner: Arc<dyn std::any::Any + Send + Sync> = self.clone();
        // SAFETY: zeroed when the region was made ready and never handed out before;
        // aligned (the region starts on a huge page, and a slice's offset is a sum of
        // lengths that are multiples of PAGE_ALIGN); inside the region (`next_slice`); the
        // arena unmaps regions only when dropped, which `owner` prevents.
        Some(unsafe { AlignedBuf::from_region(ptr, len, index as u32, owner) })
    }

    /// Makes up to `regions` more regions ready now, in the calling thread (for callers that
    /// want the memory at once, and tests); returns how many it made.
    pub fn prepare(&self, regions: usize) -> std::io::Result<usize> {
        for made in 0..regions {
            if self.shared.state.lock().regions.len() >= self.shared.most_regions {
                return Ok(made);
            }
            let region = Region::ready()?;
            let mut state = self.shared.state.lock();
            if state.regions.len() >= self.shared.most_regions {
                return Ok(made);
            }
            state.regions.push(region);
        }
        Ok(regions)
    }

    /// Starts the thread that keeps regions ready ahead of carving (once; later calls do
    /// nothing). Not at the first carve: a cold start's reads take buffers of their own, and
    /// the regions' faults (milliseconds each on a VM whose host backs memory lazily) do not
    /// compete with its first queries; the recycler starts it when buffers first come back.
    pub fn make_ready(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.readier_started.load(Relaxed) {
            return;
        }
        let mut readier = self.readier.lock();
        if self.readier_started.swap(true, Relaxed) {
            return;
        }
        let shared = self.shared.clone();
        match std::thread::Builder::new()
            .name("ooode-arena".into())
            .spawn(move || make_regions_ready(&shared))
        {
            Ok(handle) => *readier = Some(handle),
            Err(e) => {
                log::warn!("ooode: no thread to make page buffers ready: {e}");
                self.shared.state.lock().failed = true;
            }
        }
    }

    /// Region `index`'s address and size, for registering it with a ring.
    pub fn region(&self, index: u32) -> Option<libc::iovec> {
        let state = self.shared.state.lock();
        let region = state.regions.get(index as usize)?;
        Some(libc::iovec {
            iov_base: region.start.as_ptr().cast(),
            iov_len: REGION_BYTES,
        })
    }

    /// Regions made ready so far.
    pub fn regions(&self) -> usize {
        self.shared.state.lock().regions.len()
    }
}

/// The readier's pace: a region at most every this long (4 MiB per 100 ms, 40 MB/s; a 114
/// MiB pool moves in 3 s), so that its faults take a small share of a core while buffers
/// move into the arena. A vCPU faulting memory in from its host runs nothing else meanwhile,
/// whatever the thread's priority: at one region per 20 ms, starting as a 64-client run
/// started, the clients' first queries started 10 ms later on average (six runs each way).
const READY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The readier's loop: keeps [`READY_AHEAD`] regions ready beyond the one being carved, at
/// the OS's idle priority (queries' threads come first; a query never waits for it), at most
/// one every [`READY_EVERY`].
fn make_regions_ready(shared: &Shared) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` lives on this stack; pid 0 is the calling thread, and any thread may
    // lower its own priority.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        log::debug!(
            "ooode: the page buffers' thread keeps its priority: {}",
            std::io::Error::last_os_error()
        );
    }
    let mut state = shared.state.lock();
    // Started as buffers come back in volume, the moment a workload starts or turns: the
    // first region waits a turn too.
    shared.wake.wait_for(&mut state, READY_EVERY);
    loop {
        if state.shutdown {
            return;
        }
        if !state.wants_region(shared.most_regions) {
            shared.wake.wait(&mut state);
            continue;
        }
        drop(state);
        let started = std::time::Instant::now();
        let made = Region::ready();
        state = shared.state.lock();
        match made {
            Ok(region) => state.regions.push(region),
            Err(e) => {
                log::warn!("ooode: page buffers on 4 KiB pages from now on: {e}");
                state.failed = true;
            }
        }
        let rest = READY_EVERY.saturating_sub(started.elapsed());
        if !state.shutdown && !rest.is_zero() {
            shared.wake.wait_for(&mut state, rest);
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.readier.get_mut().take() {
            // It stops after the region it may be making; the regions unmap with `shared`.
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carves_aligned_disjoint_buffers_up_to_its_limit() {
        let arena = Arena::new(2 * REGION_BYTES).unwrap();
        assert_eq!(arena.prepare(3).unwrap(), 2, "the limit is two regions");
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
        assert_eq!(r1.iov_base as usize % REGION_ALIGN, 0, "on a huge page");
        let last = bufs.last().unwrap().as_ptr() as usize;
        assert!((r1.iov_base as usize..r1.iov_base as usize + r1.iov_len).contains(&last));
        assert!(bufs.iter().all(|b| b.iter().all(|&x| x == 0)), "zeroed");
    }

    #[test]
    fn refuses_sizes_that_do_not_tile_a_region_and_small_limits() {
        assert!(Arena::new(REGION_BYTES - 1).is_none());
        let arena = Arena::new(REGION_BYTES).unwrap();
        arena.prepare(1).unwrap();
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
        a.prepare(1).unwrap();
        let buf = a.carve(8192).unwrap();
        assert_eq!(buf.region_of(&a), Some(0));
        assert_eq!(buf.region_of(&b), None);
        assert_eq!(AlignedBuf::zeroed(8192).region_of(&a), None);
    }

    #[test]
    fn buffers_keep_the_arena_alive() {
        let arena = Arena::new(REGION_BYTES).unwrap();
        arena.prepare(1).unwrap();
        let mut buf = arena.carve(4096).unwrap();
        let weak = Arc::downgrade(&arena);
        drop(arena);
        assert!(weak.upgrade().is_some(), "the buffer holds the arena");
        buf[0] = 9;
        assert_eq!(buf[0], 9);
        drop(buf);
        assert!(weak.upgrade().is_none(), "the last buffer let it go");
    }

    /// Waits up to ten seconds for `done`.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(start.elapsed().as_secs() < 10, "{what}: not within 10 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn regions_are_made_ready_ahead_by_a_thread_and_never_waited_for() {
        let arena = Arena::new(16 * REGION_BYTES).unwrap();
        assert!(
            arena.carve(8192).is_none(),
            "nothing ready: no wait, no buffer"
        );
        std::thread::sleep(3 * READY_EVERY);
        assert_eq!(
            arena.regions(),
            0,
            "no region made before the thread starts"
        );
        arena.make_ready();
        eventually("the first region", || arena.regions() > 0);
        let first = arena.carve(8192).expect("a ready region");
        assert_eq!(first.region(), Some(0));
        // The one being carved and READY_AHEAD more, no further.
        eventually("regions ahead", || arena.regions() == 1 + READY_AHEAD);
        std::thread::sleep(3 * READY_EVERY);
        assert_eq!(arena.regions(), 1 + READY_AHEAD, "no more ahead than that");
        // Carving into the next region makes the thread ready one more.
        let per_region = REGION_BYTES / 8192;
        let bufs: Vec<AlignedBuf> = (0..per_region)
            .map(|_| arena.carve(8192).unwrap())
            .collect();
        assert_eq!(bufs.last().unwrap().region(), Some(1));
        eventually("the next region", || arena.regions() == 2 + READY_AHEAD);
        // Dropping the arena's last holder stops its thread (the test would hang otherwise).
        drop((first, bufs, arena));
    }

    #[test]
    fn regions_sit_on_huge_pages_where_the_kernel_allows() {
        use crate::io::buf::{HugePages, huge_pages_only_where_advised};
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if thp.is_empty() || thp.contains("[never]") {
            eprintln!("skipped: transparent huge pages are off in this kernel ({thp:?})");
            return;
        }
        match huge_pages_only_where_advised().expect("prctl(PR_SET_THP_DISABLE)") {
            HugePages::WhereAdvised => {}
            HugePages::Never => {
                eprintln!("skipped: this kernel cannot keep huge pages where advised only");
                return;
            }
        }
        let arena = Arena::new(REGION_BYTES).unwrap();
        arena.prepare(1).unwrap();
        let start = arena.region(0).unwrap().iov_base as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let huge_kib = huge_kib_of_mapping(&smaps, start).expect("the region's mapping");
        assert!(
            huge_kib >= 2048,
            "{huge_kib} KiB of the region on huge pages"
        );
    }

    /// `AnonHugePages` of the mapping of /proc/self/smaps that holds `addr`.
    fn huge_kib_of_mapping(smaps: &str, addr: usize) -> Option<u64> {
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
            } else if inside && let Some(kib) = line.strip_prefix("AnonHugePages:") {
                return kib.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }
}
