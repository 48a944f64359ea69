//! The buffer pool: a fixed byte budget of cached pages, shared by all queries of a session.
//!
//! - Single flight: concurrent requests for a page that is being read wait for that one read.
//! - CLOCK eviction with a hint: a page gets "chances" when used (data and leaf pages 1,
//!   B+tree inner nodes 3), the clock hand takes one chance per pass and evicts pages with
//!   none left, so the upper levels of the indexes stay resident while heap pages stream
//!   through.
//! - The budget counts pages being read as well as cached ones, and is never exceeded: when
//!   nothing can be evicted (everything is being read), a read bypasses the cache.
//! - `clear()` empties it (cold-cache benchmarks).

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;

use super::buf::PageBuf;
use super::{FileId, ReadFuture};
use crate::storage::{Result, StorageError};

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

type SharedRead = Shared<BoxFuture<'static, Result<PageBuf, Arc<StorageError>>>>;

enum State {
    Loading(SharedRead),
    Ready(PageBuf),
}

struct Entry {
    state: State,
    len: usize,
    chances: u8,
    ring_pos: usize,
}

#[derive(Default)]
struct Inner {
    map: HashMap<PageKey, Entry>,
    ring: Vec<Option<PageKey>>,
    free_pos: Vec<usize>,
    hand: usize,
    used: usize,
    stats: PoolStats,
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
    /// Bytes held now (cached and being read).
    pub used_bytes: u64,
    /// Most bytes ever held.
    pub peak_bytes: u64,
    /// Pages cached or being read now.
    pub pages: u64,
}

/// A page cache with a byte budget.
pub struct BufferPool {
    budget: usize,
    inner: Mutex<Inner>,
    file_keys: Mutex<HashMap<(u64, u64), FileId>>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("budget", &self.budget)
            .field("stats", &self.stats())
            .finish()
    }
}

enum Action {
    Hit(PageBuf),
    Wait(SharedRead),
    Load(SharedRead),
    Bypass,
}

impl Inner {
    fn insert_ring(&mut self, key: PageKey) -> usize {
        match self.free_pos.pop() {
            Some(p) => {
                self.ring[p] = Some(key);
                p
            }
            None => {
                self.ring.push(Some(key));
                self.ring.len() - 1
            }
        }
    }

    fn remove(&mut self, key: &PageKey) {
        if let Some(e) = self.map.remove(key) {
            self.ring[e.ring_pos] = None;
            self.free_pos.push(e.ring_pos);
            self.used -= e.len;
        }
    }

