//! Heap pages: a table's rows, clustered by its key, in a PAX layout.
//!
//! [`page`] encodes one page's rows and decodes a page straight into Arrow arrays;
//! [`in_place`] reads fixed-width values of a page where they lie; [`packer`] cuts a stream of batches into page-sized groups of rows.

pub mod in_place;
pub mod packer;
pub mod page;

pub use in_place::{FixedColumn, FixedLayout, readable_in_place};
pub use packer::HeapPacker;
pub use page::{HeapCodec, decode_row_count};
