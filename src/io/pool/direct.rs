//! Direct reads: a reader that ends its read itself, with no future in the pool.
//!
//! ```text
//!   claim(key) ──> cached: Hit ── absent: an entry `Direct` (bytes reserved) ──> Claimed
//!                  being read by another request: Busy (the caller uses `get`)
//!   the reader's read completes (on whichever thread takes it) ──> finish_claim(key, page)
//!       the page cached, or the entry forgotten (failed read); requests that came meanwhile
//!       wake and look again
//! ```
//!
//! Why: a read through [`BufferPool::get`] is a future every request for the page shares
//! (`Shared`: an allocation, its wakers, and a poll by a task to drive it). An operator that
//! keeps many reads in flight can instead have them completed into a queue of its own by the
//! engine (see [`crate::io::ReadSink`]), without a future or a wake-up per read. Such a read
//! is never abandoned: the engine ends every read it accepted, so its entry always ends, even
//! when the operator that asked for it is gone (a cancelled query's page is cached).

use std::collections::hash_map::{Entry as MapEntry, VacantEntry};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{BufferPool, Entry, PageHint, PageKey, State};
use crate::io::buf::PageBuf;

/// What [`BufferPool::claim`] found.
#[derive(Debug)]
pub enum Claim {
    /// The page is cached (counted as a hit).
    Hit(PageBuf),
    /// The caller reads the page and must end the read with [`BufferPool::finish_claim`].
    Claimed,
    /// Another request reads the page, or there is no room: use [`BufferPool::get`].
    Busy,
}

impl BufferPool {
    /// Claims the read of page `key` (`len` bytes): see [`Claim`].
    pub fn claim(&self, key: PageKey, len: usize, hint: PageHint) -> Claim {
        let shard = self.shard(&key);
        {
            let mut guard = shard.lock();
            // One search of the map for the page: what it finds, or where it goes.
            let s = &mut *guard;
            match s.map.entry(key) {
                MapEntry::Occupied(mut e) => return Self::found(e.get_mut(), &mut s.stats, hint),
                MapEntry::Vacant(v) if self.reserve_without_evicting(len) => {
                    Self::insert_direct(v, (&mut s.ring, &mut s.free_pos), &mut s.stats, len, hint);
                    return Claim::Claimed;
                }
                MapEntry::Vacant(_) => {}
            }
        }
        // Room first (eviction visits other shards, one lock at a time), then the entry,
        // unless another request put one there meanwhile.
        if !self.reserve(len) {
            return Claim::Busy;
        }
        let mut guard = shard.lock();
        let s = &mut *guard;
        match s.map.entry(key) {
            MapEntry::Occupied(mut e) => {
                let found = Self::found(e.get_mut(), &mut s.stats, hint);
                drop(guard);
                self.release(len);
                found
            }
            MapEntry::Vacant(v) => {
                Self::insert_direct(v, (&mut s.ring, &mut s.free_pos), &mut s.stats, len, hint);
                Claim::Claimed
            }
        }
    }

    /// Ends a claimed read: `Some(page)` caches it, None forgets the entry (a failed read).
    /// Requests that found the entry meanwhile are woken to look again.
    pub fn finish_claim(&self, key: PageKey, page: Option<&PageBuf>) {
        let mut s = self.shard(&key).lock();
        let Some(entry) = s.map.get_mut(&key) else {
            return;
        };
        let State::Direct { joiners } = &mut entry.state else {
            return;
        };
        let joiners = std::mem::take(joiners);
        let freed = match page {
            Some(page) => {
                entry.state = State::Ready(page.clone());
                0
            }
            None => s.remove(&key),
        };
        drop(s);
        self.release(freed);
        joiners.into_iter().for_each(std::task::Waker::wake);
    }

    /// What a claim of page with entry `e` gets: the cached page (a hit), or Busy for a page
    /// being read; joins nothing.
    fn found(e: &mut Entry, stats: &mut super::ShardStats, hint: PageHint) -> Claim {
        let State::Ready(page) = &e.state else {
            return Claim::Busy;
        };
        let page = page.clone();
        e.renew(hint);
        stats.hits += 1;
        Claim::Hit(page)
    }

    /// Puts the entry of a page the caller reads (its `len` bytes reserved) at `slot`, a
    /// place in its shard's map, and the page in the shard's clock ring (`ring`, its free
    /// places).
    fn insert_direct(
        slot: VacantEntry<'_, PageKey, Entry>,
        (ring, free_pos): (&mut Vec<Option<PageKey>>, &mut Vec<usize>),
        stats: &mut super::ShardStats,
        len: usize,
        hint: PageHint,
    ) {
        stats.misses += 1;
        let ring_pos = super::ring_slot(ring, free_pos, *slot.key());
        slot.insert(Entry {
            state: State::Direct {
                joiners: Vec::new(),
            },
            len,
            chances: hint.chances(),
            ring_pos,
        });
    }
}

