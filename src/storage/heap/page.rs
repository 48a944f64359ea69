//! Encoding and decoding of one heap page.
//!
//! ```text
//! // Layout: heap page body (after the 24-byte common header, little endian)
//! //   24..28   row count n                        u32
//! //   28..32   column count c                     u32
//! //   32..     column directory, 12 bytes a column:
//! //              nulls offset   u32  (0: no nulls in this page; else a validity bitmap of
//! //                                   ceil(n/8) bytes, LSB first, 1 = valid, as in Arrow)
//! //              values offset  u32
//! //              values length  u32
//! //   then the regions, each starting on an 8-byte boundary, column by column:
//! //     fixed width (ints, floats, dates, times, timestamps, decimals, fixed-size binary):
//! //              n values of the type's width, little endian, as in an Arrow values buffer
//! //     boolean: ceil(n/8) bytes of bits, LSB first
//! //     strings and binary (Utf8, LargeUtf8, Utf8View, Binary, ...):
//! //              n+1 u32 offsets from the start of the data, then the data bytes
//! //   the rest of the page is zero
//! ```
//!
//! Each region has exactly the bytes of the Arrow buffer it becomes, so decoding is a bounds
//! check and a copy per column (or a slice of the page, for a reader that drops the batch soon). Decoding validates offsets and UTF-8 (through Arrow's validating
//! `ArrayData` builder) so damaged bytes give an error, not a panic.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayData, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{DataType, SchemaRef};

use crate::storage::error::{Result, StorageError};
use crate::storage::page::{HEADER_LEN, read_u32};

pub(super) const BODY_HEADER: usize = 8;
const DIR_ENTRY: usize = 12;
const REGION_ALIGN: usize = 8;

/// How a column's values are laid out in a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnClass {
    /// Fixed width in bytes.
    Fixed(usize),
    /// Bit-packed booleans.
    Bool,
    /// Offsets + bytes.
    Var,
}

/// The layout class of `t`, or None if heap pages cannot store it.
pub fn column_class(t: &DataType) -> Option<ColumnClass> {
    use DataType::*;
    Some(match t {
        Boolean => ColumnClass::Bool,
        Int8 | UInt8 => ColumnClass::Fixed(1),
        Int16 | UInt16 | Float16 => ColumnClass::Fixed(2),
        Int32 | UInt32 | Float32 | Date32 | Time32(_) | Decimal32(_, _) => ColumnClass::Fixed(4),
        Int64
        | UInt64
        | Float64
        | Date64
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_)
        | Decimal64(_, _) => ColumnClass::Fixed(8),
        Decimal128(_, _) => ColumnClass::Fixed(16),
        Decimal256(_, _) => ColumnClass::Fixed(32),
        FixedSizeBinary(w) if *w > 0 => ColumnClass::Fixed(*w as usize),
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView => ColumnClass::Var,
        _ => return None,
    })
}

fn align(n: usize) -> usize {
    align_to(n, REGION_ALIGN)
}

fn align_to(n: usize, unit: usize) -> usize {
    n.div_ceil(unit) * unit
}

/// Where the values region of a column of `class` starts: wide values (decimal128 and 256)
/// on 16 bytes, the alignment Arrow requires of them, so a page's slice serves as their
/// buffer without a copy; the others on [`REGION_ALIGN`].
fn values_align(class: ColumnClass) -> usize {
    match class {
        ColumnClass::Fixed(w) if w >= 16 => 16,
        _ => REGION_ALIGN,
    }
}

/// Encoder/decoder of heap pages for one table schema.
#[derive(Debug, Clone)]
pub struct HeapCodec {
    schema: SchemaRef,
    classes: Vec<ColumnClass>,
    page_size: usize,
}

