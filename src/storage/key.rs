//! Order-preserving byte encoding of index keys.
//!
//! One B+tree implementation serves every key type because keys are compared as plain bytes
//! (`memcmp`). A key is the concatenation of its columns' encodings; each column encodes as:
//!
//! ```text
//! // Layout: one key column
//! //   null      -> 0x00                       (nulls sort first)
//! //   non-null  -> 0x01, then by type:
//! //     signed ints, dates, times, timestamps, durations, decimals:
//! //               big-endian two's complement with the sign bit flipped
//! //     unsigned ints: big-endian
//! //     floats:   IEEE bits; negative -> all bits inverted, positive -> sign bit set (-0 < +0)
//! //     boolean:  0x00 / 0x01
//! //     strings, binary: bytes with 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x00
//! //     fixed-size binary: the bytes as they are (width known from the schema)
//! ```
//!
//! Every column's encoding is self-delimiting, so `memcmp` of two composite keys orders them by
//! the first column, then the second, and a key prefix (the first k columns) is a byte prefix.
//! The encoding is part of the on-disk format: it must not change without a format version bump.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::*;

use super::error::{Result, StorageError};

/// Encodes rows of a fixed list of columns into order-preserving keys.
#[derive(Debug, Clone)]
pub struct KeyEncoder {
    types: Vec<DataType>,
}

impl KeyEncoder {
    /// An encoder for keys over `fields`; fails for types that have no key encoding.
    pub fn new(fields: &[FieldRef]) -> Result<Self> {
        for f in fields {
            if !key_type_supported(f.data_type()) {
                return Err(StorageError::UnsupportedType {
                    column: f.name().clone(),
                    data_type: f.data_type().clone(),
                });
            }
        }
        Ok(Self {
            types: fields.iter().map(|f| f.data_type().clone()).collect(),
        })
    }

    /// Types of the key columns.
    pub fn types(&self) -> &[DataType] {
        &self.types
    }

    /// Number of key columns.
    pub fn columns(&self) -> usize {
        self.types.len()
    }

    /// Encodes every row of `columns` (one array per key column, all the same length).
    pub fn encode_rows(&self, columns: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        self.check_columns(columns)?;
        let rows = columns.first().map_or(0, |c| c.len());
        // Each key made with its room (`vec![v; n]` would clone an empty vector, whose clone
        // has none: each key would then grow twice).
        let mut keys: Vec<Vec<u8>> = (0..rows)
            .map(|_| Vec::with_capacity(16 * columns.len()))
            .collect();
        for col in columns {
            append_column(col.as_ref(), 0, &mut keys);
        }
        Ok(keys)
    }

    /// Encodes the single row `row` of `columns`.
    pub fn encode_row(&self, columns: &[ArrayRef], row: usize) -> Result<Vec<u8>> {
        let mut key = Vec::new();
        self.encode_row_into(columns, row, &mut key)?;
        Ok(key)
    }

    /// Encodes the single row `row` of `columns` into `key` (cleared first): no allocation
    /// once `key` has grown to the key's size.
    pub fn encode_row_into(
        &self,
        columns: &[ArrayRef],
        row: usize,
        key: &mut Vec<u8>,
    ) -> Result<()> {
        self.check_columns(columns)?;
        if let Some(c) = columns.iter().find(|c| row >= c.len()) {
            return Err(StorageError::InvalidArgument(format!(
                "row {row} of a key column of {} rows",
                c.len()
            )));
        }
        key.clear();
        for col in columns {
            append_column(col.as_ref(), row, std::slice::from_mut(key));
        }
        Ok(())
    }

    fn check_columns(&self, columns: &[ArrayRef]) -> Result<()> {
        if columns.len() > self.types.len() {
            return Err(StorageError::InvalidArgument(format!(
                "{} key columns given, the key has {}",
                columns.len(),
                self.types.len()
            )));
        }
        // A prefix of the key columns is allowed: it encodes a key prefix.
        for (c, t) in columns.iter().zip(&self.types) {
            if c.data_type() != t {
                return Err(StorageError::InvalidArgument(format!(
                    "key column of type {} given where the index has {t}",
                    c.data_type()
                )));
            }
        }
        Ok(())
    }
}

