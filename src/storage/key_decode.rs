//! Decoding index keys back into Arrow columns, for index-only scans.
//!
//! A dense index's leaf entries hold the whole key (see [`super::key`] for the encoding), so
//! a query that needs only the index's columns reads them from the leaves and never touches
//! the heap. Decoding reverses each column's encoding; keys come from disk, so every
//! malformed byte is an error, never a panic.

use std::sync::Arc;

use arrow::array::NullBufferBuilder;
use arrow::array::{
    ArrayData, ArrayRef, BinaryBuilder, BinaryViewBuilder, BooleanBuilder, FixedSizeBinaryBuilder,
    LargeBinaryBuilder, LargeStringBuilder, StringBuilder, StringViewBuilder, make_array,
};
use arrow::buffer::MutableBuffer;
use arrow::datatypes::{DataType, FieldRef};
use arrow::error::ArrowError;

use super::error::{Result, StorageError};
use super::heap::page::primitive_array;
use super::key::key_type_supported;

/// How one key column is laid out after its null marker.
#[derive(Debug, Clone, Copy)]
enum Layout {
    Bool,
    /// Big-endian, sign bit flipped.
    Signed(usize),
    Unsigned(usize),
    /// Ordered IEEE bits (see the encoder).
    Float(usize),
    /// Escaped bytes, terminated by 0x00 0x00.
    Escaped,
    /// Exactly this many bytes.
    Raw(usize),
}

fn layout(t: &DataType) -> Layout {
    use DataType::*;
    match t {
        Boolean => Layout::Bool,
        Int8 => Layout::Signed(1),
        Int16 => Layout::Signed(2),
        Int32 | Date32 | Time32(_) => Layout::Signed(4),
        Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => Layout::Signed(8),
        Decimal128(_, _) => Layout::Signed(16),
        UInt8 => Layout::Unsigned(1),
        UInt16 => Layout::Unsigned(2),
        UInt32 => Layout::Unsigned(4),
        UInt64 => Layout::Unsigned(8),
        Float32 => Layout::Float(4),
        Float64 => Layout::Float(8),
        FixedSizeBinary(w) => Layout::Raw((*w).max(0) as usize),
        _ => Layout::Escaped,
    }
}

/// Decodes keys of an index into some of its columns.
#[derive(Debug)]
pub struct KeyDecoder {
    types: Vec<DataType>,
    layouts: Vec<Layout>,
    /// For each key column up to the last one wanted: the output positions it fills.
    outputs: Vec<Vec<usize>>,
    wanted: usize,
    /// Every column of the key is parsed (so nothing may follow the last).
    whole_key: bool,
}

impl KeyDecoder {
    /// A decoder of keys over `fields` that yields the key columns `wanted` (positions in the
    /// key), in that order.
    pub fn new(fields: &[FieldRef], wanted: &[usize]) -> Result<Self> {
        for f in fields {
            if !key_type_supported(f.data_type()) {
                return Err(StorageError::UnsupportedType {
                    column: f.name().clone(),
                    data_type: f.data_type().clone(),
                });
            }
        }
        let last = wanted.iter().max().map_or(0, |&w| w + 1);
        if last > fields.len() {
            return Err(StorageError::InvalidArgument(format!(
                "key column {} wanted of a key of {}",
                last - 1,
                fields.len()
            )));
        }
        let mut outputs = vec![Vec::new(); last];
        for (out, &col) in wanted.iter().enumerate() {
            outputs[col].push(out);
        }
        let types: Vec<DataType> = fields[..last]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Self {
            layouts: types.iter().map(layout).collect(),
            types,
            whole_key: last == fields.len(),
            outputs,
            wanted: wanted.len(),
        })
    }

    /// An empty set of decoded rows.
    pub fn rows(self: &Arc<Self>) -> KeyRows {
        KeyRows {
            builders: self
                .types
                .iter()
                .zip(&self.outputs)
                .map(|(t, outs)| (!outs.is_empty()).then(|| Builder::new(t)))
                .collect(),
            decoder: self.clone(),
            len: 0,
            scratch: Vec::new(),
        }
    }
}