impl HeapCodec {
    /// A codec for `schema`; fails naming the first column whose type pages cannot store.
    pub fn new(schema: SchemaRef, page_size: usize) -> Result<Self> {
        let classes = schema
            .fields()
            .iter()
            .map(|f| {
                column_class(f.data_type()).ok_or_else(|| StorageError::UnsupportedType {
                    column: f.name().clone(),
                    data_type: f.data_type().clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            schema,
            classes,
            page_size,
        })
    }

    /// The table schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Column layout classes, in schema order.
    pub fn classes(&self) -> &[ColumnClass] {
        &self.classes
    }

    /// Bytes a page needs for `rows` rows whose variable-width columns hold `var_bytes[k]`
    /// bytes in the `k`-th of them: the layout [`encode`](Self::encode) writes, region by
    /// region with its alignment (an upper bound: every nullable column is counted with a
    /// bitmap). The data of a variable-width column shifts every region after it, so their
    /// padding depends on it: a total of the variable-width bytes cannot tell.
    pub fn bytes_needed(&self, rows: usize, var_bytes: &[usize]) -> usize {
        let mut total = HEADER_LEN + BODY_HEADER + DIR_ENTRY * self.classes.len();
        let mut var_columns = var_bytes.iter();
        for (class, field) in self.classes.iter().zip(self.schema.fields()) {
            if field.is_nullable() {
                total = align(total) + rows.div_ceil(8);
            }
            total = align_to(total, values_align(*class))
                + match class {
                    ColumnClass::Fixed(w) => rows * w,
                    ColumnClass::Bool => rows.div_ceil(8),
                    ColumnClass::Var => 4 * (rows + 1) + var_columns.next().copied().unwrap_or(0),
                };
        }
        total
    }

    /// Writes the body of a heap page holding all rows of `batch` into `page` (zeroed, of the
    /// codec's page size). The caller seals the header. Fails if the rows do not fit.
    pub fn encode(&self, batch: &RecordBatch, page: &mut [u8]) -> Result<()> {
        let n = batch.num_rows();
        let ncols = self.classes.len();
        let page_len = page.len();
        let too_big = || {
            StorageError::InvalidArgument(format!(
                "{n} rows do not fit in a {page_len} byte page (a single row larger than a page \
                 needs a larger ooode.page_size)"
            ))
        };
        page[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&(n as u32).to_le_bytes());
        page[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&(ncols as u32).to_le_bytes());
        let mut at = HEADER_LEN + BODY_HEADER + DIR_ENTRY * ncols;
        for (c, (class, array)) in self.classes.iter().zip(batch.columns()).enumerate() {
            let dir = HEADER_LEN + BODY_HEADER + DIR_ENTRY * c;
            let mut nulls_at = 0usize;
            if let Some(nulls) = array.logical_nulls().filter(|n| n.null_count() > 0) {
                at = align(at);
                let bits = nulls.inner().sliced();
                let len = n.div_ceil(8);
                page.get_mut(at..at + len)
                    .ok_or_else(too_big)?
                    .copy_from_slice(&bits.as_slice()[..len]);
                nulls_at = at;
                at += len;
            }
            at = align_to(at, values_align(*class));
            let values_at = at;
            match class {
                ColumnClass::Fixed(w) => {
                    let data = array.to_data();
                    let bytes =
                        &data.buffers()[0].as_slice()[data.offset() * w..(data.offset() + n) * w];
                    page.get_mut(at..at + bytes.len())
                        .ok_or_else(too_big)?
                        .copy_from_slice(bytes);
                    at += bytes.len();
                }
                ColumnClass::Bool => {
                    let bits = array.as_boolean().values().sliced();
                    let len = n.div_ceil(8);
                    page.get_mut(at..at + len)
                        .ok_or_else(too_big)?
                        .copy_from_slice(&bits.as_slice()[..len]);
                    at += len;
                }
                ColumnClass::Var => {
                    let offsets_len = 4 * (n + 1);
                    let data_start = at + offsets_len;
                    if data_start > page.len() {
                        return Err(too_big());
                    }
                    let mut data_at = data_start;
                    let mut fits = true;
                    let mut row = 0usize;
                    for_each_bytes(array.as_ref(), |value| {
                        let off = (data_at - data_start) as u32;
                        page[at + 4 * row..at + 4 * row + 4].copy_from_slice(&off.to_le_bytes());
                        row += 1;
                        match page.get_mut(data_at..data_at + value.len()) {
                            Some(dst) if fits => {
                                dst.copy_from_slice(value);
                                data_at += value.len();
                            }
                            _ => fits = false,
                        }
                    });
                    if !fits {
                        return Err(too_big());
                    }
                    let end = (data_at - data_start) as u32;
                    page[at + 4 * n..at + 4 * n + 4].copy_from_slice(&end.to_le_bytes());
                    at = data_at;
                }
            }
            page[dir..dir + 4].copy_from_slice(&(nulls_at as u32).to_le_bytes());
            page[dir + 4..dir + 8].copy_from_slice(&(values_at as u32).to_le_bytes());
            page[dir + 8..dir + 12].copy_from_slice(&((at - values_at) as u32).to_le_bytes());
        }
        if at > page.len() {
            return Err(too_big());
        }
        Ok(())
    }

    /// Decodes the columns `projection` (indices into the table schema; all when None) of a
    /// verified heap page. `file` and `page_no` name the page in errors.
    pub fn decode(
        &self,
        page: &[u8],
        projection: Option<&[usize]>,
        file: &Path,
        page_no: u64,
    ) -> Result<RecordBatch> {
        let all: Vec<usize>;
        let projection = match projection {
            Some(p) => p,
            None => {
                all = (0..self.classes.len()).collect();
                &all
            }
        };
        let fields = projection
            .iter()
            .map(|&c| {
                self.schema.fields().get(c).cloned().ok_or_else(|| {
                    StorageError::InvalidArgument(format!("column index {c} out of range"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        self.decode_projected(page, projection, &schema, file, page_no)
    }

    /// [`Self::decode`] of columns `projection` whose schema the caller built once
    /// (`schema` must be the table schema projected to `projection`): a page decoded per read
    /// then allocates no schema.
    pub fn decode_projected(
        &self,
        page: &[u8],
        projection: &[usize],
        schema: &arrow::datatypes::SchemaRef,
        file: &Path,
        page_no: u64,
    ) -> Result<RecordBatch> {
        let source = Source::Copied(page);
        self.decode_source(&source, projection, schema, file, page_no)
    }

    /// [`Self::decode_projected`] whose columns are slices of `page` itself, not copies: for
    /// a caller that reads a few rows of the batch and drops it (an index join's probe reads a
    /// handful of a page's rows; copying the whole page's columns first was a tenth of its
    /// CPU). The batch holds the page's bytes while it lives.
    pub fn decode_projected_shared(
        &self,
        page: &Buffer,
        projection: &[usize],
        schema: &arrow::datatypes::SchemaRef,
        file: &Path,
        page_no: u64,
    ) -> Result<RecordBatch> {
        let source = Source::Shared(page);
        self.decode_source(&source, projection, schema, file, page_no)
    }

    fn decode_source(
        &self,
        source: &Source<'_>,
        projection: &[usize],
        schema: &arrow::datatypes::SchemaRef,
        file: &Path,
        page_no: u64,
    ) -> Result<RecordBatch> {
        let page = source.bytes();
        let bad = |why: String| StorageError::corrupted(file, Some(page_no), why);
        let n = self.body_rows(page).map_err(bad)?;
        if schema.fields().len() != projection.len() {
            return Err(StorageError::InvalidArgument(format!(
                "{} columns asked for with a schema of {}",
                projection.len(),
                schema.fields().len()
            )));
        }
        let mut columns = Vec::with_capacity(projection.len());
        for (&c, field) in projection.iter().zip(schema.fields()) {
            if c >= self.classes.len() {
                return Err(StorageError::InvalidArgument(format!(
                    "column index {c} out of range"
                )));
            }
            let array = self
                .decode_column(source, c, n)
                .map_err(|why| bad(format!("column '{}': {why}", field.name())))?;
            columns.push(array);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        RecordBatch::try_new_with_options(schema.clone(), columns, &options)
            .map_err(|e| bad(format!("rows do not form a batch: {e}")))
    }

    /// The row count of `page`, checked against the table's columns and the page's size.
    pub(super) fn body_rows(&self, page: &[u8]) -> std::result::Result<usize, String> {
        let n = decode_row_count(page).ok_or("no row count")? as usize;
        let ncols = read_u32(page, HEADER_LEN + 4).unwrap_or(0) as usize;
        if ncols != self.classes.len() {
            return Err(format!(
                "page has {ncols} columns, the table has {}",
                self.classes.len()
            ));
        }
        // A page cannot hold more rows than bits: bounds the allocations below.
        if n > page.len() * 8 {
            return Err(format!("row count {n} larger than the page can hold"));
        }
        Ok(n)
    }

    fn decode_column(&self, source: &Source<'_>, c: usize, n: usize) -> Result<ArrayRef, String> {
        let (nulls_at, values_at, values_len) = directory_entry(source.bytes(), c)?;
        let nulls = if nulls_at == 0 {
            None
        } else {
            let bits = source.region(nulls_at, n.div_ceil(8))?;
            Some(NullBuffer::new(BooleanBuffer::new(bits, 0, n)))
        };
        let field = &self.schema.fields()[c];
        if nulls.is_some() && !field.is_nullable() {
            return Err("nulls in a non-nullable column".into());
        }
        let expect_len = |want: usize| {
            if values_len == want {
                Ok(())
            } else {
                Err(format!(
                    "values region is {values_len} bytes, expected {want}"
                ))
            }
        };
        let target = field.data_type().clone();
        let data = match self.classes[c] {
            ColumnClass::Fixed(w) => {
                expect_len(n * w)?;
                let values = source.region(values_at, values_len)?;
                if let Some(array) = primitive_array(&target, &values, n, &nulls) {
                    return Ok(array);
                }
                ArrayData::builder(target.clone()).add_buffer(values)
            }
            ColumnClass::Bool => {
                expect_len(n.div_ceil(8))?;
                ArrayData::builder(target.clone()).add_buffer(source.region(values_at, values_len)?)
            }
            ColumnClass::Var => {
                let offsets_len = 4 * (n + 1);
                if values_len < offsets_len {
                    return Err("offsets region shorter than the row count".into());
                }
                let stored = match target {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
                    _ => DataType::Binary,
                };
                ArrayData::builder(stored)
                    .add_buffer(source.region(values_at, offsets_len)?)
                    .add_buffer(source.region(values_at + offsets_len, values_len - offsets_len)?)
            }
        };
        let data = data
            .len(n)
            .nulls(nulls)
            // Regions start aligned for their type (see `values_align`); pages written
            // before wide values were aligned to 16 need a copy of those.
            .align_buffers(true)
            .build()
            .map_err(|e| format!("invalid values: {e}"))?;
        let array = arrow::array::make_array(data);
        if array.data_type() == &target {
            Ok(array)
        } else {
            arrow::compute::cast(&array, &target).map_err(|e| format!("cannot convert: {e}"))
        }
    }
}

/// Column `c`'s entry in `page`'s column directory: where its validity bitmap starts (0:
/// none), where its values start, and their length in bytes.
pub(super) fn directory_entry(page: &[u8], c: usize) -> Result<(usize, usize, usize), String> {
    let dir = HEADER_LEN + BODY_HEADER + DIR_ENTRY * c;
    let read = |at| {
        read_u32(page, at)
            .map(|v| v as usize)
            .ok_or("directory out of page")
    };
    Ok((read(dir)?, read(dir + 4)?, read(dir + 8)?))
}

/// `n` values of `t` in `values` (checked to hold exactly that) with `nulls`, as an array
/// built directly for the common fixed-width types: `ArrayData`'s generic validation, which
/// allocates a layout per column, was a tenth of decoding a page. None for other types, or
/// values not aligned for their type (those take the generic path, which copies them).
pub(crate) fn primitive_array(
    t: &DataType,
    values: &Buffer,
    n: usize,
    nulls: &Option<NullBuffer>,
) -> Option<ArrayRef> {
    use arrow::array::PrimitiveArray;
    use arrow::buffer::ScalarBuffer;
    use arrow::datatypes::{
        ArrowPrimitiveType, Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type,
    };
    fn build<T: ArrowPrimitiveType>(
        t: &DataType,
        values: &Buffer,
        n: usize,
        nulls: &Option<NullBuffer>,
    ) -> Option<ArrayRef> {
        let width = std::mem::size_of::<T::Native>();
        let aligned = values
            .as_ptr()
            .align_offset(std::mem::align_of::<T::Native>())
            == 0;
        if !aligned || values.len() != n * width {
            return None;
        }
        let array =
            PrimitiveArray::<T>::try_new(ScalarBuffer::new(values.clone(), 0, n), nulls.clone())
                .ok()?;
        Some(Arc::new(array.with_data_type(t.clone())))
    }
    match t {
        DataType::Int64 => build::<Int64Type>(t, values, n, nulls),
        DataType::Int32 => build::<Int32Type>(t, values, n, nulls),
        DataType::Float64 => build::<Float64Type>(t, values, n, nulls),
        DataType::Date32 => build::<Date32Type>(t, values, n, nulls),
        DataType::Decimal128(_, _) => build::<Decimal128Type>(t, values, n, nulls),
        _ => None,
    }
}

/// Where a decoded column's buffers come from.
enum Source<'a> {
    /// Copies of the page's bytes: the batch outlives the page.
    Copied(&'a [u8]),
    /// Slices of the page itself (no copy): the batch holds the page.
    Shared(&'a Buffer),
}

impl Source<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Copied(page) => page,
            Self::Shared(page) => page.as_slice(),
        }
    }

    /// The `len` bytes at `at` as a buffer; an error when they are not all in the page.
    fn region(&self, at: usize, len: usize) -> Result<Buffer, String> {
        let end = at.checked_add(len).ok_or("region overflows")?;
        if end > self.bytes().len() {
            return Err(format!("region {at}+{len} outside the page"));
        }
        Ok(match self {
            Self::Copied(page) => Buffer::from_slice_ref(&page[at..end]),
            Self::Shared(page) => page.slice_with_length(at, len),
        })
    }
}

/// Asks the CPU to bring the lines of column `column`'s values in `page` into its cache, at
/// most `max_lines` of them, without waiting for them. Reads the page's column directory
/// (which should be in the cache already); a damaged directory only limits what is fetched.
pub fn prefetch_values(page: &[u8], column: usize, max_lines: usize) {
    let entry = HEADER_LEN + BODY_HEADER + column * DIR_ENTRY;
    let (Some(at), Some(len)) = (read_u32(page, entry + 4), read_u32(page, entry + 8)) else {
        return;
    };
    let end = (at as usize).saturating_add(len as usize).min(page.len());
    if let Some(values) = page.get(at as usize..end) {
        crate::storage::page::prefetch(values, max_lines);
    }
}

/// Row count of a heap page (header field), without verifying the page.
pub fn decode_row_count(page: &[u8]) -> Option<u32> {
    read_u32(page, HEADER_LEN)
}

/// Calls `f` with the bytes of every value of a string or binary array, in order; nulls give an
/// empty slice.
pub(crate) fn for_each_bytes(array: &dyn Array, mut f: impl FnMut(&[u8])) {
    macro_rules! each {
        ($a:expr) => {{
            let a = $a;
            for i in 0..a.len() {
                f(if a.is_null(i) {
                    &[]
                } else {
                    a.value(i).as_ref()
                })
            }
        }};
    }
    match array.data_type() {
        DataType::Utf8 => each!(array.as_string::<i32>()),
        DataType::LargeUtf8 => each!(array.as_string::<i64>()),
        DataType::Utf8View => each!(array.as_string_view()),
        DataType::Binary => each!(array.as_binary::<i32>()),
        DataType::LargeBinary => each!(array.as_binary::<i64>()),
        DataType::BinaryView => each!(array.as_binary_view()),
        other => unreachable!("for_each_bytes on {other}: HeapCodec::new rejects it"),
    }
}

/// Byte length of every value of a string or binary array (0 for nulls).
pub(crate) fn value_lengths(array: &dyn Array) -> Vec<usize> {
    let mut lens = Vec::with_capacity(array.len());
    for_each_bytes(array, |v| lens.push(v.len()));
    lens
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Decimal128Array, Int64Array, StringArray, StringViewArray};
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn prefetching_a_column_of_any_bytes_never_panics() {
        let (_, _, page) = sample();
        for column in 0..8 {
            prefetch_values(&page, column, 16);
        }
        // A directory entry pointing past the page, a length that overflows, a short page.
        let mut bad = page.clone();
        let entry = HEADER_LEN + BODY_HEADER;
        bad[entry + 4..entry + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        bad[entry + 8..entry + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        prefetch_values(&bad, 0, 16);
        prefetch_values(&page[..entry + 6], 0, 16);
        prefetch_values(&[], 3, 16);
    }

    fn sample() -> (HeapCodec, RecordBatch, Vec<u8>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("flag", DataType::Boolean, false),
            Field::new("price", DataType::Decimal128(15, 2), false),
            Field::new("name", DataType::Utf8, true),
            Field::new("note", DataType::Utf8View, false),
        ]));
        let rows = 37;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter(
                    (0..rows).map(|i| (i % 5 != 0).then_some(i * 1000)),
                )),
                Arc::new(BooleanArray::from_iter((0..rows).map(|i| Some(i % 3 == 0)))),
                Arc::new(
                    Decimal128Array::from_iter_values((0..rows).map(|i| i as i128 * 7 - 100))
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
                Arc::new(StringArray::from_iter(
                    (0..rows).map(|i| (i % 4 != 1).then(|| format!("n{i}"))),
                )),
                Arc::new(StringViewArray::from_iter_values(
                    (0..rows).map(|i| format!("a longer note, number {i}")),
                )),
            ],
        )
        .unwrap();
        let codec = HeapCodec::new(schema, 8192).unwrap();
        let mut page = vec![0u8; 8192];
        codec.encode(&batch, &mut page).unwrap();
        (codec, batch, page)
    }

    #[test]
    fn shared_decode_equals_the_copy_and_points_into_the_page() {
        let (codec, batch, page) = sample();
        let schema = codec.schema().clone();
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        let file = Path::new("t");
        let copied = codec
            .decode_projected(&page, &all, &schema, file, 1)
            .unwrap();
        let shared_page = aligned(&page);
        let shared = codec
            .decode_projected_shared(&shared_page, &all, &schema, file, 1)
            .unwrap();
        assert_eq!(copied, batch);
        assert_eq!(shared, batch);
        // The ids and the decimals (which Arrow wants on 16 bytes) are slices of the page's
        // bytes, not copies.
        let range = shared_page.as_ptr_range();
        for c in [0, 2] {
            let values = shared.column(c).to_data().buffers()[0].as_ptr();
            assert!(range.contains(&values), "column {c} lies in the page");
        }
    }

    /// `page` in a buffer aligned as pages read from disk are.
    fn aligned(page: &[u8]) -> Buffer {
        let mut buf = arrow::buffer::MutableBuffer::from_len_zeroed(page.len());
        buf.as_slice_mut().copy_from_slice(page);
        buf.into()
    }

    #[test]
    fn pages_with_wide_values_on_eight_bytes_still_decode() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("price", DataType::Decimal128(15, 2), false),
        ]));
        let prices = Decimal128Array::from_iter_values([1, -20, 300])
            .with_precision_and_scale(15, 2)
            .unwrap();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(arrow::array::Int32Array::from(vec![1, 2, 3])),
                Arc::new(prices),
            ],
        )
        .unwrap();
        let codec = HeapCodec::new(schema.clone(), 8192).unwrap();
        let mut page = vec![0u8; 8192];
        codec.encode(&batch, &mut page).unwrap();
        // Three i32 end at 56 + 12 = 68: the decimals start at 80 now, at 72 before.
        let dir = HEADER_LEN + BODY_HEADER + DIR_ENTRY + 4;
        assert_eq!(read_u32(&page, dir), Some(80));
        page.copy_within(80..80 + 48, 72);
        page[dir..dir + 4].copy_from_slice(&72u32.to_le_bytes());
        let shared_page = aligned(&page);
        let file = Path::new("t");
        let shared = codec
            .decode_projected_shared(&shared_page, &[0, 1], &schema, file, 1)
            .unwrap();
        assert_eq!(shared, batch);
        let values = shared.column(1).to_data().buffers()[0].as_ptr();
        assert_eq!(values.align_offset(16), 0, "copied to its alignment");
        assert_eq!(codec.decode(&page, None, file, 1).unwrap(), batch);
    }

    #[test]
    fn a_region_outside_the_page_is_an_error_on_both_paths() {
        let (codec, _, mut page) = sample();
        let schema = codec.schema().clone();
        // The values offset of column 3 ("name") points past the page.
        let dir = HEADER_LEN + BODY_HEADER + DIR_ENTRY * 3 + 4;
        page[dir..dir + 4].copy_from_slice(&9000u32.to_le_bytes());
        let file = Path::new("t");
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        let copied = codec.decode_projected(&page, &all, &schema, file, 4);
        let shared_page = Buffer::from(page);
        let shared = codec.decode_projected_shared(&shared_page, &all, &schema, file, 4);
        for result in [copied, shared] {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("column 'name'"), "{err}");
            assert!(err.contains("outside the page"), "{err}");
        }
    }
}
