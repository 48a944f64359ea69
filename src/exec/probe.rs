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
use crate::storage::btree::{KeyRange, RangeCursor, RowId};

/// Counters a step reports to: the plan node's and the query's.
#[derive(Debug, Clone)]
pub struct StepMetrics(pub [Arc<IoMetrics>; 2]);

impl StepMetrics {
    /// Counters of `node` within `query`.
    pub fn new(node: Arc<IoMetrics>, query: &QueryIo) -> Self {
        Self([node, query.metrics.clone()])
    }
}

async fn with_permit<T>(
    query: &QueryIo,
    read: impl std::future::Future<Output = crate::storage::Result<T>>,
) -> Result<T> {
    let _permit = query
        .permits
        .acquire()
        .await
        .map_err(|e| datafusion::common::DataFusionError::Execution(e.to_string()))?;
    read.await.map_err(to_df)
}

/// Values (row ids, or heap page row ids for a sparse index) of the keys in `range` of the
/// `index`-th index of `table`.
pub async fn lookup(
    table: &TableIo,
    index: usize,
    range: KeyRange,
    query: &QueryIo,
    metrics: &StepMetrics,
) -> Result<Vec<u64>> {
    let meta = &table.table().indexes()[index].meta;
    let file = table.table().indexes()[index].segment.file_of(0).to_path_buf();
    let mut cursor = RangeCursor::new(&meta.tree, range, meta.is_sparse());
    let mut out = Vec::new();
    while let Some(page_no) = cursor.next_page() {
        let page = with_permit(query, table.index_page(index, page_no, &metrics.0)).await?;
        cursor.feed(&page, &file, &mut out).map_err(to_df)?;
    }
    Ok(out)
}

/// Heap page `page_no` of `table`.
pub async fn heap_page(
    table: &TableIo,
    page_no: u64,
    query: &QueryIo,
    metrics: &StepMetrics,
) -> Result<PageBuf> {
    with_permit(query, table.heap_page(page_no, &metrics.0)).await
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
                    format!("index points at slot {bad}, the page has {} rows", batch.num_rows()),
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
