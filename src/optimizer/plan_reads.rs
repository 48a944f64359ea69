//! What a table's scan reads while the query is planned: the range counts of the index scans
//! its pushed-down filters make (the rule's own candidates), for the rule to find, and a
//! read-ahead of the cheapest one if it is small (see [`crate::access::plan_time`]).

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;

use super::ranges::index_candidates;
use crate::access::plan_time::{IndexRanges, PlanCounts, PlanReads, read_ahead};
use crate::access::{QueryIo, TableIo};
use crate::config::{IndexJoinMode, OoodeConfig};
use crate::io::IoMetrics;

/// Counts what the index scans of `table` filtered by `predicate` (over the table's columns)
/// would read, and starts reading ahead the smallest if it is small; the read-ahead's reads
/// count in `io` under `query`'s budget. Nothing with `index_join = 'never'` or when no index
/// fits; no read-ahead in order or outside a tokio runtime.
pub async fn plan_reads(
    table: &Arc<TableIo>,
    predicate: &Arc<dyn PhysicalExpr>,
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
            index: c.index,
            ranges: c.ranges,
        })
        .collect();
    if candidates.is_empty() {
        return Ok(PlanReads::default());
    }
    let counts = PlanCounts::count(table, candidates, query).await;
    let read_ahead = read_ahead(table, &counts, query, io).map(Arc::new);
    Ok(PlanReads { counts, read_ahead })
}
