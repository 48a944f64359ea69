//! ooode's own queue in front of the device: at most `depth` reads of an engine are at the
//! device at once; the others wait here, ordered by their query's size class.
//!
//! ```text
//!   read (first poll) ──> room at the device and nobody queued? ──yes──> push into its ring
//!        │ no
//!        └──> queued by class (the read's buffer and reply travel with it)
//!   a ring reaps n completions ──> n places free ──> dispatch: the smallest class first
//!        (one grant in FAIR_EVERY to the classes in turn), pushed into the read's own ring
//!        by the reaper itself: no task has to wake up for the device to stay busy
//! ```
//!
//! Why: admission bounds the pages queries hold (read or being read); a read behind all of
//! them waits the device's whole queue (6-7 ms per read with 256 queued on this VM's disk).
//! Kept here, the queue can be ordered, so a point lookup's dependent reads pass the large
//! queries' backlog at every level of its plan. Off by default (`ooode.device_queue_depth`
//! 0): measured at SF 1 on 2 cores, a depth of 64 cut the median latency at 16 clients by a
//! quarter and the points' p99 by a quarter, but cost 6-13 % of the queries per second at 64
//! clients, where the points' tail is their tasks waiting for a core, not the device.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Instant;

use parking_lot::Mutex;

use super::request::ReadOp;
use super::ring::{Ring, Target};
use crate::io::metrics::IoMetrics;
use crate::io::priority::{CLASSES, ClassTurns, take_below};

/// Reads waiting for the device, and how many are there.
#[derive(Debug)]
pub struct DeviceQueue {
    depth: AtomicUsize,
    at_device: AtomicUsize,
    waiting: AtomicUsize,
    pending: Mutex<Pending>,
    metrics: Arc<IoMetrics>,
}

#[derive(Debug, Default)]
struct Pending {
    by_class: [VecDeque<Queued>; CLASSES],
    turns: ClassTurns,
}

/// A read ready to be pushed into its ring.
#[derive(Debug)]
pub struct Queued {
    /// The ring whose slot the read holds.
    pub ring: Arc<Ring>,
    /// Where it reads.
    pub target: Target,
    /// The read.
    pub op: Box<ReadOp>,
    since: Instant,
}

impl Queued {
    /// A read for `ring`, queued from now.
    pub fn new(ring: Arc<Ring>, target: Target, op: Box<ReadOp>) -> Self {
        Self {
            ring,
            target,
            op,
            since: Instant::now(),
        }
    }
}

impl DeviceQueue {
    /// A queue letting `depth` reads at the device (0: any number, and no counting),
    /// counting waits in `metrics`.
    pub fn new(depth: usize, metrics: Arc<IoMetrics>) -> Arc<Self> {
        Arc::new(Self {
            depth: AtomicUsize::new(depth),
            at_device: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            pending: Mutex::new(Pending::default()),
            metrics,
        })
    }

    /// Reads allowed at the device at once (0: no limit).
    pub fn depth(&self) -> usize {
        self.depth.load(SeqCst)
    }

    /// Whether reads are limited (and counted): off, a read costs no shared counter.
    pub fn limited(&self) -> bool {
        self.depth() != 0
    }

    /// The limit in force, where there is one.
    fn room(&self) -> usize {
        match self.depth() {
            0 => usize::MAX,
            n => n,
        }
    }

    /// Changes the depth (a lower one lets the reads there finish; a higher one, or 0, sends
    /// waiting reads now). Reads sent while there was no limit are not counted against a new
    /// one: for as long as they take, the device may hold that many more.
    pub fn set_depth(&self, depth: usize) {
        self.depth.store(depth, SeqCst);
        self.dispatch();
    }

    /// Reads waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(SeqCst)
    }

    /// Takes a place at the device for one read, if there is one and no read waits for one
    /// (a read never overtakes those queued before it, except by class).
    pub fn try_enter(&self) -> bool {
        self.waiting.load(SeqCst) == 0 && take_below(&self.at_device, self.room())
    }

    /// Queues `read` in `class` until there is room at the device.
    pub fn enqueue(&self, class: usize, read: Queued) {
        {
            let mut pending = self.pending.lock();
            pending.by_class[class.min(CLASSES - 1)].push_back(read);
            self.waiting.fetch_add(1, SeqCst);
        }
        // Room freed before the read was queued is handed out here.
        self.dispatch();
    }

    /// Notes that `n` counted reads left the device, and sends waiting ones in their place.
    pub fn left(&self, n: usize) {
        self.at_device.fetch_sub(n, SeqCst);
        if self.waiting.load(SeqCst) > 0 {
            self.dispatch();
        }
    }

    /// Sends waiting reads to the device while there is room: each pushed into its own ring,
    /// each ring entered once.
    fn dispatch(&self) {
        let mut rings: Vec<Arc<Ring>> = Vec::new();
        {
            let mut pending = self.pending.lock();
            while self.waiting.load(SeqCst) > 0 && take_below(&self.at_device, self.room()) {
                let Some(class) = pending
                    .turns
                    .order()
                    .find(|&c| !pending.by_class[c].is_empty())
                else {
                    self.at_device.fetch_sub(1, SeqCst);
                    break;
                };
                let read = pending.by_class[class]
                    .pop_front()
                    .expect("a non-empty class");
                self.waiting.fetch_sub(1, SeqCst);
                pending.turns.granted(class);
                if read.op.reply.is_canceled() {
                    // Its reader gave up while it waited: no read, the place goes on.
                    self.at_device.fetch_sub(1, SeqCst);
                    read.ring.discard(*read.op);
                    continue;
                }
                self.metrics.note_queued(read.since.elapsed());
                read.ring.push(read.target, read.op);
                if !rings.iter().any(|r| Arc::ptr_eq(r, &read.ring)) {
                    rings.push(read.ring);
                }
            }
        }
        for ring in rings {
            ring.submit_now();
        }
    }
}
