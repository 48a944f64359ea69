//! Heap pages read straight into an operator's inbox: no future, task or wake-up per read.
//!
//! ```text
//!   operator ── start(page) ──> pool: cached ──> the page now
//!                                     being read by another request ──> Unavailable
//!                                     claimed ──> engine.start_read(sink = the inbox)
//!   completion (the thread taking it) ──> checksum and header checked ──> the pool caches
//!        the page (or forgets a failed read) ──> the inbox's list ──> one wake-up
//!   operator ── poll_ended ──> every read that ended since its last look
//! ```
//!
//! Why: a read through [`super::steps::missing_heap_page`] is a boxed future in the
//! operator's `FuturesUnordered`, a future the pool shares among requests for the page, and a
//! oneshot from the engine: allocations, wakers and wake-ups per page that the profiles of a
//! cold page showed spread over a dozen places. An operator that starts many reads and
//! takes their pages as they come needs none of that. The read's pool entry is ended by the
//! completion, not by the operator, so a cancelled query's reads still end their entries.
//! Reads the inbox cannot start (another request reads the page, no room in the pool, an
//! engine without sinks) go the future way.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::task::AtomicWaker;
use parking_lot::Mutex;

use super::table_io::{Counters, TableIo, page_error};
use crate::io::pool::Claim;
use crate::io::{PageBuf, PageHint, ReadSink};
use crate::storage::page::{PageKind, verify_page};
use crate::storage::{Result, StorageError};

/// What [`HeapInbox::start`] did.
#[derive(Debug)]
pub enum Start {
    /// The page was in the pool (counted as a hit).
    Cached(PageBuf),
    /// Its read was started; it ends in the inbox.
    Started,
    /// Nothing: read it the future way.
    Unavailable,
}

/// A read that ended: the heap page's number and the page, verified.
pub type Ended = (u64, Result<PageBuf>);

/// The heap pages of one table an operator reads directly, and those that ended.
pub struct HeapInbox {
    table: Arc<TableIo>,
    counters: Counters,
    state: Mutex<InboxState>,
    waker: AtomicWaker,
}

#[derive(Default)]
struct InboxState {
    /// Reads in flight, by page: when each started, for the counters.
    started: foldhash::HashMap<u64, Option<Instant>>,
    ended: Vec<Ended>,
}

impl HeapInbox {
    /// An inbox for heap pages of `table`, its reads and hits counted in `counters`.
    pub fn new(table: Arc<TableIo>, counters: Counters) -> Arc<Self> {
        Arc::new(Self {
            table,
            counters,
            state: Mutex::new(InboxState::default()),
            waker: AtomicWaker::new(),
        })
    }

    /// Starts reading heap page `page_no` into the inbox, unless it is cached or cannot be
    /// read this way (see [`Start`]). A page is read once at a time per inbox: the caller
    /// does not start a page it still waits for.
    pub fn start(self: &Arc<Self>, page_no: u64) -> Start {
        let Some(at) = self.table.heap_location(page_no) else {
            return Start::Unavailable;
        };
        let pool = self.table.pool();
        match pool.claim(at.key, at.len, PageHint::Data) {
            Claim::Hit(page) => {
                self.counters.hit();
                return Start::Cached(page);
            }
            Claim::Busy => return Start::Unavailable,
            Claim::Claimed => {}
        }
        let sink: Arc<dyn ReadSink> = self.clone();
        let class = self.counters.class();
        // Held until the start is counted: a completion on another thread waits for it.
        let mut state = self.state.lock();
        let engine = self.table.engine();
        if engine.start_read(at.file, at.offset, at.len, class, &sink, page_no) {
            state
                .started
                .insert(page_no, self.counters.start_detached());
            return Start::Started;
        }
        drop(state);
        pool.finish_claim(at.key, None);
        Start::Unavailable
    }

    /// Moves the reads that ended into `out` (which should be empty; its room is kept for
    /// the next ones); Pending, to be woken when one ends, if none did.
    pub fn poll_ended(&self, cx: &mut Context<'_>, out: &mut Vec<Ended>) -> Poll<()> {
        self.waker.register(cx.waker());
        let mut state = self.state.lock();
        if state.ended.is_empty() {
            return Poll::Pending;
        }
        std::mem::swap(&mut state.ended, out);
        Poll::Ready(())
    }
}

impl ReadSink for HeapInbox {
    fn complete(&self, page_no: u64, result: Result<PageBuf>, ended: Instant) {
        let path = self.table.heap_file(page_no);
        // Started, so it has a place; in its segment's file it is page `at.page`.
        let at = self.table.heap_location(page_no);
        let local = at.map_or(page_no, |at| at.page);
        let result = result
            .map_err(|e| match e {
                // The engine stopped before the read: it knows no file to name.
                StorageError::Io {
                    path: p,
                    op,
                    source,
                } if p.as_os_str().is_empty() => StorageError::io(path, op, source),
                e => page_error(e, local),
            })
            .and_then(|page| {
                verify_page(&page, local, &[PageKind::Heap], path)?;
                Ok(page)
            });
        if let Some(at) = at {
            (self.table.pool()).finish_claim(at.key, result.as_ref().ok());
        }
        let bytes = result.as_ref().ok().map(|page| page.len());
        let started = {
            let mut state = self.state.lock();
            let started = state.started.remove(&page_no).flatten();
            state.ended.push((page_no, result));
            started
        };
        self.counters.finish_started(started, bytes, ended);
        self.waker.wake();
    }
}
