//! The asynchronous steps every ooode node is made of: walk a B+tree, fetch a heap page.
//!
//! Each step reads one page at a time and holds one permit of the query's budget while its
//! read is in flight, so the number of reads in flight for a query never exceeds
//! `ooode.max_outstanding_io`, however many steps run concurrently. A step that finds its page
//! in the buffer pool costs no read.

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use datafusion::common::Result;

use super::context::{QueryIo, to_df};
use crate::io::{IoMetrics, PageBuf, TableIo};
use crate::storage::btree::{CountCursor, KeyRange, RangeCursor, RowId};

/// Counters a step reports to (the plan node's and the query's), and how its reads wait.
#[derive(Debug, Clone)]
pub struct StepMetrics {
    /// The node's counters, then the query's.
    pub counters: [Arc<IoMetrics>; 2],
    /// Whether the steps' caller does nothing but wait for them, so that a permit a step holds
    /// goes back as soon as its read completes: its reads then need no task of their own (see
    /// [`with_permit`]).
    always_polled: bool,
}

impl StepMetrics {
    /// Counters of `node` within `query`, for steps of an operator.
    pub fn new(node: Arc<IoMetrics>, query: &QueryIo) -> Self {
        query.register_node(&node);
        Self {
            counters: [node, query.metrics.clone()],
            always_polled: false,
        }
    }

    /// The same, for steps whose caller does nothing but wait for them (a read-ahead task).
    pub fn always_polled(self) -> Self {
        Self {
            always_polled: true,
            ..self
        }
    }
}

/// Runs one page read under a permit of the query's budget, as a task of its own.
///
/// The task, not the step that asked for the page, waits for the permit, reads and gives the
/// permit back. Permits are handed out in FIFO order, so a permit granted to a step that is
/// not being polled (its operator waits for room in its output channel) would be held
/// hostage while the operators downstream, which must run to make that room, wait for it.
/// A dropped step aborts its task; an aborted read is finished and recycled by the engine.
/// Steps whose caller only ever waits for them ([`StepMetrics::always_polled`]) cannot hold a
/// permit hostage: they wait for it and read themselves, a task and a wake-up less per read.
async fn with_permit<F>(query: &Arc<QueryIo>, metrics: &StepMetrics, read: F) -> Result<PageBuf>
where
    F: std::future::Future<Output = crate::storage::Result<PageBuf>> + Send + 'static,
{
    let (query, node) = (query.clone(), metrics.counters[0].clone());
    if metrics.always_polled {
        let _permit = query.permits.acquire().await.map_err(|e| {
            to_df(crate::storage::StorageError::Input(format!(
                "read budget closed: {e}"
            )))
        })?;
        query.note_read(&node);
        return read.await.map_err(to_df);
    }
    let task = AbortOnDrop(tokio::spawn(async move {
        let _permit =
            query.permits.clone().acquire_owned().await.map_err(|e| {
                crate::storage::StorageError::Input(format!("read budget closed: {e}"))
            })?;
        query.note_read(&node);
        read.await
    }));
    task.await
        .map_err(|e| {
            datafusion::common::DataFusionError::Execution(format!("page read task: {e}"))
        })?
        .map_err(to_df)
}

/// A task handle that aborts the task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Values (row ids, or heap page row ids for a sparse index) of the keys in `range` of the
/// `index`-th index of `table`.
pub async fn lookup(
    table: &Arc<TableIo>,
    index: usize,
    range: KeyRange,
    query: &Arc<QueryIo>,
    metrics: &StepMetrics,
) -> Result<Vec<u64>> {
    let meta = &table.table().indexes()[index].meta;
    let file = table.table().indexes()[index]
        .segment
        .file_of(0)
        .to_path_buf();
    // TableIo verifies every page once, when it is read; the walk need not again.
    let mut cursor = RangeCursor::new(&meta.tree, range, meta.is_sparse()).with_verified_pages();
    let mut out = Vec::new();
    while let Some(page_no) = cursor.next_page() {
        let page = index_page(table, index, page_no, query, metrics).await?;
        cursor.feed(&page, &file, &mut out).map_err(to_df)?;
    }
    Ok(out)
}

