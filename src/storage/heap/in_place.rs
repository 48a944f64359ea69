//! Fixed-width columns of a heap page read where they lie, without decoding the page.
//!
//! An index join's probe takes a handful of a page's rows. Decoding the page into Arrow
//! arrays first (an array, a buffer and their reference counts per column, a batch per
//! page), then gathering the rows from those arrays, was about a sixth of the CPU of a cold
//! join from the OS cache. A [`FixedLayout`] checks once where each column's values and
//! validity bits are in the page; rows are then copied straight from the page's bytes.
//! Only fixed-width columns (see [`ColumnClass::Fixed`]) can be read so.

use std::path::Path;

use arrow::datatypes::DataType;

use super::page::{ColumnClass, HeapCodec, directory_entry};
use crate::storage::error::{Result, StorageError};

/// Where one fixed-width column of a page lies in it, checked against the page's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedColumn {
    values_at: usize,
    width: usize,
    /// The validity bitmap's first byte, if the page has one for the column.
    nulls_at: Option<usize>,
}

impl FixedColumn {
    /// Bytes a value takes.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Whether the page holds a validity bitmap for the column (else every row is valid).
    pub fn has_nulls(&self) -> bool {
        self.nulls_at.is_some()
    }

    /// The bytes of row `row`'s value in `page` (the page the layout was made of; `row`
    /// below its row count), little endian as in an Arrow buffer.
    pub fn value<'a>(&self, page: &'a [u8], row: usize) -> &'a [u8] {
        let at = self.values_at + row * self.width;
        &page[at..at + self.width]
    }

    /// Whether row `row` is valid (not null).
    pub fn is_valid(&self, page: &[u8], row: usize) -> bool {
        self.nulls_at
            .is_none_or(|at| page[at + row / 8] & (1 << (row % 8)) != 0)
    }

    /// Row `row`'s value of a 64- or 32-bit integer column, widened (None for other widths).
    pub fn int_value(&self, page: &[u8], row: usize) -> Option<i64> {
        let v = self.value(page, row);
        Some(match self.width {
            8 => i64::from_le_bytes(v.try_into().ok()?),
            4 => i32::from_le_bytes(v.try_into().ok()?) as i64,
            _ => return None,
        })
    }
}

/// The fixed-width columns asked of one page: its row count and where each column lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedLayout {
    rows: usize,
    columns: smallvec::SmallVec<[FixedColumn; 4]>,
}

impl FixedLayout {
    /// Rows in the page.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The `i`-th column asked for.
    pub fn column(&self, i: usize) -> &FixedColumn {
        &self.columns[i]
    }
}

/// Whether `t` is a type whose values [`FixedLayout`] can hand out: fixed width, and stored
/// as Arrow stores it (booleans are bit-packed, so they are not).
pub fn readable_in_place(t: &DataType) -> bool {
    matches!(super::page::column_class(t), Some(ColumnClass::Fixed(_)))
}

impl HeapCodec {
    /// Where columns `projection` (table column indices, each of a type
    /// [`readable_in_place`]) lie in `page`, heap page `page_no` of `file`; every region checked
    /// to be inside the page, as decoding would. A damaged page gives an error, not a layout
    /// whose reads could fall outside it.
    pub fn fixed_layout(
        &self,
        page: &[u8],
        projection: &[usize],
        file: &Path,
        page_no: u64,
    ) -> Result<FixedLayout> {
        let bad = |why: String| StorageError::corrupted(file, Some(page_no), why);
        let rows = self.body_rows(page).map_err(bad)?;
        let mut columns = smallvec::SmallVec::with_capacity(projection.len());
        for &c in projection {
            let (Some(&ColumnClass::Fixed(width)), Some(field)) =
                (self.classes().get(c), self.schema().fields().get(c))
            else {
                return Err(StorageError::InvalidArgument(format!(
                    "column {c} cannot be read in place"
                )));
            };
            let column = fixed_column(page, c, rows, width, field.is_nullable())
                .map_err(|why| bad(format!("column '{}': {why}", field.name())))?;
            columns.push(column);
        }
        Ok(FixedLayout { rows, columns })
    }
}

