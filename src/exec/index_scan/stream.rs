//! The work of one index scan (or heap scan), as concurrent jobs driven by read completions.
//!
//! ```text
//!   one walk per key range ──(B+tree pages, a leaf of row ids at a time)──> page groups
//!   (a heap scan: its page range; an index-only scan: each leaf's keys decoded, filtered,
//!    queued: no heap page)
//!        └─> one fetch job per heap page ──(page read, permit held until decoded)──>
//!            decode the rows, apply the residual predicate ──> queued ──> batch out
//! ```
//!
//! All jobs live in one `FuturesUnordered` that the loop always polls, even while the
//! consumer is not taking output: whichever read completes first has its step run first,
//! and no step holding a permit waits for the consumer. Walks go on while fewer than
//! `max_fetches` fetches are pending, and nothing new starts while the queued output holds
//! `out_bytes` or more (reserved in DataFusion's memory pool).

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::batch_filter;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use crate::access::index_only::IndexColumns;
use crate::access::steps::{
    Columns, KeyLeaves, Leaves, Slots, StepCtx, decode_rows, group_by_page, heap_page, lookup_keys,
    lookup_leaves,
};
use crate::access::{TableIo, Turn};
use crate::exec::reservation::ChunkedReservation;
use crate::storage::btree::KeyRange;
use crate::storage::key_decode::KeyRows;

/// Which heap pages a scan reads.
pub enum Pages {
    /// The rows an index names in key ranges.
    Index {
        /// Position of the index in the manifest.
        index: usize,
        /// Whether it is sparse (names pages, not rows).
        sparse: bool,
        /// The key ranges.
        ranges: Vec<KeyRange>,
        /// The columns read, when the index's keys hold them all (an index-only scan).
        keys: Option<Arc<IndexColumns>>,
    },
    /// Every row of a range of heap pages.
    Range(std::ops::Range<u64>),
}

/// What a scan needs to run.
pub struct ScanWork {
    pub table: Arc<TableIo>,
    pub pages: Pages,
    pub read_columns: Vec<usize>,
    pub predicate: Option<Arc<dyn PhysicalExpr>>,
    pub output: Option<Vec<usize>>,
    pub steps: StepCtx,
    pub max_fetches: usize,
    pub out_bytes: usize,
    /// Rows per output batch (pages' rows are put together up to it).
    pub batch_rows: usize,
    pub memory: MemoryReservation,
}

/// A walk of one key range, parked between leaves.
enum Walk {
    Ids(Leaves),
    Keys(KeyLeaves),
}

impl Walk {
    fn next_leaf(self) -> BoxFuture<'static, Job> {
        match self {
            Walk::Ids(leaves) => leaves.into_future().map(Job::Leaf).boxed(),
            Walk::Keys(leaves) => leaves.into_future().map(Job::Keys).boxed(),
        }
    }
}

enum Job {
    Leaf((Option<Result<Vec<u64>>>, Leaves)),
    Keys((Option<Result<KeyRows>>, KeyLeaves)),
    Rows(Result<RecordBatch>),
}

