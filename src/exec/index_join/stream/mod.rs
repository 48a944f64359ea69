//! The work of one partition of an index nested-loop join.
//!
//! ```text
//!   outer batches ──> per distinct key: a probe
//!     probe: B+tree walk, a leaf of row ids at a time ──> per heap page: a fetch job
//!     fetch: page read (under a permit, held until decoded) ──> rows: key check (sparse
//!            index), inner predicate ──> pairs (outer rows of the key x these rows) queued
//!   queue ──(as the consumer takes them)──> pairs turned into output rows, batch-size
//!            chunks at most; a probe's last item adds what semi / anti / outer joins owe
//! ```
//!
//! Every step of every probe lives in one `FuturesUnordered` that the loop always polls, so
//! whichever read completes first runs first and no step holding a permit waits for the
//! consumer. What the loop starts is bounded: outer batches are pulled while fewer than
//! `max_probes` probes are open, leaves are walked while fewer than `max_fetches` page reads
//! are pending, and neither while the queued output holds `out_bytes` or more. Pairs are
//! turned into rows only when they are sent, so a key with a million matches streams in
//! batch-size chunks. Outer batches held by open probes and the queued output are reserved
//! in DataFusion's memory pool; over its limit the query fails with `ResourcesExhausted`.

use std::collections::VecDeque;

// Maps keyed by probe, page and join key, touched several times per page: SipHash showed in
// profiles.
use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::future::BoxFuture;
use futures::future::poll_fn;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use super::exec::InnerSide;
use super::inner_page::{InnerRows, PageRows};
use super::outer_keys::{OuterRows, group_keys};
use super::output::{Gather, OutputSpec, compact_views};
use crate::access::heap_reads::{Ended, HeapInbox};
use crate::access::index_only::IndexColumns;
use crate::access::steps::{
    CachedLookup, Descended, KeyLeaves, Leaves, Slots, StepCtx, descend_ahead, lookup_cached,
    lookup_cached_keys, lookup_keys, lookup_leaves,
};
use crate::access::{InboxReader, Permit, Turn};
use crate::exec::metrics::NodeMetrics;
use crate::exec::reservation::ChunkedReservation;
use crate::io::buf::PageBuf;
use crate::storage::btree::KeyRange;
use crate::storage::heap::page::prefetch_values;
use crate::storage::key_decode::KeyRows;

mod fetch;

use fetch::{FoundNow, PermitFor};

/// How much one partition of the join may have open at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Probes (distinct outer keys) open.
    pub max_probes: usize,
    /// Heap page fetches pending.
    pub max_fetches: usize,
    /// Rows per output batch.
    pub batch_rows: usize,
    /// Bytes of queued output above which nothing new starts.
    pub out_bytes: usize,
}

/// What a partition of the join needs.
pub struct JoinWork {
    pub outer: SendableRecordBatchStream,
    pub outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub inner: Arc<InnerSide>,
    /// The inner side's columns from the index's keys: probes read leaves only.
    pub keys: Option<Arc<IndexColumns>>,
    pub output: OutputSpec,
    pub steps: StepCtx,
    pub node: NodeMetrics,
    pub limits: Limits,
    pub memory: MemoryReservation,
}

/// A probe's walk, parked between leaves.
enum Walk {
    Ids(Leaves),
    Keys(KeyLeaves),
    /// Row ids found from cached nodes while the page fetches were at their cap: the fetches
    /// wait their turn, the walk is not done again.
    Found(Vec<u64>),
}

/// How many probes ahead of its lookup a probe descends to its leaf and asks for the lines
/// of its search there: far enough for them to arrive (a probe takes a microsecond or two),
/// near enough for them to stay cached.
const PROBES_AHEAD: usize = 8;

/// The probes waiting for a page being fetched, with their slots: nearly always one (no
/// allocation of its own).
type Waiting = smallvec::SmallVec<[(u64, Slots); 1]>;

/// Most values a probe gathers without a walk of its own (see `lookup_cached`): a key with
/// more streams a leaf at a time.
const CACHED_LOOKUP_VALUES: usize = 256;