/// Keys decoded so far, column by column.
#[derive(Debug)]
pub struct KeyRows {
    decoder: Arc<KeyDecoder>,
    /// One per key column up to the last wanted (None: parsed, not kept).
    builders: Vec<Option<Builder>>,
    len: usize,
    scratch: Vec<u8>,
}

impl KeyRows {
    /// Rows decoded.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no key was decoded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Decodes one key; an error says what is wrong with its bytes.
    pub fn push(&mut self, key: &[u8]) -> std::result::Result<(), String> {
        let mut at = 0;
        for (col, layout) in self.decoder.layouts.iter().enumerate() {
            let end = column_end(*layout, key, at, col)?;
            if let Some(b) = self.builders[col].as_mut() {
                // `column_end` checked the marker, the length and the escapes.
                let value = &key[at + 1..end];
                match (key[at], *layout) {
                    (0, _) => b.append_null(),
                    (_, Layout::Bool) => b.append_bool(value[0] == 1),
                    (_, Layout::Escaped) => {
                        self.scratch.clear();
                        unescape(value, &mut self.scratch)
                            .map_err(|why| format!("column {col}: {why}"))?;
                        b.append_bytes(&self.scratch)
                            .map_err(|why| format!("column {col}: {why}"))?;
                    }
                    (_, fixed) => b.append_fixed(fixed, value)?,
                }
            }
            at = end;
        }
        if self.decoder.whole_key && at != key.len() {
            return Err(format!(
                "{} bytes after the key's last column",
                key.len() - at
            ));
        }
        self.len += 1;
        Ok(())
    }

