//! Admission of page reads: a cap on the reads in flight of each query and one on all queries
//! of a runtime together, with the reads of small queries first and, within a query, the
//! reads closest to its output first.
//!
//! ```text
//!   step wants a read ──> fast path: nobody waits, runtime below its cap (for a query not
//!        │                long: below the cap and the reserve above it), query below its limit
//!        │                ──> permit (three atomic additions, no lock)
//!        └─ else: queued under the query, at the step's level ──> pending
//!   a permit dropped ──> counts back ──> if anyone waits: lock, dispatch:
//!        while there is room (the cap, and the reserve for all but long queries): a query
//!        of the smallest size class that waits and is below its own limit (round robin
//!        within the class; one grant in FAIR_EVERY to the classes in turn, which may use
//!        the reserve) gets one permit, for its waiter of the highest level (closest to
//!        the output: finished work leaves memory first)
//! ```
//!
//! Size classes are log2 of the page reads the optimizer estimated for the query's plan.
//! Under load, plain round robin between queries made a point lookup (a few reads per
//! level, six levels) wait a turn of every waiting query for each of its reads: measured at
//! 64 clients (SF 1, release), the slowest 5 % of point lookups spent 92 ms, of which their
//! 25 reads had waited 624 ms in the queue, summed (reads of one level wait together). Smaller
//! classes first lets a point through in a few completions; the fair turns keep the largest
//! queries moving (at least one grant in `FAIR_EVERY` times the classes waiting). A permit is
//! held until the step has used its page (decoded it), not just until the read completes,
//! so permits bound pages in memory too.
//!
//! The reserve (`ooode.short_query_io_reserve_percent` of the cap) lies above the cap, for
//! queries not estimated long (above `ooode.short_query_reads` pages): long queries take
//! permits up to the cap, except on the fair turns, and the others up to the cap and the
//! reserve. Why: priority among waiters does not help a point lookup when long queries hold
//! every permit, with pages read and not yet used (their operators run at idle priority
//! beside short queries, see [`super::idle_lane`]): measured at 64 clients, the points that
//! waited longest found 236-252 of the 256 permits held by long queries and 0.1-9 permits
//! given back per millisecond. Why above the cap: carved out of it, a long query had to know
//! whether short ones run beside it. Alone it must not leave the reserve free (the 10 % Fig.
//! 4 query with pages from the OS cache read 132 K pages/s with it against 150 K without),
//! but a burst's first long queries, started before any short one, took the whole cap and
//! the first points waited for its pages to be used (log, 2026-12-07).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use foldhash::HashMap;
use futures::task::AtomicWaker;
use parking_lot::Mutex;

use crate::config::MAX_READS_IN_FLIGHT;
use crate::io::priority::{CLASSES, ClassTurns, UNKNOWN_CLASS, size_class, take_below};

/// Levels of priority within a query (higher first); deeper levels share the last one.
pub const LEVELS: usize = 8;

/// The runtime-wide side: a cap on reads in flight for all queries.
#[derive(Debug)]
pub struct Admission {
    cap: AtomicUsize,
    /// Permits above the cap for queries not long (see the module's notes).
    reserve: AtomicUsize,
    in_use: AtomicUsize,
    /// Requests queued (fast paths step aside while any wait, to keep the turn fair).
    waiting: AtomicUsize,
    queues: Mutex<Queues>,
    next_query: AtomicU64,
}

#[derive(Debug, Default)]
struct Queues {
    /// Looked up under the lock at every queued request and grant: a fast hash, not SipHash.
    by_query: HashMap<u64, QueryWaiters>,
    /// Queries with waiters, in turn order, by size class (smallest first).
    turns: [VecDeque<u64>; CLASSES],
    /// Which class the next permit goes to.
    class_turns: ClassTurns,
}

/// The estimate of a query not estimated yet.
const NOT_ESTIMATED: u64 = u64::MAX;

impl Queues {
    /// Queues query `id` of `class` for its turns, unless it is queued already.
    fn enqueue(&mut self, id: u64, class: usize) {
        if let Some(w) = self.by_query.get_mut(&id)
            && !w.in_turn
        {
            w.in_turn = true;
            self.turns[class].push_back(id);
        }
    }

