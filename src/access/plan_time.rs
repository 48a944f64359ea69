//! Reads made while a query is planned: B+tree range counts for the optimizer's estimates,
//! and the read-ahead of small index scans.
//!
//! ```text
//!   TableProvider::scan(filters) ──> PlanCounts::count: the filters' candidate index scans,
//!        │   awaited                   their key ranges counted (a leaf or two each)
//!        │                           ReadAhead: a task of its own, held by the scan node:
//!        │                             the smallest scan, if small, read into the pool
//!   rest of DataFusion's planning, the index rule: finds its counts made
//!   ... ──> the plan runs: its index scan finds its pages read
//! ```
//!
//! Counts read through the query's own engine and pool: out of order the reads of all the
//! ranges counted are in flight together, so a cold count costs one tree height of dependent
//! reads, not one read per node visited. They are made in `scan`, which is async: DataFusion's
//! physical optimizer is not, and a rule that waited for reads held a tokio worker meanwhile
//! (under 64 concurrent clients on 2 workers, 55 % of the workers' context switches were
//! there, and every running query stalled behind the queries being planned). The rule counts
//! itself, blocking, only the ranges `scan` did not foresee. Counts run outside admission: a
//! plan's counts are at most [`COUNTED_RANGES`] ranges per candidate, two descents each, and
//! a query being planned should not queue behind the reads of queries already running (nor
//! could the rule's blocking count wait for a permit that a step needing its thread holds).
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
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::budget::QueryIo;
use super::steps::{StepCtx, count, group_by_page, heap_page, lookup_leaves};
use super::table_io::TableIo;
use crate::io::IoMetrics;
use crate::storage::btree::KeyRange;

/// At most this many ranges are counted exactly; the rest are extrapolated.
pub const COUNTED_RANGES: usize = 32;

/// Index scans estimated to read at most this many pages read ahead. A point query's reads
/// then overlap its planning; a larger scan's reads take far longer than planning does, so
/// there is little to hide, and reading ahead would spend reads on a plan not yet chosen.
pub const READ_AHEAD_PAGES: usize = 256;

/// What an index scan is expected to cost, from exact B+tree range counts.
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
    query.note_blocking_count();
    let ctx = StepCtx::plan_time(query.clone(), io);
    // Every engine of the runtime: a read this count joins may be another engine's.
    let mut engines = query.runtime().engines();
    if !engines.iter().any(|e| Arc::ptr_eq(e, table.engine())) {
        engines.push(table.engine().clone());
    }
    crate::io::wait::block_on_reads(&engines, count_ranges(table, index, ranges, &ctx))
}

/// The estimate of an index scan over `ranges` ranges of index `index_no` whose
/// [`counted_ranges`] hold `entries` entries.
pub fn estimate_from_counts(
    io: &TableIo,
    index_no: usize,
    ranges: usize,
    entries: u64,
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
}

/// Range counts of a table's candidate index scans, made while its scan was planned (an
/// async step) so that the optimizer rule, which cannot wait asynchronously, finds them made.
#[derive(Debug, Default)]
pub struct PlanCounts {
    counted: Vec<Counted>,
    /// Counters of the counts' reads (not the scan's: they are the plan's, and in order
    /// nothing of the scan is read before the plan runs).
    io: Arc<IoMetrics>,
}

#[derive(Debug)]
struct Counted {
    scan: IndexRanges,
    /// None when the count failed (a damaged index): the estimate is then made large and the
    /// scan, if chosen, reports the damage itself.
    entries: Option<u64>,
}

impl PlanCounts {
    /// Counts `candidates` (index scans of `table`), all at once, through `query`'s engine,
    /// outside admission (see the module doc).
    pub async fn count(
        table: &TableIo,
        candidates: Vec<IndexRanges>,
        query: &Arc<QueryIo>,
    ) -> Self {
        let io = IoMetrics::new();
        let ctx = StepCtx::plan_time(query.clone(), io.clone());
        let entries = futures::future::join_all(
            candidates
                .iter()
                .map(|c| count_ranges(table, c.index, &c.ranges, &ctx)),
        )
        .await;
        let counted = candidates
            .into_iter()
            .zip(entries)
            .map(|(scan, entries)| Counted {
                scan,
                entries: entries.ok(),
            })
            .collect();
        Self { counted, io }
    }

    /// The count of `ranges` of the `index`-th index, if it was made: `Some(None)` when it
    /// was made and failed.
    pub fn get(&self, index: usize, ranges: &[KeyRange]) -> Option<Option<u64>> {
        self.counted
            .iter()
            .find(|c| c.scan.index == index && c.scan.ranges == ranges)
            .map(|c| c.entries)
    }

    /// Counters of the counts' reads.
    pub fn io(&self) -> &Arc<IoMetrics> {
        &self.io
    }

    /// The counted scan of `table` that reads the fewest pages, with its estimate.
    fn smallest(&self, table: &TableIo) -> Option<(ScanEstimate, &IndexRanges)> {
        self.counted
            .iter()
            .filter_map(|c| {
                let entries = c.entries?;
                let estimate =
                    estimate_from_counts(table, c.scan.index, c.scan.ranges.len(), entries);
                Some((estimate, &c.scan))
            })
            .min_by_key(|(estimate, _)| estimate.pages)
    }
}

/// The counts and the read-ahead a table's scan made while the query was planned
/// ([`crate::optimizer::plan_reads`]).
#[derive(Debug, Default)]
pub struct PlanReads {
    /// Range counts of the candidate index scans.
    pub counts: PlanCounts,
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

/// Starts reading ahead the heap pages of the cheapest of the scans of `table` counted in
/// `counts`, if it reads at most [`READ_AHEAD_PAGES`], under `query`'s budget, counting the
/// reads in `io`. None in order or outside a tokio runtime.
pub fn read_ahead(
    table: &Arc<TableIo>,
    counts: &PlanCounts,
    query: &Arc<QueryIo>,
    io: Arc<IoMetrics>,
) -> Option<ReadAhead> {
    if query.mode == crate::config::ExecutionMode::InOrder {
        return None;
    }
    let (estimate, scan) = counts.smallest(table)?;
    if estimate.pages > READ_AHEAD_PAGES {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let ctx = StepCtx::new(query.clone(), io, 0);
    let (table, scan) = (table.clone(), scan.clone());
    // The outcome is the scan's to find: a failed read is not cached, so the plan reads the
    // page again and reports the error itself.
    let task = Box::pin(async move {
        let _ = read_pages(table, scan, ctx).await;
    });
    Some(ReadAhead(runtime.spawn(crate::io::batch::Batched(task))))
}

/// The lookups and heap page reads of `scan`, into the pool, without decoding.
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
                for (page_no, _) in group_by_page(&ids?) {
                    let (table, ctx) = (table.clone(), ctx.clone());
                    reads.push(async move { heap_page(&table, page_no, &ctx).await.map(drop) });
                }
            }
            Some(read) = reads.next(), if !reads.is_empty() => read?,
            else => return Ok(()),
        }
    }
}
