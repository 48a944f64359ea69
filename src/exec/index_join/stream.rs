//! The work of one partition of an index nested-loop join.
//!
//! ```text
//!   outer batches ──> per distinct key: a probe task
//!        probe: B+tree descent (one page read at a time) ──> row ids
//!               ──> the heap pages holding them, read concurrently
//!               ──> rows: key check (sparse index), inner predicate ──> output rows
//!   output rows collect and go out in batches; outer batches keep being pulled while
//!   probes run, so in a chain the next join starts on early rows while this one works
//! ```
//!
//! Every probe of every outer batch lives in one `FuturesUnordered`: the probe whose read
//! completes first runs its next step first. Outer batches are pulled only while fewer than
//! `max_probes` probes are pending (backpressure), and reads in flight are bounded by the
//! query's budget.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::filter::batch_filter;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use super::exec::InnerSide;
use super::output::{OutputSpec, compact_views};
use crate::exec::context::QueryIo;
use crate::exec::metrics::NodeMetrics;
use crate::exec::probe::{StepMetrics, decode_rows, group_by_page, heap_page, lookup};
use crate::storage::KeyEncoder;
use crate::storage::btree::KeyRange;

/// What a partition of the join needs.
pub struct JoinWork {
    pub outer: SendableRecordBatchStream,
    pub outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub inner: Arc<InnerSide>,
    pub output: OutputSpec,
    pub query: Arc<QueryIo>,
    pub node: NodeMetrics,
    pub max_probes: usize,
    pub flush_rows: usize,
}

type ProbeResult = Result<Option<RecordBatch>>;

/// Rows of the inner table whose key is `key` (a full key or a key prefix), after the inner
/// predicate, projected to the inner output columns.
async fn probe(
    inner: Arc<InnerSide>,
    key: Vec<u8>,
    query: Arc<QueryIo>,
    steps: StepMetrics,
) -> Result<RecordBatch> {
    let table = &inner.table;
    let ids = lookup(
        table,
        inner.index,
        KeyRange::prefix(key.clone()),
        &query,
        &steps,
    )
    .await?;
    let pages = group_by_page(&ids);
    let inner_ref = &inner;
    let mut fetches: FuturesUnordered<_> = pages
        .into_iter()
        .map(|(page_no, slots)| {
            let (query, steps, inner) = (query.clone(), steps.clone(), inner_ref);
            async move {
                let page = heap_page(table, page_no, &query, &steps).await?;
                let slots = (!inner.sparse).then_some(slots.as_slice());
                decode_rows(table, page_no, &page, &inner.decode_columns, slots)
            }
        })
        .collect();
    let mut parts = Vec::new();
    while let Some(rows) = fetches.next().await {
        let mut rows = rows?;
        if inner.sparse {
            // A sparse index names pages: keep the rows whose key starts with the probe key.
            let key_cols: Vec<ArrayRef> = inner
                .key_positions
                .iter()
                .map(|&i| rows.column(i).clone())
                .collect();
            let run = key_run(&inner.encoder, &key_cols, &key)?;
            rows = rows.slice(run.start, run.len());
        }
        if let Some(pred) = &inner.predicate {
            rows = batch_filter(&rows.project(&inner.read_positions)?, pred)?;
        } else {
            rows = rows.project(&inner.read_positions)?;
        }
        let rows = match &inner.output {
            Some(cols) => rows.project(cols)?,
            None => rows,
        };
        parts.push(rows);
    }
    Ok(concat_batches(&inner.output_schema, &parts)?)
}

