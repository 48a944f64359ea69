//! The rows of a table's segments in clustering-key order: the input of a compaction.
//!
//! ```text
//!   segment 0: heap pages 0, 1, 2 ... ──read in order, `window` ahead──> rows (sorted) ─┐
//!   segment 1: heap pages ...         ──────────────────────────────────> rows (sorted) ─┼─> k-way
//!   ...                                                                                  │   merge
//!   segment k-1                       ──────────────────────────────────> rows (sorted) ─┘   ──> batches
//! ```
//!
//! Each segment's heap holds its rows sorted by the clustering key (the loader sorts them,
//! stably), so merging the segments, equal keys going to the earlier segment, gives the
//! rows in the order one load of all of them would have written: the loader takes them as
//! they come (`LoadOptions::presorted`) instead of sorting again. Memory: `window` pages per
//! segment plus one output batch. A table without a clustering key keeps insertion order:
//! its segments one after the other.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::interleave_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::stream::{BoxStream, StreamExt};

use super::steps::{Columns, StepCtx, decode_rows, heap_page, to_df};
use super::table_io::TableIo;
use crate::storage::key::KeyEncoder;

/// The rows of every segment of `table`, merged in clustering-key order, in batches of up to
/// `batch_rows`; each segment is read `window` pages ahead.
pub fn merged_rows(
    table: Arc<TableIo>,
    ctx: StepCtx,
    window: usize,
    batch_rows: usize,
) -> Result<SendableRecordBatchStream> {
    let schema = table.table().schema().clone();
    let columns = Columns::new(&table, (0..schema.fields().len()).collect())?;
    let sources: Vec<_> = (0..table.segments())
        .map(|part| segment_pages(&table, part, &columns, &ctx, window.max(1)))
        .collect();
    let key = &table.table().manifest().clustering_key;
    let stream: BoxStream<'static, Result<RecordBatch>> = if key.is_empty() {
        futures::stream::iter(sources).flatten().boxed()
    } else {
        let ids = key
            .iter()
            .map(|c| schema.index_of(c))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let fields: Vec<_> = ids.iter().map(|&i| schema.fields()[i].clone()).collect();
        let encoder = KeyEncoder::new(&fields).map_err(to_df)?;
        let merge = Merge {
            schema: schema.clone(),
            sources: sources.into_iter().map(Source::new).collect(),
            ids,
            encoder,
            heap: BinaryHeap::new(),
            started: false,
            batch_rows: batch_rows.max(1),
        };
        futures::stream::try_unfold(merge, |mut m| async move {
            Ok(m.next_batch().await?.map(|b| (b, m)))
        })
        .boxed()
    };
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
}

/// The decoded heap pages of segment `part`, in page order. Each read runs as a task of its
/// own: the merge polls one segment at a time, and a read waiting to be polled must not sit
/// on its admission permit (with more segments x `window` than the query's permits, the
/// reads of the segment being consumed would wait for permits nobody releases).
fn segment_pages(
    table: &Arc<TableIo>,
    part: usize,
    columns: &Columns,
    ctx: &StepCtx,
    window: usize,
) -> BoxStream<'static, Result<RecordBatch>> {
    let base = table.heap_base(part);
    let pages = table.segment(part).map_or(0, |t| t.manifest().heap_pages);
    let (table, columns, ctx) = (table.clone(), columns.clone(), ctx.clone());
    futures::stream::iter(base..base + pages)
        .map(move |page_no| {
            let (table, columns, ctx) = (table.clone(), columns.clone(), ctx.clone());
            // Aborted when dropped (a cancelled compaction), so no read outlives the merge.
            let task = AbortOnDrop(tokio::spawn(async move {
                let held = heap_page(&table, page_no, &ctx).await?;
                decode_rows(&table, page_no, &held.page, &columns, None)
            }));
            async move {
                let mut task = task;
                match (&mut task.0).await {
                    Ok(rows) => rows,
                    Err(e) => Err(DataFusionError::Execution(format!(
                        "a page read of the merge stopped: {e}"
                    ))),
                }
            }
        })
        .buffered(window)
        .boxed()
}

/// A spawned task that is aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One segment's rows being merged.
struct Source {
    pages: BoxStream<'static, Result<RecordBatch>>,
    batch: Option<RecordBatch>,
    keys: Vec<Vec<u8>>,
    next: usize,
    /// Index of `batch` among the batches the pending output rows point into.
    slot: usize,
}

impl Source {
    fn new(pages: BoxStream<'static, Result<RecordBatch>>) -> Self {
        Self {
            pages,
            batch: None,
            keys: Vec::new(),
            next: 0,
            slot: 0,
        }
    }
}

struct Merge {
    schema: SchemaRef,
    sources: Vec<Source>,
    ids: Vec<usize>,
    encoder: KeyEncoder,
    /// The next row of each source with one left: (its key, source); ties go to the
    /// earlier source, which keeps the merge stable.
    heap: BinaryHeap<Reverse<(Vec<u8>, usize)>>,
    started: bool,
    batch_rows: usize,
}

impl Merge {
    /// Moves source `s` to its next non-empty page; false when it has none left.
    async fn load(&mut self, s: usize, batches: &mut Vec<RecordBatch>) -> Result<bool> {
        let source = &mut self.sources[s];
        while let Some(batch) = source.pages.next().await {
            let batch = batch?;
            if batch.num_rows() == 0 {
                continue;
            }
            let cols: Vec<ArrayRef> = self.ids.iter().map(|&i| batch.column(i).clone()).collect();
            source.keys = self.encoder.encode_rows(&cols).map_err(to_df)?;
            source.next = 0;
            source.slot = batches.len();
            batches.push(batch.clone());
            source.batch = Some(batch);
            return Ok(true);
        }
        source.batch = None;
        Ok(false)
    }

    fn push_next(&mut self, s: usize) {
        let source = &mut self.sources[s];
        let key = std::mem::take(&mut source.keys[source.next]);
        self.heap.push(Reverse((key, s)));
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        // The batches output rows point into: the current page of each source first.
        let mut batches: Vec<RecordBatch> = Vec::new();
        if !self.started {
            self.started = true;
            for s in 0..self.sources.len() {
                if self.load(s, &mut batches).await? {
                    self.push_next(s);
                }
            }
        } else {
            for source in &mut self.sources {
                if let Some(b) = &source.batch {
                    source.slot = batches.len();
                    batches.push(b.clone());
                }
            }
        }
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(self.batch_rows);
        while picks.len() < self.batch_rows {
            let Some(Reverse((_, s))) = self.heap.pop() else {
                break;
            };
            let source = &mut self.sources[s];
            picks.push((source.slot, source.next));
            source.next += 1;
            if source.next < source.keys.len() || self.load(s, &mut batches).await? {
                self.push_next(s);
            }
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        let out = interleave_record_batch(&refs, &picks)?;
        debug_assert_eq!(out.schema().fields(), self.schema.fields());
        Ok(Some(out))
    }
}