    /// Gives one permit to a waiter of a query in `class` (round robin within the class),
    /// out of the reserve too when `fair` (a fair turn): whether one was given.
    fn grant_in(&mut self, class: usize, admission: &Admission, fair: bool) -> bool {
        let mut turns_left = self.turns[class].len();
        while turns_left > 0 {
            turns_left -= 1;
            let Some(id) = self.turns[class].pop_front() else {
                break;
            };
            let Some(waiters) = self.by_query.get_mut(&id) else {
                continue;
            };
            // A request cancelled while queued takes itself out (`Acquire`'s drop), so the
            // levels' fronts need no sweep; one cancelled between its drop's mark and its
            // lock is popped below and its permit handed back.
            let Some(level) = waiters.levels.iter_mut().rev().find(|l| !l.is_empty()) else {
                self.by_query.remove(&id);
                continue;
            };
            if !admission.take(&waiters.share, fair) {
                self.turns[class].push_back(id);
                if admission.in_use.load(SeqCst) >= admission.room_for(&waiters.share, fair) {
                    return false;
                }
                // At its own limit, or long and only the reserve free: the next one may not
                // be.
                continue;
            }
            let cell = level.pop_front().expect("non-empty level");
            admission.waiting.fetch_sub(1, SeqCst);
            waiters.share.waiting.fetch_sub(1, SeqCst);
            if let Some(queued_at) = cell.queued_at {
                let waited = queued_at.elapsed().as_nanos() as u64;
                cell.granted_after.store(waited, SeqCst);
            }
            let granted = cell
                .state
                .compare_exchange(WAITING, GRANTED, SeqCst, SeqCst)
                .is_ok();
            if granted {
                cell.waker.wake();
            } else {
                // Cancelled, not taken out yet: the permit goes back, and this was no turn
                // (another waiter, of this query or the next, gets it now: left free, it
                // would wait for the next permit given back, and there may be none).
                admission.in_use.fetch_sub(1, SeqCst);
                waiters.share.in_use.fetch_sub(1, SeqCst);
                turns_left += 1;
            }
            if waiters.levels.iter().any(|l| !l.is_empty()) {
                // Its class may have changed since it was queued (its plan was estimated).
                let class = waiters.share.class();
                self.turns[class].push_back(id);
            } else {
                self.by_query.remove(&id);
            }
            if granted {
                return true;
            }
        }
        false
    }
}

#[derive(Debug)]
struct QueryWaiters {
    share: Arc<Share>,
    levels: [VecDeque<Arc<Cell>>; LEVELS],
    /// Whether the query is in `turns`.
    in_turn: bool,
}

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const GONE: u8 = 2;

/// One queued request.
#[derive(Debug)]
struct Cell {
    state: AtomicU8,
    waker: AtomicWaker,
    /// When it was queued: for a query not known to be long only. Its waits are what
    /// [`Share::waits`] tells (how a short query's time goes under load); a long query's
    /// thousands of queued reads would pay two more clock reads each for figures nobody reads.
    queued_at: Option<Instant>,
    /// Nanoseconds from queueing to the grant (set by the grant).
    granted_after: AtomicU64,
}

/// One query's side: its limit and its reads in flight.
#[derive(Debug)]
pub struct Share {
    id: u64,
    limit: usize,
    /// Above this many estimated reads the query is long.
    short_query_reads: u64,
    in_use: AtomicUsize,
    /// Its requests queued now.
    waiting: AtomicUsize,
    admission: Arc<Admission>,
    /// Requests that were queued, their time queued until granted, and from the grant until
    /// their task ran (summed, nanoseconds): where a query's time goes under load.
    queued: AtomicU64,
    queued_nanos: AtomicU64,
    woken_nanos: AtomicU64,
    /// Estimated page reads of the whole query ([`NOT_ESTIMATED`]: none yet); its size
    /// class (see [`size_class`]) puts its reads before those of larger queries.
    estimated: AtomicU64,
}