/// Whether `t` has a key encoding.
pub fn key_type_supported(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Boolean
            | Int8
            | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Float32
            | Float64
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(_, _)
            | Duration(_)
            | Decimal128(_, _)
            | Utf8
            | LargeUtf8
            | Utf8View
            | Binary
            | LargeBinary
            | BinaryView
            | FixedSizeBinary(_)
    )
}

/// Byte order of two encoded keys, as `a.cmp(b)` but eight bytes a step: keys are short
/// (a few words), and the call into `memcmp` per comparison of a B+tree search showed as 7 %
/// of a probe's CPU.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut a_rest, mut b_rest) = (a, b);
    while let (Some((x, a_tail)), Some((y, b_tail))) = (
        a_rest.split_first_chunk::<8>(),
        b_rest.split_first_chunk::<8>(),
    ) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        (a_rest, b_rest) = (a_tail, b_tail);
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        if x != y {
            return x.cmp(y);
        }
    }
    a_rest.len().cmp(&b_rest.len())
}

/// The smallest byte string greater than every string that starts with `prefix`, or None when
/// there is none (the prefix is all 0xFF). Turns a key-prefix lookup into a range.
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// Where `key` lies between the keys `lo` and `hi` (`lo` < `hi`), as a share from 0 to 1,
/// read from the eight bytes after their common prefix: keys spread evenly over that span
/// land where they are, whatever their type (the encoding keeps their order). With
/// `past_equal` the key stands for the position just after it: one step of its last byte,
/// so that an included upper bound of a discrete key counts the key itself.
pub fn share_between(key: &[u8], past_equal: bool, lo: &[u8], hi: &[u8]) -> f64 {
    spans_past(key, past_equal, lo, hi).clamp(0.0, 1.0)
}

/// [`share_between`] not capped at `hi`: how many spans from `lo` to `hi` lie between `lo`
/// and `key`, to extrapolate past the last key known.
pub fn spans_past(key: &[u8], past_equal: bool, lo: &[u8], hi: &[u8]) -> f64 {
    if compare_keys(key, lo).is_lt() {
        return 0.0;
    }
    // The bytes all three share; a key past `hi` may differ from it before `lo` does.
    let common = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let shared = common(lo, hi).min(common(lo, key));
    let word = |k: &[u8], pad: u8| {
        let rest = k.get(shared..).unwrap_or(&[]);
        let mut word = [pad; 8];
        let n = rest.len().min(8);
        word[..n].copy_from_slice(&rest[..n]);
        u64::from_be_bytes(word)
    };
    let (lo, hi) = (word(lo, 0), word(hi, 0));
    if hi <= lo {
        // They differ only past the eight bytes read: nothing to interpolate on.
        return 0.5;
    }
    let key = word(key, if past_equal { 0xFF } else { 0 }).max(lo);
    (key - lo) as f64 / (hi - lo) as f64
}

/// The value of `key` when it is the encoding of one non-null 64- or 32-bit signed integer
/// column of type `t` (`Int64`, `Int32`): a search over such a column can then compare values
/// instead of encoding rows. None for any other type or key.
pub fn int_key_value(t: &DataType, key: &[u8]) -> Option<i64> {
    let [1, value @ ..] = key else {
        return None;
    };
    match t {
        DataType::Int64 => {
            let mut b: [u8; 8] = value.try_into().ok()?;
            b[0] ^= 0x80;
            Some(i64::from_be_bytes(b))
        }
        DataType::Int32 => {
            let mut b: [u8; 4] = value.try_into().ok()?;
            b[0] ^= 0x80;
            Some(i32::from_be_bytes(b) as i64)
        }
        _ => None,
    }
}

trait KeyBytes {
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! signed_key {
    ($($t:ty),*) => {$(
        impl KeyBytes for $t {
            fn put(self, out: &mut Vec<u8>) {
                let mut b = self.to_be_bytes();
                b[0] ^= 0x80;
                out.extend_from_slice(&b);
            }
        }
    )*};
}
signed_key!(i8, i16, i32, i64, i128);

macro_rules! unsigned_key {
    ($($t:ty),*) => {$(
        impl KeyBytes for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
        }
    )*};
}
unsigned_key!(u8, u16, u32, u64);