/// The rows of a clustered heap page whose key starts with `prefix`.
///
/// The loader writes a clustered table's rows in clustering key order, so those rows are one
/// run; two binary searches find it with a few key encodings instead of one per row.
fn key_run(
    encoder: &KeyEncoder,
    key_cols: &[ArrayRef],
    prefix: &[u8],
) -> Result<std::ops::Range<usize>> {
    use std::cmp::Ordering;
    let rows = key_cols.first().map_or(0, |c| c.len());
    let key = std::cell::RefCell::new(Vec::with_capacity(prefix.len()));
    let order = |row: usize| -> Result<Ordering> {
        let mut key = key.borrow_mut();
        encoder
            .encode_row_into(key_cols, row, &mut key)
            .map_err(crate::exec::context::to_df)?;
        let common = key.len().min(prefix.len());
        Ok(match key[..common].cmp(&prefix[..common]) {
            // A key that is a proper prefix of `prefix` sorts before it.
            Ordering::Equal if key.len() < prefix.len() => Ordering::Less,
            o => o,
        })
    };
    // First row where `past(row)` holds; `past` must be false then true along the rows.
    let search = |past: &dyn Fn(Ordering) -> bool| -> Result<usize> {
        let (mut lo, mut hi) = (0, rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if past(order(mid)?) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    };
    let start = search(&|o| o != Ordering::Less)?;
    let end = search(&|o| o == Ordering::Greater)?.max(start);
    Ok(start..end)
}

/// Runs one partition of the join, sending output batches to `tx`.
pub async fn run(mut work: JoinWork, tx: Sender<Result<RecordBatch>>) -> Result<()> {
    let steps = StepMetrics::new(work.node.io.clone(), &work.query);
    let mut probes: FuturesUnordered<BoxFuture<'static, ProbeResult>> = FuturesUnordered::new();
    let mut out: Vec<RecordBatch> = Vec::new();
    let mut out_rows = 0usize;
    let mut outer_done = false;
    let schema: SchemaRef = work.output.schema.clone();
    loop {
        let want_outer = !outer_done && probes.len() < work.max_probes;
        let flush_now = out_rows >= work.flush_rows || (probes.is_empty() && out_rows > 0);
        if flush_now {
            let batch = compact_views(concat_batches(&schema, &out)?)?;
            out.clear();
            out_rows = 0;
            if tx.send(Ok(batch)).await.is_err() {
                return Ok(()); // consumer gone: stop
            }
        }
        if probes.is_empty() && outer_done {
            break;
        }
        tokio::select! {
            biased;
            Some(result) = probes.next(), if !probes.is_empty() => {
                if let Some(batch) = result? {
                    out_rows += batch.num_rows();
                    if batch.num_rows() > 0 {
                        out.push(batch);
                    }
                }
            }
            next = work.outer.next(), if want_outer => match next {
                None => outer_done = true,
                Some(batch) => {
                    let batch = Arc::new(batch?);
                    let (keyed, unmatched) = group_keys(&batch, &work.outer_keys, &work.inner.encoder)?;
                    if let Some(rows) = work.output.unmatched(&batch, &unmatched)? {
                        out_rows += rows.num_rows();
                        out.push(rows);
                    }
                    work.node.add_probes(keyed.len());
                    for (key, rows) in keyed {
                        let (inner, query, steps, spec, batch) = (
                            work.inner.clone(),
                            work.query.clone(),
                            steps.clone(),
                            work.output.clone(),
                            batch.clone(),
                        );
                        probes.push(
                            async move {
                                let found = probe(inner, key, query, steps).await?;
                                Ok(Some(spec.build(&batch, &rows, &found)?))
                            }
                            .boxed(),
                        );
                    }
                }
            },
        }
    }
    Ok(())
}

/// Outer rows by encoded join key, in first-seen key order.
type KeyedRows = Vec<(Vec<u8>, Vec<u32>)>;

/// Groups the rows of `batch` by encoded join key; rows with a null key part cannot match
/// (returned second).
fn group_keys(
    batch: &RecordBatch,
    keys: &[Arc<dyn PhysicalExpr>],
    encoder: &KeyEncoder,
) -> Result<(KeyedRows, Vec<u32>)> {
    let arrays = keys
        .iter()
        .zip(encoder.types())
        .map(|(k, t)| {
            let a = k.evaluate(batch)?.into_array(batch.num_rows())?;
            Ok(if a.data_type() == t {
                a
            } else {
                arrow::compute::cast(&a, t)?
            })
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let encoded = encoder
        .encode_rows(&arrays)
        .map_err(crate::exec::context::to_df)?;
    let mut groups: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
    let mut order = Vec::new();
    let mut unmatched = Vec::new();
    for (row, key) in encoded.into_iter().enumerate() {
        if arrays.iter().any(|a| a.is_null(row)) {
            unmatched.push(row as u32);
            continue;
        }
        match groups.get_mut(&key) {
            Some(rows) => rows.push(row as u32),
            None => {
                order.push(key.clone());
                groups.insert(key, vec![row as u32]);
            }
        }
    }
    let keyed = order
        .into_iter()
        .map(|k| {
            let rows = groups.remove(&k).unwrap_or_default();
            (k, rows)
        })
        .collect();
    Ok((keyed, unmatched))
}
