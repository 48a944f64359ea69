//! A heap page as the join's probes see it: its rows (decoded, or read where they lie in the
//! page), which of them pass the inner side's predicate, and which of them a probe's key
//! names.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Schema};
use datafusion::common::{DataFusionError, Result};

use super::exec::InnerSide;
use crate::access::steps::decode_page_shared;
use crate::access::to_df;
use crate::io::PageBuf;
use crate::storage::KeyEncoder;
use crate::storage::heap::{FixedLayout, readable_in_place};
use crate::storage::key::int_key_value;

/// The table columns probes read where they lie in each heap page, undecoded (see
/// `storage::heap::in_place`): the inner side's output columns, then, for a sparse index,
/// the join key's column, searched for each probe's run of rows.
#[derive(Debug, Clone)]
pub struct InPlaceColumns {
    columns: Vec<usize>,
    outputs: usize,
    /// The key column's type, for a sparse index.
    key_type: Option<DataType>,
}

impl InPlaceColumns {
    /// The columns for an inner side reading `read_columns` of `schema`, projected to
    /// `output` (positions among them); None where a page's rows must be decoded: a predicate
    /// runs on them, an output column is not of fixed width, or the sparse index's key
    /// (`sparse_key`, table columns) is not one non-nullable 32- or 64-bit integer column.
    pub(super) fn plan(
        schema: &Schema,
        read_columns: &[usize],
        output: Option<&[usize]>,
        has_predicate: bool,
        sparse_key: Option<&[usize]>,
    ) -> Option<Self> {
        if has_predicate {
            return None;
        }
        let mut columns: Vec<usize> = match output {
            Some(cols) => (cols.iter())
                .map(|&c| read_columns.get(c).copied())
                .collect::<Option<_>>()?,
            None => read_columns.to_vec(),
        };
        let fields = schema.fields();
        let fixed = |c: usize| {
            fields
                .get(c)
                .is_some_and(|f| readable_in_place(f.data_type()))
        };
        if !columns.iter().all(|&c| fixed(c)) {
            return None;
        }
        let outputs = columns.len();
        let key_type = match sparse_key {
            None => None,
            Some(&[k]) => {
                let field = fields.get(k)?;
                let int = matches!(field.data_type(), DataType::Int64 | DataType::Int32);
                if field.is_nullable() || !int {
                    return None;
                }
                columns.push(k);
                Some(field.data_type().clone())
            }
            Some(_) => return None,
        };
        Some(Self {
            columns,
            outputs,
            key_type,
        })
    }
}

/// A heap page whose rows probes take where they lie: the page, and where its output
/// columns (the first ones of the layout) and key column are.
pub(super) struct InPlacePage {
    page: PageBuf,
    layout: FixedLayout,
}

impl InPlacePage {
    /// Bytes of output column `column` of row `row` (a row of the page).
    pub(super) fn value(&self, column: usize, row: usize) -> &[u8] {
        self.layout.column(column).value(&self.page, row)
    }

    /// Whether row `row` of output column `column` is valid.
    pub(super) fn is_valid(&self, column: usize, row: usize) -> bool {
        self.layout.column(column).is_valid(&self.page, row)
    }

    /// Whether output column `column` has nulls in this page.
    pub(super) fn has_nulls(&self, column: usize) -> bool {
        self.layout.column(column).has_nulls()
    }

    /// Bytes a value of output column `column` takes.
    pub(super) fn width(&self, column: usize) -> usize {
        self.layout.column(column).width()
    }

    /// The rows whose key is the probe's `key` (a sparse index's pages are in key order).
    fn key_run(&self, columns: &InPlaceColumns, key: &[u8]) -> Result<Range<usize>> {
        let wanted = (columns.key_type.as_ref()).and_then(|t| int_key_value(t, key));
        let Some(wanted) = wanted else {
            return Err(DataFusionError::Internal(
                "a probe's key is not one integer, though its page is read in place".into(),
            ));
        };
        let column = self.layout.column(columns.outputs);
        // The plan admits 32- and 64-bit integer keys only, whose values are never None.
        let value = |row: usize| column.int_value(&self.page, row).unwrap_or(i64::MAX);
        let first = |below: &dyn Fn(i64) -> bool| {
            let (mut lo, mut hi) = (0, self.layout.rows());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match below(value(mid)) {
                    true => lo = mid + 1,
                    false => hi = mid,
                }
            }
            lo
        };
        let start = first(&|v| v < wanted);
        let end = first(&|v| v <= wanted).max(start);
        Ok(start..end)
    }
}

