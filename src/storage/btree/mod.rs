//! Static B+tree indexes: bulk builder, node pages, and I/O-free search cursors.

pub mod builder;
pub mod cursor;
pub mod node;

pub use builder::{BTreeBuilder, TreeShape};
pub use cursor::{CountCursor, KeyRange, LastLeaf, LeafSink, RangeCursor};
pub use node::{RowId, SearchKeys};
