//! Page-read estimates from index statistics: entry counts in a key range (two B+tree
//! descents each, stopping above the leaves) and average entries per key.

use std::sync::Arc;

use crate::access::plan_time::{PlanCounts, count_ranges_now};
pub use crate::access::plan_time::{ScanEstimate, counted_ranges, estimate_from_counts};
use crate::access::{QueryIo, TableIo};
use crate::io::IoMetrics;
use crate::storage::btree::KeyRange;
use crate::storage::{IndexHandle, Table};

/// What a full scan of `table` reads, in pages: the Parquet copy's size when there is one
/// (compressed, and a scan reads only its columns, so this is an upper bound), else the heap.
pub fn scan_pages(io: &TableIo) -> f64 {
    let pages: f64 = (0..io.segments())
        .filter_map(|part| io.segment(part))
        .map(|table| {
            let m = table.manifest();
            let columnar = table
                .columnar_bytes()
                .map(|bytes| bytes as f64 / m.page_size as f64);
            columnar.unwrap_or(m.heap_pages as f64)
        })
        .sum();
    pages.max(1.0)
}

/// Estimated rows and page reads of an index scan over `ranges` of the `index_no`-th index,
/// from range counts (`covering`: the scan reads the index's leaves only): made while the
/// table's scan was planned (`counted`), else read now
/// through the query's engine, blocking (see
/// [`crate::access::plan_time::count_ranges_now`]), counted in `node_io`.
pub fn index_scan_estimate(
    io: &TableIo,
    index_no: usize,
    ranges: &[KeyRange],
    counted: &PlanCounts,
    query: &Arc<QueryIo>,
    node_io: Arc<IoMetrics>,
    covering: bool,
) -> ScanEstimate {
    let table = io.table();
    let Some(index) = table.indexes().get(index_no) else {
        return ScanEstimate {
            rows: usize::MAX,
            pages: usize::MAX,
        };
    };
    // A failed count (damaged index) makes the estimate large: the scan is kept, and reports
    // the damage itself if it reads there.
    let entries = match counted.get(index_no, ranges) {
        Some(entries) => entries,
        None => count_ranges_now(io, index_no, ranges, query, node_io).ok(),
    };
    let entries = entries.unwrap_or(index.meta.tree.entries);
    estimate_from_counts(io, index_no, ranges.len(), entries, covering)
}

/// Estimated rows found and page reads per probe of `index` with a key of `key_len` columns
/// (`covering`: probes read the index's leaves only).
pub fn probe_estimate(
    table: &Table,
    index: &IndexHandle,
    key_len: usize,
    covering: bool,
) -> (f64, f64) {
    let m = table.manifest();
    let tree = &index.meta.tree;
    let rows_per_page = m.row_count as f64 / m.heap_pages.max(1) as f64;
    let full_key = key_len == index.meta.columns.len();
    let rows = if index.meta.is_sparse() && full_key {
        // The clustering key is the table's primary key.
        1.0
    } else if !index.meta.is_sparse() && full_key {
        tree.entries as f64 / tree.distinct_keys.max(1) as f64
    } else if key_len == 1 && index.meta.distinct_first > 0 {
        m.row_count as f64 / index.meta.distinct_first as f64
    } else {
        1.0
    };
    if index.meta.is_sparse() {
        // Clustered: the rows of one key are next to each other.
        (rows, 1.0 + (rows / rows_per_page).ceil())
    } else if covering {
        // A leaf, and now and then the next one: a key's entries are next to each other.
        let per_leaf = tree.entries as f64 / tree.leaf_pages.max(1) as f64;
        (rows, 1.0 + rows / per_leaf.max(1.0))
    } else {
        // A leaf, then one heap page per row (rows of a key are scattered).
        (rows, 1.0 + rows)
    }
}
