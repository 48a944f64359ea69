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
//!
//! A small scan's pages can be read ahead while the query is planned ([`prefetch`]: the same
//! lookups and reads, into the buffer pool, without decoding); the scan then finds them there.

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
use crate::io::{IoMetrics, TableIo};
use crate::storage::btree::KeyRange;

/// Where a scan's pages are (an index of a table, key ranges in it), and the budget and
/// counters its reads go under.
pub struct ScanPages {
    /// The table.
    pub table: Arc<TableIo>,
    /// Its index read (position in the manifest).
    pub index: usize,
    /// Key ranges of that index.
    pub ranges: Vec<KeyRange>,
    /// The budget the reads take permits from, and the query's counters.
    pub query: Arc<QueryIo>,
    /// The scan node's I/O counters.
    pub node_io: Arc<IoMetrics>,
}

/// What the scan needs to run: its pages, and what it does with their rows.
pub struct ScanWork {
    pub pages: Arc<ScanPages>,
    pub sparse: bool,
    pub read_columns: Vec<usize>,
    pub predicate: Arc<dyn PhysicalExpr>,
    pub output: Option<Vec<usize>>,
}

enum Done {
    /// A lookup's row ids.
    RowIds(Vec<u64>),
    /// A page's rows that passed the predicate.
    Rows(RecordBatch),
    /// A page read into the pool (prefetch).
    Read,
}

/// The scan's lookups, as jobs that return the row ids they find.
fn lookups(
    p: &Arc<ScanPages>,
    steps: &StepMetrics,
) -> FuturesUnordered<BoxFuture<'static, Result<Done>>> {
    p.ranges
        .iter()
        .cloned()
        .map(|range| {
            let (p, steps) = (p.clone(), steps.clone());
            async move {
                Ok(Done::RowIds(
                    lookup(&p.table, p.index, range, &p.query, &steps).await?,
                ))
            }
            .boxed()
        })
        .collect()
}

/// Reads the pages a scan will read into the buffer pool, without decoding them, as a task
/// whose caller only waits for it: started while the query is planned, so the reads overlap
/// planning, and the scan then finds its pages cached or being read (one read each: the pool
/// shares reads in flight).
pub async fn prefetch(pages: Arc<ScanPages>) -> Result<()> {
    let steps = StepMetrics::new(pages.node_io.clone(), &pages.query).always_polled();
    let mut jobs = lookups(&pages, &steps);
    while let Some(done) = jobs.next().await {
        if let Done::RowIds(ids) = done? {
            for (page_no, _) in group_by_page(&ids) {
                let (p, steps) = (pages.clone(), steps.clone());
                jobs.push(
                    async move {
                        heap_page(&p.table, page_no, &p.query, &steps).await?;
                        Ok(Done::Read)
                    }
                    .boxed(),
                );
            }
        }
    }
    Ok(())
}

/// Runs the scan, sending batches to `tx` as pages complete.
pub async fn run(work: ScanWork, node: NodeMetrics, tx: Sender<Result<RecordBatch>>) -> Result<()> {
    let w = Arc::new(work);
    let p = w.pages.clone();
    let steps = StepMetrics::new(p.node_io.clone(), &p.query);
    node.add_probes(p.ranges.len());
    let mut jobs = lookups(&p, &steps);
    while let Some(done) = jobs.next().await {
        match done? {
            Done::RowIds(ids) => {
                for (page_no, slots) in group_by_page(&ids) {
                    let (w, steps) = (w.clone(), steps.clone());
                    jobs.push(
                        async move {
                            let table = &w.pages.table;
                            let page = heap_page(table, page_no, &w.pages.query, &steps).await?;
                            // A sparse index names pages: every row of the page is a candidate.
                            let slots = (!w.sparse).then_some(slots.as_slice());
                            let rows = decode_rows(table, page_no, &page, &w.read_columns, slots)?;
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
            Done::Read => {}
        }
    }
    Ok(())
}
