//! Layer 3: reading tables. Between the pages of [`crate::io`] and the plan nodes of
//! [`crate::exec`]: what a query reads, under which budget, and how.
//!
//! ```text
//!   OoodeRuntime (one per DataFusion RuntimeEnv): engines, buffer pool, Admission, tables
//!      │
//!   QueryIo (one per query): its share of admission, mode, counters
//!      │
//!   steps: lookup_leaves (B+tree walk, a leaf at a time), heap_page (page + permit),
//!          count, decode_rows          plan_time: range counts, read-ahead of small scans
//!      │
//!   TableIo: a table's page numbers -> file + offset, through the pool, verified once
//! ```

pub mod admission;
pub mod budget;
pub mod heap_reads;
pub mod idle_lane;
pub mod index_only;
pub mod merge;
pub mod plan_time;
pub mod remote;
pub mod runtime;
pub mod slots;
pub mod steps;
pub mod table_io;

pub use admission::{Admission, AdmissionWaits, Permit};
pub use budget::{InboxReader, OpenStream, QueryIo, Turn};
pub use plan_time::{IndexRanges, PlanCounts, PlanReads, ReadAhead, ScanEstimate};
pub use remote::RemoteTable;
pub use runtime::{OoodeRuntime, OperatorTasks};
pub use steps::{HeldPage, StepCtx, to_df};
pub use table_io::{CachedNode, Counters, FileKeys, TableIo};
