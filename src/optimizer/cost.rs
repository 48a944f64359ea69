//! Page-read estimates from index statistics: exact entry counts in a key range (two B+tree
//! descents each) and average entries per key.

use crate::exec::ScanEstimate;
use crate::io::TableIo;
use crate::storage::btree::KeyRange;
use crate::storage::{IndexHandle, Table};

/// What a full scan of `table` reads, in pages: the Parquet copy's size when there is one
/// (compressed, and a scan reads only its columns, so this is an upper bound), else the heap.
pub fn scan_pages(table: &Table) -> f64 {
    let m = table.manifest();
    let columnar = table
        .columnar_bytes()
        .map(|bytes| bytes as f64 / m.page_size as f64);
    columnar.unwrap_or(m.heap_pages as f64).max(1.0)
}

/// At most this many ranges are counted exactly; the rest are extrapolated.
const COUNTED_RANGES: usize = 32;

/// Estimated rows and page reads of an index scan over `ranges`, counting entries now (see
/// [`TableIo::count_entries_now`]).
pub fn index_scan_estimate(io: &TableIo, index_no: usize, ranges: &[KeyRange]) -> ScanEstimate {
    let table = io.table();
    let Some(index) = table.indexes().get(index_no) else {
        return ScanEstimate {
            rows: usize::MAX,
            pages: usize::MAX,
        };
    };
    let entries = counted_ranges(ranges)
        .iter()
        // A failed count (damaged index) makes the estimate large: the scan is kept.
        .map(|r| {
            io.count_entries_now(index_no, r)
                .unwrap_or(index.meta.tree.entries)
        })
        .sum();
    estimate_from_counts(table, index_no, ranges.len(), entries)
}

/// The ranges whose entries are counted exactly (the others are extrapolated from them).
pub fn counted_ranges(ranges: &[KeyRange]) -> &[KeyRange] {
    &ranges[..ranges.len().min(COUNTED_RANGES)]
}

/// The estimate of an index scan over `ranges` ranges of index `index_no` whose
/// [`counted_ranges`] hold `entries` entries.
pub fn estimate_from_counts(
    table: &Table,
    index_no: usize,
    ranges: usize,
    entries: u64,
) -> ScanEstimate {
    let Some(index) = table.indexes().get(index_no) else {
        return ScanEstimate {
            rows: usize::MAX,
            pages: usize::MAX,
        };
    };
    let m = table.manifest();
    let rows_per_page = m.row_count as f64 / m.heap_pages.max(1) as f64;
    let counted = ranges.min(COUNTED_RANGES);
    let entries = entries as f64 * ranges as f64 / counted.max(1) as f64;
    let descents = ranges * index.meta.tree.height as usize;
    if index.meta.is_sparse() {
        // Entries are pages; one more page per range where the range starts mid-page.
        let pages = entries + ranges as f64;
        ScanEstimate {
            rows: (pages * rows_per_page) as usize,
            pages: pages as usize + descents,
        }
    } else {
        let pages = entries.min(m.heap_pages as f64);
        ScanEstimate {
            rows: entries as usize,
            pages: pages as usize + descents,
        }
    }
}

/// Estimated rows found and page reads per probe of `index` with a key of `key_len` columns.
pub fn probe_estimate(table: &Table, index: &IndexHandle, key_len: usize) -> (f64, f64) {
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
    } else {
        // A leaf, then one heap page per row (rows of a key are scattered).
        (rows, 1.0 + rows)
    }
}
