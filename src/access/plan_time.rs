//! Reads made while a query is planned: B+tree range counts for the optimizer's estimates,
//! and the read-ahead of small index scans.
//!
//! A count reads no leaf: the inner nodes give the entries of every leaf between the two
//! where the range starts and ends exactly, and those two leaves' shares are interpolated
//! between the keys around them ([`crate::storage::btree::CountCursor::estimate`]). Inner
//! nodes stay pinned once read, so a count reads nothing after the table's first queries,
//! and the rule finds it made. Exact counts read those two leaves: measured at 64 clients
//! (SF 1, release), the rule then blocked a tokio worker for them a quarter of the time,
//! and a point query's planning waited behind the device's queue of reads.
//!
//! ```text
//!   TableProvider::scan(filters) ──> PlanCounts: the counts of the filters' candidate index
//!        │                           scans (inner nodes only), one shared future
//!        │                           out of order: ReadAhead, a task held by the scan node,
//!        │                             drives the counts, then reads the smallest scan's
//!        │                             heap pages into the pool if it is small
//!        │                           in order: the counts made here
//!   rest of DataFusion's planning, the index rule: finds the counts made (or still in
//!   flight: then it drives them itself, blocking, as it would count)
//!   ... ──> the plan runs: its index scan finds its pages read
//! ```
//!
//! Counts read through the query's own engine and pool: out of order the reads of all the
//! ranges counted are in flight together, so a cold count costs the inner levels' dependent
//! reads, not one read per node visited. DataFusion's physical optimizer is synchronous: a
//! rule that counts holds its tokio worker until the reads complete. So the counts start in
//! `scan`, where the filters are known, and overlap the rest of planning; the rule counts
//! itself only ranges `scan` did not foresee. Awaiting the counts in `scan` instead, so that
//! the rule never blocks, was measured slower (release, SF 1, one run each, same hour): point
//! lookups alone p50 4.15 ms against 2.26 (the rest of planning and the read-ahead no
//! longer overlapped the counts), and 64 concurrent clients 79 q/s against 88. Counts run
//! outside admission: a plan's counts are at most [`COUNTED_RANGES`] ranges per candidate,
//! two descents each; a blocked rule could not wait for a permit that a step needing its
//! thread holds, and a query being planned should not queue behind running queries' reads.
//!
//! Read-ahead: DataFusion hands a table's filters to its provider's `scan`; from there to the
//! end of planning take a few hundred microseconds, about as long as a point query's first
//! reads. Only scans of at most [`READ_AHEAD_PAGES`] pages read ahead, under the query's
//! budget, counted as the scan's reads. The task ends with the plan that holds it (a query
//! dropped or cancelled stops its read-ahead). In order nothing reads ahead.
//!
//! Measured on Fig. 4 at `N = 1`, SF 1, cold, release build (medians, runs alternating):
//! without read-ahead 1.64 ms (planning 1.01, execution 0.64); with a read-ahead that started
//! at the end of the index rule instead, 1.50 ms (1.06, 0.43); from `scan`, 1.26 ms (0.94,
//! 0.33: the rule's count finds its leaf read).

use std::sync::Arc;

use datafusion::common::Result;
use futures::future::{BoxFuture, Shared};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};

use super::budget::QueryIo;
use super::steps::{StepCtx, count, group_by_page, heap_page, lookup_leaves};
use super::table_io::TableIo;
use crate::io::{IoEngine, IoMetrics};
use crate::storage::btree::KeyRange;

/// At most this many ranges are counted exactly; the rest are extrapolated.
pub const COUNTED_RANGES: usize = 32;

/// Index scans estimated to read at most this many pages read ahead. A point query's reads
/// then overlap its planning; a larger scan's reads take far longer than planning does, so
/// there is little to hide, and reading ahead would spend reads on a plan not yet chosen.
pub const READ_AHEAD_PAGES: usize = 256;

/// What an index scan is expected to cost, from B+tree range counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEstimate {
    /// Rows found in the ranges (before the residual predicate).
    pub rows: usize,
    /// Page reads: index nodes and heap pages.
    pub pages: usize,
}

/// The ranges whose entries are counted exactly (the others are extrapolated from them).
pub fn counted_ranges(ranges: &[KeyRange]) -> &[KeyRange] {
    &ranges[..ranges.len().min(COUNTED_RANGES)]
}

/// Entries of the `index`-th index of `table` in the [`counted_ranges`] of `ranges`, all
/// counted at once; reads are counted in `io`.
pub async fn count_ranges(
    table: &TableIo,
    index: usize,
    ranges: &[KeyRange],
    ctx: &StepCtx,
) -> Result<u64> {
    let counts: Vec<u64> = futures::future::try_join_all(
        counted_ranges(ranges)
            .iter()
            .map(|r| count(table, index, r, ctx)),
    )
    .await?;
    Ok(counts.iter().sum())
}

