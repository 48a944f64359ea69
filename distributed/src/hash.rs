//! Which shard a row belongs to: a hash of its distribution key.
//!
//! Persistent, so it must never change with a dependency: DataFusion's own row hash depends on
//! foldhash's fixed seed and may change between releases, which would silently misplace rows
//! of tables loaded before. This one is CRC32C over a canonical encoding of the key values,
//! named in every shard map ([`HASH_NAME`]). Integers of every width (and dates) are widened
//! to i64 first, so a key of Int32 and one of Int64 with equal values land in the same shard:
//! two tables sharded on their join keys are co-located.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Int8Type, Int16Type, Int32Type, Int64Type,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion::common::{Result, plan_err};
use ooode::storage::checksum::crc32c_append;

/// The name of this hash in shard maps.
pub const HASH_NAME: &str = "crc32c-v1";

/// Whether rows can be sharded on a column of `data_type`.
pub fn can_shard_on(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Date32
            | Date64
            | Decimal128(_, _)
            | Utf8
            | LargeUtf8
            | Utf8View
    )
}

/// The shard (in `0..shards`) of every row of the key columns `key`.
pub fn shard_of_rows(key: &[ArrayRef], shards: u32) -> Result<Vec<u32>> {
    let rows = key.first().map_or(0, |a| a.len());
    let mut hashes = vec![0u32; rows];
    for column in key {
        if !can_shard_on(column.data_type()) {
            return plan_err!(
                "cannot shard on a column of type {} (integers, dates, Decimal128 and \
                 strings can be distribution keys)",
                column.data_type()
            );
        }
        for (row, h) in hashes.iter_mut().enumerate() {
            *h = fold(*h, column, row);
        }
    }
    Ok(hashes.into_iter().map(|h| h % shards.max(1)).collect())
}

/// The shard of one key value (one column), as [`shard_of_rows`] computes it.
pub fn shard_of_value(column: &ArrayRef, row: usize, shards: u32) -> u32 {
    fold(0, column, row) % shards.max(1)
}

fn fold(seed: u32, column: &ArrayRef, row: usize) -> u32 {
    if column.is_null(row) {
        return crc32c_append(seed, &[0]);
    }
    let int = |v: i64| crc32c_append(seed, &[&[1u8][..], &v.to_le_bytes()].concat());
    let bytes = |b: &[u8]| {
        let len = (b.len() as u64).to_le_bytes();
        crc32c_append(crc32c_append(seed, &[&[2u8][..], &len].concat()), b)
    };
    match column.data_type() {
        DataType::Int8 => int(column.as_primitive::<Int8Type>().value(row).into()),
        DataType::Int16 => int(column.as_primitive::<Int16Type>().value(row).into()),
        DataType::Int32 => int(column.as_primitive::<Int32Type>().value(row).into()),
        DataType::Int64 => int(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => int(column.as_primitive::<UInt8Type>().value(row).into()),
        DataType::UInt16 => int(column.as_primitive::<UInt16Type>().value(row).into()),
        DataType::UInt32 => int(column.as_primitive::<UInt32Type>().value(row).into()),
        // Above i64::MAX the bits wrap: still one fixed shard per value.
        DataType::UInt64 => int(column.as_primitive::<UInt64Type>().value(row) as i64),
        DataType::Date32 => int(column.as_primitive::<Date32Type>().value(row).into()),
        DataType::Date64 => int(column.as_primitive::<Date64Type>().value(row)),
        DataType::Decimal128(_, _) => {
            let v = column.as_primitive::<Decimal128Type>().value(row);
            crc32c_append(seed, &[&[3u8][..], &v.to_le_bytes()].concat())
        }
        DataType::Utf8 => bytes(column.as_string::<i32>().value(row).as_bytes()),
        DataType::LargeUtf8 => bytes(column.as_string::<i64>().value(row).as_bytes()),
        DataType::Utf8View => bytes(column.as_string_view().value(row).as_bytes()),
        // `shard_of_rows` checked the type; a value of another type goes to shard 0's hash.
        _ => seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray, StringViewArray};
    use std::sync::Arc;

    #[test]
    fn equal_values_of_any_integer_width_or_string_kind_share_a_shard() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 3, 1_000_000]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3, 1_000_000]));
        assert_eq!(
            shard_of_rows(&[a], 7).unwrap(),
            shard_of_rows(&[b], 7).unwrap()
        );
        let s: ArrayRef = Arc::new(StringArray::from(vec!["x", "yy", ""]));
        let v: ArrayRef = Arc::new(StringViewArray::from(vec!["x", "yy", ""]));
        assert_eq!(
            shard_of_rows(&[s], 5).unwrap(),
            shard_of_rows(&[v], 5).unwrap()
        );
    }

    #[test]
    fn the_hash_is_fixed_and_spreads_keys() {
        // Pinned: a change here misplaces the rows of every table loaded before it.
        let keys: ArrayRef = Arc::new(Int64Array::from((0..10).collect::<Vec<i64>>()));
        let ids = shard_of_rows(std::slice::from_ref(&keys), 3).unwrap();
        assert_eq!(ids, [0, 0, 2, 2, 1, 2, 0, 2, 1, 2]);
        assert_eq!(shard_of_value(&keys, 4, 3), ids[4]);
        let many: ArrayRef = Arc::new(Int64Array::from((0..30_000).collect::<Vec<i64>>()));
        let mut counts = [0usize; 3];
        for s in shard_of_rows(&[many], 3).unwrap() {
            counts[s as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 9_000), "{counts:?}");
    }

    #[test]
    fn an_unshardable_type_is_an_error() {
        let f: ArrayRef = Arc::new(datafusion::arrow::array::Float64Array::from(vec![1.0]));
        let e = shard_of_rows(&[f], 2).unwrap_err().to_string();
        assert!(e.contains("Float64"), "{e}");
    }
}