/// Node `page_no` of the `index`-th index of `table`. Cached nodes (the upper B+tree levels,
/// mostly) cost neither a permit nor a task.
async fn index_page(
    table: &Arc<TableIo>,
    index: usize,
    page_no: u64,
    query: &Arc<QueryIo>,
    metrics: &StepMetrics,
) -> Result<PageBuf> {
    if let Some(page) = table.cached_index_page(index, page_no, &metrics.counters) {
        return Ok(page);
    }
    let (t, m) = (table.clone(), metrics.clone());
    with_permit(query, metrics, async move {
        t.index_page(index, page_no, &m.counters).await
    })
    .await
}

/// Entries of the `index`-th index of `table` in `range`: two descents, reading the pages they
/// need as [`lookup`] does (the inner nodes are usually pinned, so a leaf or two).
pub async fn count(
    table: &Arc<TableIo>,
    index: usize,
    range: &KeyRange,
    query: &Arc<QueryIo>,
    metrics: &StepMetrics,
) -> Result<u64> {
    let handle = &table.table().indexes()[index];
    let file = handle.segment.file_of(0).to_path_buf();
    let mut cursor = CountCursor::new(&handle.meta.tree, range);
    while let Some(page_no) = cursor.next_page() {
        let page = index_page(table, index, page_no, query, metrics).await?;
        cursor.feed(&page, &file).map_err(to_df)?;
    }
    Ok(cursor.count().unwrap_or(0))
}

/// Heap page `page_no` of `table`.
pub async fn heap_page(
    table: &Arc<TableIo>,
    page_no: u64,
    query: &Arc<QueryIo>,
    metrics: &StepMetrics,
) -> Result<PageBuf> {
    if let Some(page) = table.cached_heap_page(page_no, &metrics.counters) {
        return Ok(page);
    }
    let (t, m) = (table.clone(), metrics.clone());
    with_permit(query, metrics, async move {
        t.heap_page(page_no, &m.counters).await
    })
    .await
}

/// Decodes columns `projection` of a heap page, keeping the rows at `slots` (all when None).
pub fn decode_rows(
    table: &TableIo,
    page_no: u64,
    page: &PageBuf,
    projection: &[usize],
    slots: Option<&[u16]>,
) -> Result<RecordBatch> {
    // TableIo verified the page when it arrived.
    let file = table.heap_file(page_no);
    let batch = table
        .table()
        .codec()
        .decode(page, Some(projection), &file, page_no)
        .map_err(to_df)?;
    match slots {
        None => Ok(batch),
        Some(slots) => {
            if let Some(&bad) = slots.iter().find(|&&s| s as usize >= batch.num_rows()) {
                return Err(to_df(crate::storage::StorageError::corrupted(
                    file,
                    Some(page_no),
                    format!(
                        "index points at slot {bad}, the page has {} rows",
                        batch.num_rows()
                    ),
                )));
            }
            let idx = UInt32Array::from_iter_values(slots.iter().map(|&s| s as u32));
            Ok(take_record_batch(&batch, &idx)?)
        }
    }
}

/// Groups row ids by heap page, keeping pages in first-seen order.
pub fn group_by_page(row_ids: &[u64]) -> Vec<(u64, Vec<u16>)> {
    let mut groups: Vec<(u64, Vec<u16>)> = Vec::new();
    let mut index: std::collections::HashMap<u64, usize> = Default::default();
    for &id in row_ids {
        let r = RowId(id);
        match index.get(&r.page()) {
            Some(&i) => groups[i].1.push(r.slot()),
            None => {
                index.insert(r.page(), groups.len());
                groups.push((r.page(), vec![r.slot()]));
            }
        }
    }
    groups
}
