//! Turning the inner rows found for one key into join output rows.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::{filter_record_batch, take};
use arrow::datatypes::SchemaRef;
use datafusion::common::{JoinSide, Result};
use datafusion::physical_plan::joins::utils::JoinFilter;

use super::exec::IndexJoinKind;

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
    /// Output rows for outer rows `rows` of `outer`, all with the same key, whose inner
    /// matches are `inner` (already filtered by the inner side's own predicate).
    pub fn build(
        &self,
        outer: &RecordBatch,
        rows: &[u32],
        inner: &RecordBatch,
    ) -> Result<RecordBatch> {
        let m = inner.num_rows();
        // Candidate pairs: every outer row with every inner row.
        let outer_idx =
            UInt32Array::from_iter_values(rows.iter().flat_map(|&r| std::iter::repeat_n(r, m)));
        let inner_idx = UInt32Array::from_iter_values((0..rows.len()).flat_map(|_| 0..m as u32));
        let pass: Option<BooleanArray> = match &self.filter {
            Some(f) if m > 0 => Some(self.eval_filter(f, outer, &outer_idx, inner, &inner_idx)?),
            _ => None,
        };
        let passes = |pair: usize| {
            pass.as_ref()
                .is_none_or(|p| p.is_valid(pair) && p.value(pair))
        };
        match self.kind {
            IndexJoinKind::Inner | IndexJoinKind::LeftOuter => {
                let mut cols = take_all(outer, &outer_idx)?;
                cols.extend(take_all(inner, &inner_idx)?);
                let joined = RecordBatch::try_new(self.schema.clone(), cols)?;
                let joined = match &pass {
                    Some(p) => filter_record_batch(&joined, &clean(p))?,
                    None => joined,
                };
                if self.kind == IndexJoinKind::Inner {
                    return Ok(joined);
                }
                let unmatched: Vec<u32> = rows
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !(0..m).any(|j| passes(i * m + j)))
                    .map(|(_, &r)| r)
                    .collect();
                if unmatched.is_empty() {
                    return Ok(joined);
                }
                let padded = self.outer_with_nulls(outer, &unmatched)?;
                Ok(arrow::compute::concat_batches(
                    &self.schema,
                    [&joined, &padded],
                )?)
            }
            IndexJoinKind::Semi | IndexJoinKind::Anti => {
                let want_match = self.kind == IndexJoinKind::Semi;
                let keep: Vec<u32> = rows
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| (0..m).any(|j| passes(i * m + j)) == want_match)
                    .map(|(_, &r)| r)
                    .collect();
                let idx = UInt32Array::from(keep);
                Ok(RecordBatch::try_new(
                    self.schema.clone(),
                    take_all(outer, &idx)?,
                )?)
            }
        }
    }

    /// Output for outer rows that cannot match (a null key): kept by anti and outer joins.
    pub fn unmatched(&self, outer: &RecordBatch, rows: &[u32]) -> Result<Option<RecordBatch>> {
        match self.kind {
            IndexJoinKind::Inner | IndexJoinKind::Semi => Ok(None),
            IndexJoinKind::Anti => {
                let idx = UInt32Array::from(rows.to_vec());
                Ok(Some(RecordBatch::try_new(
                    self.schema.clone(),
                    take_all(outer, &idx)?,
                )?))
            }
            IndexJoinKind::LeftOuter => Ok(Some(self.outer_with_nulls(outer, rows)?)),
        }
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
