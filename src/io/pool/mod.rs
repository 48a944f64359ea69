//! The buffer pool: a byte budget of cached pages, shared by all queries of a runtime.
//!
//! ```text
//!   get(key) ──> shard = hash(key) % 64 ──lock──> Ready: hit (clone the page)
//!                                              Loading: join (one more waiter)
//!                                              absent: reserve bytes (evicting from other
//!                                                      shards, one lock at a time), insert
//!                                                      Loading ──unlock──> read
//!   the read runs outside every lock; the first waiter to see it finish caches the page
//!   (or forgets a failed read); the last waiter to give up removes the entry and drops the
//!   read, which the engine then cancels.
//! ```
//!
//! - Lookups take one shard's lock for a few instructions: 64 shards, so queries on different
//!   cores rarely meet. No lock is held across a read, a system call or an await.
//! - Single flight: concurrent requests for a page that is being read share that one read.
//!   Cancelled requests leave nothing behind: when every waiter of a read has gone, the entry is
//!   removed and the read dropped (the engine recycles its buffer when the kernel is done).
//! - CLOCK eviction with a hint: a page gets "chances" when used (data and leaf pages 1, B+tree
//!   inner nodes 3); the hand takes one chance per pass and evicts pages with none left, so
//!   the upper levels of the indexes stay resident while heap pages stream through.
//! - The budget counts pages being read as well as cached ones and is never exceeded: when
//!   nothing can be evicted (everything is being read), a read bypasses the cache. Where the
//!   pool has a [`PoolMemory`] (DataFusion's memory pool, through the access layer), the bytes
//!   it holds are reserved there too, in 1 MiB steps; when that memory is refused the pool
//!   evicts instead of growing.
//! - `clear()` empties it (cold-cache benchmarks); `set_budget` resizes it.

mod direct;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

use futures::future::{MapErr, Shared};
use futures::{FutureExt, TryFutureExt};
use parking_lot::Mutex;

use super::buf::PageBuf;
use super::{FileId, ReadFuture};
use crate::storage::{Result, StorageError};

pub use direct::Claim;

/// Identifies a page: file (a pool file key, see [`BufferPool::file_key`]) and byte offset.
pub type PageKey = (FileId, u64);

/// What kind of page is requested (sets how long it stays cached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageHint {
    /// Heap page.
    Data,
    /// B+tree leaf.
    IndexLeaf,
    /// B+tree inner node.
    IndexInner,
}

impl PageHint {
    fn chances(self) -> u8 {
        match self {
            Self::Data | Self::IndexLeaf => 1,
            Self::IndexInner => 3,
        }
    }
}

/// Memory the pool's bytes are accounted in (DataFusion's memory pool, through the access
/// layer); the pool asks before it holds more and gives back what it no longer holds.
pub trait PoolMemory: Send + Sync + std::fmt::Debug {
    /// Asks for `bytes` more; false if they are refused.
    fn try_grow(&self, bytes: usize) -> bool;
    /// Gives `bytes` back.
    fn shrink(&self, bytes: usize);
}

/// Bytes asked of a [`PoolMemory`] at a time.
const GRANULE: usize = 1 << 20;

/// Number of shards: enough that lookups from a few dozen cores rarely share one.
const SHARDS: usize = 64;

/// A read every request for its page waits for: the engine's future itself (its error shared,
/// errors are not `Clone`), no box of its own.
type SharedRead = Shared<MapErr<ReadFuture, fn(StorageError) -> Arc<StorageError>>>;

enum State {
    /// Being read; `waiters` requests wait for it.
    Loading {
        read: SharedRead,
        waiters: u32,
    },
    Ready(PageBuf),
    /// Being read by a reader that ends the read itself (see [`direct`]): requests for the
    /// page wait for that, then look again.
    Direct {
        joiners: Vec<std::task::Waker>,
    },
}