/// A heap page's rows as read for the probes waiting for it.
pub(super) enum PageRows {
    /// Decoded into the columns the inner side decodes.
    Decoded(RecordBatch),
    /// Read where they lie.
    InPlace(InPlacePage),
}

/// The inner rows a probe's output pairs take, until the output is built.
#[derive(Clone)]
pub(super) enum InnerRows {
    /// The inner side's output columns, decoded.
    Decoded(Arc<RecordBatch>),
    /// The page itself, its output columns read where they lie.
    InPlace(Arc<InPlacePage>),
}

impl InnerRows {
    /// Rows held.
    pub(super) fn num_rows(&self) -> usize {
        match self {
            Self::Decoded(batch) => batch.num_rows(),
            Self::InPlace(page) => page.layout.rows(),
        }
    }

    /// Bytes held.
    pub(super) fn memory_size(&self) -> usize {
        match self {
            Self::Decoded(batch) => batch.get_array_memory_size(),
            Self::InPlace(page) => page.page.len(),
        }
    }

    /// Whether both are the same rows (the same allocation).
    pub(super) fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Decoded(a), Self::Decoded(b)) => Arc::ptr_eq(a, b),
            (Self::InPlace(a), Self::InPlace(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A heap page as probes use it: its rows, and which pass the inner side's own predicate
/// (evaluated once per page, not per probe).
pub(super) struct PageView {
    pub(super) rows: InnerRows,
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
    /// Heap page `page_no` read for its probes: in place when `in_place` and the inner side
    /// allows it (see [`InPlaceColumns`]), else decoded.
    pub(super) fn read_page(
        &self,
        page_no: u64,
        page: &PageBuf,
        in_place: bool,
    ) -> Result<PageRows> {
        match (&self.in_place, in_place) {
            (Some(columns), true) => {
                let layout = (self.table.table().codec())
                    .fixed_layout(
                        page,
                        &columns.columns,
                        self.table.heap_file(page_no),
                        page_no,
                    )
                    .map_err(to_df)?;
                Ok(PageRows::InPlace(InPlacePage {
                    page: page.clone(),
                    layout,
                }))
            }
            _ => decode_page_shared(&self.table, page_no, page, &self.decode_columns)
                .map(PageRows::Decoded),
        }
    }

    /// The probes' view of `rows`, and the decoded batch a sparse index's probes search.
    pub(super) fn view(&self, rows: PageRows) -> Result<(PageView, Option<RecordBatch>)> {
        Ok(match rows {
            PageRows::Decoded(batch) => (self.page_view(&batch)?, Some(batch)),
            PageRows::InPlace(page) => {
                let rows = InnerRows::InPlace(Arc::new(page));
                (PageView { rows, passes: None }, None)
            }
        })
    }

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
            rows: InnerRows::Decoded(Arc::new(rows)),
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

    /// A probe's rows of heap page `page_no` (decoded as `decoded`, or read in place, seen as
    /// `page`): the slots the index named (the rows of the key's run, for a sparse index)
    /// that pass the inner predicate.
    pub(super) fn probe_rows(
        &self,
        decoded: Option<&RecordBatch>,
        page: &PageView,
        page_no: u64,
        slots: &[u16],
        key: &[u8],
    ) -> Result<Vec<u32>> {
        let candidates: Vec<u32> = if self.sparse {
            // A sparse index names pages: the rows whose key starts with the probe key.
            let run = match (decoded, &page.rows) {
                (None, InnerRows::InPlace(rows)) => match &self.in_place {
                    Some(columns) => rows.key_run(columns, key)?,
                    None => return Err(DataFusionError::Internal("no in-place columns".into())),
                },
                (Some(decoded), _) => match self.key_positions.as_slice() {
                    // One key column (most keys): borrowed, no vector per probe and page.
                    &[i] => key_run(&self.encoder, std::slice::from_ref(decoded.column(i)), key)?,
                    positions => {
                        let key_cols: Vec<ArrayRef> = positions
                            .iter()
                            .map(|&i| decoded.column(i).clone())
                            .collect();
                        key_run(&self.encoder, &key_cols, key)?
                    }
                },
                (None, InnerRows::Decoded(_)) => {
                    return Err(DataFusionError::Internal(
                        "a page's key columns are missing".into(),
                    ));
                }
            };
            (run.start as u32..run.end as u32).collect()
        } else {
            let n = decoded.map_or(page.rows.num_rows(), RecordBatch::num_rows);
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
