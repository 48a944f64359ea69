//! Turning the inner rows found for one key into join output rows, a bounded chunk at a time.
//!
//! The outer rows of one key (`outer_rows` of an outer batch) and the inner rows of one heap
//! page that match it (`page_rows` of the page, already through the inner side's own
//! predicate) make a grid of candidate pairs. [`OutputSpec::pairs`] adds a range of that grid
//! to a [`Gather`] (and notes which outer rows found a match), so a key with a million matches
//! never becomes one batch; the gathered rows of many probes become one output batch with one
//! `interleave` per column. [`OutputSpec::finish`] adds what a semi, anti or outer join owes
//! for the key once all its pairs are through.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use datafusion::common::{JoinSide, Result};
use datafusion::physical_plan::joins::utils::JoinFilter;

use super::exec::IndexJoinKind;
use super::inner_page::{InPlacePage, InnerRows};

/// How to build output rows.
#[derive(Debug, Clone)]
pub struct OutputSpec {
    pub kind: IndexJoinKind,
    pub schema: SchemaRef,
    pub filter: Option<JoinFilter>,
    /// Which side of the original join the outer input was (for the filter's column indices).
    pub outer_side: JoinSide,
}

fn take_all(batch: &RecordBatch, idx: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), idx, None))
        .collect::<Result<_, _>>()?)
}

impl OutputSpec {
    /// Whether the kind needs to know, per outer row, whether any pair passed (semi, anti and
    /// outer joins).
    pub fn tracks_matches(&self) -> bool {
        self.kind != IndexJoinKind::Inner
    }

    /// Whether pairs become output rows (inner and outer joins).
    pub fn emits_pairs(&self) -> bool {
        matches!(self.kind, IndexJoinKind::Inner | IndexJoinKind::LeftOuter)
    }

    /// Whether a pair's outcome depends on more than the key (a join filter).
    pub fn has_filter(&self) -> bool {
        self.filter.is_some()
    }

    /// Adds the pairs `grid` of a probe to `gather`: the grid is `outer_rows.len() x
    /// page_rows.len()`, pair `p` being outer row `outer_rows[p / m]` with row
    /// `page_rows[p % m]` of `page` (the inner side's output columns). Pairs that pass the join
    /// filter become output rows (inner and outer joins); `matched[i]` is set for the outer
    /// rows `outer_rows[i]` with a passing pair. Returns the rows added.
    #[allow(clippy::too_many_arguments)]
    pub fn pairs(
        &self,
        gather: &mut Gather,
        outer: &Arc<RecordBatch>,
        outer_rows: &[u32],
        page: &InnerRows,
        page_rows: &[u32],
        grid: Range<usize>,
        matched: Option<&mut [bool]>,
    ) -> Result<usize> {
        let m = page_rows.len();
        if m == 0 || grid.is_empty() {
            return Ok(0);
        }
        let pass: Option<BooleanArray> = match &self.filter {
            Some(f) => {
                // A join with a filter decodes its pages (see `InPlaceColumns`).
                let InnerRows::Decoded(page) = page else {
                    return Err(datafusion::common::DataFusionError::Internal(
                        "a join filter over rows read in place".into(),
                    ));
                };
                let outer_idx =
                    UInt32Array::from_iter_values(grid.clone().map(|p| outer_rows[p / m]));
                let inner_idx =
                    UInt32Array::from_iter_values(grid.clone().map(|p| page_rows[p % m]));
                Some(clean(
                    &self.eval_filter(f, outer, &outer_idx, page, &inner_idx)?,
                ))
            }
            None => None,
        };
        let passes = |i: usize| pass.as_ref().is_none_or(|mask| mask.value(i));
        if let Some(matched) = matched {
            for (i, p) in grid.clone().enumerate() {
                if passes(i) {
                    matched[p / m] = true;
                }
            }
        }
        if !self.emits_pairs() {
            return Ok(0);
        }
        let (o, n) = (gather.outer_source(outer), gather.inner_source(page));
        let before = gather.outer_idx.len();
        for (i, p) in grid.enumerate() {
            if passes(i) {
                gather.outer_idx.push((o, outer_rows[p / m] as usize));
                gather.inner_idx.push((n, page_rows[p % m] as usize));
            }
        }
        Ok(gather.outer_idx.len() - before)
    }

