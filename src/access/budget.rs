//! The I/O budget and counters of one query.
//!
//! Made once per query while it is planned (the provider's scan makes it, the optimizer rule
//! hands the same one to every ooode node of the plan): its execution mode, its share of the
//! runtime's admission (`ooode.max_outstanding_io` reads in flight out of order, one in
//! order), and the counters of all its reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::admission::{Acquire, AdmissionWaits, Permit, Share};
use super::runtime::{OoodeRuntime, TaskPlace};
use super::slots::{LongQuerySlots, QuerySlot, RunningTask};
use super::table_io::Counters;
use crate::config::{ExecutionMode, OoodeConfig};
use crate::io::IoMetrics;

/// The I/O budget and counters of one query.
#[derive(Debug)]
pub struct QueryIo {
    /// Execution mode.
    pub mode: ExecutionMode,
    /// O_DIRECT reads.
    pub direct: bool,
    /// Reads of the whole query.
    pub metrics: Arc<IoMetrics>,
    share: Arc<Share>,
    runtime: Arc<OoodeRuntime>,
    /// Reads issued while a read of another plan node of the query was in flight.
    overlapped: AtomicU64,
    /// When the query was made, and nanoseconds after it that its last operator task ended
    /// (0: none yet).
    created: std::time::Instant,
    work_done: AtomicU64,
    /// Turns of long queries when the query was planned (`ooode.max_long_queries`), and
    /// its slot among them.
    long_slots: Option<Arc<LongQuerySlots>>,
    slot: Arc<QuerySlot>,
    /// The settings it was made from (a plan shipped elsewhere reads under the same).
    config: OoodeConfig,
    /// Range counts the optimizer rule made itself, blocking its thread.
    own_counts: AtomicU64,
    /// Range counts started in `scan` that the optimizer rule waited for, blocking its thread.
    count_waits: AtomicU64,
    /// Nanoseconds those waits blocked their thread, summed.
    count_wait_nanos: AtomicU64,
    /// Output streams of the query's operators open now (see [`OpenStream`]).
    open_streams: AtomicUsize,
    /// Operator tasks that read heap pages under permits of their own now (see
    /// [`InboxReader`]).
    inbox_readers: AtomicUsize,
}

/// An operator task of a query that starts heap page reads under permits it holds until
/// the pages are used (an index join's partition, see [`QueryIo::inbox_reader`]).
#[derive(Debug)]
pub struct InboxReader(Arc<QueryIo>);

impl InboxReader {
    /// The permits this task may gather through admission's queue while the query is at
    /// its own limit: its even part of the limit, at least one. Beyond it the task starts
    /// pages only under the permits of its own reads as they end. Without that bound, the
    /// partitions of one query traded permits through the queue: once a partition found
    /// the query at its limit with no read of its own in flight, it queued every page, and
    /// every permit the other partitions gave back went to it through the queue (a lock,
    /// a grant and a wake-up per page) while they, finding requests queued, waited in
    /// turn; seen in the profile of one query from the OS cache as a tenth of its CPU.
    pub fn fair_permits(&self) -> usize {
        let readers = self.0.inbox_readers.load(Relaxed).max(1);
        (self.0.limit() / readers).max(1)
    }
}

impl Drop for InboxReader {
    fn drop(&mut self) {
        self.0.inbox_readers.fetch_sub(1, Relaxed);
    }
}

/// An open output stream of a query's operator (see [`QueryIo::open_stream`]).
#[derive(Debug)]
pub struct OpenStream(Arc<QueryIo>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        if self.0.open_streams.fetch_sub(1, Relaxed) == 1 {
            self.0.runtime.note_executing(false);
        }
    }
}

/// How recently a short query must have started an operator task for long queries to run on
/// the idle lane: a service's mix of short and long queries, not one user's queries in turn.
const SHORT_QUERIES_RECENT: std::time::Duration = std::time::Duration::from_secs(5);

