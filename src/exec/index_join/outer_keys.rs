//! The outer side's rows grouped by join key: one probe per distinct key.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;
// Keyed by encoded join key, once per outer row: SipHash showed in profiles.
use foldhash::{HashMap, HashMapExt};

use crate::access::to_df;
use crate::storage::KeyEncoder;

/// Outer rows grouped by encoded join key, in first-seen key order: each key with the span of
/// `rows` that holds its rows (in row order).
pub(super) struct KeyedRows {
    pub(super) keys: Vec<(Vec<u8>, std::ops::Range<u32>)>,
    pub(super) rows: Arc<[u32]>,
}

/// A probe's outer rows: a span of the rows of its batch grouped by key.
pub(super) struct OuterRows {
    pub(super) all: Arc<[u32]>,
    pub(super) span: std::ops::Range<u32>,
}

impl OuterRows {
    pub(super) fn as_slice(&self) -> &[u32] {
        &self.all[self.span.start as usize..self.span.end as usize]
    }

    pub(super) fn len(&self) -> usize {
        self.span.len()
    }
}

/// Groups the rows of `batch` by encoded join key; rows with a null key part cannot match
/// (returned second).
pub(super) fn group_keys(
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
    let mut encoded = encoder.encode_rows(&arrays).map_err(to_df)?;
    let mut unmatched = Vec::new();
    const NO_GROUP: u32 = u32::MAX;
    // Each row's group, each group's first row (whose key the group takes: no copy of a
    // key) and size; the keys stay borrowed from `encoded` until the grouping is done.
    let mut group_of_row = vec![NO_GROUP; encoded.len()];
    let (mut firsts, mut sizes) = (Vec::new(), Vec::<u32>::new());
    {
        let mut group_of: HashMap<&[u8], u32> = HashMap::with_capacity(encoded.len());
        for (row, key) in encoded.iter().enumerate() {
            if arrays.iter().any(|a| a.is_null(row)) {
                unmatched.push(row as u32);
                continue;
            }
            let group = *group_of.entry(key.as_slice()).or_insert_with(|| {
                firsts.push(row);
                sizes.push(0);
                (firsts.len() - 1) as u32
            });
            sizes[group as usize] += 1;
            group_of_row[row] = group;
        }
    }
    // The groups' rows laid out one group after the other.
    let mut starts = Vec::with_capacity(sizes.len());
    let mut end = 0u32;
    for size in &sizes {
        starts.push(end);
        end += size;
    }
    let mut rows = vec![0u32; end as usize];
    let mut next = starts.clone();
    for (row, &group) in group_of_row.iter().enumerate() {
        if group != NO_GROUP {
            rows[next[group as usize] as usize] = row as u32;
            next[group as usize] += 1;
        }
    }
    let keys = firsts
        .into_iter()
        .zip(starts.into_iter().zip(sizes))
        .map(|(first, (start, size))| (std::mem::take(&mut encoded[first]), start..start + size))
        .collect();
    let keyed = KeyedRows {
        keys,
        rows: rows.into(),
    };
    Ok((keyed, unmatched))
}

#[cfg(test)]
mod group_tests {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::Column;

    use super::*;

    #[test]
    fn groups_rows_by_key_in_first_seen_order_and_sets_null_keys_apart() {
        let field = Arc::new(Field::new("k", DataType::Int64, true));
        let schema = Arc::new(Schema::new(vec![field.clone()]));
        let keys = Int64Array::from(vec![Some(5), Some(3), None, Some(5), Some(3), Some(9)]);
        let batch = RecordBatch::try_new(schema, vec![Arc::new(keys)]).unwrap();
        let encoder = KeyEncoder::new(&[field]).unwrap();
        let key_expr: Arc<dyn PhysicalExpr> = Arc::new(Column::new("k", 0));
        let (keyed, unmatched) = group_keys(&batch, &[key_expr], &encoder).unwrap();
        let groups: Vec<Vec<u32>> = keyed
            .keys
            .iter()
            .map(|(_, span)| keyed.rows[span.start as usize..span.end as usize].to_vec())
            .collect();
        assert_eq!(groups, vec![vec![0, 3], vec![1, 4], vec![5]]);
        assert_eq!(unmatched, vec![2]);
        let first = OuterRows {
            all: keyed.rows.clone(),
            span: keyed.keys[0].1.clone(),
        };
        assert_eq!((first.as_slice(), first.len()), (&[0u32, 3][..], 2));
        let single = |v: i64| {
            let a: ArrayRef = Arc::new(Int64Array::from(vec![v]));
            encoder.encode_rows(&[a]).unwrap().remove(0)
        };
        let encoded: Vec<&Vec<u8>> = keyed.keys.iter().map(|(k, _)| k).collect();
        assert_eq!(encoded, vec![&single(5), &single(3), &single(9)]);
    }
}