enum Job {
    /// The next leaf of a probe's walk (None: the walk is over).
    Leaf(u64, (Option<Result<Vec<u64>>>, Leaves)),
    /// The same for an index-only probe: the leaf's keys, decoded.
    Keys(u64, (Option<Result<KeyRows>>, KeyLeaves)),
    /// A heap page's rows (the inner side's columns), for every probe waiting for it.
    Page(u64, Result<PageRows>),
}

struct OuterBatch {
    batch: Arc<RecordBatch>,
    open_probes: usize,
    bytes: usize,
}

struct Probe {
    outer: u64,
    /// Its outer rows: a span of its batch's rows grouped by key (one allocation per batch,
    /// not one per probe).
    rows: OuterRows,
    /// The rows with its key: a prefix range, shared by the probe's walks.
    range: Arc<KeyRange>,
    /// Walk still going, fetches pending, pair items queued.
    pending: usize,
    matched: Option<Vec<bool>>,
    /// A semi or anti join without filter has its answer once any row matched.
    settled: bool,
    /// The index node its walk reads for probes that wait for it (see
    /// [`Join::wait_for_node`]), until the walk's first step ends.
    reads_node: Option<(usize, u64)>,
}

impl Probe {
    /// The encoded key it looks up (its range's lower bound).
    fn key(&self) -> &[u8] {
        match &self.range.lower {
            std::ops::Bound::Included(key) | std::ops::Bound::Excluded(key) => key,
            std::ops::Bound::Unbounded => &[],
        }
    }
}

enum Work {
    /// Pairs of a probe's outer rows with rows `rows` of one page (the inner side's output
    /// columns, shared by the probes that read it), from grid position `next`.
    Pairs {
        probe: u64,
        page: InnerRows,
        rows: Vec<u32>,
        next: usize,
        /// Pairs in all (outer rows x `rows`).
        total: usize,
        bytes: usize,
    },
    /// Rows ready to go.
    Rows(RecordBatch, usize),
    /// A probe's end: what semi / anti / outer joins owe for its rows.
    Finish(u64),
}

struct Fetch {
    inner: Arc<InnerSide>,
    steps: StepCtx,
    /// Probes take their rows from heap pages where they lie, undecoded (the inner side
    /// allows it, no join filter needs them decoded, and no probe reads index leaves, whose
    /// rows come decoded: an output batch takes inner rows of one kind).
    in_place: bool,
}

struct Join {
    spec: OutputSpec,
    keys: Option<Arc<IndexColumns>>,
    limits: Limits,
    memory: ChunkedReservation,
    outers: HashMap<u64, OuterBatch>,
    probes: HashMap<u64, Probe>,
    next_id: u64,
    jobs: FuturesUnordered<BoxFuture<'static, Job>>,
    /// Where heap pages read without a job end (see `access::heap_reads`), if the engine
    /// reads that way; each such read's permit, by page, held until the page is used; and
    /// the list the ended reads are moved into.
    inbox: Option<Arc<HeapInbox>>,
    /// This task counted among its query's readers into an inbox, while it has one.
    reader: Option<InboxReader>,
    direct: HashMap<u64, Permit>,
    ended: Vec<Ended>,
    /// Pages to read into the inbox: started at the loop's turn, once the task holds its
    /// query's turn (a permit taken without it could be held while the task waits for one,
    /// with the permits other queries' turns need), or when one of the inbox's reads gives
    /// its permit back (the query holds all it may, and no other query's read is queued).
    to_start: VecDeque<u64>,
    /// Pages whose permits are asked of admission (the inbox had no read to wait for, or
    /// other queries' reads are queued).
    permit_waits: FuturesUnordered<PermitFor>,
    /// An empty [`FoundNow`] kept between uses, its room with it: a set made and grown for
    /// every outer batch and every resumption showed in profiles (about 1.5 % of the CPU).
    spare_found: FoundNow,
    /// The row ids of the last probe whose ids were copied out: the next lookup fills it
    /// (an allocation a probe less).
    spare_ids: Vec<u64>,
    /// Counts them in the node's metrics.
    node: NodeMetrics,
    /// The inner side and how its steps read, under one count of this partition's own: a
    /// page fetch taking them apart would touch counts every partition of the query shares.
    fetch: Arc<Fetch>,
    /// Index nodes a probe's walk reads, and the probes waiting for it to look their keys
    /// up again (see [`Self::wait_for_node`]).
    node_waits: HashMap<(usize, u64), Vec<u64>>,
    /// Heap pages being fetched, and the probes (with their slots) waiting for each: a page
    /// several probes need is read and decoded once.
    pages: HashMap<u64, Waiting>,
    /// Pages of `pages` found in the buffer pool: decoded at the loop's next turn, no task.
    ready: VecDeque<(u64, PageBuf)>,
    parked: VecDeque<(u64, Walk)>,
    out: VecDeque<Work>,
    out_bytes: usize,
    /// Rows the queued work will make (pairs counted as rows): a full batch waits for no
    /// more work.
    out_rows: usize,
}

