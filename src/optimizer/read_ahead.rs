//! Read-ahead of small index scans while the query is planned.
//!
//! ```text
//!   TableProvider::scan(filters) ──> read_ahead: a task of its own
//!        │                               count the filters' key ranges (a leaf or two)
//!        │                               small? read the index scan's heap pages into the pool
//!   rest of DataFusion's planning, the index rule (its count finds the leaves cached),
//!   EnforceDistribution ... ──> the plan runs: its index scan finds its pages read
//! ```
//!
//! DataFusion hands a table's filters to its provider's `scan` (reported Inexact, they stay
//! in a FilterExec that the index rule later folds into an index scan). From there to the end
//! of planning take a few hundred microseconds: building the rest of the physical plan and
//! DataFusion's physical optimizer. A point query's first reads (the index leaf that the
//! rule's estimate counts in, then the heap pages the scan needs) take about as long, so
//! started at `scan` they are done, or nearly, when the plan starts to run.
//!
//! Only scans of at most [`READ_AHEAD_PAGES`] pages read ahead; the decision is the rule's
//! estimate, computed the same way (exact B+tree counts). The reads go under the budget of
//! the scan as planned (`ooode.max_outstanding_io` of its own, not yet the query's) and count
//! as the scan's reads in EXPLAIN ANALYZE. A scan the rule then does not turn into an index
//! scan has read at most those pages for nothing. In order, nothing reads ahead: its reads
//! wait for the plan, one at a time.
//!
//! Measured on Fig. 4 at `N = 1`, SF 1, cold, release build (medians, runs alternating):
//! without read-ahead 1.64 ms (planning 1.01, execution 0.64); with a read-ahead that started
//! at the end of the index rule instead, 1.50 ms (1.06, 0.43); from `scan`, 1.26 ms (0.94,
//! 0.33: the rule's count finds its leaf read). Hot, 1.04 -> 1.08 ms: the task and its
//! lookups, which find everything cached.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;

use super::cost::{counted_ranges, estimate_from_counts};
use super::ranges::{IndexCandidate, index_candidates};
use crate::exec::index_scan::{ScanPages, prefetch};
use crate::exec::probe::{StepMetrics, count};
use crate::exec::{ExecutionMode, IndexJoinMode, OoodeConfig, QueryIo};
use crate::io::{IoMetrics, TableIo};

/// Index scans estimated to read at most this many pages read ahead. A point query's reads
/// then overlap its planning; a larger scan's reads take far longer than planning does, so
/// there is little to hide, and reading ahead would spend reads on a plan not yet chosen.
pub const READ_AHEAD_PAGES: usize = 256;

/// Starts reading ahead what an index scan of `table` filtered by `predicate` (over the
/// table's columns) would read, if it is small, in a task of its own; its reads count in `io`
/// under `query`'s budget. Nothing happens in order, with `index_join = 'never'`, when no
/// index fits, or outside a tokio runtime.
pub fn read_ahead(
    table: &Arc<TableIo>,
    predicate: &Arc<dyn PhysicalExpr>,
    config: &OoodeConfig,
    io: Arc<IoMetrics>,
    query: Arc<QueryIo>,
) -> Result<()> {
    if config.execution_mode == ExecutionMode::InOrder || config.index_join == IndexJoinMode::Never
    {
        return Ok(());
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(());
    };
    let candidates = index_candidates(table.table(), predicate, Some)?;
    if candidates.is_empty() {
        return Ok(());
    }
    let table = table.clone();
    // The outcome is the scan's to find: a failed read is not cached, so the plan reads the
    // page again and reports the error itself.
    drop(runtime.spawn(async move {
        if let Some(pages) = smallest_scan(table, candidates, io, query).await? {
            prefetch(Arc::new(pages)).await?;
        }
        Ok::<_, datafusion::common::DataFusionError>(())
    }));
    Ok(())
}

/// The pages of the cheapest candidate's scan, as the rule estimates it, if it reads at most
/// [`READ_AHEAD_PAGES`].
async fn smallest_scan(
    table: Arc<TableIo>,
    candidates: Vec<IndexCandidate>,
    io: Arc<IoMetrics>,
    query: Arc<QueryIo>,
) -> Result<Option<ScanPages>> {
    let steps = StepMetrics::new(io.clone(), &query).always_polled();
    let mut best: Option<(usize, IndexCandidate)> = None;
    for candidate in candidates {
        let mut entries = 0;
        for range in counted_ranges(&candidate.ranges) {
            entries += count(&table, candidate.index, range, &query, &steps).await?;
        }
        let pages = estimate_from_counts(
            table.table(),
            candidate.index,
            candidate.ranges.len(),
            entries,
        )
        .pages;
        if best.as_ref().is_none_or(|b| pages < b.0) {
            best = Some((pages, candidate));
        }
    }
    Ok(best
        .filter(|(pages, _)| *pages <= READ_AHEAD_PAGES)
        .map(|(_, c)| ScanPages {
            table,
            index: c.index,
            ranges: c.ranges,
            query,
            node_io: io,
        }))
}
