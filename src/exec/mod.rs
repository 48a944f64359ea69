//! Layer 4: the DataFusion plan nodes, built on [`crate::access`].
//!
//! Each node runs its work as a task of its own that polls many small steps at once (walk a
//! B+tree to a key, read a heap page, decode rows): thousands of steps are pending, bounded by
//! the query's budget of reads in flight, and whichever read completes first is computed on
//! first. `in_order` mode runs the same nodes with a budget of one read and the synchronous
//! engine: the paper's IODE baseline.
//!
//! Nodes: [`OoodeScanExec`] (full scan), [`IndexScanExec`] (key ranges of one index, residual
//! predicate), [`IndexJoinExec`] (index nested-loop join: inner, semi, anti, left outer).

pub mod index_join;
pub mod index_scan;
pub mod metrics;
pub mod scan;

/// Estimated output rows up to which an ooode node runs as one pipeline: one partition, no
/// round-robin hop to spread its rows over cores. A point query's few rows gain nothing from
/// more cores, and each hand-off between tasks adds a thread wake-up to its dependent reads.
pub const ONE_PIPELINE_ROWS: usize = 256;

/// Bytes of output a node queues before it stops starting new work (reads already in flight
/// still complete and queue their rows): what a slow consumer can make a node hold.
pub const OUTPUT_BYTES: usize = 4 << 20;

/// Room reserved in a node's output channel for one batch (or the consumer gone).
pub(crate) type Reserved<'a> = std::result::Result<
    tokio::sync::mpsc::Permit<'a, datafusion::common::Result<arrow::array::RecordBatch>>,
    tokio::sync::mpsc::error::SendError<()>,
>;

/// The task of one partition of an ooode node: runs `work` with the query's turn among long
/// queries (`ooode.max_long_queries`; the work takes it while it reads and gives it up while
/// it only waits for its consumer), its reads batched per poll, and notes when it ended.
pub(crate) fn partition_task<W, F>(
    query: std::sync::Arc<crate::access::QueryIo>,
    work: W,
) -> impl std::future::Future<Output = datafusion::common::Result<()>> + Send + 'static
where
    W: FnOnce(crate::access::Turn) -> F + Send + 'static,
    F: std::future::Future<Output = datafusion::common::Result<()>> + Send + 'static,
{
    crate::io::batch::Batched(Box::pin(async move {
        let done = work(query.turn()).await;
        query.note_work_done();
        done
    }))
}

pub use crate::access::ScanEstimate;
pub use crate::config::{ExecutionMode, IndexJoinMode, OoodeConfig};
pub use index_join::{IndexJoinBuilder, IndexJoinExec, IndexJoinKind, InnerSide};
pub use index_scan::{IndexScanBuilder, IndexScanExec};
pub use scan::OoodeScanExec;