    /// Evicts until `len` more bytes fit in `budget`; false if that is impossible now.
    fn make_room(&mut self, len: usize, budget: usize) -> bool {
        if len > budget {
            return false;
        }
        // Each pass takes at most one chance from each page; four passes exhaust the largest
        // hint, so a fifth finds nothing new to evict.
        let mut steps = self.ring.len() * 5;
        while self.used + len > budget && steps > 0 {
            steps -= 1;
            if self.ring.is_empty() {
                return false;
            }
            self.hand = (self.hand + 1) % self.ring.len();
            let Some(key) = self.ring[self.hand] else {
                continue;
            };
            let entry = self.map.get_mut(&key).expect("ring and map agree");
            let evict = match &entry.state {
                State::Ready(_) => {
                    if entry.chances > 0 {
                        entry.chances -= 1;
                        false
                    } else {
                        true
                    }
                }
                // A read nobody waits for any more (its readers were cancelled).
                State::Loading(s) => s.strong_count() == Some(1),
            };
            if evict {
                self.remove(&key);
                self.stats.evictions += 1;
            }
        }
        self.used + len <= budget
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

impl BufferPool {
    /// A pool holding at most `budget` bytes.
    pub fn new(budget: usize) -> Arc<Self> {
        Arc::new(Self {
            budget,
            inner: Mutex::new(Inner::default()),
            file_keys: Mutex::new(HashMap::new()),
        })
    }

    /// The pool's key for the file at `path`, by device and inode: the same file read through
    /// different engines shares cached pages, and a file replaced at the same path (a table
    /// loaded again) gets a new key, so its old pages are never served for it.
    pub fn file_key(&self, path: &std::path::Path) -> Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| StorageError::io(path, "stat", e))?;
        let mut keys = self.file_keys.lock();
        let next = FileId(keys.len() as u32);
        Ok(*keys.entry((meta.dev(), meta.ino())).or_insert(next))
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The page `key` of `len` bytes: cached, joined to a read in flight, or read by `load`.
    /// Returns the page and whether it came without a new read.
    pub async fn get(
        &self,
        key: PageKey,
        len: usize,
        hint: PageHint,
        load: impl FnOnce() -> ReadFuture,
    ) -> Result<(PageBuf, bool)> {
        let mut load = Some(load);
        let mut start_read = || (load.take().expect("the read starts once"))();
        let action = {
            let mut inner = self.inner.lock();
            match inner.map.get_mut(&key) {
                Some(e) => {
                    e.chances = e.chances.max(hint.chances());
                    match &e.state {
                        State::Ready(p) => {
                            let p = p.clone();
                            inner.stats.hits += 1;
                            Action::Hit(p)
                        }
                        State::Loading(s) => {
                            let s = s.clone();
                            inner.stats.joined += 1;
                            Action::Wait(s)
                        }
                    }
                }
                None => {
                    inner.stats.misses += 1;
                    if inner.make_room(len, self.budget) {
                        let read: SharedRead =
                            start_read().map(|r| r.map_err(Arc::new)).boxed().shared();
                        let ring_pos = inner.insert_ring(key);
                        inner.map.insert(
                            key,
                            Entry {
                                state: State::Loading(read.clone()),
                                len,
                                chances: hint.chances(),
                                ring_pos,
                            },
                        );
                        inner.used += len;
                        inner.stats.peak_bytes = inner.stats.peak_bytes.max(inner.used as u64);
                        Action::Load(read)
                    } else {
                        inner.stats.bypasses += 1;
                        Action::Bypass
                    }
                }
            }
        };
        match action {
            Action::Hit(p) => Ok((p, true)),
            Action::Bypass => Ok((start_read().await?, false)),
            Action::Wait(read) => {
                let r = read.await;
                self.settle(key, &r);
                r.map(|p| (p, true)).map_err(|e| e.duplicate())
            }
            Action::Load(read) => {
                let r = read.await;
                self.settle(key, &r);
                r.map(|p| (p, false)).map_err(|e| e.duplicate())
            }
        }
    }

    /// The page `key` if it is cached (counted as a hit), without starting or joining a read.
    pub fn get_cached(&self, key: PageKey, hint: PageHint) -> Option<PageBuf> {
        let mut inner = self.inner.lock();
        let e = inner.map.get_mut(&key)?;
        let State::Ready(page) = &e.state else {
            return None;
        };
        let page = page.clone();
        e.chances = e.chances.max(hint.chances());
        inner.stats.hits += 1;
        Some(page)
    }

    /// Records the outcome of a finished read: cache the page, or forget a failed read.
    fn settle(&self, key: PageKey, result: &Result<PageBuf, Arc<StorageError>>) {
        let mut inner = self.inner.lock();
        let loading = matches!(
            inner.map.get(&key),
            Some(Entry {
                state: State::Loading(_),
                ..
            })
        );
        if !loading {
            return;
        }
        match result {
            Ok(page) => {
                if let Some(e) = inner.map.get_mut(&key) {
                    e.state = State::Ready(page.clone());
                }
            }
            Err(_) => inner.remove(&key),
        }
    }

    /// Drops every cached page (reads in flight finish and are then cached).
    pub fn clear(&self) {
        let mut inner = self.inner.lock();
        let ready: Vec<PageKey> = inner
            .map
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Ready(_)))
            .map(|(k, _)| *k)
            .collect();
        for k in ready {
            inner.remove(&k);
        }
    }

    /// Counters and current size.
    pub fn stats(&self) -> PoolStats {
        let inner = self.inner.lock();
        PoolStats {
            used_bytes: inner.used as u64,
            pages: inner.map.len() as u64,
            ..inner.stats
        }
    }
}
