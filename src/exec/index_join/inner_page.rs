//! A heap page as the join's probes see it: its decoded rows, which of them pass the inner
//! side's predicate, and which of them a probe's key names.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::common::{DataFusionError, Result};

use super::exec::InnerSide;
use crate::access::to_df;
use crate::storage::KeyEncoder;
use crate::storage::key::int_key_value;

/// A decoded heap page as probes use it: the inner side's output columns, and which rows pass
/// the inner side's own predicate (evaluated once per page, not per probe).
pub(super) struct PageView {
    pub(super) rows: Arc<RecordBatch>,
    passes: Option<arrow::array::BooleanArray>,
}

impl PageView {
    /// The rows among `candidates` that pass the inner predicate.
    pub(super) fn passing(&self, mut candidates: Vec<u32>) -> Vec<u32> {
        if let Some(mask) = &self.passes {
            // In place: no second vector per probe and page.
            candidates.retain(|&r| mask.value(r as usize));
        }
        candidates
    }
}

impl InnerSide {
    /// The probes' view of `decoded`, the rows of one heap page (columns `decode_columns`).
    pub(super) fn page_view(&self, decoded: &RecordBatch) -> Result<PageView> {
        // The scan's columns come first among those decoded: all of them, mostly. A view is
        // made for every page decoded, so it makes no schema, and a batch of the scan's
        // columns only where a predicate runs on them or they are the output.
        let rows = match &self.output {
            // The projected schema is the node's, built once (not a new one per page).
            Some(cols) => RecordBatch::try_new_with_options(
                self.output_schema.clone(),
                cols.iter().map(|&c| decoded.column(c).clone()).collect(),
                &RecordBatchOptions::new().with_row_count(Some(decoded.num_rows())),
            )?,
            None => self.scan_columns(decoded)?,
        };
        let passes = match &self.predicate {
            Some(pred) => {
                let projected;
                let scan = match &self.output {
                    None => &rows,
                    Some(_) => {
                        projected = self.scan_columns(decoded)?;
                        &projected
                    }
                };
                let value = pred.evaluate(scan)?.into_array(scan.num_rows())?;
                let mask = value
                    .as_any()
                    .downcast_ref::<arrow::array::BooleanArray>()
                    .ok_or_else(|| {
                        DataFusionError::Internal("inner predicate is not boolean".into())
                    })?;
                Some(match arrow::array::Array::null_count(mask) {
                    0 => mask.clone(),
                    _ => arrow::compute::prep_null_mask_filter(mask),
                })
            }
            None => None,
        };
        Ok(PageView {
            rows: Arc::new(rows),
            passes,
        })
    }

    /// The scan's columns of `decoded`, as a batch of the scan's schema.
    fn scan_columns(&self, decoded: &RecordBatch) -> Result<RecordBatch> {
        if self.read_width == decoded.num_columns() {
            return Ok(decoded.clone());
        }
        Ok(RecordBatch::try_new_with_options(
            self.read_schema.clone(),
            decoded.columns()[..self.read_width].to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(decoded.num_rows())),
        )?)
    }

    /// A probe's rows of heap page `page_no` (decoded as `decoded`, seen as `page`): the
    /// slots the index named (the rows of the key's run, for a sparse index) that pass the
    /// inner predicate.
    pub(super) fn probe_rows(
        &self,
        decoded: &RecordBatch,
        page: &PageView,
        page_no: u64,
        slots: &[u16],
        key: &[u8],
    ) -> Result<Vec<u32>> {
        let candidates: Vec<u32> = if self.sparse {
            // A sparse index names pages: the rows whose key starts with the probe key.
            let run = match self.key_positions.as_slice() {
                // One key column (most keys): borrowed, no vector per probe and page.
                &[i] => key_run(&self.encoder, std::slice::from_ref(decoded.column(i)), key)?,
                positions => {
                    let key_cols: Vec<ArrayRef> = positions
                        .iter()
                        .map(|&i| decoded.column(i).clone())
                        .collect();
                    key_run(&self.encoder, &key_cols, key)?
                }
            };
            (run.start as u32..run.end as u32).collect()
        } else {
            let n = decoded.num_rows();
            if let Some(&bad) = slots.iter().find(|&&s| s as usize >= n) {
                return Err(to_df(crate::storage::StorageError::corrupted(
                    self.table.heap_file(page_no),
                    Some(page_no),
                    format!("index points at slot {bad}, the page has {n} rows"),
                )));
            }
            slots.iter().map(|&s| s as u32).collect()
        };
        Ok(page.passing(candidates))
    }
}

/// The rows of a clustered heap page whose key starts with `prefix`.
///
/// The loader writes a clustered table's rows in clustering key order, so those rows are one
/// run; two binary searches find it with a few key encodings instead of one per row.
pub(super) fn key_run(
    encoder: &KeyEncoder,
    key_cols: &[ArrayRef],
    prefix: &[u8],
) -> Result<std::ops::Range<usize>> {
    use std::cmp::Ordering;
    if let Some(run) = int_key_run(key_cols, prefix) {
        return Ok(run);
    }
    let rows = key_cols.first().map_or(0, |c| c.len());
    let key = std::cell::RefCell::new(Vec::with_capacity(prefix.len()));
    let order = |row: usize| -> Result<Ordering> {
        let mut key = key.borrow_mut();
        encoder
            .encode_row_into(key_cols, row, &mut key)
            .map_err(to_df)?;
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

/// [`key_run`] over one integer key column without nulls (most join keys): the probe's value
/// searched among the column's values, with no row encoded (profiled: encoding rows for the
/// comparisons was a seventh of a hot in-order run). None where the key is of another kind.
fn int_key_run(key_cols: &[ArrayRef], prefix: &[u8]) -> Option<std::ops::Range<usize>> {
    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Int32Type, Int64Type};
    let [column] = key_cols else {
        return None;
    };
    if column.null_count() > 0 {
        return None;
    }
    let wanted = int_key_value(column.data_type(), prefix)?;
    fn run<T: Copy + Into<i64>>(values: &[T], wanted: i64) -> std::ops::Range<usize> {
        let start = values.partition_point(|&v| v.into() < wanted);
        let len = values[start..].partition_point(|&v| v.into() <= wanted);
        start..start + len
    }
    match column.data_type() {
        DataType::Int64 => Some(run(column.as_primitive::<Int64Type>().values(), wanted)),
        DataType::Int32 => Some(run(column.as_primitive::<Int32Type>().values(), wanted)),
        _ => None,
    }
}
