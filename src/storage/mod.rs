//! Layer 1: the on-disk format of ooode tables (Arrow only, no DataFusion execution types).
//!
//! A table is a directory holding `manifest.json` and page files:
//!
//! ```text
//!   orders/
//!     manifest.json                  format version, schema, row count, page size, indexes ...
//!     heap.0.pages                   heap pages (rows clustered by the key, PAX layout)
//!     index_clustering.0.pages       sparse B+tree on the clustering key
//!     index_o_custkey.0.pages        dense B+tree on o_custkey
//! ```
//!
//! With several data paths, each segment has one file per path (`heap.0.pages`,
//! `heap.1.pages`, ...) and pages are striped over them ([`segment`]). Every page has a common
//! header with a checksum ([`page`]); heap pages are described in [`heap::page`], B+tree nodes in
//! [`btree::node`], index keys in [`key`]. `docs/format.md` collects the layouts.

pub mod btree;
pub mod checksum;
pub mod columnar_sums;
pub mod error;
pub mod heap;
pub mod key;
pub mod key_decode;
pub mod loader;
pub mod manifest;
pub mod page;
pub mod segment;
pub mod segments;
pub mod sort;
pub mod table;

pub use btree::{KeyRange, RowId};
pub use error::{Result, StorageError};
pub use key::KeyEncoder;
pub use loader::{LoadOptions, LoadPhase, LoadProgress, TableWriter, load_batches, load_stream};
pub use manifest::Manifest;
pub use table::{IndexHandle, Table};
