//! Full scan of an ooode table (what the provider plans; the optimizer may replace it).

mod exec;

pub use exec::{ColumnarScan, OoodeScanExec};