    /// What the join owes for the outer rows `rows` of one key once all their pairs are
    /// through: semi the matched rows, anti the others, left outer the others padded with
    /// nulls, inner nothing.
    pub fn finish(
        &self,
        outer: &RecordBatch,
        rows: &[u32],
        matched: &[bool],
    ) -> Result<Option<RecordBatch>> {
        let pick = |want: bool| -> Vec<u32> {
            rows.iter()
                .zip(matched)
                .filter(|(_, m)| **m == want)
                .map(|(r, _)| *r)
                .collect()
        };
        let picked = match self.kind {
            IndexJoinKind::Inner => return Ok(None),
            IndexJoinKind::Semi => pick(true),
            IndexJoinKind::Anti | IndexJoinKind::LeftOuter => pick(false),
        };
        if picked.is_empty() {
            return Ok(None);
        }
        match self.kind {
            IndexJoinKind::LeftOuter => self.outer_with_nulls(outer, &picked).map(Some),
            _ => self.outer_rows(outer, &picked).map(Some),
        }
    }

    /// Output for outer rows that cannot match (a null key): kept by anti and outer joins.
    pub fn unmatched(&self, outer: &RecordBatch, rows: &[u32]) -> Result<Option<RecordBatch>> {
        if rows.is_empty() {
            return Ok(None);
        }
        match self.kind {
            IndexJoinKind::Inner | IndexJoinKind::Semi => Ok(None),
            IndexJoinKind::Anti => self.outer_rows(outer, rows).map(Some),
            IndexJoinKind::LeftOuter => self.outer_with_nulls(outer, rows).map(Some),
        }
    }

    fn outer_rows(&self, outer: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
        let idx = UInt32Array::from(rows.to_vec());
        Ok(RecordBatch::try_new(
            self.schema.clone(),
            take_all(outer, &idx)?,
        )?)
    }

