//! Cuts a stream of row batches into groups that each fill one heap page.

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;

use super::page::{ColumnClass, HeapCodec, value_lengths};
use crate::storage::error::{Result, StorageError};

/// Row ids keep the slot in 16 bits, so a page holds at most this many rows.
pub const MAX_ROWS_PER_PAGE: usize = u16::MAX as usize + 1;

/// Packs rows, in arrival order, into page-sized batches.
#[derive(Debug)]
pub struct HeapPacker {
    codec: HeapCodec,
    pending: Vec<RecordBatch>,
    rows: usize,
    /// Bytes of the pending rows' values in each variable-width column.
    var_bytes: Vec<usize>,
    /// The same with the next row, to try.
    with_next: Vec<usize>,
}

impl HeapPacker {
    /// A packer for pages of `codec`.
    pub fn new(codec: HeapCodec) -> Self {
        let var_columns = codec
            .classes()
            .iter()
            .filter(|c| **c == ColumnClass::Var)
            .count();
        Self {
            codec,
            pending: Vec::new(),
            rows: 0,
            var_bytes: vec![0; var_columns],
            with_next: vec![0; var_columns],
        }
    }

    /// Adds `batch`; returns the pages it completed, each as the batch of its rows.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<Vec<RecordBatch>> {
        let n = batch.num_rows();
        let lengths: Vec<Vec<usize>> = self
            .codec
            .classes()
            .iter()
            .zip(batch.columns())
            .filter(|(class, _)| **class == ColumnClass::Var)
            .map(|(_, col)| value_lengths(col.as_ref()))
            .collect();
        let page_size = self.codec.page_size();
        let mut full = Vec::new();
        let mut start = 0;
        for i in 0..n {
            if !self.fits_with_row(&lengths, i) {
                if self.rows > 0 {
                    self.pending.push(batch.slice(start, i - start));
                    full.push(self.take_pending()?);
                    start = i;
                }
                if !self.fits_with_row(&lengths, i) {
                    return Err(StorageError::InvalidArgument(format!(
                        "a row of {} bytes does not fit in a {page_size} byte page; use a \
                         larger page size",
                        self.codec.bytes_needed(1, &self.with_next)
                    )));
                }
            }
            self.rows += 1;
            self.var_bytes.copy_from_slice(&self.with_next);
        }
        if start < n {
            self.pending.push(batch.slice(start, n - start));
        }
        Ok(full)
    }

    /// Whether the pending rows and row `i` of the batch whose variable-width values have
    /// `lengths` fit one page (leaves their variable-width bytes in `with_next`).
    fn fits_with_row(&mut self, lengths: &[Vec<usize>], i: usize) -> bool {
        for ((next, pending), column) in self.with_next.iter_mut().zip(&self.var_bytes).zip(lengths)
        {
            *next = pending + column[i];
        }
        self.rows < MAX_ROWS_PER_PAGE
            && self.codec.bytes_needed(self.rows + 1, &self.with_next) <= self.codec.page_size()
    }

    /// The last, partly filled page, if any rows are left.
    pub fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if self.rows == 0 {
            return Ok(None);
        }
        self.take_pending().map(Some)
    }

    fn take_pending(&mut self) -> Result<RecordBatch> {
        let batch = concat_batches(self.codec.schema(), &self.pending)?;
        self.pending.clear();
        self.rows = 0;
        self.var_bytes.fill(0);
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Date32Array, Decimal128Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn every_page_packed_encodes_when_text_shifts_a_wide_column() {
        // Text before a decimal (its values 16-byte aligned): the text's length moves the
        // decimal's padding, which a page's size must count.
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, false),
            Field::new("d", DataType::Decimal128(15, 2), true),
            Field::new("t", DataType::Date32, false),
        ]));
        for (page_size, step, modulus) in [4096, 8192]
            .into_iter()
            .flat_map(|p| (1..8).flat_map(move |s| (5..40).map(move |m| (p, s, m))))
        {
            let codec = HeapCodec::new(schema.clone(), page_size).unwrap();
            let mut packer = HeapPacker::new(codec.clone());
            let rows = 1500;
            let text: Vec<String> = (0..rows).map(|i| "x".repeat(i * step % modulus)).collect();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from_iter_values(&text)),
                    Arc::new(
                        Decimal128Array::from_iter(
                            (0..rows).map(|i| (i % 5 > 0).then_some(i as i128)),
                        )
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                    ),
                    Arc::new(Date32Array::from_iter_values(0..rows as i32)),
                ],
            )
            .unwrap();
            let mut pages = packer.push(&batch).unwrap();
            pages.extend(packer.finish().unwrap());
            assert_eq!(pages.iter().map(|p| p.num_rows()).sum::<usize>(), rows);
            for page in &pages {
                let mut buf = vec![0; page_size];
                codec.encode(page, &mut buf).unwrap();
            }
        }
    }
}