/// [`count_ranges`] for a caller that cannot wait asynchronously (an optimizer rule): the
/// thread blocks until the reads complete, taking their completions itself (the reactor
/// task that normally does may need this very thread). Reads go outside admission (see the
/// module doc).
pub fn count_ranges_now(
    table: &TableIo,
    index: usize,
    ranges: &[KeyRange],
    query: &Arc<QueryIo>,
    io: Arc<IoMetrics>,
) -> Result<u64> {
    query.note_own_count();
    let ctx = StepCtx::plan_time(query.clone(), io);
    let engines = engines_of(table, query);
    crate::io::wait::block_on_reads(&engines, count_ranges(table, index, ranges, &ctx))
}

/// The estimate of an index scan over `ranges` ranges of index `index_no` whose
/// [`counted_ranges`] hold `entries` entries; `covering`: it reads the index's leaves only
/// (an index-only scan, see [`crate::access::index_only`]).
pub fn estimate_from_counts(
    io: &TableIo,
    index_no: usize,
    ranges: usize,
    entries: u64,
    covering: bool,
) -> ScanEstimate {
    let table = io.table();
    let Some(index) = table.indexes().get(index_no) else {
        return ScanEstimate {
            rows: usize::MAX,
            pages: usize::MAX,
        };
    };
    let rows_per_page = io.row_count() as f64 / io.heap_pages().max(1) as f64;
    let counted = ranges.min(COUNTED_RANGES);
    let entries = entries as f64 * ranges as f64 / counted.max(1) as f64;
    // Each segment has its own tree to walk.
    let descents = ranges * index.meta.tree.height as usize * io.segments();
    if index.meta.is_sparse() {
        // Entries are pages; one more page per range where the range starts mid-page.
        let pages = entries + ranges as f64;
        ScanEstimate {
            rows: (pages * rows_per_page) as usize,
            pages: pages as usize + descents,
        }
    } else if covering {
        // The leaves the ranges span: the first of each range, then the entries' share.
        let tree = &index.meta.tree;
        let per_leaf = tree.entries as f64 / tree.leaf_pages.max(1) as f64;
        let leaves = (entries / per_leaf.max(1.0)).ceil() as usize;
        ScanEstimate {
            rows: entries as usize,
            pages: leaves + descents,
        }
    } else {
        let pages = entries.min(io.heap_pages() as f64);
        ScanEstimate {
            rows: entries as usize,
            pages: pages as usize + descents,
        }
    }
}

/// Where an index scan's rows are: an index of a table and key ranges in it.
#[derive(Debug, Clone)]
pub struct IndexRanges {
    /// Position of the index in the manifest.
    pub index: usize,
    /// Key ranges of that index.
    pub ranges: Vec<KeyRange>,
    /// The index's keys hold every column the scan reads: it reads no heap page.
    pub covering: bool,
}

/// The counts of a table's candidate index scans, one per candidate (None: the count failed,
/// a damaged index; the estimate is then made large and the scan, if chosen, reports the
/// damage itself).
type Counts = Arc<[Option<u64>]>;

/// Range counts of a table's candidate index scans, started while its scan was planned so
/// that the optimizer rule finds them made, or at least in flight: one future, driven by
/// whoever needs it first (the read-ahead task, the rule, an in-order scan).
#[derive(Default)]
pub struct PlanCounts {
    candidates: Vec<IndexRanges>,
    counts: Option<Shared<BoxFuture<'static, Counts>>>,
    query: Option<Arc<QueryIo>>,
    /// Engines whose completions a blocked waiter takes (see [`count_ranges_now`]).
    engines: Vec<Arc<dyn IoEngine>>,
}

/// Every engine of `query`'s runtime, and `table`'s: a read a count joins may be any of
/// theirs, and a thread blocked on it must take its completion itself.
fn engines_of(table: &TableIo, query: &QueryIo) -> Vec<Arc<dyn IoEngine>> {
    let mut engines = query.runtime().engines();
    if !engines.iter().any(|e| Arc::ptr_eq(e, table.engine())) {
        engines.push(table.engine().clone());
    }
    engines
}

impl std::fmt::Debug for PlanCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCounts")
            .field("candidates", &self.candidates.len())
            .field("counted", &self.counts.as_ref().and_then(|c| c.peek()))
            .finish()
    }
}

impl PlanCounts {
    /// The counts of `candidates` (index scans of `table`), all at once, through `query`'s
    /// engine, outside admission (see the module doc); nothing is read until they are awaited.
    pub fn new(table: &Arc<TableIo>, candidates: Vec<IndexRanges>, query: &Arc<QueryIo>) -> Self {
        // Counted apart from the scan's reads: they are the plan's, and in order nothing of
        // the scan is read before the plan runs.
        let ctx = StepCtx::plan_time(query.clone(), IoMetrics::new());
        let engines = engines_of(table, query);
        let (table, counted) = (table.clone(), candidates.clone());
        let counts = async move {
            let counts = futures::future::join_all(
                counted
                    .iter()
                    .map(|c| count_ranges(&table, c.index, &c.ranges, &ctx)),
            )
            .await;
            counts.into_iter().map(Result::ok).collect::<Counts>()
        };
        Self {
            engines,
            candidates,
            counts: Some(counts.boxed().shared()),
            query: Some(query.clone()),
        }
    }