impl KeyBytes for f32 {
    fn put(self, out: &mut Vec<u8>) {
        let bits = self.to_bits();
        let ordered = if bits >> 31 == 1 {
            !bits
        } else {
            bits | (1 << 31)
        };
        out.extend_from_slice(&ordered.to_be_bytes());
    }
}

impl KeyBytes for f64 {
    fn put(self, out: &mut Vec<u8>) {
        let bits = self.to_bits();
        let ordered = if bits >> 63 == 1 {
            !bits
        } else {
            bits | (1 << 63)
        };
        out.extend_from_slice(&ordered.to_be_bytes());
    }
}

fn put_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

fn append_primitive<T>(array: &dyn Array, first: usize, keys: &mut [Vec<u8>])
where
    T: ArrowPrimitiveType,
    T::Native: KeyBytes,
{
    let a = array.as_primitive::<T>();
    for (key, i) in keys.iter_mut().zip(first..) {
        if a.is_null(i) {
            key.push(0);
        } else {
            key.push(1);
            a.value(i).put(key);
        }
    }
}

fn append_bytes<'a>(
    array: &dyn Array,
    first: usize,
    keys: &mut [Vec<u8>],
    value: impl Fn(usize) -> &'a [u8],
    escape: bool,
) {
    for (key, i) in keys.iter_mut().zip(first..) {
        if array.is_null(i) {
            key.push(0);
        } else {
            key.push(1);
            if escape {
                put_escaped(value(i), key);
            } else {
                key.extend_from_slice(value(i));
            }
        }
    }
}