struct Entry {
    state: State,
    len: usize,
    chances: u8,
    ring_pos: usize,
}

impl Entry {
    /// Gives the entry back the chances `hint` is worth; written only when they grow (a
    /// lookup that finds the page then leaves the entry's line clean).
    fn renew(&mut self, hint: PageHint) {
        if self.chances < hint.chances() {
            self.chances = hint.chances();
        }
    }
}

/// Page keys are two integers: a fast hash (not SipHash) for shard choice and shard maps.
type FastHash = foldhash::fast::FixedState;

#[derive(Default)]
struct Shard {
    map: HashMap<PageKey, Entry, FastHash>,
    ring: Vec<Option<PageKey>>,
    free_pos: Vec<usize>,
    hand: usize,
    /// Steps left in the hand's current turn of this shard.
    turn_left: usize,
    stats: ShardStats,
}

/// A shard on cache lines of its own: both cores lock shards at random, and a lock sharing a
/// line with its neighbour's would make each lookup wait for the other core's writes to it.
#[derive(Default)]
#[repr(align(128))]
struct PaddedShard(Mutex<Shard>);

impl std::ops::Deref for PaddedShard {
    type Target = Mutex<Shard>;
    fn deref(&self) -> &Mutex<Shard> {
        &self.0
    }
}

#[derive(Default, Clone, Copy)]
struct ShardStats {
    hits: u64,
    joined: u64,
    misses: u64,
    evictions: u64,
    bypasses: u64,
    abandoned: u64,
}

/// Counters of a [`BufferPool`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Requests served from cached pages.
    pub hits: u64,
    /// Requests that joined a read already in flight.
    pub joined: u64,
    /// Requests that started a read.
    pub misses: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Reads that bypassed the cache (no room: everything else was being read).
    pub bypasses: u64,
    /// Reads dropped because every request waiting for them was cancelled.
    pub abandoned: u64,
    /// Bytes held now (cached and being read).
    pub used_bytes: u64,
    /// Most bytes ever held.
    pub peak_bytes: u64,
    /// Pages cached or being read now.
    pub pages: u64,
    /// Pages being read now.
    pub loading: u64,
    /// Bytes reserved in the pool's [`PoolMemory`] now.
    pub reserved_bytes: u64,
}

/// A page cache with a byte budget.
pub struct BufferPool {
    shards: Box<[PaddedShard]>,
    hasher: FastHash,
    budget: AtomicUsize,
    used: AtomicUsize,
    peak: AtomicUsize,
    memory: Option<Arc<dyn PoolMemory>>,
    /// Bytes granted by `memory`; changed under its lock, read without.
    granted: Mutex<usize>,
    granted_now: AtomicUsize,
    /// Shard where the next eviction starts.
    evict_from: AtomicUsize,
    file_keys: Mutex<HashMap<FileIdentity, FileId>>,
    evictions: AtomicU64,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("budget", &self.budget())
            .field("stats", &self.stats())
            .finish()
    }
}

/// A place for `key` in a shard's clock ring (`ring`, its free places `free_pos`): apart
/// from [`Shard`] so that it can be taken while an entry of the shard's map is held.
fn ring_slot(ring: &mut Vec<Option<PageKey>>, free_pos: &mut Vec<usize>, key: PageKey) -> usize {
    match free_pos.pop() {
        Some(p) => {
            ring[p] = Some(key);
            p
        }
        None => {
            ring.push(Some(key));
            ring.len() - 1
        }
    }
}

impl Shard {
    fn insert_ring(&mut self, key: PageKey) -> usize {
        ring_slot(&mut self.ring, &mut self.free_pos, key)
    }

    /// Removes `key`; returns the bytes it held.
    fn remove(&mut self, key: &PageKey) -> usize {
        match self.map.remove(key) {
            Some(e) => {
                self.ring[e.ring_pos] = None;
                self.free_pos.push(e.ring_pos);
                e.len
            }
            None => 0,
        }
    }

