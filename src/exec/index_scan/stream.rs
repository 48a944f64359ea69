//! The work of one index scan, as a set of concurrent jobs driven by read completions.
//!
//! ```text
//!   one Lookup job per key range ──(B+tree pages, one read at a time)──> row ids
//!        └─> one Fetch job per heap page holding those rows ──(page read)──> decode,
//!            keep the rows, apply the residual predicate ──> batch out
//! ```
//!
//! All jobs live in one `FuturesUnordered`: whichever read completes first has its step run
//! first, and a finished lookup adds its fetch jobs at once, so lookups and fetches overlap.
//! Reads in flight are bounded by the query's budget, not by the number of jobs.

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::batch_filter;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use crate::exec::context::QueryIo;
use crate::exec::metrics::NodeMetrics;
use crate::exec::probe::{StepMetrics, decode_rows, group_by_page, heap_page, lookup};
use crate::io::TableIo;
use crate::storage::btree::KeyRange;

/// What the scan needs to run.
pub struct ScanWork {
    pub table: Arc<TableIo>,
    pub index: usize,
    pub sparse: bool,
    pub ranges: Vec<KeyRange>,
    pub read_columns: Vec<usize>,
    pub predicate: Arc<dyn PhysicalExpr>,
    pub output: Option<Vec<usize>>,
    pub query: Arc<QueryIo>,
    pub node: NodeMetrics,
}

enum Done {
    RowIds(Vec<u64>),
    Rows(RecordBatch),
}

/// Runs the scan, sending batches to `tx` as pages complete.
pub async fn run(work: ScanWork, tx: Sender<Result<RecordBatch>>) -> Result<()> {
    let w = Arc::new(work);
    let steps = StepMetrics::new(w.node.io.clone(), &w.query);
    let mut jobs: FuturesUnordered<BoxFuture<'static, Result<Done>>> = FuturesUnordered::new();
    w.node.add_probes(w.ranges.len());
    for range in w.ranges.iter().cloned() {
        let (w, steps) = (w.clone(), steps.clone());
        jobs.push(
            async move {
                Ok(Done::RowIds(
                    lookup(&w.table, w.index, range, &w.query, &steps).await?,
                ))
            }
            .boxed(),
        );
    }
    while let Some(done) = jobs.next().await {
        match done? {
            Done::RowIds(ids) => {
                for (page_no, slots) in group_by_page(&ids) {
                    let (w, steps) = (w.clone(), steps.clone());
                    jobs.push(
                        async move {
                            let page = heap_page(&w.table, page_no, &w.query, &steps).await?;
                            // A sparse index names pages: every row of the page is a candidate.
                            let slots = (!w.sparse).then_some(slots.as_slice());
                            let rows =
                                decode_rows(&w.table, page_no, &page, &w.read_columns, slots)?;
                            let rows = batch_filter(&rows, &w.predicate)?;
                            let rows = match &w.output {
                                Some(cols) => rows.project(cols)?,
                                None => rows,
                            };
                            Ok(Done::Rows(rows))
                        }
                        .boxed(),
                    );
                }
            }
            Done::Rows(batch) => {
                if batch.num_rows() > 0 && tx.send(Ok(batch)).await.is_err() {
                    // The consumer is gone (query cancelled): stop issuing reads.
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}
