//! Read-ahead of small index scans while the query is planned: which index scans a table's
//! pushed-down filters make (the rule's own candidates), handed to
//! [`crate::access::plan_time::read_ahead`], which counts them and reads the pages of the
//! cheapest one if it is small.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;

use super::ranges::index_candidates;
use crate::access::plan_time::{IndexRanges, ReadAhead, read_ahead as start};
use crate::access::{QueryIo, TableIo};
use crate::config::{IndexJoinMode, OoodeConfig};
use crate::io::IoMetrics;

/// Starts reading ahead what an index scan of `table` filtered by `predicate` (over the
/// table's columns) would read, if it is small; its reads count in `io` under `query`'s
/// budget. The returned handle stops it when dropped. Nothing with `index_join = 'never'`, in
/// order, when no index fits, or outside a tokio runtime.
pub fn read_ahead(
    table: &Arc<TableIo>,
    predicate: &Arc<dyn PhysicalExpr>,
    config: &OoodeConfig,
    io: Arc<IoMetrics>,
    query: &Arc<QueryIo>,
) -> Result<Option<ReadAhead>> {
    if config.index_join == IndexJoinMode::Never {
        return Ok(None);
    }
    let candidates = index_candidates(table.table(), predicate, Some)?
        .into_iter()
        .map(|c| IndexRanges {
            index: c.index,
            ranges: c.ranges,
        })
        .collect();
    Ok(start(table, candidates, query, io))
}