/// How long a query's permit requests waited: in the queue, and granted until their task ran.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AdmissionWaits {
    /// Requests that waited in the queue (the others found room at once).
    pub queued: u64,
    /// Time queued until granted, summed over the requests (timed only while the query was
    /// not known to be long: a long query's queued reads skip the clock).
    pub queued_time: Duration,
    /// Time from the grant until the request's task ran again, summed (scheduling delay).
    pub wake_time: Duration,
}

impl Admission {
    /// Admission of at most `cap` reads in flight in all.
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: AtomicUsize::new(cap.max(1)),
            reserve: AtomicUsize::new(0),
            in_use: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            queues: Mutex::new(Queues::default()),
            next_query: AtomicU64::new(0),
        })
    }

    /// Changes the cap (reads in flight above a lower one finish; new ones wait).
    pub fn set_cap(&self, cap: usize) {
        if self.cap.swap(cap.max(1), SeqCst) < cap {
            self.dispatch();
        }
    }

    /// Sets the permits above the cap for queries not long (see the module's notes).
    pub fn set_reserve(&self, reserve: usize) {
        // More room for queries not long: their waiters may go now.
        if self.reserve.swap(reserve, SeqCst) < reserve {
            self.dispatch();
        }
    }

    /// The permits above the cap for queries not long.
    pub fn reserve(&self) -> usize {
        self.reserve.load(SeqCst)
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap.load(SeqCst)
    }

    /// Permits held now, over all queries.
    pub fn in_use(&self) -> usize {
        self.in_use.load(SeqCst)
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(SeqCst)
    }

    /// A new query allowed `limit` reads in flight, long if estimated to read more than
    /// `short_query_reads` pages.
    pub fn share(self: &Arc<Self>, limit: usize, short_query_reads: u64) -> Arc<Share> {
        Arc::new(Share {
            id: self.next_query.fetch_add(1, SeqCst),
            limit: limit.max(1),
            short_query_reads,
            in_use: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            admission: self.clone(),
            queued: AtomicU64::new(0),
            queued_nanos: AtomicU64::new(0),
            woken_nanos: AtomicU64::new(0),
            estimated: AtomicU64::new(NOT_ESTIMATED),
        })
    }

    /// Takes one unit of the runtime's room for `share` (see [`Self::room_for`]) and of its
    /// limit, if both have some.
    fn take(&self, share: &Share, into_reserve: bool) -> bool {
        if !take_below(&self.in_use, self.room_for(share, into_reserve)) {
            return false;
        }
        if !take_below(&share.in_use, share.limit) {
            self.in_use.fetch_sub(1, SeqCst);
            return false;
        }
        true
    }

    /// Permits in flight below which `share` may take one: the cap for a long query, unless
    /// `into_reserve` (a fair turn); the cap and the reserve above it otherwise.
    fn room_for(&self, share: &Share, into_reserve: bool) -> usize {
        match share.is_long() && !into_reserve {
            true => self.cap.load(SeqCst),
            false => self.most(),
        }
    }

    /// The most permits in flight: the cap and the reserve of short queries above it, but
    /// no more than one ring of the engines holds (the cap itself is bounded so by the
    /// settings), so that reads never wait in an engine for room.
    fn most(&self) -> usize {
        let cap = self.cap.load(SeqCst);
        (cap + self.reserve.load(SeqCst)).min(MAX_READS_IN_FLIGHT.max(cap))
    }

    fn give_back(&self, share: &Share) {
        share.in_use.fetch_sub(1, SeqCst);
        self.in_use.fetch_sub(1, SeqCst);
        if self.waiting.load(SeqCst) > 0 {
            self.dispatch();
        }
    }

    /// Hands free permits to waiting requests: to the queries of the smallest size class
    /// first, round robin within a class, and one in [`crate::io::priority::FAIR_EVERY`] to the classes in turn.
    fn dispatch(&self) {
        self.dispatch_locked(&mut self.queues.lock());
    }

    /// [`Self::dispatch`] with the queues locked already.
    fn dispatch_locked(&self, q: &mut Queues) {
        while self.in_use.load(SeqCst) < self.most() {
            let mut granted = None;
            let fair = q.class_turns.fair_turn();
            for class in q.class_turns.order() {
                if self.in_use.load(SeqCst) >= self.most() {
                    // Taken meanwhile: the turns of the classes after stay as they are.
                    break;
                }
                if !q.turns[class].is_empty() && q.grant_in(class, self, fair) {
                    granted = Some(class);
                    break;
                }
            }
            match granted {
                Some(class) => q.class_turns.granted(class),
                None => break,
            }
        }
    }
}

