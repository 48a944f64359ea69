//! Layer 4: the DataFusion plan nodes, built on [`crate::access`].
//!
//! Each node runs its work as a task of its own that polls many small steps at once (walk a
//! B+tree to a key, read a heap page, decode rows): thousands of steps are pending, bounded by
//! the query's budget of reads in flight, and whichever read completes first is computed on
//! first. `in_order` mode runs the same nodes over the synchronous engine, each inside its
//! consumer's polls (one read at a time per pipeline): the paper's IODE baseline.
//!
//! Nodes: [`OoodeScanExec`] (full scan), [`IndexScanExec`] (key ranges of one index, residual
//! predicate), [`IndexJoinExec`] (index nested-loop join: inner, semi, anti, left outer).

pub mod index_join;
pub mod index_scan;
mod inline;
pub mod metrics;
mod reservation;
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

/// The work of one partition of an ooode node: runs `work` with `turn`, the query's turn
/// among long queries (`ooode.max_long_queries`; the work takes it while it reads and gives
/// it up while it only waits for its consumer), its reads batched per poll, and notes when it
/// ended.
fn partition_task<W, F>(
    query: std::sync::Arc<crate::access::QueryIo>,
    turn: crate::access::Turn,
    work: W,
) -> impl std::future::Future<Output = datafusion::common::Result<()>> + Send + 'static
where
    W: FnOnce(crate::access::Turn) -> F + Send + 'static,
    F: std::future::Future<Output = datafusion::common::Result<()>> + Send + 'static,
{
    crate::io::batch::Batched(Box::pin(async move {
        let done = work(turn).await;
        query.note_work_done();
        done
    }))
}

/// The steps of a node of `query` reading `table` at `level` (counted in `io`), and whether
/// the node runs inside its consumer's polls (see [`partition_stream`]): in order over an
/// engine that reads on the call (local files). Reads of object stores complete later, on
/// another thread: those nodes keep their task and their budget of one read.
pub(crate) fn node_steps(
    query: &std::sync::Arc<crate::access::QueryIo>,
    io: &std::sync::Arc<crate::io::IoMetrics>,
    table: &crate::access::TableIo,
    level: usize,
) -> (crate::access::StepCtx, bool) {
    let steps = crate::access::StepCtx::new(query.clone(), io.clone(), level);
    match query.mode == ExecutionMode::InOrder && table.engine().reads_on_call() {
        true => (steps.inline(), true),
        false => (steps, false),
    }
}

/// The output stream of one partition of an ooode node running `work`.
///
/// Normally the work is a task of its own (its reads overlap the consumer's work). `inline`
/// (see [`node_steps`]), it runs inside the consumer's polls, Volcano style: the paper's
/// in-order baseline issues each read from the thread that needs its rows, with no hand-off
/// between threads for each batch. Measured before (SF 1, pages in the OS cache), a chain of
/// tasks spent ~8 % of its in-order CPU switching threads.
pub(crate) fn partition_stream<W, F>(
    schema: arrow::datatypes::SchemaRef,
    query: std::sync::Arc<crate::access::QueryIo>,
    inline: bool,
    work: W,
) -> datafusion::physical_plan::SendableRecordBatchStream
where
    W: FnOnce(BatchSender, crate::access::Turn) -> F + Send + 'static,
    F: std::future::Future<Output = datafusion::common::Result<()>> + Send + 'static,
{
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    // Counted before the lane is chosen: this query is executing from here on.
    let open = query.open_stream();
    if inline {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let turn = crate::access::Turn::none();
        let task = partition_task(query, turn, move |turn| work(tx, turn));
        let stream = Box::pin(RecordBatchStreamAdapter::new(
            schema,
            inline::Inline::new(rx, Box::pin(task)),
        ));
        return Box::pin(Executing {
            stream,
            _open: open,
        });
    }
    let mut builder =
        datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder::new(schema, 4);
    let tx = builder.tx();
    let turn = query.turn();
    let lane = query.operator_lane().cloned();
    let task = partition_task(query, turn, move |turn| work(tx, turn));
    match lane {
        Some(lane) => builder.spawn_on(task, &lane),
        None => builder.spawn(task),
    }
    Box::pin(Executing {
        stream: builder.build(),
        _open: open,
    })
}

/// A node's output stream that counts its query as executing until the consumer drops it
/// (a prompt end on the consumer's side, where the node's task may end later on another
/// runtime: see [`crate::access::QueryIo::operator_lane`]).
struct Executing {
    stream: datafusion::physical_plan::SendableRecordBatchStream,
    _open: crate::access::OpenStream,
}

impl futures::Stream for Executing {
    type Item = datafusion::common::Result<arrow::array::RecordBatch>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.stream.size_hint()
    }
}

impl datafusion::physical_plan::RecordBatchStream for Executing {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.stream.schema()
    }
}

/// Where a node's work sends its output batches.
pub(crate) type BatchSender =
    tokio::sync::mpsc::Sender<datafusion::common::Result<arrow::array::RecordBatch>>;

pub use crate::access::ScanEstimate;
pub use crate::config::{ExecutionMode, IndexJoinMode, OoodeConfig};
pub use index_join::{IndexJoinBuilder, IndexJoinExec, IndexJoinKind, InnerSide};
pub use index_scan::{IndexScanBuilder, IndexScanExec};
pub use scan::{ColumnarScan, OoodeScanExec};