impl QueryIo {
    /// A budget from the session settings: `max_outstanding_io` reads in flight out of order,
    /// one in order, within the runtime's cap.
    pub fn new(runtime: &Arc<OoodeRuntime>, config: &OoodeConfig) -> Arc<Self> {
        let limit = match config.execution_mode {
            ExecutionMode::InOrder => 1,
            ExecutionMode::OutOfOrder => config.max_outstanding_io.max(1),
        };
        Arc::new(Self {
            mode: config.execution_mode,
            direct: config.direct_io,
            metrics: IoMetrics::new(),
            share: runtime.admission().share(limit, config.short_query_reads),
            runtime: runtime.clone(),
            overlapped: AtomicU64::new(0),
            long_slots: runtime.long_slots(),
            slot: Arc::default(),
            created: std::time::Instant::now(),
            work_done: AtomicU64::new(0),
            own_counts: AtomicU64::new(0),
            count_waits: AtomicU64::new(0),
            count_wait_nanos: AtomicU64::new(0),
            open_streams: AtomicUsize::new(0),
            inbox_readers: AtomicUsize::new(0),
            config: config.clone(),
        })
    }

    /// The settings it was made from.
    pub fn config(&self) -> &OoodeConfig {
        &self.config
    }

    /// The runtime the query reads through.
    pub fn runtime(&self) -> &Arc<OoodeRuntime> {
        &self.runtime
    }

    /// The turns the query takes with other long queries: those of `ooode.max_long_queries`
    /// when set and the query was estimated (its whole plan shares this budget, so its tasks
    /// share one slot) to read more than `ooode.short_query_reads` pages.
    fn long_slots(&self) -> Option<&LongQuerySlots> {
        self.long_slots.as_deref().filter(|_| self.is_long())
    }

    /// Whether the query was estimated to read more than `ooode.short_query_reads` pages.
    pub fn is_long(&self) -> bool {
        self.share.is_long()
    }

    /// Counts an output stream of one of the query's operators as open until the returned
    /// guard drops (the stream's consumer holds it): the query is executing meanwhile.
    pub fn open_stream(self: &Arc<Self>) -> OpenStream {
        if self.open_streams.fetch_add(1, Relaxed) == 0 {
            self.runtime.note_executing(true);
        }
        OpenStream(self.clone())
    }

    /// Where an operator task of the query about to start runs: on the runtime's idle lane
    /// (see [`super::idle_lane`]) when `ooode.long_queries_idle_priority` is on, the query
    /// is long, another query is executing (see [`Self::open_stream`]) and a short query
    /// started an operator within the last seconds (a service's mix); None: on the caller's
    /// runtime.
    pub fn operator_lane(&self) -> Option<&tokio::runtime::Handle> {
        let rt = &self.runtime;
        if !self.is_long() {
            rt.note_short_start();
            rt.note_operator_task(TaskPlace::Short);
            return None;
        }
        let others = rt.executing_queries() > usize::from(self.open_streams.load(Relaxed) > 0);
        let mixed = others && rt.short_query_within(SHORT_QUERIES_RECENT);
        let lane = (self.config.long_queries_idle_priority && mixed)
            .then(|| rt.idle_lane())
            .flatten();
        rt.note_operator_task(match lane {
            Some(_) => TaskPlace::LongOnIdleLane,
            None => TaskPlace::LongOnCaller,
        });
        Some(lane?.handle())
    }

    /// Waits for the query's turn among long queries (at once for others); an operator task
    /// holds the guard, through its [`Turn`], while it has work (see [`super::slots`]).
    async fn running(&self) -> Option<RunningTask> {
        let slots = self.long_slots()?;
        Some(self.slot.enter(slots).await)
    }

    /// One operator task's hold on the query's turn, not taken yet.
    pub fn turn(self: &Arc<Self>) -> Turn {
        Turn {
            query: Some(self.clone()),
            running: None,
        }
    }

    /// Notes that one of the query's operator tasks ended (its output sent).
    pub fn note_work_done(&self) {
        let nanos = self.created.elapsed().as_nanos().max(1) as u64;
        self.work_done.fetch_max(nanos, Relaxed);
    }

    /// When the query's last operator task ended so far, if one did: what the consumer took
    /// after that is its own time (or waiting to be scheduled).
    pub fn work_done_at(&self) -> Option<std::time::Instant> {
        match self.work_done.load(Relaxed) {
            0 => None,
            nanos => Some(self.created + std::time::Duration::from_nanos(nanos)),
        }
    }

    /// Reads the query may have in flight.
    pub fn limit(&self) -> usize {
        self.share.limit()
    }

    /// Permits the query holds now.
    pub fn permits_in_use(&self) -> usize {
        self.share.in_use()
    }