/// Runs one partition of the join, sending output batches to `tx`.
/// `turn` is held while reads may be in flight (see [`crate::access::Turn`]).
pub async fn run(work: JoinWork, tx: Sender<Result<RecordBatch>>, mut turn: Turn) -> Result<()> {
    let JoinWork {
        mut outer,
        outer_keys,
        inner,
        keys,
        output,
        steps,
        node,
        limits,
        memory,
    } = work;
    let inbox = (inner.table.engine().starts_reads())
        .then(|| HeapInbox::new(inner.table.clone(), steps.counters().clone()));
    let reader = inbox.is_some().then(|| steps.query().inbox_reader());
    let mut join = Join {
        inbox,
        reader,
        direct: HashMap::new(),
        ended: Vec::new(),
        to_start: VecDeque::new(),
        permit_waits: FuturesUnordered::new(),
        spare_found: FoundNow::default(),
        spare_ids: Vec::new(),
        node: node.clone(),
        fetch: Arc::new(Fetch {
            in_place: inner.in_place.is_some() && !output.has_filter() && keys.is_none(),
            inner,
            steps,
        }),
        spec: output,
        keys,
        limits,
        memory: ChunkedReservation::new(memory),
        outers: HashMap::new(),
        probes: HashMap::new(),
        next_id: 0,
        jobs: FuturesUnordered::new(),
        node_waits: HashMap::new(),
        pages: HashMap::new(),
        ready: VecDeque::new(),
        parked: VecDeque::new(),
        out: VecDeque::new(),
        out_bytes: 0,
        out_rows: 0,
    };
    let mut outer_done = false;
    loop {
        // Let other queries' woken tasks run between slices of this one's work.
        crate::io::batch::yield_if_long().await;
        // Pages found in the pool are decoded first: that frees places in the window of
        // fetches for the parked probes.
        join.decode_ready()?;
        let room = join.out_bytes < join.limits.out_bytes;
        let resumes = room && join.pages.len() < join.limits.max_fetches && !join.parked.is_empty();
        let reading = !join.jobs.is_empty() || !join.direct.is_empty();
        let to_start = !join.to_start.is_empty() || !join.permit_waits.is_empty();
        if resumes || reading || to_start {
            turn.busy().await;
        } else {
            // Nothing in flight, nothing to start: it waits for its input or its consumer.
            turn.idle();
        }
        if resumes {
            join.resume_parked()?;
        }
        join.start_waiting();
        // Pages found in the pool meanwhile: decoded now, before the loop looks for work
        // left (nothing else wakes it for them).
        join.decode_ready()?;
        let room = join.out_bytes < join.limits.out_bytes;
        let want_outer = !outer_done && room && join.probes.len() < join.limits.max_probes;
        if outer_done
            && join.jobs.is_empty()
            && join.direct.is_empty()
            && join.to_start.is_empty()
            && join.permit_waits.is_empty()
            && join.parked.is_empty()
            && join.out.is_empty()
        {
            if !join.node_waits.is_empty() {
                // A probe waiting for a walk that no longer runs would lose its rows.
                return Err(DataFusionError::Internal(
                    "index join: probes left waiting for an index node no walk reads".into(),
                ));
            }
            break;
        }
        // Output leaves in full batches while work is ready (a page's few rows each, as they
        // came, cost every operator above a batch and the consumer a wake-up per page); what
        // is queued goes out as it is once nothing else can make progress.
        let full = join.out_rows >= join.limits.batch_rows;
        tokio::select! {
            biased;
            permit = tx.reserve(), if full => {
                if !join.send(permit)? {
                    return Ok(()); // consumer gone: stop
                }
            }
            Some(job) = join.jobs.next(), if !join.jobs.is_empty() => join.done(job)?,
            _ = poll_fn(|cx| poll_ended(join.inbox.as_deref(), cx, &mut join.ended)),
                if !join.direct.is_empty() => join.take_ended()?,
            Some((page_no, permit)) = join.permit_waits.next(), if !join.permit_waits.is_empty()
                => join.start_under(page_no, permit),
            next = outer.next(), if want_outer => match next {
                None => outer_done = true,
                Some(batch) => join.add_outer(batch?, &outer_keys, &node)?,
            },
            permit = tx.reserve(), if !join.out.is_empty() => {
                if !join.send(permit)? {
                    return Ok(());
                }
            }
            else => {
                return Err(DataFusionError::Internal(
                    "index join: nothing to wait for, yet work is open".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Waits for reads to end in `inbox` (see [`HeapInbox::poll_ended`]).
fn poll_ended(
    inbox: Option<&HeapInbox>,
    cx: &mut std::task::Context<'_>,
    out: &mut Vec<Ended>,
) -> std::task::Poll<()> {
    match inbox {
        Some(inbox) => inbox.poll_ended(cx, out),
        None => std::task::Poll::Pending,
    }
}

impl Join {
    /// Sends the next batch through `permit`; false when the consumer is gone.
    fn send(&mut self, permit: crate::exec::Reserved<'_>) -> Result<bool> {
        let Ok(permit) = permit else {
            return Ok(false);
        };
        if let Some(batch) = self.next_batch()? {
            permit.send(Ok(batch));
        }
        Ok(true)
    }

    fn grow(&mut self, bytes: usize) -> Result<()> {
        self.memory.try_grow(bytes)
    }

    /// Opens the probes of one outer batch.
    fn add_outer(
        &mut self,
        batch: RecordBatch,
        keys: &[Arc<dyn PhysicalExpr>],
        node: &NodeMetrics,
    ) -> Result<()> {
        let (keyed, unmatched) = group_keys(&batch, keys, &self.fetch.inner.encoder)?;
        if let Some(rows) = self.spec.unmatched(&batch, &unmatched)? {
            self.queue_rows(rows)?;
        }
        if keyed.keys.is_empty() {
            return Ok(());
        }
        node.add_probes(keyed.keys.len());
        let bytes = batch.get_array_memory_size();
        self.grow(bytes)?;
        let outer_id = self.id();
        self.outers.insert(
            outer_id,
            OuterBatch {
                batch: Arc::new(batch),
                open_probes: keyed.keys.len(),
                bytes,
            },
        );
        // Probes whose pages are fetched now: their pool lookups are made together at the end.
        let mut found_now = std::mem::take(&mut self.spare_found);
        // Probes a few ahead have descended to their leaf already (see `descend_ahead`).
        let mut keys =
            (keyed.keys.into_iter()).map(|(key, span)| (Arc::new(KeyRange::prefix(key)), span));
        let mut ahead = VecDeque::with_capacity(PROBES_AHEAD);
        loop {
            while ahead.len() < PROBES_AHEAD
                && let Some((range, span)) = keys.next()
            {
                let descended =
                    descend_ahead(&self.fetch.inner.table, self.fetch.inner.index, &range);
                ahead.push_back((range, span, descended));
            }
            let Some((range, span, descended)) = ahead.pop_front() else {
                break;
            };
            let id = self.id();
            let rows = OuterRows {
                all: keyed.rows.clone(),
                span,
            };
            let matched = self.spec.tracks_matches().then(|| vec![false; rows.len()]);
            self.probes.insert(
                id,
                Probe {
                    outer: outer_id,
                    rows,
                    range: range.clone(),
                    pending: 1,
                    matched,
                    settled: false,
                    reads_node: None,
                },
            );
            match self.keys.clone() {
                Some(keys) => self.start_keys(id, range, &keys, descended)?,
                None => self.start_ids(id, range, descended, Some(&mut found_now))?,
            }
        }
        self.fetch_found(&mut found_now);
        self.spare_found = found_now;
        Ok(())
    }

    /// Starts a probe that fetches heap pages: its row ids at once when the index nodes are
    /// all cached (its pages gathered into `found_now` when given, for one pool lookup of
    /// many probes' pages), else a walk, or a wait for the walk of another probe that reads
    /// the node this one lacks.
    fn start_ids(
        &mut self,
        id: u64,
        range: Arc<KeyRange>,
        descended: Option<Descended>,
        found_now: Option<&mut FoundNow>,
    ) -> Result<()> {
        let found = lookup_cached(
            &self.fetch.inner.table,
            self.fetch.inner.index,
            &range,
            self.fetch.steps.counters(),
            CACHED_LOOKUP_VALUES,
            descended,
            std::mem::take(&mut self.spare_ids),
        )?;
        match found {
            CachedLookup::Found(ids) => match found_now {
                // Within the window of page fetches (and behind no parked probe): now.
                Some(found_now)
                    if self.parked.is_empty()
                        && self.pages.len() + found_now.pages() + ids.len()
                            <= self.limits.max_fetches =>
                {
                    found_now.push(id, &ids, &self.pages);
                    // Copied out: the next probe's lookup fills it again.
                    self.spare_ids = ids;
                }
                // Beyond it the fetches wait their turn (in order, with two fetches at most,
                // nearly every probe of a batch: walking again would descend twice more).
                _ => self.parked.push_back((id, Walk::Found(ids))),
            },
            CachedLookup::Missing { part, page_no } if self.wait_for_node(id, (part, page_no)) => {}
            CachedLookup::Missing { .. } | CachedLookup::TooMany => {
                let leaves = lookup_leaves(
                    self.fetch.inner.table.clone(),
                    self.fetch.inner.index,
                    range,
                    self.fetch.steps.clone(),
                )
                .boxed();
                self.parked.push_back((id, Walk::Ids(leaves)));
            }
        }
        Ok(())
    }

    /// Makes probe `id`, whose lookup lacks index node `node`, wait for the walk of another
    /// probe reading it, if one does (true); else `id`'s own walk will read it, and probes
    /// lacking it meanwhile wait for that walk (false). A dense index's leaf holds the
    /// entries of many probes of a batch: each walked on its own before, a boxed stream per
    /// probe polled through the pool's shared read, several times the CPU of a probe whose
    /// nodes are cached.
    fn wait_for_node(&mut self, id: u64, node: (usize, u64)) -> bool {
        if let Some(waiting) = self.node_waits.get_mut(&node) {
            waiting.push(id);
            return true;
        }
        self.node_waits.insert(node, Vec::new());
        if let Some(p) = self.probes.get_mut(&id) {
            p.reads_node = Some(node);
        }
        false
    }

    /// The walk of `probe` read the node it read for others (or ended): the probes that
    /// waited for it look their keys up again, from cached nodes.
    fn node_read(&mut self, probe: u64) -> Result<()> {
        let Some(node) = self
            .probes
            .get_mut(&probe)
            .and_then(|p| p.reads_node.take())
        else {
            return Ok(());
        };
        for id in self.node_waits.remove(&node).unwrap_or_default() {
            let Some(p) = self.probes.get(&id) else {
                continue;
            };
            let range = p.range.clone();
            match self.keys.clone() {
                Some(keys) => self.start_keys(id, range, &keys, None)?,
                None => self.start_ids(id, range, None, None)?,
            }
        }
        Ok(())
    }

    /// Starts an index-only probe: its keys at once when the index nodes are all cached,
    /// else a walk.
    fn start_keys(
        &mut self,
        id: u64,
        range: Arc<KeyRange>,
        keys: &Arc<IndexColumns>,
        descended: Option<Descended>,
    ) -> Result<()> {
        let found = lookup_cached_keys(
            &self.fetch.inner.table,
            self.fetch.inner.index,
            &range,
            self.fetch.steps.counters(),
            CACHED_LOOKUP_VALUES,
            keys.decoder(),
            descended,
        )?;
        match found {
            CachedLookup::Found(rows) => {
                self.add_keys(id, rows)?;
                self.release(id); // the walk is over
            }
            CachedLookup::Missing { part, page_no } if self.wait_for_node(id, (part, page_no)) => {}
            CachedLookup::Missing { .. } | CachedLookup::TooMany => {
                let leaves = lookup_keys(
                    self.fetch.inner.table.clone(),
                    self.fetch.inner.index,
                    range,
                    self.fetch.steps.clone(),
                    keys.decoder().clone(),
                )
                .boxed();
                self.parked.push_back((id, Walk::Keys(leaves)));
            }
        }
        Ok(())
    }

    /// Rows of an index-only probe, read from a leaf's keys: all of them the probe's (a
    /// dense index's prefix range holds the key's entries only), those passing the inner
    /// predicate kept.
    fn add_keys(&mut self, probe: u64, rows: KeyRows) -> Result<()> {
        let Some(keys) = &self.keys else {
            return Ok(());
        };
        let Some(p) = self.probes.get_mut(&probe) else {
            return Ok(());
        };
        if p.settled || rows.is_empty() {
            return Ok(());
        }
        p.pending += 1;
        let decoded = keys.batch(rows)?;
        let page = self.fetch.inner.page_view(&decoded)?;
        let found = page.passing((0..decoded.num_rows() as u32).collect());
        self.add_rows(probe, &page.rows, found)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Walks a probe's next leaf (or ends a probe whose answer is known).
    fn resume(&mut self, probe: u64, walk: Walk) -> Result<()> {
        if self.probes.get(&probe).is_some_and(|p| p.settled) {
            self.node_read(probe)?;
            self.release(probe);
            return Ok(());
        }
        self.jobs.push(match walk {
            Walk::Found(ids) => {
                self.fetch_pages(probe, &ids);
                self.release(probe); // the walk is over
                return Ok(());
            }
            Walk::Ids(leaves) => leaves
                .into_future()
                .map(move |next| Job::Leaf(probe, next))
                .boxed(),
            Walk::Keys(leaves) => leaves
                .into_future()
                .map(move |next| Job::Keys(probe, next))
                .boxed(),
        });
        Ok(())
    }

    fn done(&mut self, job: Job) -> Result<()> {
        if let Job::Leaf(probe, _) | Job::Keys(probe, _) = &job {
            self.node_read(*probe)?;
        }
        match job {
            Job::Leaf(probe, (None, _)) => self.release(probe),
            Job::Leaf(_, (Some(Err(e)), _)) => return Err(e),
            Job::Leaf(probe, (Some(Ok(ids)), leaves)) => {
                let settled = self.probes.get(&probe).is_none_or(|p| p.settled);
                if !settled {
                    self.fetch_pages(probe, &ids);
                }
                self.parked.push_back((probe, Walk::Ids(leaves)));
            }
            Job::Keys(probe, (None, _)) => self.release(probe),
            Job::Keys(_, (Some(Err(e)), _)) => return Err(e),
            Job::Keys(probe, (Some(Ok(rows)), leaves)) => {
                self.add_keys(probe, rows)?;
                self.parked.push_back((probe, Walk::Keys(leaves)));
            }
            Job::Page(page_no, rows) => {
                let waiting = self.pages.remove(&page_no).unwrap_or_default();
                let (page, decoded) = self.fetch.inner.view(rows?)?;
                for (probe, slots) in waiting {
                    let found = match self.probes.get(&probe) {
                        Some(p) if !p.settled => self.fetch.inner.probe_rows(
                            decoded.as_ref(),
                            &page,
                            page_no,
                            &slots,
                            p.key(),
                        )?,
                        _ => Vec::new(),
                    };
                    self.add_rows(probe, &page.rows, found)?;
                }
            }
        }
        Ok(())
    }

    /// Resumes parked probes while the window of fetches and the output have room; pages they
    /// find in the pool are decoded on the way (so they never wait with nothing in flight).
    fn resume_parked(&mut self) -> Result<()> {
        // Probes whose row ids are known are gathered, for one pool lookup of their pages.
        let mut found_now = std::mem::take(&mut self.spare_found);
        let room =
            |join: &Self, planned: usize| join.pages.len() + planned < join.limits.max_fetches;
        while self.out_bytes < self.limits.out_bytes && room(self, found_now.pages()) {
            let Some((probe, walk)) = self.parked.pop_front() else {
                break;
            };
            match walk {
                Walk::Found(ids) if self.probes.get(&probe).is_some_and(|p| !p.settled) => {
                    found_now.push(probe, &ids, &self.pages)
                }
                walk => self.resume(probe, walk)?,
            }
            if !room(self, found_now.pages()) {
                self.fetch_found(&mut found_now);
                self.decode_ready()?;
            }
        }
        self.fetch_found(&mut found_now);
        self.spare_found = found_now;
        self.decode_ready()
    }

    /// Decodes the pages found in the pool, for their probes.
    fn decode_ready(&mut self) -> Result<()> {
        // A sparse index's probes search each page's key column first (`key_run`): its lines
        // are asked for a few pages ahead, so the search's misses overlap (they were a ninth
        // of a hot run, one dependent miss per step of the search).
        let key_column = match self.fetch.inner.sparse {
            true => (self.fetch.inner.key_positions.first())
                .map(|&k| self.fetch.inner.decode_columns.indices[k]),
            false => None,
        };
        if let Some(column) = key_column {
            for (_, page) in self.ready.iter().take(KEY_PREFETCH_PAGES) {
                prefetch_values(page, column, KEY_PREFETCH_LINES);
            }
        }
        while let Some((page_no, page)) = self.ready.pop_front() {
            if let Some(column) = key_column
                && let Some((_, ahead)) = self.ready.get(KEY_PREFETCH_PAGES - 1)
            {
                prefetch_values(ahead, column, KEY_PREFETCH_LINES);
            }
            let rows = (self.fetch.inner).read_page(page_no, &page, self.fetch.in_place);
            self.done(Job::Page(page_no, rows))?;
        }
        Ok(())
    }

    /// Rows `rows` of `page` (the inner side's output columns of one heap page) found for
    /// `probe`.
    fn add_rows(&mut self, probe: u64, page: &InnerRows, rows: Vec<u32>) -> Result<()> {
        let Some(p) = self.probes.get_mut(&probe) else {
            return Ok(());
        };
        if rows.is_empty() || p.settled {
            self.release(probe);
            return Ok(());
        }
        if !self.spec.emits_pairs() && !self.spec.has_filter() {
            // Semi or anti without a filter: one row answers for every outer row of the key.
            if let Some(m) = &mut p.matched {
                m.iter_mut().for_each(|x| *x = true);
            }
            p.settled = true;
            self.release(probe);
            return Ok(());
        }
        let total = p.rows.len() * rows.len();
        // The probe's share of the page's memory (the page is shared by its probes).
        let bytes = page.memory_size() * rows.len() / page.num_rows().max(1) + rows.len() * 4;
        self.grow(bytes)?;
        self.out_bytes += bytes;
        self.out_rows += total;
        self.out.push_back(Work::Pairs {
            probe,
            page: page.clone(),
            rows,
            next: 0,
            total,
            bytes,
        });
        Ok(())
    }

    /// One unit of a probe's pending work is over; the last one ends the probe.
    fn release(&mut self, probe: u64) {
        let Some(p) = self.probes.get_mut(&probe) else {
            return;
        };
        p.pending -= 1;
        if p.pending > 0 {
            return;
        }
        if self.spec.tracks_matches() {
            self.out.push_back(Work::Finish(probe));
        } else {
            self.close(probe);
        }
    }

    /// Forgets a finished probe, and its outer batch once all of that batch's probes are done.
    fn close(&mut self, probe: u64) {
        let Some(p) = self.probes.remove(&probe) else {
            return;
        };
        if let Some(o) = self.outers.get_mut(&p.outer) {
            o.open_probes -= 1;
            if o.open_probes == 0 {
                let bytes = o.bytes;
                self.outers.remove(&p.outer);
                self.memory.shrink(bytes);
            }
        }
    }

    fn queue_rows(&mut self, rows: RecordBatch) -> Result<()> {
        let bytes = rows.get_array_memory_size();
        self.grow(bytes)?;
        self.out_bytes += bytes;
        self.out_rows += rows.num_rows();
        self.out.push_back(Work::Rows(rows, bytes));
        Ok(())
    }

    fn unqueue(&mut self, bytes: usize) {
        self.out_bytes -= bytes;
        self.memory.shrink(bytes);
    }

    /// Up to a batch of output rows from the front of the queue.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let mut parts: Vec<RecordBatch> = Vec::new();
        let mut gather = Gather::default();
        let mut rows = 0;
        while rows < self.limits.batch_rows {
            let room = self.limits.batch_rows - rows;
            let Some(front) = self.out.front_mut() else {
                break;
            };
            match front {
                Work::Rows(batch, bytes) => {
                    if batch.num_rows() <= room {
                        let bytes = *bytes;
                        rows += batch.num_rows();
                        self.out_rows -= batch.num_rows();
                        parts.push(batch.clone());
                        self.out.pop_front();
                        self.unqueue(bytes);
                    } else {
                        parts.push(batch.slice(0, room));
                        *batch = batch.slice(room, batch.num_rows() - room);
                        rows += room;
                        self.out_rows -= room;
                    }
                }
                Work::Pairs {
                    probe,
                    page,
                    rows: page_rows,
                    next,
                    total,
                    bytes,
                } => {
                    let (probe, total) = (*probe, *total);
                    let Some(p) = self.probes.get_mut(&probe) else {
                        let bytes = *bytes;
                        self.out_rows -= total - *next;
                        self.out.pop_front();
                        self.unqueue(bytes);
                        continue;
                    };
                    let end = total.min(*next + room);
                    let outer = &self.outers[&p.outer].batch;
                    rows += self.spec.pairs(
                        &mut gather,
                        outer,
                        p.rows.as_slice(),
                        page,
                        page_rows,
                        *next..end,
                        p.matched.as_deref_mut(),
                    )?;
                    self.out_rows -= end - *next;
                    *next = end;
                    if end == total {
                        let bytes = *bytes;
                        self.out.pop_front();
                        self.unqueue(bytes);
                        self.release(probe);
                    }
                }
                Work::Finish(probe) => {
                    let probe = *probe;
                    self.out.pop_front();
                    if let Some(p) = self.probes.get(&probe) {
                        let outer = &self.outers[&p.outer].batch;
                        let matched = p.matched.as_deref().unwrap_or(&[]);
                        if let Some(out) = self.spec.finish(outer, p.rows.as_slice(), matched)? {
                            rows += out.num_rows();
                            parts.push(out);
                        }
                    }
                    self.close(probe);
                }
            }
        }
        if let Some(pairs) = gather.build(&self.spec.schema)? {
            parts.push(pairs);
        }
        let batch = match parts.len() {
            0 => return Ok(None),
            1 => parts.pop().expect("one part"),
            _ => concat_batches(&self.spec.schema, &parts)?,
        };
        compact_views(batch).map(Some)
    }
}

/// Pages ahead whose key column [`Join::decode_ready`] asks the CPU for.
const KEY_PREFETCH_PAGES: usize = 8;
/// Most cache lines of a key column asked for (an 8 KiB page's 8-byte keys take about ten).
const KEY_PREFETCH_LINES: usize = 16;
