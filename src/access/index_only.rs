//! Index-only reads: the columns a dense index holds in its keys, decoded from its leaves.
//!
//! A secondary index's leaf entries carry the whole key, so a scan or a join's inner side
//! that needs only the index's columns (a composite index such as `(o_custkey, o_orderkey)`
//! for a join from customers to their orders' keys) reads leaves and no heap page: one
//! dependent read fewer per row, and a leaf holds hundreds of rows where the heap holds one
//! of them per page read. A sparse (clustering) index names pages, not rows, so it never
//! covers.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::steps::{Columns, to_df};
use super::table_io::TableIo;
use crate::storage::Table;
use crate::storage::key_decode::{KeyDecoder, KeyRows};

/// For each of `columns` (table columns), its position in the key of the `index`-th index of
/// `table`; None when the index is sparse or lacks one of them.
pub fn covering_positions(table: &Table, index: usize, columns: &[usize]) -> Option<Vec<usize>> {
    let meta = &table.indexes().get(index)?.meta;
    if meta.is_sparse() {
        return None;
    }
    let key: Vec<usize> = meta
        .columns
        .iter()
        .map(|c| table.schema().index_of(c).ok())
        .collect::<Option<_>>()?;
    columns
        .iter()
        .map(|c| key.iter().position(|k| k == c))
        .collect()
}

/// Whether the `index`-th index of `table` holds every one of `columns` in its keys.
pub fn covers(table: &Table, index: usize, columns: &[usize]) -> bool {
    covering_positions(table, index, columns).is_some()
}

/// Some columns of a table, read from an index's keys.
#[derive(Debug)]
pub struct IndexColumns {
    decoder: Arc<KeyDecoder>,
    schema: SchemaRef,
}

impl IndexColumns {
    /// `columns` of `table` from the keys of its `index`-th index; None when that index does
    /// not cover them.
    pub fn new(table: &TableIo, index: usize, columns: &Columns) -> Result<Option<Self>> {
        let t = table.table();
        let Some(wanted) = covering_positions(t, index, &columns.indices) else {
            return Ok(None);
        };
        let fields: Vec<_> = t.indexes()[index]
            .meta
            .columns
            .iter()
            .map(|c| Ok(Arc::new(t.schema().field_with_name(c)?.clone())))
            .collect::<Result<_>>()?;
        let decoder = KeyDecoder::new(&fields, &wanted).map_err(to_df)?;
        Ok(Some(Self {
            decoder: Arc::new(decoder),
            schema: columns.schema.clone(),
        }))
    }

    /// The decoder of the keys.
    pub fn decoder(&self) -> &Arc<KeyDecoder> {
        &self.decoder
    }

    /// The decoded rows as a batch of the columns.
    pub fn batch(&self, rows: KeyRows) -> Result<RecordBatch> {
        let n = rows.len();
        let columns = rows.finish()?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}
