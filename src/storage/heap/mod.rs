//! Heap pages: a table's rows, clustered by its key, in a PAX layout.
//!
//! [`page`] encodes one page's rows and decodes a page straight into Arrow arrays;
//! [`packer`] cuts a stream of batches into page-sized groups of rows.

pub mod packer;
pub mod page;

pub use packer::HeapPacker;
pub use page::{HeapCodec, decode_row_count};