    /// Runs the clock hand on through the rest of its turn of the ring, evicting cached pages
    /// without chances left, until `want` bytes are freed; returns the bytes freed and whether
    /// the turn is over.
    fn sweep(&mut self, want: usize) -> (usize, bool) {
        let mut freed = 0;
        while freed < want && self.turn_left > 0 {
            self.turn_left -= 1;
            self.hand = (self.hand + 1) % self.ring.len();
            let Some(key) = self.ring[self.hand] else {
                continue;
            };
            let Some(entry) = self.map.get_mut(&key) else {
                continue;
            };
            // Pages being read are not evicted: their waiters remove them if they give up.
            if let State::Ready(_) = entry.state {
                if entry.chances > 0 {
                    entry.chances -= 1;
                } else {
                    freed += self.remove(&key);
                    self.stats.evictions += 1;
                }
            }
        }
        (freed, self.turn_left == 0)
    }
}

/// The default pool budget: a quarter of physical memory (1 GiB if it cannot be read).
pub fn default_budget() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page > 0 {
        (pages as usize).saturating_mul(page as usize) / 4
    } else {
        1 << 30
    }
}

/// What a pool key stands for: a local file or a version of an object. A local file is its
/// device and inode, and its size and change time: once a removed segment's files are closed
/// the file system reuses their inodes, and a new file on an old inode must not find the old
/// file's pages (page files are written once, so a file's change time stays as loaded).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FileIdentity {
    Local {
        dev: u64,
        ino: u64,
        size: u64,
        ctime_ns: i128,
    },
    Object(String),
}

/// What a request does after a miss.
enum Next {
    Found(Found),
    Bypass,
    Wait(SharedRead),
}

/// What a request found.
enum Found {
    Hit(PageBuf),
    Join(SharedRead),
    /// A direct read (see [`direct`]): wait for its end, then look again.
    Direct,
    Absent,
}

impl BufferPool {
    /// A pool holding at most `budget` bytes.
    pub fn new(budget: usize) -> Arc<Self> {
        Self::with_memory(budget, None)
    }

    /// A pool holding at most `budget` bytes, all of them reserved in `memory` first.
    pub fn with_memory(budget: usize, memory: Option<Arc<dyn PoolMemory>>) -> Arc<Self> {
        Arc::new(Self {
            shards: (0..SHARDS).map(|_| PaddedShard::default()).collect(),
            // Another seed than the shards' maps: keys of one shard must still spread there.
            hasher: FastHash::with_seed(0x9E37_79B9_7F4A_7C15),
            budget: AtomicUsize::new(budget),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            memory,
            granted: Mutex::new(0),
            granted_now: AtomicUsize::new(0),
            evict_from: AtomicUsize::new(0),
            file_keys: Mutex::new(HashMap::new()),
            evictions: AtomicU64::new(0),
        })
    }