    fn outer_with_nulls(&self, outer: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
        let idx = UInt32Array::from(rows.to_vec());
        let mut cols = take_all(outer, &idx)?;
        for f in self.schema.fields().iter().skip(outer.num_columns()) {
            cols.push(new_null_array(f.data_type(), rows.len()));
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }

    fn eval_filter(
        &self,
        f: &JoinFilter,
        outer: &RecordBatch,
        outer_idx: &UInt32Array,
        inner: &RecordBatch,
        inner_idx: &UInt32Array,
    ) -> Result<BooleanArray> {
        let cols = f
            .column_indices()
            .iter()
            .map(|ci| {
                let (batch, idx) = if ci.side == self.outer_side {
                    (outer, outer_idx)
                } else {
                    (inner, inner_idx)
                };
                Ok(take(batch.column(ci.index).as_ref(), idx, None)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let intermediate = RecordBatch::try_new_with_options(
            Arc::clone(f.schema()),
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(outer_idx.len())),
        )?;
        let value = f.expression().evaluate(&intermediate)?;
        let array = value.into_array(outer_idx.len())?;
        let mask = array
            .as_any()
            .downcast_ref::<BooleanArray>()
            .cloned()
            .ok_or_else(|| {
                datafusion::common::DataFusionError::Internal("join filter is not boolean".into())
            })?;
        Ok(mask)
    }
}

/// Output rows being gathered from pairs: for each row, an outer batch's row and an inner
/// page's row. One `interleave` per column builds them (or, for pages read in place, one
/// copy of each row's value), however many probes and pages the rows come from, instead of
/// a `take` per column per probe.
#[derive(Default)]
pub struct Gather {
    outer: Vec<Arc<RecordBatch>>,
    inner: Vec<InnerRows>,
    outer_idx: Vec<(usize, usize)>,
    inner_idx: Vec<(usize, usize)>,
}

/// The index of `item` in `list`, appended unless it is the last one already.
fn source<T: Clone>(list: &mut Vec<T>, item: &T, same: impl Fn(&T, &T) -> bool) -> usize {
    // Consecutive pairs mostly share their batches: only the last source is looked at, and
    // a batch met again after others is listed again. A search of the whole list cost, for
    // every page new to the list (most of them), a comparison per page gathered before it:
    // quadratic in an output batch's pages, over a thousand of them at 8,192 rows.
    if let Some(last) = list.last()
        && same(last, item)
    {
        return list.len() - 1;
    }
    list.push(item.clone());
    list.len() - 1
}

impl Gather {
    fn outer_source(&mut self, batch: &Arc<RecordBatch>) -> usize {
        source(&mut self.outer, batch, Arc::ptr_eq)
    }

    fn inner_source(&mut self, rows: &InnerRows) -> usize {
        source(&mut self.inner, rows, InnerRows::same)
    }

    /// The gathered rows as a batch of `schema` (outer columns, then inner), if any.
    pub fn build(self, schema: &SchemaRef) -> Result<Option<RecordBatch>> {
        if self.outer_idx.is_empty() {
            return Ok(None);
        }
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        if let Some(first) = self.outer.first() {
            for c in 0..first.num_columns() {
                let arrays: Vec<&dyn Array> =
                    self.outer.iter().map(|b| b.column(c).as_ref()).collect();
                cols.push(arrow::compute::interleave(&arrays, &self.outer_idx)?);
            }
        }
        let mut decoded = Vec::new();
        let mut in_place = Vec::new();
        for rows in &self.inner {
            match rows {
                InnerRows::Decoded(batch) => decoded.push(batch.as_ref()),
                InnerRows::InPlace(page) => in_place.push(page.as_ref()),
            }
        }
        match (decoded.first(), in_place.is_empty()) {
            (Some(first), true) => {
                for c in 0..first.num_columns() {
                    let arrays: Vec<&dyn Array> =
                        decoded.iter().map(|b| b.column(c).as_ref()).collect();
                    cols.push(arrow::compute::interleave(&arrays, &self.inner_idx)?);
                }
            }
            (None, false) => {
                for (c, field) in schema.fields().iter().skip(cols.len()).enumerate() {
                    cols.push(gather_in_place(
                        &in_place,
                        &self.inner_idx,
                        c,
                        field.data_type(),
                    )?);
                }
            }
            (None, true) => {}
            (Some(_), false) => {
                return Err(datafusion::common::DataFusionError::Internal(
                    "an output batch of both decoded pages and pages read in place".into(),
                ));
            }
        }
        Ok(Some(RecordBatch::try_new(schema.clone(), cols)?))
    }
}

/// Column `column` of the rows `idx` (page, row) of `pages`, as an array of type `t`: each
/// value copied from where it lies in its page.
fn gather_in_place(
    pages: &[&InPlacePage],
    idx: &[(usize, usize)],
    column: usize,
    t: &arrow::datatypes::DataType,
) -> Result<ArrayRef> {
    use arrow::array::{ArrayData, BooleanBufferBuilder};
    use arrow::buffer::{MutableBuffer, NullBuffer};
    let width = pages.first().map_or(0, |p| p.width(column));
    let mut values = MutableBuffer::with_capacity(idx.len() * width);
    // Every page of a table stores a column at the same width (its type's).
    let copy: fn(&mut MutableBuffer, &[u8]) = match width {
        16 => |out, v| out.push(i128::from_le_bytes(v.try_into().unwrap_or_default())),
        8 => |out, v| out.push(i64::from_le_bytes(v.try_into().unwrap_or_default())),
        4 => |out, v| out.push(i32::from_le_bytes(v.try_into().unwrap_or_default())),
        _ => |out, v| out.extend_from_slice(v),
    };
    for &(page, row) in idx {
        copy(&mut values, pages[page].value(column, row));
    }
    let nulls = pages.iter().any(|p| p.has_nulls(column)).then(|| {
        let mut valid = BooleanBufferBuilder::new(idx.len());
        for &(page, row) in idx {
            valid.append(pages[page].is_valid(column, row));
        }
        NullBuffer::new(valid.finish())
    });
    let data = ArrayData::builder(t.clone())
        .len(idx.len())
        .add_buffer(values.into())
        .nulls(nulls)
        .build()?;
    Ok(arrow::array::make_array(data))
}

/// A filter mask with nulls as false.
fn clean(mask: &BooleanArray) -> BooleanArray {
    if mask.null_count() == 0 {
        mask.clone()
    } else {
        arrow::compute::prep_null_mask_filter(mask)
    }
}

/// Rewrites string and binary view columns to hold only the bytes their rows use.
///
/// Taking rows from a view array keeps all of its data buffers, and concatenating keeps all
/// buffers of all parts: through a chain of joins the buffer lists would multiply. Output
/// batches are compacted before they leave the node.
pub fn compact_views(batch: RecordBatch) -> Result<RecordBatch> {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;
    if !batch
        .columns()
        .iter()
        .any(|c| matches!(c.data_type(), DataType::Utf8View | DataType::BinaryView))
    {
        return Ok(batch);
    }
    let cols: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => Arc::new(c.as_string_view().gc()) as ArrayRef,
            DataType::BinaryView => Arc::new(c.as_binary_view().gc()) as ArrayRef,
            _ => c.clone(),
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), cols)?)
}