/// Runs the scan, sending batches to `tx` as pages complete.
/// `turn` is held while reads may be in flight (see [`crate::access::Turn`]).
pub async fn run(work: ScanWork, tx: Sender<Result<RecordBatch>>, mut turn: Turn) -> Result<()> {
    let ScanWork {
        table,
        pages,
        read_columns,
        predicate,
        output,
        steps,
        max_fetches,
        out_bytes,
        batch_rows,
        memory,
    } = work;
    let rows_of = Arc::new(RowsOf {
        read_columns: Columns::new(&table, read_columns)?,
        table: table.clone(),
        predicate,
        output,
    });
    let mut jobs: FuturesUnordered<BoxFuture<'static, Job>> = FuturesUnordered::new();
    let mut parked: VecDeque<Walk> = VecDeque::new();
    let mut from_keys = None;
    let (mut page_range, sparse) = match pages {
        Pages::Index {
            index,
            sparse,
            ranges,
            keys,
        } => {
            for range in ranges {
                let (table, steps) = (table.clone(), steps.clone());
                parked.push_back(match &keys {
                    Some(k) => Walk::Keys(
                        lookup_keys(table, index, range, steps, k.decoder().clone()).boxed(),
                    ),
                    None => Walk::Ids(lookup_leaves(table, index, range, steps).boxed()),
                });
            }
            from_keys = keys;
            (0..0, sparse)
        }
        Pages::Range(r) => (r, true),
    };
    let mut fetches = 0usize;
    let mut out = Queued {
        batches: VecDeque::new(),
        bytes: 0,
        rows: 0,
        batch_rows,
        memory: ChunkedReservation::new(memory),
    };
    let fetch = |page_no: u64, slots: Option<Slots>| {
        let (rows_of, steps) = (rows_of.clone(), steps.clone());
        async move {
            let rows = async {
                let held = heap_page(&rows_of.table, page_no, &steps).await?;
                rows_of.rows(page_no, &held.page, slots.as_deref())
            }
            .await;
            Job::Rows(rows)
        }
        .boxed()
    };
    loop {
        // Let other queries' woken tasks run between slices of this one's work.
        crate::io::batch::yield_if_long().await;
        let room = out.bytes < out_bytes;
        let starts = room && fetches < max_fetches && !(page_range.is_empty() && parked.is_empty());
        if starts || !jobs.is_empty() {
            turn.busy().await;
        } else {
            // Nothing in flight, nothing to start: only output waits for the consumer.
            turn.idle();
        }
        while out.bytes < out_bytes && fetches < max_fetches {
            if let Some(page_no) = page_range.next() {
                match rows_of.table.cached_heap_page(page_no, steps.counters()) {
                    // In the pool: its rows now, no task (a boxed future and a wake-up).
                    Some(page) => out.push(rows_of.rows(page_no, &page, None)?)?,
                    None => {
                        jobs.push(fetch(page_no, None));
                        fetches += 1;
                    }
                }
            } else if let Some(walk) = parked.pop_front() {
                jobs.push(walk.next_leaf());
            } else {
                break;
            }
        }
        if jobs.is_empty() && parked.is_empty() && page_range.is_empty() && out.batches.is_empty() {
            return Ok(());
        }
        // Pages' rows leave in full batches while reads are ready, as they are once nothing
        // else can make progress (a batch per page costs every operator above it).
        let full = out.rows >= batch_rows;
        tokio::select! {
            biased;
            permit = tx.reserve(), if full => {
                if !out.send(permit)? {
                    return Ok(());
                }
            }
            Some(job) = jobs.next(), if !jobs.is_empty() => match job {
                Job::Leaf((None, _)) => {}
                Job::Leaf((Some(ids), leaves)) => {
                    for (page_no, slots) in group_by_page(&ids?) {
                        // A sparse index names pages: every row of the page is a candidate.
                        let slots = (!sparse).then_some(slots);
                        match rows_of.table.cached_heap_page(page_no, steps.counters()) {
                            Some(page) => out.push(rows_of.rows(page_no, &page, slots.as_deref())?)?,
                            None => {
                                jobs.push(fetch(page_no, slots));
                                fetches += 1;
                            }
                        }
                    }
                    parked.push_back(Walk::Ids(leaves));
                }
                Job::Keys((None, _)) => {}
                Job::Keys((Some(keys), leaves)) => {
                    let decoded = from_keys.as_ref().map(|k| k.batch(keys?));
                    if let Some(rows) = decoded {
                        let rows = rows_of.kept(rows?)?;
                        if rows.num_rows() > 0 {
                            out.push(rows)?;
                        }
                    }
                    parked.push_back(Walk::Keys(leaves));
                }
                Job::Rows(rows) => {
                    fetches -= 1;
                    let rows = rows?;
                    if rows.num_rows() > 0 {
                        out.push(rows)?;
                    }
                }
            },
            permit = tx.reserve(), if !out.batches.is_empty() => {
                if !out.send(permit)? {
                    return Ok(());
                }
            }
            else => {
                return Err(DataFusionError::Internal(
                    "index scan: nothing to wait for, yet work is open".into(),
                ));
            }
        }
    }
}

/// Rows waiting for the consumer, reserved in DataFusion's memory pool.
struct Queued {
    batches: VecDeque<(RecordBatch, usize)>,
    bytes: usize,
    rows: usize,
    batch_rows: usize,
    memory: ChunkedReservation,
}

impl Queued {
    /// Queues `rows` (none: nothing to queue).
    fn push(&mut self, rows: RecordBatch) -> Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let bytes = rows.get_array_memory_size();
        self.memory.try_grow(bytes)?;
        self.bytes += bytes;
        self.rows += rows.num_rows();
        self.batches.push_back((rows, bytes));
        Ok(())
    }

    /// Sends the front batches put together, up to `batch_rows` rows (one batch at least);
    /// false when the consumer is gone.
    fn send(&mut self, permit: crate::exec::Reserved<'_>) -> Result<bool> {
        let Ok(permit) = permit else {
            return Ok(false); // the consumer is gone (query cancelled): stop
        };
        let (first, mut bytes) = self.batches.pop_front().expect("a queued batch");
        let mut rows = first.num_rows();
        let mut parts = vec![first];
        while let Some((next, _)) = self.batches.front() {
            if rows + next.num_rows() > self.batch_rows {
                break;
            }
            let (next, b) = self.batches.pop_front().expect("front exists");
            rows += next.num_rows();
            bytes += b;
            parts.push(next);
        }
        let batch = match parts.len() {
            1 => parts.pop().expect("one part"),
            _ => arrow::compute::concat_batches(&parts[0].schema(), &parts)?,
        };
        self.bytes -= bytes;
        self.rows -= rows;
        self.memory.shrink(bytes);
        permit.send(Ok(batch));
        Ok(true)
    }
}

/// What a scan keeps of a heap page.
struct RowsOf {
    table: Arc<TableIo>,
    read_columns: Columns,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    output: Option<Vec<usize>>,
}

impl RowsOf {
    fn rows(
        &self,
        page_no: u64,
        page: &crate::io::PageBuf,
        slots: Option<&[u16]>,
    ) -> Result<RecordBatch> {
        self.kept(decode_rows(
            &self.table,
            page_no,
            page,
            &self.read_columns,
            slots,
        )?)
    }

    /// The rows of `rows` (the columns read) the predicate keeps, projected to the output.
    fn kept(&self, rows: RecordBatch) -> Result<RecordBatch> {
        let rows = match &self.predicate {
            Some(p) => batch_filter(&rows, p)?,
            None => rows,
        };
        Ok(match &self.output {
            Some(cols) => rows.project(cols)?,
            None => rows,
        })
    }
}