    /// The pool's key for the file at `path`, by device and inode: the same file read through
    /// different engines shares cached pages, and a file replaced at the same path (a table
    /// loaded again) gets a new key, so its old pages are never served for it.
    pub fn file_key(&self, path: &std::path::Path) -> Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| StorageError::io(path, "stat", e))?;
        Ok(self.key_of(FileIdentity::Local {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        }))
    }

    /// The pool's key of the object at `url` with version `version` (its e-tag or size and
    /// modification time): a replaced object gets a new key, so its old pages are not served.
    pub fn object_key(&self, url: &str, version: &str) -> FileId {
        self.key_of(FileIdentity::Object(format!("{url}#{version}")))
    }

    fn key_of(&self, identity: FileIdentity) -> FileId {
        let mut keys = self.file_keys.lock();
        let next = FileId(keys.len() as u32);
        *keys.entry(identity).or_insert(next)
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget.load(Relaxed)
    }

    /// Changes the byte budget; a smaller one evicts at once what no longer fits.
    pub fn set_budget(&self, budget: usize) {
        let old = self.budget.swap(budget, SeqCst);
        if budget < old {
            let over = self.used.load(SeqCst).saturating_sub(budget);
            if over > 0 {
                self.evict(over);
            }
            self.give_back();
        }
    }

    fn shard(&self, key: &PageKey) -> &Mutex<Shard> {
        &self.shards[self.shard_of(key)]
    }

    fn shard_of(&self, key: &PageKey) -> usize {
        self.hasher.hash_one(key) as usize % SHARDS
    }

    /// The page `key` of `len` bytes: cached, joined to a read in flight, or read by `load`.
    /// Returns the page and whether it came without a new read. `load` is called under a
    /// shard's lock: it must only build the read's future (nothing starts before a poll).
    pub async fn get(
        &self,
        key: PageKey,
        len: usize,
        hint: PageHint,
        load: impl FnOnce() -> ReadFuture + Send + 'static,
    ) -> Result<(PageBuf, bool)> {
        let shard = self.shard(&key);
        let mut load = Some(load);
        loop {
            let next = {
                let mut s = shard.lock();
                match Self::find(&mut s, &key, hint) {
                    Found::Hit(page) => return Ok((page, true)),
                    found @ (Found::Join(_) | Found::Direct) => Some(Next::Found(found)),
                    // Room without evicting (the usual case): the entry goes in under this
                    // same lock, one lookup per miss.
                    Found::Absent if self.reserve_without_evicting(len) => Some(Next::Wait(
                        Self::insert_loading(&mut s, key, len, hint, &mut load),
                    )),
                    Found::Absent => None,
                }
            };
            // Else a miss: room first (eviction visits other shards, one lock at a time),
            // then the entry, unless another request put it there meanwhile.
            let next = match next {
                Some(next) => next,
                None => {
                    let reserved = self.reserve(len);
                    self.start_read(shard, key, len, hint, reserved, &mut load)
                }
            };
            return match next {
                Next::Found(Found::Hit(page)) => Ok((page, true)),
                Next::Found(Found::Join(read)) => self.wait(key, read, true).await,
                // Its reader caches the page or forgets the entry: then look again.
                Next::Found(Found::Direct) => {
                    direct::DirectWait::new(self, key).await;
                    continue;
                }
                Next::Found(Found::Absent) | Next::Bypass => {
                    let load = load.take().expect("the read starts once");
                    Ok((load().await?, false))
                }
                Next::Wait(read) => self.wait(key, read, false).await,
            };
        }
    }

    /// After a miss: the entry for a new read (with room reserved), or what another request
    /// put there meanwhile, or a bypass (no room).
    fn start_read(
        &self,
        shard: &Mutex<Shard>,
        key: PageKey,
        len: usize,
        hint: PageHint,
        reserved: bool,
        load: &mut Option<impl FnOnce() -> ReadFuture + Send + 'static>,
    ) -> Next {
        let mut s = shard.lock();
        match Self::find(&mut s, &key, hint) {
            Found::Absent => {}
            found => {
                drop(s);
                if reserved {
                    self.release(len);
                }
                return Next::Found(found);
            }
        }
        if !reserved {
            s.stats.misses += 1;
            s.stats.bypasses += 1;
            return Next::Bypass;
        }
        Next::Wait(Self::insert_loading(&mut s, key, len, hint, load))
    }

    /// Puts `key` in a locked shard as being read by `load` (its `len` bytes reserved): the
    /// read every request for the page waits for.
    fn insert_loading(
        s: &mut Shard,
        key: PageKey,
        len: usize,
        hint: PageHint,
        load: &mut Option<impl FnOnce() -> ReadFuture + Send + 'static>,
    ) -> SharedRead {
        s.stats.misses += 1;
        // `load` only builds the read: it starts when first polled, outside the lock.
        let load = load.take().expect("the read starts once");
        let read: SharedRead = (load().map_err(Arc::new as fn(_) -> _)).shared();
        let ring_pos = s.insert_ring(key);
        s.map.insert(
            key,
            Entry {
                state: State::Loading {
                    read: read.clone(),
                    waiters: 1,
                },
                len,
                chances: hint.chances(),
                ring_pos,
            },
        );
        read
    }

    /// Looks `key` up in a locked shard, joining a read in flight.
    fn find(s: &mut Shard, key: &PageKey, hint: PageHint) -> Found {
        let Some(e) = s.map.get_mut(key) else {
            return Found::Absent;
        };
        e.renew(hint);
        match &mut e.state {
            State::Ready(page) => {
                let page = page.clone();
                s.stats.hits += 1;
                Found::Hit(page)
            }
            State::Loading { read, waiters } => {
                *waiters += 1;
                let read = read.clone();
                s.stats.joined += 1;
                Found::Join(read)
            }
            State::Direct { .. } => {
                s.stats.joined += 1;
                Found::Direct
            }
        }
    }

    /// Waits for `read` as one of its waiters; the first to see it finish records the
    /// outcome, and a waiter that gives up leaves (the last one removes the entry).
    async fn wait(&self, key: PageKey, read: SharedRead, joined: bool) -> Result<(PageBuf, bool)> {
        let mut waiter = Waiter {
            pool: self,
            key,
            read: read.clone(),
            done: false,
        };
        let result = read.await;
        waiter.done = true;
        self.settle(key, &waiter.read, &result);
        result.map(|p| (p, joined)).map_err(|e| e.duplicate())
    }

    /// Records the outcome of a finished read: cache the page, or forget a failed read.
    fn settle(&self, key: PageKey, read: &SharedRead, result: &Result<PageBuf, Arc<StorageError>>) {
        let mut s = self.shard(&key).lock();
        let Some(entry) = s.map.get_mut(&key) else {
            return;
        };
        if !matches!(&entry.state, State::Loading { read: r, .. } if r.ptr_eq(read)) {
            return;
        }
        match result {
            Ok(page) => entry.state = State::Ready(page.clone()),
            Err(_) => {
                let freed = s.remove(&key);
                drop(s);
                self.release(freed);
            }
        }
    }

    /// A waiter of `read` gave up before it finished.
    fn leave(&self, key: PageKey, read: &SharedRead) {
        let mut s = self.shard(&key).lock();
        let Some(entry) = s.map.get_mut(&key) else {
            return;
        };
        let State::Loading { read: r, waiters } = &mut entry.state else {
            return;
        };
        if !r.ptr_eq(read) {
            return;
        }
        *waiters -= 1;
        if *waiters == 0 {
            // Nobody wants the page any more: forget the read (the engine cancels it).
            let freed = s.remove(&key);
            s.stats.abandoned += 1;
            drop(s);
            self.release(freed);
        }
    }

    /// Takes `len` bytes of the budget if they fit without evicting and without asking the
    /// pool's memory for more: no lock taken, so it may run under a shard's.
    fn reserve_without_evicting(&self, len: usize) -> bool {
        let granted = match self.memory {
            Some(_) => self.granted_now.load(SeqCst),
            None => usize::MAX,
        };
        let mut used = self.used.load(SeqCst);
        loop {
            let want = used + len;
            if want > self.budget() || want > granted {
                return false;
            }
            match (self.used).compare_exchange_weak(used, want, SeqCst, SeqCst) {
                Ok(_) => {
                    self.note_peak(want);
                    return true;
                }
                Err(now) => used = now,
            }
        }
    }

    /// Most bytes held: written only when passed (a locked instruction on a line both cores
    /// read at every miss otherwise).
    fn note_peak(&self, used: usize) {
        if used > self.peak.load(Relaxed) {
            self.peak.fetch_max(used, Relaxed);
        }
    }

    /// Takes `len` bytes of the budget, evicting to make room; false if nothing more can go.
    fn reserve(&self, len: usize) -> bool {
        for _ in 0..4 {
            let used = self.used.load(SeqCst);
            let want = used + len;
            if want <= self.budget() && self.granted_covers(want) {
                if self
                    .used
                    .compare_exchange(used, want, SeqCst, SeqCst)
                    .is_ok()
                {
                    self.note_peak(want);
                    return true;
                }
                continue;
            }
            if self.evict(len) == 0 {
                return false;
            }
        }
        false
    }

    /// Whether `bytes` in all are granted by the pool's memory (asking for more if not).
    fn granted_covers(&self, bytes: usize) -> bool {
        let Some(memory) = &self.memory else {
            return true;
        };
        if bytes <= self.granted_now.load(SeqCst) {
            return true;
        }
        let mut granted = self.granted.lock();
        if bytes <= *granted {
            return true;
        }
        let more = (bytes - *granted).div_ceil(GRANULE) * GRANULE;
        if !memory.try_grow(more) {
            return false;
        }
        *granted += more;
        self.granted_now.store(*granted, SeqCst);
        true
    }

    /// Returns `len` bytes to the budget.
    fn release(&self, len: usize) {
        if len > 0 {
            self.used.fetch_sub(len, SeqCst);
            self.give_back();
        }
    }

    /// Gives granted memory the pool holds no pages for back, keeping a granule or two.
    fn give_back(&self) {
        let Some(memory) = &self.memory else {
            return;
        };
        if self.granted_now.load(SeqCst) <= self.used.load(SeqCst) + 2 * GRANULE {
            return;
        }
        let mut granted = self.granted.lock();
        let keep = (self.used.load(SeqCst) + GRANULE).div_ceil(GRANULE) * GRANULE;
        if *granted > keep {
            memory.shrink(*granted - keep);
            *granted = keep;
            self.granted_now.store(keep, SeqCst);
        }
    }

    /// Evicts cached pages, shard after shard, until `want` bytes are freed or every page
    /// had its chances; returns the bytes freed.
    ///
    /// One clock over all shards: the hand goes round a shard's pages, then moves to the next
    /// shard, and the next eviction goes on where this one stopped, so each page loses one
    /// chance per turn of the whole pool, as in a single clock.
    fn evict(&self, want: usize) -> usize {
        let mut at = self.evict_from.load(Relaxed) % SHARDS;
        let mut freed = 0;
        let mut arrived = false;
        // A turn of the pool takes one chance from every page; the largest hint has three,
        // so a fifth turn finds nothing new.
        for _ in 0..5 * SHARDS + 1 {
            let (got, turn_over) = {
                let mut s = self.shards[at].lock();
                if arrived || s.turn_left == 0 {
                    s.turn_left = s.ring.len();
                }
                if s.ring.is_empty() {
                    (0, true)
                } else {
                    s.sweep(want - freed)
                }
            };
            freed += got;
            if freed >= want {
                break;
            }
            if turn_over {
                at = (at + 1) % SHARDS;
                arrived = true;
            }
        }
        self.evict_from.store(at, Relaxed);
        if freed > 0 {
            self.evictions.fetch_add(1, Relaxed);
            self.used.fetch_sub(freed, SeqCst);
        }
        freed
    }

    /// The page `key` if it is cached (counted as a hit), without starting or joining a read.
    pub fn get_cached(&self, key: PageKey, hint: PageHint) -> Option<PageBuf> {
        let mut s = self.shard(&key).lock();
        let e = s.map.get_mut(&key)?;
        let State::Ready(page) = &e.state else {
            return None;
        };
        let page = page.clone();
        e.renew(hint);
        s.stats.hits += 1;
        Some(page)
    }

    /// [`get_cached`](Self::get_cached) of many keys at once: `out[i]` is the page of
    /// `keys[i]` if it is cached (`out` is cleared first); returns the number found.
    ///
    /// Each shard is locked once for all its keys, and its entries are all found before any
    /// page is handed out: a lookup one at a time costs three dependent cache misses (the
    /// table's control bytes, the entry, the page's reference count) behind two locked
    /// instructions that keep the next lookup's misses from starting, so a hot probe loop
    /// waited on memory one miss at a time. Here the entries' misses overlap, the counts
    /// are fetched into the cache before they are incremented, and the first two lines of
    /// each page found are asked for.
    pub fn get_cached_many(
        &self,
        keys: &[PageKey],
        hint: PageHint,
        out: &mut Vec<Option<PageBuf>>,
    ) -> usize {
        out.clear();
        out.resize(keys.len(), None);
        let mut by_shard: Vec<(u32, u32)> = (keys.iter().enumerate())
            .map(|(i, key)| (self.shard_of(key) as u32, i as u32))
            .collect();
        by_shard.sort_unstable();
        let mut found = 0;
        let mut renewed: Vec<u32> = Vec::new();
        for run in by_shard.chunk_by(|a, b| a.0 == b.0) {
            let mut s = self.shards[run[0].0 as usize].lock();
            let shard = &mut *s;
            let mut pages: Vec<(u32, &PageBuf)> = Vec::with_capacity(run.len());
            for &(_, i) in run {
                if let Some(e) = shard.map.get(&keys[i as usize])
                    && let State::Ready(page) = &e.state
                {
                    page.prefetch_count();
                    pages.push((i, page));
                    if e.chances < hint.chances() {
                        renewed.push(i);
                    }
                }
            }
            let hits = pages.len();
            for (i, page) in pages {
                // Its holder count is in the cache now, and with it where the bytes are: the
                // page's first lines (its header, where every reader starts) are asked for
                // while they are known.
                crate::storage::page::prefetch(page, 2);
                out[i as usize] = Some(page.clone());
            }
            for i in renewed.drain(..) {
                if let Some(e) = shard.map.get_mut(&keys[i as usize]) {
                    e.renew(hint);
                }
            }
            shard.stats.hits += hits as u64;
            found += hits;
        }
        found
    }

    /// Drops every cached page (reads in flight finish and are then cached).
    pub fn clear(&self) {
        let mut freed = 0;
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            let ready: Vec<PageKey> = s
                .map
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Ready(_)))
                .map(|(k, _)| *k)
                .collect();
            for k in ready {
                freed += s.remove(&k);
            }
        }
        self.used.fetch_sub(freed, SeqCst);
        self.give_back();
    }

    /// Counters and current size.
    pub fn stats(&self) -> PoolStats {
        let mut out = PoolStats::default();
        for shard in self.shards.iter() {
            let s = shard.lock();
            let st = s.stats;
            out.hits += st.hits;
            out.joined += st.joined;
            out.misses += st.misses;
            out.evictions += st.evictions;
            out.bypasses += st.bypasses;
            out.abandoned += st.abandoned;
            out.pages += s.map.len() as u64;
            out.loading += s
                .map
                .values()
                .filter(|e| matches!(e.state, State::Loading { .. } | State::Direct { .. }))
                .count() as u64;
        }
        out.used_bytes = self.used.load(SeqCst) as u64;
        out.peak_bytes = self.peak.load(Relaxed) as u64;
        out.reserved_bytes = self.granted_now.load(SeqCst) as u64;
        out
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        if let Some(memory) = &self.memory {
            memory.shrink(*self.granted.get_mut());
        }
    }
}

/// One request waiting for a read; leaves the read when dropped before it finished.
struct Waiter<'a> {
    pool: &'a BufferPool,
    key: PageKey,
    read: SharedRead,
    done: bool,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.pool.leave(self.key, &self.read);
        }
    }
}

#[cfg(test)]
mod tests;
