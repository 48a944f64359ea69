//! Local flash as a cache of the pages of tables in object storage.
//!
//! ```text
//!   read(file, offset) ──> index: (object URL#version, offset) -> slot, CRC32C
//!        hit:  slot read from the cache file (the local engine: io_uring, O_DIRECT)
//!              CRC matches? page : entry dropped, page fetched from the store
//!        miss: GET from the store ──> page returned; written to a slot in the background,
//!              entered in the index once the write is done
//! ```
//!
//! One cache file per page size (`pages-<bytes>.cache`) of fixed slots, within one byte budget
//! for all; slots are reused in CLOCK order. A slot's bytes are checked against the CRC taken
//! when it was written on every read, so a slot being rewritten, a damaged cache file or a
//! stale entry can never serve a wrong page: it is read from the store instead. The cache is
//! emptied when a process opens it (its index lives in memory): a restart discards it safely.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use futures::FutureExt;
use parking_lot::Mutex;

use super::buf::PageBuf;
use super::{FileId, IoEngine, IoMetrics, ReadFuture};
use crate::storage::{Result, StorageError};

/// A cached page: its object (URL and version) and byte offset.
type Key = (Arc<str>, u64);

#[derive(Debug)]
enum Slot {
    Free,
    /// Being written; not in the index.
    Writing,
    Ready {
        key: Key,
        crc: u32,
        referenced: bool,
    },
}

#[derive(Debug)]
struct Slots {
    by_key: HashMap<Key, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

impl Slots {
    /// A slot to write into: a free one, else the first unreferenced one the hand finds.
    fn claim(&mut self) -> Option<usize> {
        if let Some(i) = self.slots.iter().position(|s| matches!(s, Slot::Free)) {
            self.slots[i] = Slot::Writing;
            return Some(i);
        }
        for _ in 0..2 * self.slots.len() {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            match &mut self.slots[i] {
                Slot::Ready {
                    referenced: r @ true,
                    ..
                } => *r = false,
                Slot::Ready { key, .. } => {
                    self.by_key.remove(key);
                    self.slots[i] = Slot::Writing;
                    return Some(i);
                }
                _ => {}
            }
        }
        None
    }
}

/// The slots of one page size.
#[derive(Debug)]
struct SlotFile {
    len: usize,
    writer: Arc<File>,
    reader: FileId,
    slots: Mutex<Slots>,
}

/// Counters of a [`DiskCache`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DiskCacheStats {
    /// Pages served from the cache.
    pub hits: u64,
    /// Pages asked for and not there.
    pub misses: u64,
    /// Slots whose bytes failed their CRC (read from the store instead).
    pub bad: u64,
    /// Pages written.
    pub writes: u64,
    /// Pages held now.
    pub pages: u64,
}

/// The cache (one per runtime and directory).
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    budget: usize,
    reserved: AtomicUsize,
    local: Arc<dyn IoEngine>,
    files: Mutex<HashMap<usize, Option<Arc<SlotFile>>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    bad: AtomicU64,
    writes: AtomicU64,
}

fn open_for_writing(path: &Path) -> Result<File> {
    let open = |direct: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true).create(true).truncate(true);
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    match open(true) {
        Ok(f) => Ok(f),
        // File systems without O_DIRECT (tmpfs) get buffered writes.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            open(false).map_err(|e| StorageError::io(path, "create the disk cache", e))
        }
        Err(e) => Err(StorageError::io(path, "create the disk cache", e)),
    }
}

