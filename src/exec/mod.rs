//! Layer 3: the out-of-order runtime and the DataFusion plan nodes built on it.
//!
//! A query's ooode nodes decompose their work into small asynchronous steps ([`probe`]): walk
//! a B+tree to a key, read a heap page, decode rows. Each step issues one page read and
//! yields; the read's completion runs the next step. Thousands of steps are pending at once,
//! bounded by the query's budget of reads in flight ([`context::QueryIo`]), and whichever read
//! completes first is computed on first. `in_order` mode runs the same nodes with a budget of
//! one read and the synchronous engine: the paper's IODE baseline.
//!
//! Nodes: [`OoodeScanExec`] (full scan), [`IndexScanExec`] (key ranges of one index, residual
//! predicate), [`IndexJoinExec`] (index nested-loop join: inner, semi, anti, left outer).

pub mod config;
pub mod context;
pub mod index_join;
pub mod index_scan;
pub mod metrics;
pub mod probe;
pub mod scan;

/// Estimated output rows up to which an ooode node runs as one pipeline: one partition, no
/// round-robin hop to spread its rows over cores. A point query's few rows gain nothing from
/// more cores, and each hand-off between tasks adds a thread wake-up to its dependent reads.
pub const ONE_PIPELINE_ROWS: usize = 256;

pub use config::{ExecutionMode, IndexJoinMode, OoodeConfig};
pub use context::{OoodeRuntime, QueryIo};
pub use index_join::{IndexJoinExec, IndexJoinKind, InnerSide};
pub use index_scan::{IndexScanExec, ScanEstimate};
pub use scan::OoodeScanExec;
