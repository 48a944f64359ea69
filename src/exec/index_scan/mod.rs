//! Index scan: B+tree lookups for key ranges, heap pages fetched concurrently, residual
//! predicate applied to the rows. Its loop (`stream`) also runs heap scans.

mod exec;
pub(crate) mod stream;

pub use exec::{IndexScanBuilder, IndexScanExec};