/// Waits until the direct read of a page ends (cached or forgotten).
pub(super) struct DirectWait<'a> {
    pool: &'a BufferPool,
    key: PageKey,
}

impl<'a> DirectWait<'a> {
    pub(super) fn new(pool: &'a BufferPool, key: PageKey) -> Self {
        Self { pool, key }
    }
}

impl Future for DirectWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.pool.shard(&self.key).lock();
        match s.map.get_mut(&self.key) {
            Some(Entry {
                state: State::Direct { joiners },
                ..
            }) => {
                // A request polled again keeps one waker in the list, not one per poll.
                if !joiners.iter().any(|w| w.will_wake(cx.waker())) {
                    joiners.push(cx.waker().clone());
                }
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::FileId;
    use crate::storage::page::AlignedBuf;
    use futures::FutureExt;

    fn page(byte: u8) -> PageBuf {
        let mut buf = AlignedBuf::zeroed(4096);
        buf[0] = byte;
        PageBuf::new(buf, None::<std::sync::Arc<crate::io::Recycler>>)
    }

    fn never_read() -> crate::io::ReadFuture {
        panic!("the request must not start a read of its own")
    }

    /// A claimed page is read once: a second claim is told to wait, a request through `get`
    /// waits for the claim's end and then finds the page cached; the claim is a miss, the
    /// request a join and then a hit.
    #[tokio::test]
    async fn requests_wait_for_a_claimed_read_and_find_its_page() {
        let pool = BufferPool::new(1 << 20);
        let key = (FileId(1), 8192);
        assert!(matches!(
            pool.claim(key, 4096, PageHint::Data),
            Claim::Claimed
        ));
        assert!(matches!(pool.claim(key, 4096, PageHint::Data), Claim::Busy));
        assert_eq!(pool.stats().loading, 1);
        assert_eq!(
            pool.stats().used_bytes,
            4096,
            "the read's bytes are reserved"
        );
        let mut waiting = Box::pin(pool.get(key, 4096, PageHint::Data, never_read));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        pool.finish_claim(key, Some(&page(7)));
        let (got, cached) = waiting.await.unwrap();
        assert_eq!((got[0], cached), (7, true));
        let stats = pool.stats();
        assert_eq!((stats.misses, stats.joined, stats.hits), (1, 1, 1));
        assert_eq!((stats.loading, stats.pages, stats.used_bytes), (0, 1, 4096));
        match pool.claim(key, 4096, PageHint::Data) {
            Claim::Hit(p) => assert_eq!(p[0], 7),
            other => panic!("a cached page is a hit, not {other:?}"),
        }
    }

    /// A failed claimed read leaves no entry and gives its bytes back; a request that waited
    /// for it then reads the page itself.
    #[tokio::test]
    async fn a_failed_claim_leaves_no_entry_and_waiters_read_for_themselves() {
        let pool = BufferPool::new(1 << 20);
        let key = (FileId(2), 0);
        assert!(matches!(
            pool.claim(key, 4096, PageHint::Data),
            Claim::Claimed
        ));
        let own_read = || futures::future::ready(Ok(page(9))).boxed();
        let mut waiting = Box::pin(pool.get(key, 4096, PageHint::Data, own_read));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        pool.finish_claim(key, None);
        assert_eq!(
            pool.stats().used_bytes,
            0,
            "the failed read's bytes are given back"
        );
        let (got, cached) = waiting.await.unwrap();
        assert_eq!((got[0], cached), (9, false), "read again by the waiter");
        assert_eq!(pool.stats().loading, 0);
    }

    /// Pages being read are not evicted, and a claim over the budget evicts cached pages or,
    /// with nothing to evict, is refused (the caller reads the future way, which bypasses).
    #[tokio::test]
    async fn claims_evict_cached_pages_and_never_overrun_the_budget() {
        let pool = BufferPool::new(2 * 4096);
        let (a, b, c) = ((FileId(3), 0), (FileId(3), 4096), (FileId(3), 8192));
        assert!(matches!(
            pool.claim(a, 4096, PageHint::Data),
            Claim::Claimed
        ));
        assert!(matches!(
            pool.claim(b, 4096, PageHint::Data),
            Claim::Claimed
        ));
        assert!(matches!(pool.claim(c, 4096, PageHint::Data), Claim::Busy));
        pool.finish_claim(a, Some(&page(1)));
        pool.clear();
        assert_eq!(pool.stats().loading, 1, "clear keeps the read in flight");
        assert!(matches!(
            pool.claim(c, 4096, PageHint::Data),
            Claim::Claimed
        ));
        pool.finish_claim(b, Some(&page(2)));
        pool.finish_claim(c, Some(&page(3)));
        // Both cached pages had their chance: the next claim evicts one of them.
        let d = (FileId(3), 12288);
        assert!(matches!(
            pool.claim(d, 4096, PageHint::Data),
            Claim::Claimed
        ));
        assert!(pool.stats().used_bytes <= 2 * 4096);
        assert!(pool.stats().evictions >= 1);
        pool.finish_claim(d, None);
    }
}