    /// The counts, once made (awaiting them drives their reads).
    pub async fn made(&self) -> Option<Counts> {
        Some(self.counts.clone()?.await)
    }

    /// The count of `ranges` of the `index`-th index, if it is one of the candidates:
    /// `Some(None)` when it failed. A count still in flight is waited for, blocking the
    /// thread (taking completions itself, as [`count_ranges_now`] does): the caller is the
    /// optimizer rule, which cannot wait asynchronously.
    pub fn get(&self, index: usize, ranges: &[KeyRange]) -> Option<Option<u64>> {
        let at = self
            .candidates
            .iter()
            .position(|c| c.index == index && c.ranges == ranges)?;
        let counts = self.counts.as_ref()?;
        let counts = match counts.peek() {
            Some(counts) => counts.clone(),
            None => {
                let query = self.query.as_ref()?;
                let blocked = std::time::Instant::now();
                let counts = crate::io::wait::block_on_reads(&self.engines, counts.clone());
                query.note_count_wait(blocked.elapsed());
                counts
            }
        };
        counts.get(at).copied()
    }

    /// The counted scan of `table` that reads the fewest pages, with its estimate.
    fn smallest(&self, table: &TableIo, counts: &Counts) -> Option<(ScanEstimate, IndexRanges)> {
        self.candidates
            .iter()
            .zip(counts.iter())
            .filter_map(|(scan, entries)| {
                let estimate = estimate_from_counts(
                    table,
                    scan.index,
                    scan.ranges.len(),
                    (*entries)?,
                    scan.covering,
                );
                Some((estimate, scan.clone()))
            })
            .min_by_key(|(estimate, _)| estimate.pages)
    }
}

/// The counts and the read-ahead a table's scan made while the query was planned
/// ([`crate::optimizer::plan_reads`](fn@crate::optimizer::plan_reads)).
#[derive(Debug, Default)]
pub struct PlanReads {
    /// Range counts of the candidate index scans.
    pub counts: Arc<PlanCounts>,
    /// The read-ahead of the smallest, if any; dropping its last handle stops it.
    pub read_ahead: Option<Arc<ReadAhead>>,
}

/// A read-ahead running in a task of its own; dropping it stops the task.
#[derive(Debug)]
pub struct ReadAhead(tokio::task::JoinHandle<()>);

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ReadAhead {
    /// Whether the task has finished.
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// Starts a task that awaits `counts` (so they are made while the rest of the query is
/// planned) and then reads ahead the heap pages of the cheapest of the scans of `table`
/// counted, if it reads at most [`READ_AHEAD_PAGES`], under `query`'s budget, counting the
/// reads in `io`. None outside a tokio runtime.
pub fn read_ahead(
    table: &Arc<TableIo>,
    counts: &Arc<PlanCounts>,
    query: &Arc<QueryIo>,
    io: Arc<IoMetrics>,
) -> Option<ReadAhead> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let ctx = StepCtx::new(query.clone(), io, 0);
    let (table, counts) = (table.clone(), counts.clone());
    // The outcome is the scan's to find: a failed read is not cached, so the plan reads the
    // page again and reports the error itself.
    let task = Box::pin(async move {
        let Some(made) = counts.made().await else {
            return;
        };
        let Some((estimate, scan)) = counts.smallest(&table, &made) else {
            return;
        };
        if estimate.pages <= READ_AHEAD_PAGES {
            // The plan is not estimated yet; its reads start here, as a small query's.
            ctx.query().guess_estimated_reads(estimate.pages as u64);
            let _ = read_pages(table, scan, ctx).await;
        }
    });
    Some(ReadAhead(runtime.spawn(crate::io::batch::Batched(task))))
}

/// The lookups and heap page reads of `scan` (its leaves only, when it covers its columns),
/// into the pool, without decoding.
async fn read_pages(table: Arc<TableIo>, scan: IndexRanges, ctx: StepCtx) -> Result<()> {
    let mut lookups = futures::stream::select_all(
        scan.ranges
            .into_iter()
            .map(|range| lookup_leaves(table.clone(), scan.index, range, ctx.clone()).boxed()),
    );
    let mut reads = FuturesUnordered::new();
    loop {
        tokio::select! {
            Some(ids) = lookups.next() => {
                let ids = ids?;
                if scan.covering {
                    continue;
                }
                for (page_no, _) in group_by_page(&ids) {
                    let (table, ctx) = (table.clone(), ctx.clone());
                    reads.push(async move { heap_page(&table, page_no, &ctx).await.map(drop) });
                }
            }
            Some(read) = reads.next(), if !reads.is_empty() => read?,
            else => return Ok(()),
        }
    }
}
