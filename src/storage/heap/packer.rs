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
    var_bytes: usize,
}

impl HeapPacker {
    /// A packer for pages of `codec`.
    pub fn new(codec: HeapCodec) -> Self {
        Self {
            codec,
            pending: Vec::new(),
            rows: 0,
            var_bytes: 0,
        }
    }

    /// Adds `batch`; returns the pages it completed, each as the batch of its rows.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<Vec<RecordBatch>> {
        let n = batch.num_rows();
        let mut row_var = vec![0usize; n];
        for (class, col) in self.codec.classes().iter().zip(batch.columns()) {
            if *class == ColumnClass::Var {
                for (acc, len) in row_var.iter_mut().zip(value_lengths(col.as_ref())) {
                    *acc += len;
                }
            }
        }
        let page_size = self.codec.page_size();
        let mut full = Vec::new();
        let mut start = 0;
        for (i, &var) in row_var.iter().enumerate() {
            if self.rows == MAX_ROWS_PER_PAGE
                || self.codec.bytes_needed(self.rows + 1, self.var_bytes + var) > page_size
            {
                if self.rows == 0 {
                    return Err(StorageError::InvalidArgument(format!(
                        "a row of {} bytes does not fit in a {page_size} byte page; use a \
                         larger page size",
                        self.codec.bytes_needed(1, var)
                    )));
                }
                self.pending.push(batch.slice(start, i - start));
                full.push(self.take_pending()?);
                start = i;
            }
            self.rows += 1;
            self.var_bytes += var;
        }
        if start < n {
            self.pending.push(batch.slice(start, n - start));
        }
        Ok(full)
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
        self.var_bytes = 0;
        Ok(batch)
    }
}