impl Share {
    /// Reads this query may have in flight.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Permits this query holds now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(SeqCst)
    }

    /// Whether requests of other queries wait for permits now.
    pub fn others_queued(&self) -> bool {
        let own = self.waiting.load(SeqCst);
        self.admission.waiting.load(SeqCst) > own
    }

    /// A permit now, if one is free and nobody waits for one.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let a = &self.admission;
        (a.waiting.load(SeqCst) == 0 && a.take(self, false)).then(|| Permit {
            share: self.clone(),
        })
    }

    /// Notes that the query is estimated to read `reads` pages in all: its reads then go
    /// before those of queries estimated larger.
    pub fn set_estimated_reads(&self, reads: u64) {
        self.estimated.store(reads.min(NOT_ESTIMATED - 1), Relaxed);
    }

    /// [`Self::set_estimated_reads`] unless the query was estimated already (a first guess,
    /// from a part of its plan).
    pub fn guess_estimated_reads(&self, reads: u64) {
        let reads = reads.min(NOT_ESTIMATED - 1);
        let _ = self
            .estimated
            .compare_exchange(NOT_ESTIMATED, reads, Relaxed, Relaxed);
    }

    /// The query's estimated page reads, if it was estimated.
    pub fn estimated_reads(&self) -> Option<u64> {
        Some(self.estimated.load(Relaxed)).filter(|&r| r != NOT_ESTIMATED)
    }

    /// Whether the query was estimated to read more than `short_query_reads` pages.
    pub fn is_long(&self) -> bool {
        self.estimated_reads()
            .is_some_and(|reads| reads > self.short_query_reads)
    }

    /// The query's size class (see [`crate::io::priority`]).
    pub fn class(&self) -> usize {
        match self.estimated.load(Relaxed) {
            NOT_ESTIMATED => UNKNOWN_CLASS,
            reads => size_class(reads),
        }
    }

    /// How long this query's requests waited so far.
    pub fn waits(&self) -> AdmissionWaits {
        AdmissionWaits {
            queued: self.queued.load(Relaxed),
            queued_time: Duration::from_nanos(self.queued_nanos.load(Relaxed)),
            wake_time: Duration::from_nanos(self.woken_nanos.load(Relaxed)),
        }
    }

    /// Notes a queued request of this query granted `cell`, now running.
    fn note_granted(&self, cell: &Cell) {
        self.queued.fetch_add(1, Relaxed);
        let Some(queued_at) = cell.queued_at else {
            return;
        };
        let total = queued_at.elapsed().as_nanos() as u64;
        let granted = cell.granted_after.load(SeqCst).min(total);
        self.queued_nanos.fetch_add(granted, Relaxed);
        self.woken_nanos.fetch_add(total - granted, Relaxed);
    }

    /// A permit for a read at `level` (higher: closer to the query's output, served first).
    pub fn acquire(self: &Arc<Self>, level: usize) -> Acquire {
        Acquire {
            share: self.clone(),
            level: level.min(LEVELS - 1),
            cell: None,
        }
    }
}

/// One read's right to be in flight; given back when dropped.
#[derive(Debug)]
pub struct Permit {
    share: Arc<Share>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.share.admission.give_back(&self.share);
    }
}

/// A request for a [`Permit`].
pub struct Acquire {
    share: Arc<Share>,
    level: usize,
    cell: Option<Arc<Cell>>,
}

