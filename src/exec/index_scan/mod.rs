//! Index scan: B+tree lookups for key ranges, heap pages fetched concurrently, residual
//! predicate applied to the rows.

mod exec;
mod stream;

pub use exec::{IndexScanExec, ScanEstimate};
pub use stream::{ScanPages, prefetch};