    /// Counts an operator task as reading heap pages under permits of its own until the
    /// guard drops (see [`InboxReader::fair_permits`]).
    pub fn inbox_reader(self: &Arc<Self>) -> InboxReader {
        self.inbox_readers.fetch_add(1, Relaxed);
        InboxReader(self.clone())
    }

    /// The query's share of admission.
    pub fn share(&self) -> &Arc<Share> {
        &self.share
    }

    /// A permit for one read at `level` (higher: closer to the output, served first).
    pub fn permit(&self, level: usize) -> Acquire {
        self.share.acquire(level)
    }

    /// Notes that the query's plan is estimated to read `reads` pages: its reads then go
    /// before those of queries estimated larger (see [`super::admission`]).
    pub fn set_estimated_reads(&self, reads: u64) {
        self.share.set_estimated_reads(reads);
    }

    /// A first guess at the query's reads, from a part of its plan, unless the whole plan
    /// was estimated already.
    pub fn guess_estimated_reads(&self, reads: u64) {
        self.share.guess_estimated_reads(reads);
    }

    /// How long the query's reads waited for admission so far.
    pub fn admission_waits(&self) -> AdmissionWaits {
        self.share.waits()
    }

    /// A permit now, if one is free.
    pub fn try_permit(&self) -> Option<Permit> {
        self.share.try_acquire()
    }

    /// Notes a read about to be issued by the node counting in `counters`: overlapped if
    /// another node of the query has a read in flight.
    pub fn note_read(&self, counters: &Counters) {
        let node = counters.node().map_or(0, |m| m.snapshot_in_flight());
        if self.metrics.snapshot_in_flight() > node {
            self.overlapped.fetch_add(1, Relaxed);
        }
    }

    /// Reads issued while another plan node of the query had a read in flight: proof that
    /// the levels of a join chain run at the same time.
    pub fn overlapped_reads(&self) -> u64 {
        self.overlapped.load(Relaxed)
    }

    /// Notes a range count the optimizer rule makes itself, blocking its thread.
    pub fn note_own_count(&self) {
        self.own_counts.fetch_add(1, Relaxed);
    }

    /// Range counts the optimizer rule made itself, blocking its thread: ranges the table's
    /// `scan` did not foresee from its filters (it starts the counts of those it does).
    pub fn own_counts(&self) -> u64 {
        self.own_counts.load(Relaxed)
    }

    /// Notes that the optimizer rule waited `blocked`, blocking its thread, for counts
    /// started in `scan`.
    pub fn note_count_wait(&self, blocked: std::time::Duration) {
        self.count_waits.fetch_add(1, Relaxed);
        let nanos = u64::try_from(blocked.as_nanos()).unwrap_or(u64::MAX);
        self.count_wait_nanos.fetch_add(nanos, Relaxed);
    }

    /// How long the waits of [`Self::count_waits`] blocked their thread, in all.
    pub fn count_wait_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.count_wait_nanos.load(Relaxed))
    }

    /// Times the optimizer rule waited, blocking, for counts started in `scan` and not yet
    /// made when it needed them.
    pub fn count_waits(&self) -> u64 {
        self.count_waits.load(Relaxed)
    }
}

/// One operator task's hold on its query's turn among long queries: taken before the task
/// starts reads, given up while it has none in flight and only waits for its consumer, so a
/// client that stops reading a long query's result blocks no other query.
#[derive(Debug)]
pub struct Turn {
    /// None: work that takes no turn.
    query: Option<Arc<QueryIo>>,
    running: Option<RunningTask>,
}

impl Turn {
    /// The turn of work that runs inside its consumer's polls (in order, see
    /// [`crate::exec`]): turns bound how many long queries' operator tasks share the run
    /// queue, and such work has no task; a turn granted to a pipeline its consumer is not
    /// polling would also keep the query's other pipelines waiting for it.
    pub fn none() -> Self {
        Self {
            query: None,
            running: None,
        }
    }

    /// Holds the turn (waiting for it if the query is long and holds none): call before
    /// polling work that reads.
    pub async fn busy(&mut self) {
        if let (None, Some(query)) = (&self.running, &self.query) {
            self.running = query.running().await;
        }
    }

    /// Gives the hold up: the task has no reads in flight and waits only for its consumer.
    pub fn idle(&mut self) {
        self.running = None;
    }
}