impl Future for Acquire {
    type Output = Permit;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let this = &mut *self;
        match &this.cell {
            None => {
                if let Some(p) = this.share.try_acquire() {
                    return Poll::Ready(p);
                }
                let cell = Arc::new(Cell {
                    state: AtomicU8::new(WAITING),
                    waker: AtomicWaker::new(),
                    queued_at: (!this.share.is_long()).then(Instant::now),
                    granted_after: AtomicU64::new(0),
                });
                cell.waker.register(cx.waker());
                let a = &this.share.admission;
                {
                    let mut q = a.queues.lock();
                    let id = this.share.id;
                    let waiters = q.by_query.entry(id).or_insert_with(|| QueryWaiters {
                        share: this.share.clone(),
                        levels: Default::default(),
                        in_turn: false,
                    });
                    waiters.levels[this.level].push_back(cell.clone());
                    q.enqueue(id, this.share.class());
                    a.waiting.fetch_add(1, SeqCst);
                    this.share.waiting.fetch_add(1, SeqCst);
                    // Room freed before the request was queued is handed out here, under
                    // the same lock.
                    a.dispatch_locked(&mut q);
                }
                this.cell = Some(cell.clone());
                if cell.state.load(SeqCst) == GRANTED {
                    this.share.note_granted(&cell);
                    this.cell = None;
                    return Poll::Ready(Permit {
                        share: this.share.clone(),
                    });
                }
                Poll::Pending
            }
            Some(cell) => {
                cell.waker.register(cx.waker());
                if cell.state.load(SeqCst) == GRANTED {
                    this.share.note_granted(cell);
                    this.cell = None;
                    return Poll::Ready(Permit {
                        share: this.share.clone(),
                    });
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        let Some(cell) = self.cell.take() else {
            return;
        };
        match cell.state.compare_exchange(WAITING, GONE, SeqCst, SeqCst) {
            // Still queued: dispatch skips it (and counts it out then).
            Ok(_) => {
                let a = &self.share.admission;
                let mut q = a.queues.lock();
                if let Some(w) = q.by_query.get_mut(&self.share.id) {
                    let level = &mut w.levels[self.level];
                    if let Some(i) = level.iter().position(|c| Arc::ptr_eq(c, &cell)) {
                        level.remove(i);
                        a.waiting.fetch_sub(1, SeqCst);
                        self.share.waiting.fetch_sub(1, SeqCst);
                    }
                }
            }
            // Granted but never taken: give it back.
            Err(_) => self.share.admission.give_back(&self.share),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::priority::FAIR_EVERY;
    use futures::FutureExt;

    fn poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        f.now_or_never_ref()
    }

    trait NowOrNeverRef: Future + Unpin + Sized {
        fn now_or_never_ref(&mut self) -> Option<Self::Output> {
            let waker = futures::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            match Pin::new(self).poll(&mut cx) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            }
        }
    }
    impl<F: Future + Unpin> NowOrNeverRef for F {}

    #[test]
    fn limits_and_fair_turns() {
        let a = Admission::new(4);
        let big = a.share(100, 256);
        let small = a.share(100, 256);
        // The big query takes the whole cap and queues more.
        let held: Vec<_> = (0..4).map(|_| big.try_acquire().unwrap()).collect();
        let mut big_waits: Vec<_> = (0..10).map(|_| big.acquire(0)).collect();
        for w in big_waits.iter_mut() {
            assert!(poll_once(w).is_none());
        }
        // A small query arriving later gets the second freed permit at the latest.
        let mut small_wait = small.acquire(0);
        assert!(poll_once(&mut small_wait).is_none());
        let mut held = held;
        drop(held.pop());
        drop(held.pop());
        assert!(
            poll_once(&mut small_wait).is_some(),
            "the small query waited behind the big one's queue"
        );
        assert_eq!(a.in_use(), 4);
        // Cancelled requests give back what they were granted or leave the queue.
        drop(big_waits);
        drop(held);
        assert_eq!(a.waiting(), 0);
        assert!(a.in_use() <= 1, "{}", a.in_use());
    }

    #[test]
    fn smaller_queries_first_larger_ones_still_progress() {
        let a = Admission::new(1);
        let (big, small) = (a.share(100, 256), a.share(100, 256));
        big.set_estimated_reads(100_000);
        small.set_estimated_reads(20);
        let mut held = Some(big.try_acquire().unwrap());
        let mut big_waits: Vec<_> = (0..40).map(|_| big.acquire(0)).collect();
        let mut small_waits: Vec<_> = (0..40).map(|_| small.acquire(0)).collect();
        for w in big_waits.iter_mut().chain(small_waits.iter_mut()) {
            assert!(poll_once(w).is_none());
        }
        // Pass the single permit on, 40 times: who gets it each time.
        let mut order = Vec::new();
        for _ in 0..40 {
            drop(held.take());
            let granted = |waits: &mut Vec<Acquire>| {
                let (i, p) = waits
                    .iter_mut()
                    .enumerate()
                    .find_map(|(i, w)| poll_once(w).map(|p| (i, p)))?;
                waits.remove(i);
                Some(p)
            };
            if let Some(p) = granted(&mut small_waits) {
                order.push('s');
                held = Some(p);
            } else {
                held = Some(granted(&mut big_waits).expect("someone was granted the permit"));
                order.push('b');
            }
        }
        let bigs = order.iter().filter(|&&c| c == 'b').count();
        // The fair turns go to the two classes in turn: one grant in 2 * FAIR_EVERY is big's.
        assert_eq!(bigs, 40 / (2 * FAIR_EVERY as usize), "{order:?}");
        drop(held);
        drop(big_waits);
        drop(small_waits);
        assert_eq!(a.waiting(), 0);
    }

    #[test]
    fn a_request_cancelled_as_it_is_granted_hands_its_permit_on() {
        let a = Admission::new(1);
        let q = a.share(10, 256);
        let held = q.try_acquire().unwrap();
        let (mut first, mut second) = (q.acquire(0), q.acquire(0));
        assert!(poll_once(&mut first).is_none() && poll_once(&mut second).is_none());
        assert_eq!(a.waiting(), 2);
        // `first` is dropped: its drop has marked its cell gone but not yet taken the lock
        // to take it out (the state the grant can meet, and the drop's last step then finds
        // nothing to take out).
        let cell = first.cell.take().expect("queued");
        cell.state.store(GONE, SeqCst);
        drop(first);
        drop(held);
        let permit = poll_once(&mut second).expect("the permit went to the gone request");
        assert_eq!((a.in_use(), a.waiting(), q.in_use()), (1, 0, 1));
        assert!(a.queues.lock().by_query.is_empty());
        drop(permit);
        assert_eq!((a.in_use(), q.in_use()), (0, 0));
    }

    #[test]
    fn the_reserve_above_the_cap_is_for_queries_not_long() {
        let a = Admission::new(10);
        a.set_reserve(4);
        let long = a.share(100, 256);
        long.set_estimated_reads(10_000);
        let short = a.share(100, 256);
        short.set_estimated_reads(20);
        // Not estimated yet: not long, the reserve is open to it.
        let unknown = a.share(100, 256);
        // A long query takes the whole cap, whoever runs beside it, and no more.
        let mut long_held: Vec<_> = std::iter::from_fn(|| long.try_acquire()).collect();
        assert_eq!(long_held.len(), 10);
        let mut long_wait = long.acquire(0);
        assert!(poll_once(&mut long_wait).is_none());
        // Short queries find the reserve free at once, though a long one waits.
        let mut short_held: Vec<_> = (0..3)
            .map(|_| poll_once(&mut short.acquire(0)).expect("from the reserve"))
            .collect();
        let unknown_held = poll_once(&mut unknown.acquire(0)).expect("from the reserve");
        assert_eq!((a.in_use(), long.in_use()), (14, 10));
        let mut short_wait = short.acquire(0);
        assert!(
            poll_once(&mut short_wait).is_none(),
            "cap and reserve taken"
        );
        // A long query's permit given back: the short request waiting goes first (smaller
        // class), and the long one still waits while 10 or more are held.
        drop(long_held.pop());
        short_held.push(poll_once(&mut short_wait).expect("the smaller class first"));
        assert!(poll_once(&mut long_wait).is_none());
        drop((short_held.pop(), unknown_held));
        assert_eq!(a.in_use(), 12);
        assert!(
            poll_once(&mut long_wait).is_none(),
            "12 held, cap 10: not yet"
        );
        drop((short_held.pop(), short_held.pop()));
        assert!(
            poll_once(&mut long_wait).is_none(),
            "10 held, cap 10: not yet"
        );
        drop(short_held.pop());
        let granted = poll_once(&mut long_wait).expect("below the cap");
        assert_eq!((a.in_use(), long.in_use()), (10, 10));
        // Without a reserve short queries wait for the cap too.
        a.set_reserve(0);
        assert!(short.try_acquire().is_none());
        // A larger reserve lets a waiting short request go at once.
        let mut short_wait = short.acquire(0);
        assert!(poll_once(&mut short_wait).is_none());
        a.set_reserve(1);
        let last = poll_once(&mut short_wait).expect("the reserve grown");
        drop((granted, long_held, last));
        assert_eq!((a.in_use(), a.waiting()), (0, 0));
    }

    #[test]
    fn the_fair_turns_may_use_the_reserve() {
        let a = Admission::new(4);
        a.set_reserve(2);
        let (long, short) = (a.share(100, 256), a.share(100, 256));
        long.set_estimated_reads(100_000);
        short.set_estimated_reads(20);
        // Short queries hold the cap and the reserve and keep asking: without the fair turns
        // the long query would never get one (the cap is never below its room).
        let mut held: Vec<_> = (0..6).map(|_| short.try_acquire().unwrap()).collect();
        let mut long_wait = long.acquire(0);
        let mut short_waits: Vec<_> = (0..40).map(|_| short.acquire(0)).collect();
        assert!(poll_once(&mut long_wait).is_none());
        let mut long_granted = None;
        for _ in 0..2 * FAIR_EVERY {
            drop(held.remove(0));
            if let Some(p) = poll_once(&mut long_wait) {
                long_granted = Some(p);
                break;
            }
            let (i, p) = short_waits
                .iter_mut()
                .enumerate()
                .find_map(|(i, w)| poll_once(w).map(|p| (i, p)))
                .expect("a short request was granted the permit");
            drop(short_waits.remove(i));
            held.push(p);
        }
        assert!(
            long_granted.is_some(),
            "no fair turn went to the long query"
        );
        drop((long_granted, held, short_waits));
        assert_eq!((a.in_use(), a.waiting()), (0, 0));
    }

    #[test]
    fn query_limit_and_levels() {
        let a = Admission::new(100);
        let q = a.share(1, 256);
        let first = q.try_acquire().unwrap();
        assert!(q.try_acquire().is_none(), "limit 1");
        let mut low = q.acquire(0);
        let mut high = q.acquire(5);
        assert!(poll_once(&mut low).is_none());
        assert!(poll_once(&mut high).is_none());
        drop(first);
        assert!(poll_once(&mut low).is_none(), "the higher level goes first");
        let second = poll_once(&mut high).expect("granted");
        drop(second);
        let third = poll_once(&mut low).expect("then the lower one");
        drop(third);
        assert_eq!((a.in_use(), a.waiting(), q.in_use()), (0, 0, 0));
    }

    #[test]
    fn the_reserve_stops_at_what_a_ring_holds() {
        let a = Admission::new(MAX_READS_IN_FLIGHT - 2);
        a.set_reserve(MAX_READS_IN_FLIGHT / 2);
        let short = a.share(2 * MAX_READS_IN_FLIGHT, 256);
        short.set_estimated_reads(20);
        let held: Vec<_> = std::iter::from_fn(|| short.try_acquire()).collect();
        assert_eq!(held.len(), MAX_READS_IN_FLIGHT, "2 of the reserve, no more");
        drop(held);
        assert_eq!(a.in_use(), 0);
    }

    #[test]
    fn many_threads_never_exceed_the_caps() {
        let a = Admission::new(8);
        let max_seen = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let (a, max_seen) = (a.clone(), max_seen.clone());
                std::thread::spawn(move || {
                    let q = a.share(3, 256);
                    for i in 0..2000 {
                        let p = futures::executor::block_on(q.acquire(i % 3));
                        assert!(q.in_use() <= 3);
                        max_seen.fetch_max(a.in_use(), SeqCst);
                        if (i + t) % 7 == 0 {
                            // Abandon a request now and then.
                            drop(q.acquire(1).now_or_never());
                        }
                        drop(p);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(max_seen.load(SeqCst) <= 8);
        assert_eq!((a.in_use(), a.waiting()), (0, 0));
    }
}