/// Appends the encodings of rows `first..first + keys.len()` of `array` to `keys`.
fn append_column(array: &dyn Array, first: usize, keys: &mut [Vec<u8>]) {
    use DataType::*;
    match array.data_type() {
        Boolean => {
            let a = array.as_boolean();
            for (key, i) in keys.iter_mut().zip(first..) {
                if a.is_null(i) {
                    key.push(0);
                } else {
                    key.extend_from_slice(&[1, a.value(i) as u8]);
                }
            }
        }
        Int8 => append_primitive::<Int8Type>(array, first, keys),
        Int16 => append_primitive::<Int16Type>(array, first, keys),
        Int32 => append_primitive::<Int32Type>(array, first, keys),
        Int64 => append_primitive::<Int64Type>(array, first, keys),
        UInt8 => append_primitive::<UInt8Type>(array, first, keys),
        UInt16 => append_primitive::<UInt16Type>(array, first, keys),
        UInt32 => append_primitive::<UInt32Type>(array, first, keys),
        UInt64 => append_primitive::<UInt64Type>(array, first, keys),
        Float32 => append_primitive::<Float32Type>(array, first, keys),
        Float64 => append_primitive::<Float64Type>(array, first, keys),
        Date32 => append_primitive::<Date32Type>(array, first, keys),
        Date64 => append_primitive::<Date64Type>(array, first, keys),
        Time32(TimeUnit::Second) => append_primitive::<Time32SecondType>(array, first, keys),
        Time32(_) => append_primitive::<Time32MillisecondType>(array, first, keys),
        Time64(TimeUnit::Microsecond) => {
            append_primitive::<Time64MicrosecondType>(array, first, keys)
        }
        Time64(_) => append_primitive::<Time64NanosecondType>(array, first, keys),
        Timestamp(TimeUnit::Second, _) => {
            append_primitive::<TimestampSecondType>(array, first, keys)
        }
        Timestamp(TimeUnit::Millisecond, _) => {
            append_primitive::<TimestampMillisecondType>(array, first, keys)
        }
        Timestamp(TimeUnit::Microsecond, _) => {
            append_primitive::<TimestampMicrosecondType>(array, first, keys)
        }
        Timestamp(TimeUnit::Nanosecond, _) => {
            append_primitive::<TimestampNanosecondType>(array, first, keys)
        }
        Duration(TimeUnit::Second) => append_primitive::<DurationSecondType>(array, first, keys),
        Duration(TimeUnit::Millisecond) => {
            append_primitive::<DurationMillisecondType>(array, first, keys)
        }
        Duration(TimeUnit::Microsecond) => {
            append_primitive::<DurationMicrosecondType>(array, first, keys)
        }
        Duration(TimeUnit::Nanosecond) => {
            append_primitive::<DurationNanosecondType>(array, first, keys)
        }
        Decimal128(_, _) => append_primitive::<Decimal128Type>(array, first, keys),
        Utf8 => {
            let a = array.as_string::<i32>();
            append_bytes(array, first, keys, |i| a.value(i).as_bytes(), true)
        }
        LargeUtf8 => {
            let a = array.as_string::<i64>();
            append_bytes(array, first, keys, |i| a.value(i).as_bytes(), true)
        }
        Utf8View => {
            let a = array.as_string_view();
            append_bytes(array, first, keys, |i| a.value(i).as_bytes(), true)
        }
        Binary => {
            let a = array.as_binary::<i32>();
            append_bytes(array, first, keys, |i| a.value(i), true)
        }
        LargeBinary => {
            let a = array.as_binary::<i64>();
            append_bytes(array, first, keys, |i| a.value(i), true)
        }
        BinaryView => {
            let a = array.as_binary_view();
            append_bytes(array, first, keys, |i| a.value(i), true)
        }
        FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary();
            append_bytes(array, first, keys, |i| a.value(i), false)
        }
        // KeyEncoder::new rejects every other type before an array can reach here.
        other => unreachable!("key encoding of {other} was not rejected by KeyEncoder::new"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_between_keys() {
        let k = |v: u32| v.to_be_bytes().to_vec();
        assert_eq!(share_between(&k(100), false, &k(100), &k(200)), 0.0);
        assert_eq!(share_between(&k(150), false, &k(100), &k(200)), 0.5);
        assert_eq!(share_between(&k(250), false, &k(100), &k(200)), 1.0);
        assert_eq!(share_between(&k(50), true, &k(100), &k(200)), 0.0);
        // Just past 150: the step of one key, in a span of a hundred.
        let past = share_between(&k(150), true, &k(100), &k(200));
        assert!((past - 0.51).abs() < 1e-6, "{past}");
        // A prefix of both bounds lies before them; a key with a lower prefix too.
        assert_eq!(share_between(&[0, 0], true, &k(100), &k(200)), 0.0);
        assert_eq!(
            share_between(&[0, 0, 0, 99], false, &[0, 1, 0], &[0, 1, 9]),
            0.0
        );
        assert_eq!(share_between(&[0, 2], false, &[0, 1, 0], &[0, 1, 9]), 1.0);
        // Bounds whose bytes after their shared prefix read alike (zeros past the shorter).
        assert_eq!(share_between(&[7], false, &[7], &[7, 0]), 0.5);
        // Past the span: as many spans as it lies from its start.
        assert_eq!(spans_past(&k(400), false, &k(100), &k(200)), 3.0);
        assert_eq!(
            spans_past(&k(100 + 3 * 65536), false, &k(100), &k(200)),
            65536.0 * 0.03
        );
    }
    use arrow::array::*;
    use std::sync::Arc;

    fn enc(fields: Vec<Field>, cols: Vec<ArrayRef>) -> Vec<Vec<u8>> {
        let fields: Vec<FieldRef> = fields.into_iter().map(Arc::new).collect();
        KeyEncoder::new(&fields)
            .unwrap()
            .encode_rows(&cols)
            .unwrap()
    }

    fn assert_sorted(keys: &[Vec<u8>]) {
        for w in keys.windows(2) {
            assert!(w[0] < w[1], "{:?} !< {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn integers_floats_strings_order() {
        let ints = Int64Array::from(vec![
            None,
            Some(i64::MIN),
            Some(-5),
            Some(0),
            Some(3),
            Some(i64::MAX),
        ]);
        assert_sorted(&enc(
            vec![Field::new("a", DataType::Int64, true)],
            vec![Arc::new(ints)],
        ));
        let fl = Float64Array::from(vec![
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            7.0,
            f64::INFINITY,
        ]);
        assert_sorted(&enc(
            vec![Field::new("f", DataType::Float64, false)],
            vec![Arc::new(fl)],
        ));
        let s = StringViewArray::from(vec!["", "\0", "\0\0", "a", "a\0", "ab", "b"]);
        assert_sorted(&enc(
            vec![Field::new("s", DataType::Utf8View, false)],
            vec![Arc::new(s)],
        ));
        let d = Decimal128Array::from(vec![-100_i128, -1, 0, 99])
            .with_precision_and_scale(15, 2)
            .unwrap();
        assert_sorted(&enc(
            vec![Field::new("d", DataType::Decimal128(15, 2), false)],
            vec![Arc::new(d)],
        ));
    }

    #[test]
    fn composite_orders_by_first_then_second() {
        let a = Int32Array::from(vec![1, 1, 1, 2]);
        let b = StringArray::from(vec!["a", "a\0b", "b", ""]);
        let keys = enc(
            vec![
                Field::new("a", DataType::Int32, false),
                Field::new("b", DataType::Utf8, false),
            ],
            vec![Arc::new(a), Arc::new(b)],
        );
        assert_sorted(&keys);
        let succ = prefix_successor(&keys[0][..5]).unwrap();
        assert!(keys[..3].iter().all(|k| k.as_slice() < succ.as_slice()));
        assert!(keys[3].as_slice() > succ.as_slice());
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
    }

    #[test]
    fn one_row_encodes_as_in_a_batch() {
        let fields: Vec<FieldRef> = vec![
            Arc::new(Field::new("a", DataType::Int64, true)),
            Arc::new(Field::new("b", DataType::Utf8, true)),
            Arc::new(Field::new("c", DataType::Boolean, true)),
        ];
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![Some(-3), None, Some(7)])),
            Arc::new(StringArray::from(vec![Some("x\0y"), Some(""), None])),
            Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
        ];
        let e = KeyEncoder::new(&fields).unwrap();
        let all = e.encode_rows(&cols).unwrap();
        let mut key = vec![9; 40];
        for (row, want) in all.iter().enumerate() {
            e.encode_row_into(&cols, row, &mut key).unwrap();
            assert_eq!(&key, want, "row {row}");
            assert_eq!(&e.encode_row(&cols, row).unwrap(), want);
        }
        // A key prefix (first column only) is a byte prefix.
        e.encode_row_into(&cols[..1], 2, &mut key).unwrap();
        assert!(all[2].starts_with(&key));
        let err = e
            .encode_row_into(&cols, 3, &mut key)
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 3"), "{err}");
    }

    #[test]
    fn unsupported_type_names_column() {
        let f = Arc::new(Field::new(
            "l",
            DataType::new_list(DataType::Int32, true),
            true,
        ));
        let err = KeyEncoder::new(&[f]).unwrap_err().to_string();
        assert!(err.contains("'l'"), "{err}");
    }

    #[test]
    fn compare_keys_is_byte_order() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1; 7],
            vec![1; 8],
            vec![1; 9],
            [vec![1; 8], vec![0]].concat(),
            [vec![1; 8], vec![2]].concat(),
            vec![2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5],
            vec![2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 1],
            vec![255; 17],
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(compare_keys(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn compare_keys_agrees_with_slice_order(
            a in proptest::collection::vec(0u8..4, 0..24),
            b in proptest::collection::vec(0u8..4, 0..24),
        ) {
            // Few byte values: long common prefixes, where the word steps matter.
            proptest::prop_assert_eq!(compare_keys(&a, &b), a.cmp(&b));
        }
    }

    #[test]
    fn int_key_values_decode_their_encoding() {
        for t in [DataType::Int64, DataType::Int32] {
            let enc = KeyEncoder::new(&[Arc::new(Field::new("k", t.clone(), true))]).unwrap();
            let column: ArrayRef = match t {
                DataType::Int64 => Arc::new(Int64Array::from(vec![i64::MIN, -7, 0, 9, i64::MAX])),
                _ => Arc::new(arrow::array::Int32Array::from(vec![
                    i32::MIN,
                    -7,
                    0,
                    9,
                    i32::MAX,
                ])),
            };
            let ints = arrow::compute::cast(&column, &DataType::Int64).unwrap();
            let ints = ints.as_primitive::<Int64Type>();
            for row in 0..column.len() {
                let key = enc.encode_row(std::slice::from_ref(&column), row).unwrap();
                assert_eq!(int_key_value(&t, &key), Some(ints.value(row)));
                // A longer key (two columns), a null or another type: no value.
                let mut longer = key.clone();
                longer.push(0);
                assert_eq!(int_key_value(&t, &longer), None);
            }
        }
        assert_eq!(int_key_value(&DataType::Int64, &[0]), None);
        assert_eq!(int_key_value(&DataType::UInt64, &[1; 9]), None);
    }
}
