//! What a table's scan reads while the query is planned: the range counts of the index scans
//! its pushed-down filters make (the rule's own candidates), for the rule to find, and a
//! read-ahead of the cheapest one if it is small (see [`crate::access::plan_time`]).

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;

use super::ranges::index_candidates;
use crate::access::index_only::covers;
use crate::access::plan_time::{IndexRanges, PlanCounts, PlanReads, read_ahead};
use crate::access::{QueryIo, TableIo};
use crate::config::{ExecutionMode, IndexJoinMode, OoodeConfig};
use crate::io::IoMetrics;

/// Starts counting what the index scans of `table` filtered by `predicate` (over the
/// table's columns) and reading `columns` would read, for the index rule to find, and out of order a task that
/// reads ahead the smallest if it is small; the read-ahead's reads count in `io` under
/// `query`'s budget. In order the counts are made here (the engine's reads block anyway, and
/// nothing reads ahead). Nothing with `index_join = 'never'` or when no index fits.
pub async fn plan_reads(
    table: &Arc<TableIo>,
    predicate: &Arc<dyn PhysicalExpr>,
    columns: &[usize],
    config: &OoodeConfig,
    io: Arc<IoMetrics>,
    query: &Arc<QueryIo>,
) -> Result<PlanReads> {
    if config.index_join == IndexJoinMode::Never {
        return Ok(PlanReads::default());
    }
    let candidates: Vec<IndexRanges> = index_candidates(table.table(), predicate, Some)?
        .into_iter()
        .map(|c| IndexRanges {
            covering: config.index_only_scans && covers(table.table(), c.index, columns),
            index: c.index,
            ranges: c.ranges,
        })
        .collect();
    if candidates.is_empty() {
        return Ok(PlanReads::default());
    }
    let counts = Arc::new(PlanCounts::new(table, candidates, query));
    let read_ahead = match query.mode {
        ExecutionMode::InOrder => {
            counts.made().await;
            None
        }
        ExecutionMode::OutOfOrder => read_ahead(table, &counts, query, io).map(Arc::new),
    };
    Ok(PlanReads { counts, read_ahead })
}