impl DiskCache {
    /// A cache of at most `budget` bytes in `dir` (created if missing; an old cache there is
    /// discarded), read through `local`.
    pub fn open(dir: &Path, budget: usize, local: Arc<dyn IoEngine>) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::io(dir, "create the disk cache directory", e))?;
        Ok(Arc::new(Self {
            dir: dir.to_path_buf(),
            budget,
            reserved: AtomicUsize::new(0),
            local,
            files: Mutex::new(HashMap::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bad: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }))
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The slots of pages of `len` bytes (made on first use from what is left of the budget;
    /// None when nothing is left).
    fn file(&self, len: usize) -> Option<Arc<SlotFile>> {
        let mut files = self.files.lock();
        if let Some(f) = files.get(&len) {
            return f.clone();
        }
        let left = self.budget.saturating_sub(self.reserved.load(Relaxed));
        let count = left / len.max(1);
        let made = (count > 0)
            .then(|| {
                let path = self.dir.join(format!("pages-{len}.cache"));
                let writer = open_for_writing(&path).ok()?;
                writer.set_len((count * len) as u64).ok()?;
                let reader = self.local.open(&path).ok()?;
                self.reserved.fetch_add(count * len, Relaxed);
                Some(Arc::new(SlotFile {
                    len,
                    writer: Arc::new(writer),
                    reader,
                    slots: Mutex::new(Slots {
                        by_key: HashMap::new(),
                        slots: (0..count).map(|_| Slot::Free).collect(),
                        hand: 0,
                    }),
                }))
            })
            .flatten();
        if made.is_none() {
            log::warn!(
                "ooode: no disk cache for {len}-byte pages in {} (budget used up or file error)",
                self.dir.display()
            );
        }
        files.insert(len, made.clone());
        made
    }

    /// The page at `key` of `len` bytes if the cache holds it, checked.
    pub async fn get(&self, object: &Arc<str>, offset: u64, len: usize) -> Option<PageBuf> {
        let file = self.file(len)?;
        let key = (object.clone(), offset);
        let (slot, crc) = {
            let mut s = file.slots.lock();
            let Some(&i) = s.by_key.get(&key) else {
                drop(s);
                self.misses.fetch_add(1, Relaxed);
                return None;
            };
            match &mut s.slots[i] {
                Slot::Ready {
                    crc, referenced, ..
                } => {
                    *referenced = true;
                    (i, *crc)
                }
                _ => return None,
            }
        };
        let read = self
            .local
            .read(file.reader, (slot * file.len) as u64, file.len)
            .await;
        match read {
            Ok(page) if crate::storage::checksum::crc32c(&page) == crc => {
                self.hits.fetch_add(1, Relaxed);
                Some(page)
            }
            _ => {
                self.bad.fetch_add(1, Relaxed);
                let mut s = file.slots.lock();
                if s.by_key.get(&key) == Some(&slot) {
                    s.by_key.remove(&key);
                    s.slots[slot] = Slot::Free;
                }
                None
            }
        }
    }

    /// Keeps `page` (read from the store) for `key`: written in the background, entered once
    /// written.
    pub fn put(&self, object: &Arc<str>, offset: u64, page: PageBuf) {
        let Some(file) = self.file(page.len()) else {
            return;
        };
        let key = (object.clone(), offset);
        let slot = {
            let mut s = file.slots.lock();
            if s.by_key.contains_key(&key) {
                return;
            }
            match s.claim() {
                Some(i) => i,
                None => return,
            }
        };
        let crc = crate::storage::checksum::crc32c(&page);
        let write = move || {
            let at = (slot * file.len) as u64;
            let ok = file.writer.write_all_at(&page, at).is_ok();
            let mut s = file.slots.lock();
            if ok && !s.by_key.contains_key(&key) {
                s.by_key.insert(key.clone(), slot);
                s.slots[slot] = Slot::Ready {
                    key,
                    crc,
                    referenced: false,
                };
            } else {
                s.slots[slot] = Slot::Free;
            }
        };
        self.writes.fetch_add(1, Relaxed);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(write)),
            Err(_) => write(),
        }
    }

    /// Empties the cache (a cold run).
    pub fn clear(&self) {
        for file in self.files.lock().values().flatten() {
            let mut s = file.slots.lock();
            s.by_key.clear();
            for slot in s.slots.iter_mut() {
                if !matches!(slot, Slot::Writing) {
                    *slot = Slot::Free;
                }
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> DiskCacheStats {
        let pages = self
            .files
            .lock()
            .values()
            .flatten()
            .map(|f| f.slots.lock().by_key.len() as u64)
            .sum();
        DiskCacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            bad: self.bad.load(Relaxed),
            writes: self.writes.load(Relaxed),
            pages,
        }
    }
}

/// An engine reading through a [`DiskCache`] in front of another (an object store's).
#[derive(Debug)]
pub struct CachedEngine {
    inner: Arc<dyn IoEngine>,
    cache: Arc<DiskCache>,
    /// Each opened file's identity in the cache: its path and version.
    names: Mutex<HashMap<FileId, Arc<str>>>,
}

impl CachedEngine {
    /// `inner` with `cache` in front.
    pub fn new(inner: Arc<dyn IoEngine>, cache: Arc<DiskCache>) -> Self {
        Self {
            inner,
            cache,
            names: Mutex::new(HashMap::new()),
        }
    }

    /// The cache.
    pub fn cache(&self) -> &Arc<DiskCache> {
        &self.cache
    }
}

impl IoEngine for CachedEngine {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        self.open_version(path, "")
    }

    fn open_version(&self, path: &Path, version: &str) -> Result<FileId> {
        let id = self.inner.open_version(path, version)?;
        let name: Arc<str> = format!("{}#{version}", path.display()).into();
        self.names.lock().insert(id, name);
        Ok(id)
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.inner.path(file)
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        let Some(name) = self.names.lock().get(&file).cloned() else {
            return self.inner.read(file, offset, len);
        };
        let (cache, inner) = (self.cache.clone(), self.inner.clone());
        async move {
            if let Some(page) = cache.get(&name, offset, len).await {
                return Ok(page);
            }
            let page = inner.read(file, offset, len).await?;
            cache.put(&name, offset, page.clone());
            Ok(page)
        }
        .boxed()
    }

    /// Runs pass by: each length would get slot files of its own, and their pages are
    /// pinned with the table anyway.
    fn read_run(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        self.inner.read_run(file, offset, len)
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        self.inner.metrics()
    }

    fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight()
    }

    fn close_in(&self, dir: &Path) -> usize {
        self.inner.close_in(dir)
    }
}