    /// The wanted columns, in the order they were asked for.
    pub fn finish(self) -> std::result::Result<Vec<ArrayRef>, ArrowError> {
        let mut out: Vec<Option<ArrayRef>> = vec![None; self.decoder.wanted];
        for (builder, outs) in self.builders.into_iter().zip(&self.decoder.outputs) {
            let Some(builder) = builder else { continue };
            let array = builder.finish()?;
            for &o in outs {
                out[o] = Some(array.clone());
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

/// Keys of a range search, decoded as the leaves are read.
impl super::btree::LeafSink for KeyRows {
    fn entry(&mut self, key: &[u8], _row: u64) -> std::result::Result<(), String> {
        self.push(key)
    }
}

/// Where key column `col` (laid out as `layout`, starting at `at` with its null marker) ends;
/// an error says what is wrong with its bytes.
fn column_end(
    layout: Layout,
    key: &[u8],
    at: usize,
    col: usize,
) -> std::result::Result<usize, String> {
    let value = at + 1;
    match key.get(at) {
        None => return Err(format!("key ends before column {col}")),
        Some(0) => return Ok(value),
        Some(1) => {}
        Some(other) => return Err(format!("column {col} has null marker {other:#x}")),
    }
    let fixed = |n: usize| match key.len() >= value + n {
        true => Ok(value + n),
        false => Err(format!("key ends inside column {col}")),
    };
    match layout {
        Layout::Bool => {
            let end = fixed(1)?;
            match key[value] {
                0 | 1 => Ok(end),
                v => Err(format!("column {col} is a boolean of value {v}")),
            }
        }
        Layout::Signed(n) | Layout::Unsigned(n) | Layout::Float(n) | Layout::Raw(n) => fixed(n),
        Layout::Escaped => {
            let mut i = value;
            loop {
                match key.get(i) {
                    None => return Err(format!("column {col}: unterminated string")),
                    Some(0) => match key.get(i + 1) {
                        Some(0) => return Ok(i + 2),
                        Some(0xFF) => i += 2,
                        _ => return Err(format!("column {col}: bad escape in string")),
                    },
                    Some(_) => i += 1,
                }
            }
        }
    }
}

/// Bytes of the first column's encoding at the start of `key`, a key over columns whose first
/// is of type `first`: keys sharing them share that column's value.
pub fn first_column_len(first: &DataType, key: &[u8]) -> std::result::Result<usize, String> {
    column_end(layout(first), key, 0, 0)
}

/// The bytes of an escaped string `value` (terminator included, escapes checked) into `out`.
fn unescape(value: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), &'static str> {
    let body = value.strip_suffix(&[0, 0]).ok_or("unterminated string")?;
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        out.push(b);
        if b == 0 && bytes.next() != Some(&0xFF) {
            return Err("bad escape in string");
        }
    }
    Ok(())
}

#[derive(Debug)]
enum Builder {
    Bool(BooleanBuilder),
    /// Little-endian native values of a fixed-width type.
    Fixed {
        data_type: DataType,
        /// Aligned for the type, as Arrow requires.
        values: MutableBuffer,
        nulls: NullBufferBuilder,
        width: usize,
    },
    Utf8(StringBuilder),
    LargeUtf8(LargeStringBuilder),
    Utf8View(StringViewBuilder),
    Binary(BinaryBuilder),
    LargeBinary(LargeBinaryBuilder),
    BinaryView(BinaryViewBuilder),
    FixedBinary(FixedSizeBinaryBuilder),
}

impl Builder {
    fn new(t: &DataType) -> Self {
        use DataType::*;
        match t {
            Boolean => Builder::Bool(BooleanBuilder::new()),
            Utf8 => Builder::Utf8(StringBuilder::new()),
            LargeUtf8 => Builder::LargeUtf8(LargeStringBuilder::new()),
            Utf8View => Builder::Utf8View(StringViewBuilder::new()),
            Binary => Builder::Binary(BinaryBuilder::new()),
            LargeBinary => Builder::LargeBinary(LargeBinaryBuilder::new()),
            BinaryView => Builder::BinaryView(BinaryViewBuilder::new()),
            FixedSizeBinary(w) => Builder::FixedBinary(FixedSizeBinaryBuilder::new(*w)),
            other => {
                let width = match layout(other) {
                    Layout::Signed(n) | Layout::Unsigned(n) | Layout::Float(n) => n,
                    _ => 0,
                };
                Builder::Fixed {
                    data_type: other.clone(),
                    values: MutableBuffer::new(0),
                    nulls: NullBufferBuilder::new(0),
                    width,
                }
            }
        }
    }

    fn append_null(&mut self) {
        match self {
            Builder::Bool(b) => b.append_null(),
            Builder::Fixed {
                values,
                nulls,
                width,
                ..
            } => {
                values.extend_zeros(*width);
                nulls.append_null();
            }
            Builder::Utf8(b) => b.append_null(),
            Builder::LargeUtf8(b) => b.append_null(),
            Builder::Utf8View(b) => b.append_null(),
            Builder::Binary(b) => b.append_null(),
            Builder::LargeBinary(b) => b.append_null(),
            Builder::BinaryView(b) => b.append_null(),
            Builder::FixedBinary(b) => b.append_null(),
        }
    }

    fn append_bool(&mut self, v: bool) {
        if let Builder::Bool(b) = self {
            b.append_value(v);
        }
    }

    /// Appends a fixed-width value from its key bytes (big-endian, order-preserving).
    fn append_fixed(&mut self, layout: Layout, bytes: &[u8]) -> std::result::Result<(), String> {
        if let Builder::FixedBinary(b) = self {
            return b.append_value(bytes).map_err(|e| e.to_string());
        }
        let Builder::Fixed { values, nulls, .. } = self else {
            return Ok(());
        };
        let start = values.len();
        values.extend_from_slice(bytes);
        let native = &mut values.as_slice_mut()[start..];
        native.reverse();
        let n = native.len();
        match layout {
            // The most significant byte is last once reversed.
            Layout::Signed(_) => native[n - 1] ^= 0x80,
            Layout::Float(_) => {
                if native[n - 1] & 0x80 != 0 {
                    native[n - 1] ^= 0x80; // was positive: only the sign bit was set
                } else {
                    native.iter_mut().for_each(|b| *b = !*b); // was negative: all inverted
                }
            }
            _ => {}
        }
        nulls.append_non_null();
        Ok(())
    }

    fn append_bytes(&mut self, bytes: &[u8]) -> std::result::Result<(), String> {
        let text = || std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"));
        match self {
            Builder::Utf8(b) => b.append_value(text()?),
            Builder::LargeUtf8(b) => b.append_value(text()?),
            Builder::Utf8View(b) => b.append_value(text()?),
            Builder::Binary(b) => b.append_value(bytes),
            Builder::LargeBinary(b) => b.append_value(bytes),
            Builder::BinaryView(b) => b.append_value(bytes),
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> std::result::Result<ArrayRef, ArrowError> {
        Ok(match self {
            Builder::Bool(mut b) => Arc::new(b.finish()),
            Builder::Fixed {
                data_type,
                values,
                mut nulls,
                width,
            } => {
                let len = values.len() / width.max(1);
                let (values, nulls) = (values.into(), nulls.finish());
                // Index-only probes finish a few rows each: the common types skip the
                // generic validation (see `primitive_array`).
                if let Some(array) = primitive_array(&data_type, &values, len, &nulls) {
                    return Ok(array);
                }
                let data = ArrayData::builder(data_type)
                    .len(len)
                    .add_buffer(values)
                    .nulls(nulls)
                    .build()?;
                make_array(data)
            }
            Builder::Utf8(mut b) => Arc::new(b.finish()),
            Builder::LargeUtf8(mut b) => Arc::new(b.finish()),
            Builder::Utf8View(mut b) => Arc::new(b.finish()),
            Builder::Binary(mut b) => Arc::new(b.finish()),
            Builder::LargeBinary(mut b) => Arc::new(b.finish()),
            Builder::BinaryView(mut b) => Arc::new(b.finish()),
            Builder::FixedBinary(mut b) => Arc::new(b.finish()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::KeyEncoder;
    use arrow::array::*;
    use arrow::datatypes::{Field, TimeUnit};
    use proptest::prelude::*;

    fn round_trip(fields: Vec<Field>, cols: Vec<ArrayRef>) {
        let fields: Vec<FieldRef> = fields.into_iter().map(Arc::new).collect();
        let keys = KeyEncoder::new(&fields)
            .unwrap()
            .encode_rows(&cols)
            .unwrap();
        let all: Vec<usize> = (0..fields.len()).collect();
        let decoder = Arc::new(KeyDecoder::new(&fields, &all).unwrap());
        let mut rows = decoder.rows();
        for k in &keys {
            rows.push(k).unwrap();
        }
        assert_eq!(rows.len(), keys.len());
        let got = rows.finish().unwrap();
        for (g, want) in got.iter().zip(&cols) {
            assert_eq!(g.to_data(), want.to_data(), "{}", want.data_type());
        }
    }

    #[test]
    fn every_key_type_decodes_to_what_was_encoded() {
        let n = |t: DataType| Field::new("c", t, true);
        let cases: Vec<(DataType, ArrayRef)> = vec![
            (
                DataType::Boolean,
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            ),
            (
                DataType::Int8,
                Arc::new(Int8Array::from(vec![Some(-128), None, Some(127)])),
            ),
            (
                DataType::Int16,
                Arc::new(Int16Array::from(vec![Some(-3), None, Some(9)])),
            ),
            (
                DataType::Int32,
                Arc::new(Int32Array::from(vec![Some(i32::MIN), None, Some(0)])),
            ),
            (
                DataType::Int64,
                Arc::new(Int64Array::from(vec![Some(i64::MAX), None, Some(-1)])),
            ),
            (
                DataType::UInt8,
                Arc::new(UInt8Array::from(vec![Some(255), None, Some(0)])),
            ),
            (
                DataType::UInt16,
                Arc::new(UInt16Array::from(vec![Some(7), None, Some(1)])),
            ),
            (
                DataType::UInt32,
                Arc::new(UInt32Array::from(vec![Some(u32::MAX), None])),
            ),
            (
                DataType::UInt64,
                Arc::new(UInt64Array::from(vec![Some(u64::MAX), None])),
            ),
            (
                DataType::Float32,
                Arc::new(Float32Array::from(vec![
                    Some(-0.0),
                    None,
                    Some(1.5),
                    Some(-7.25),
                ])),
            ),
            (
                DataType::Float64,
                Arc::new(Float64Array::from(vec![
                    Some(f64::NEG_INFINITY),
                    None,
                    Some(0.0),
                    Some(-1e-300),
                ])),
            ),
            (
                DataType::Date32,
                Arc::new(Date32Array::from(vec![Some(9000), None, Some(-1)])),
            ),
            (
                DataType::Date64,
                Arc::new(Date64Array::from(vec![Some(86_400_000), None])),
            ),
            (
                DataType::Time32(TimeUnit::Second),
                Arc::new(Time32SecondArray::from(vec![Some(3600), None])),
            ),
            (
                DataType::Time64(TimeUnit::Nanosecond),
                Arc::new(Time64NanosecondArray::from(vec![Some(5), None])),
            ),
            (
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![Some(-5), None, Some(1 << 50)])
                        .with_timezone("UTC"),
                ),
            ),
            (
                DataType::Duration(TimeUnit::Millisecond),
                Arc::new(DurationMillisecondArray::from(vec![Some(-9), None])),
            ),
            (
                DataType::Decimal128(15, 2),
                Arc::new(
                    Decimal128Array::from(vec![Some(-100), None, Some(i128::MAX / 3)])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ),
            (
                DataType::Utf8,
                Arc::new(StringArray::from(vec![
                    Some("a\0b"),
                    None,
                    Some(""),
                    Some("\0"),
                ])),
            ),
            (
                DataType::LargeUtf8,
                Arc::new(LargeStringArray::from(vec![Some("xyz"), None])),
            ),
            (
                DataType::Utf8View,
                Arc::new(StringViewArray::from(vec![
                    Some("a string longer than twelve bytes"),
                    None,
                    Some("\0\0"),
                ])),
            ),
            (
                DataType::Binary,
                Arc::new(BinaryArray::from(vec![Some(&[0u8, 255, 0][..]), None])),
            ),
            (
                DataType::LargeBinary,
                Arc::new(LargeBinaryArray::from(vec![Some(&[1u8][..]), None])),
            ),
            (
                DataType::BinaryView,
                Arc::new(BinaryViewArray::from(vec![Some(&[0u8, 0][..]), None])),
            ),
            (
                DataType::FixedSizeBinary(3),
                Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                        vec![Some(vec![0u8, 0, 1]), None].into_iter(),
                        3,
                    )
                    .unwrap(),
                ),
            ),
        ];
        for (t, col) in cases {
            // Alone, and between two other columns (self-delimiting encodings).
            round_trip(vec![n(t.clone())], vec![col.clone()]);
            let len = col.len();
            let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..len as i64));
            let text: ArrayRef = Arc::new(StringArray::from(vec!["tail"; len]));
            round_trip(
                vec![n(DataType::Int64), n(t), n(DataType::Utf8)],
                vec![ints, col, text],
            );
        }
    }

    #[test]
    fn wanted_columns_come_in_the_order_asked() {
        let fields: Vec<FieldRef> = vec![
            Arc::new(Field::new("a", DataType::Int32, false)),
            Arc::new(Field::new("b", DataType::Utf8, false)),
            Arc::new(Field::new("c", DataType::Int64, false)),
        ];
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StringArray::from(vec!["x", "y"])),
            Arc::new(Int64Array::from(vec![10, 20])),
        ];
        let keys = KeyEncoder::new(&fields)
            .unwrap()
            .encode_rows(&cols)
            .unwrap();
        let decoder = Arc::new(KeyDecoder::new(&fields, &[1, 0]).unwrap());
        let mut rows = decoder.rows();
        keys.iter().for_each(|k| rows.push(k).unwrap());
        let got = rows.finish().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].to_data(), cols[1].to_data());
        assert_eq!(got[1].to_data(), cols[0].to_data());
        // Nothing wanted: rows are still counted.
        let none = Arc::new(KeyDecoder::new(&fields, &[]).unwrap());
        let mut rows = none.rows();
        keys.iter().for_each(|k| rows.push(k).unwrap());
        assert_eq!(rows.len(), 2);
        assert!(rows.finish().unwrap().is_empty());
        assert!(KeyDecoder::new(&fields, &[3]).is_err());
    }

    #[test]
    fn malformed_keys_are_errors() {
        let fields: Vec<FieldRef> = vec![
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Field::new("s", DataType::Utf8, true)),
        ];
        let decoder = Arc::new(KeyDecoder::new(&fields, &[0, 1]).unwrap());
        let bad: [(&[u8], &str); 7] = [
            (&[], "ends before column 0"),
            (&[2], "null marker"),
            (&[1, 0, 0], "ends inside column 0"),
            (&[1, 0x80, 0, 0, 5, 3], "null marker"),
            (&[1, 0x80, 0, 0, 5, 1, b'a'], "unterminated"),
            (&[1, 0x80, 0, 0, 5, 1, 0, 7], "bad escape"),
            (&[1, 0x80, 0, 0, 5, 1, 0xC3, 0, 0], "UTF-8"),
        ];
        for (key, want) in bad {
            let err = decoder.rows().push(key).unwrap_err();
            assert!(err.contains(want), "{key:?}: {err}");
        }
        let err = decoder.rows().push(&[1, 0x80, 0, 0, 5, 0, 9]).unwrap_err();
        assert!(err.contains("after the key's last column"), "{err}");
        let mut ok = decoder.rows();
        ok.push(&[1, 0x80, 0, 0, 5, 1, b'a', 0, 0]).unwrap();
        ok.push(&[0, 0]).unwrap();
        let cols = ok.finish().unwrap();
        assert_eq!(
            cols[0]
                .as_primitive::<arrow::datatypes::Int32Type>()
                .value(0),
            5
        );
        assert!(cols[1].is_null(1));
    }

    #[test]
    fn first_column_len_is_the_first_columns_encoding() {
        let fields: Vec<FieldRef> = vec![
            Arc::new(Field::new("s", DataType::Utf8, true)),
            Arc::new(Field::new("a", DataType::Int64, true)),
        ];
        let s: ArrayRef = Arc::new(StringArray::from(vec![Some("x\0y"), None, Some("")]));
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let encoder = KeyEncoder::new(&fields).unwrap();
        let whole = encoder.encode_rows(&[s.clone(), a]).unwrap();
        let first = encoder.encode_rows(&[s]).unwrap();
        for (key, want) in whole.iter().zip(&first) {
            assert_eq!(first_column_len(&DataType::Utf8, key).unwrap(), want.len());
        }
        assert!(first_column_len(&DataType::Int64, &[1, 0, 0]).is_err());
    }

    proptest! {
        #[test]
        fn composite_keys_round_trip(
            rows in proptest::collection::vec(
                (any::<Option<i64>>(), any::<Option<String>>(), any::<Option<f64>>()),
                0..40,
            )
        ) {
            let a: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
            let s: ArrayRef =
                Arc::new(StringArray::from(rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>()));
            let f: ArrayRef = Arc::new(Float64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>()));
            round_trip(
                vec![
                    Field::new("a", DataType::Int64, true),
                    Field::new("s", DataType::Utf8, true),
                    Field::new("f", DataType::Float64, true),
                ],
                vec![a, s, f],
            );
        }

        #[test]
        fn arbitrary_bytes_never_panic(key in proptest::collection::vec(any::<u8>(), 0..40)) {
            let fields: Vec<FieldRef> = vec![
                Arc::new(Field::new("a", DataType::Int16, true)),
                Arc::new(Field::new("s", DataType::Utf8View, true)),
                Arc::new(Field::new("b", DataType::Boolean, true)),
            ];
            let decoder = Arc::new(KeyDecoder::new(&fields, &[2, 1, 0]).unwrap());
            let mut rows = decoder.rows();
            let _ = rows.push(&key);
        }
    }
}