/// Column `c` (of `width` bytes a value) of a page of `rows` rows, checked.
fn fixed_column(
    page: &[u8],
    c: usize,
    rows: usize,
    width: usize,
    nullable: bool,
) -> std::result::Result<FixedColumn, String> {
    let (nulls_at, values_at, values_len) = directory_entry(page, c)?;
    let inside = |at: usize, len: usize| at.checked_add(len).is_some_and(|end| end <= page.len());
    if values_len != rows * width {
        return Err(format!(
            "values region is {values_len} bytes, expected {}",
            rows * width
        ));
    }
    if !inside(values_at, values_len) {
        return Err(format!("region {values_at}+{values_len} outside the page"));
    }
    let nulls_at = match nulls_at {
        0 => None,
        _ if !nullable => return Err("nulls in a non-nullable column".into()),
        at if inside(at, rows.div_ceil(8)) => Some(at),
        at => return Err(format!("region {at}+{} outside the page", rows.div_ceil(8))),
    };
    Ok(FixedColumn {
        values_at,
        width,
        nulls_at,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, Decimal128Array, Int32Array, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::storage::heap::page::BODY_HEADER;
    use crate::storage::page::HEADER_LEN;

    fn codec() -> HeapCodec {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
            Field::new("d", DataType::Decimal128(15, 2), false),
        ]));
        HeapCodec::new(schema, 8192).unwrap()
    }

    fn page(codec: &HeapCodec, rows: i64) -> Vec<u8> {
        let n: Vec<Option<i32>> = (0..rows)
            .map(|i| (i % 3 != 0).then_some(i as i32 * 7))
            .collect();
        let batch = RecordBatch::try_new(
            codec.schema().clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
                Arc::new(arrow::array::StringArray::from_iter(
                    (0..rows).map(|i| Some(format!("row {i}"))),
                )),
                Arc::new(Int32Array::from(n)),
                Arc::new(
                    Decimal128Array::from_iter_values((0..rows).map(|i| i as i128 * 100 + 1))
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let mut bytes = vec![0u8; codec.page_size()];
        codec.encode(&batch, &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn values_read_in_place_are_the_decoded_values() {
        let codec = codec();
        let bytes = page(&codec, 50);
        let file = Path::new("t");
        let layout = codec.fixed_layout(&bytes, &[3, 0, 2], file, 1).unwrap();
        let decoded = codec.decode(&bytes, None, file, 1).unwrap();
        assert_eq!(layout.rows(), 50);
        let (d, k, n) = (layout.column(0), layout.column(1), layout.column(2));
        assert!(!k.has_nulls() && n.has_nulls());
        let ints = decoded
            .column(2)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        let decimals = decoded.column(3).as_any().downcast_ref::<Decimal128Array>();
        for row in 0..50 {
            assert_eq!(k.int_value(&bytes, row), Some(row as i64));
            assert_eq!(n.is_valid(&bytes, row), ints.is_valid(row), "row {row}");
            if ints.is_valid(row) {
                assert_eq!(n.int_value(&bytes, row), Some(ints.value(row) as i64));
            }
            let want = decimals.unwrap().value(row).to_le_bytes();
            assert_eq!(d.value(&bytes, row), want.as_slice());
        }
    }

    #[test]
    fn a_damaged_page_or_a_variable_width_column_is_an_error() {
        let codec = codec();
        let file = Path::new("t");
        let good = page(&codec, 20);
        let err = codec.fixed_layout(&good, &[1], file, 1).unwrap_err();
        assert!(err.to_string().contains("cannot be read in place"), "{err}");
        // Column 0's values region moved past the page's end.
        let mut bad = good.clone();
        let dir = HEADER_LEN + BODY_HEADER + 4;
        bad[dir..dir + 4].copy_from_slice(&(8190u32).to_le_bytes());
        let err = codec.fixed_layout(&bad, &[0], file, 7).unwrap_err();
        assert!(err.to_string().contains("outside the page"), "{err}");
        // A row count the values region does not hold.
        let mut bad = good.clone();
        bad[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&21u32.to_le_bytes());
        assert!(codec.fixed_layout(&bad, &[0], file, 7).is_err());
        // A truncated page.
        assert!(codec.fixed_layout(&good[..40], &[3], file, 7).is_err());
    }
}
