//! The asynchronous steps every ooode node is made of: walk a B+tree, fetch a heap page.
//!
//! ```text
//!   page wanted ──> pinned or in the pool? ──yes──> the page (no permit, no read)
//!        │ no
//!        v
//!   permit of the query's budget, at the step's level (waits while the query or the
//!   runtime is at its cap) ──> read through the pool (shared with concurrent requests)
//!        ──> the page and its permit ──> the caller decodes it, then drops both
//! ```
//!
//! A step is a plain future polled by its operator's task: no task of its own per read, so a
//! read costs a permit, a pool lookup and the engine's submission. The operators keep polling
//! their steps while their output waits (see `exec`), so a permit is never held by a step
//! nobody polls; a permit is held until the page is used, so permits bound pages in memory.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use datafusion::common::{DataFusionError, Result};
use futures::Stream;

use super::admission::{Acquire, Permit};
use super::budget::QueryIo;
use super::table_io::{Counters, TableIo};
use crate::config::ExecutionMode;
use crate::io::{IoMetrics, PageBuf};
use crate::storage::StorageError;
use crate::storage::btree::{
    CountCursor, KeyRange, LastLeaf, LeafSink, RangeCursor, RowId, TreeShape,
};
use crate::storage::key_decode::{KeyDecoder, KeyRows};
use crate::storage::manifest::IndexMeta;

/// Converts a storage error into a DataFusion error, once, at the boundary.
pub fn to_df(e: StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// How one plan node's steps read: under its query's budget, counted in the node's and the
/// query's counters, at the node's level (higher: closer to the output, served first).
#[derive(Debug, Clone)]
pub struct StepCtx {
    query: Arc<QueryIo>,
    counters: Counters,
    level: usize,
    /// Whether reads wait for admission (all but the optimizer's counts).
    admitted: bool,
}

impl StepCtx {
    /// Steps of a node counting in `node`, reading under `query` at `level`.
    pub fn new(query: Arc<QueryIo>, node: Arc<IoMetrics>, level: usize) -> Self {
        Self {
            counters: Counters::new(node, query.metrics.clone()).in_class_of(query.share().clone()),
            query,
            level,
            admitted: true,
        }
    }

    /// Steps of the optimizer's counts: outside admission (see [`super::plan_time`]).
    pub fn plan_time(query: Arc<QueryIo>, node: Arc<IoMetrics>) -> Self {
        Self {
            // Planning waits for them: first at the device too.
            counters: Counters::new(node.clone(), query.metrics.clone()),
            admitted: false,
            ..Self::new(query, node, 0)
        }
    }

    /// Steps run inside their consumer's polls over an engine that reads on the call (in
    /// order, see [`crate::exec`]): one read at a time per pipeline by construction, and no
    /// admission. A permit handed to a waiting step of a pipeline its consumer does not poll
    /// now (a merge that holds a batch of it) would stall the query's other pipelines.
    pub fn inline(mut self) -> Self {
        self.admitted = false;
        self
    }

    /// The query's budget.
    pub fn query(&self) -> &Arc<QueryIo> {
        &self.query
    }

    /// The counters reads are counted in.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A permit now for a read of the node's, if one is free and no read waits for one;
    /// None also for steps that read without admission (they wait for nothing, and need no
    /// permit: see [`missing_heap_page`]). See [`Self::note_read`].
    pub fn try_permit(&self) -> Option<Permit> {
        match self.admitted {
            true => self.query.try_permit(),
            false => None,
        }
    }

    /// A request for a permit for a read of the node's, queued in admission at the node's
    /// level; None for steps that read without admission.
    pub fn acquire(&self) -> Option<Acquire> {
        self.admitted.then(|| self.query.permit(self.level))
    }

    /// Notes a read of the node's issued under a permit of [`Self::try_permit`] or
    /// [`Self::acquire`].
    pub fn note_read(&self) {
        self.query.note_read(&self.counters);
    }

    /// Whether reads of other queries wait for permits now: a read of this query's waiting
    /// for a permit outside admission's queue would then pass them, so it should queue (see
    /// [`missing_heap_page`]). (No permit is handed out while any read waits, see
    /// [`Self::try_permit`].)
    pub fn others_queued(&self) -> bool {
        self.query.share().others_queued()
    }

    /// The permit for a read of the node's about to be issued: `granted` if the caller holds
    /// one for it already, else one waited for in admission's queue (None for steps that
    /// read without admission); the read is noted either way.
    async fn permit(&self, granted: Option<Permit>) -> Option<Permit> {
        let permit = match (granted, self.admitted) {
            (Some(permit), _) => Some(permit),
            (None, true) => Some(self.query.permit(self.level).await),
            (None, false) => None,
        };
        self.query.note_read(&self.counters);
        permit
    }
}

/// A page and the permit it was read under, held until the page has been used.
#[derive(Debug)]
pub struct HeldPage {
    /// The page.
    pub page: PageBuf,
    _permit: Option<Permit>,
}

/// Heap page `page_no` of `table`.
pub async fn heap_page(table: &TableIo, page_no: u64, ctx: &StepCtx) -> Result<HeldPage> {
    if let Some(page) = table.cached_heap_page(page_no, &ctx.counters) {
        return Ok(HeldPage {
            page,
            _permit: None,
        });
    }
    missing_heap_page(table, page_no, ctx, None).await
}

/// Heap page `page_no` of `table`, which the caller has just not found in the buffer pool:
/// read under a permit without looking again first (the read still finds the page if it
/// arrived meanwhile, or joins its read). `granted`: a permit the caller already holds for
/// this read (else one is asked of admission).
pub async fn missing_heap_page(
    table: &TableIo,
    page_no: u64,
    ctx: &StepCtx,
    granted: Option<Permit>,
) -> Result<HeldPage> {
    let permit = ctx.permit(granted).await;
    let page = table
        .heap_page(page_no, &ctx.counters)
        .await
        .map_err(to_df)?;
    Ok(HeldPage {
        page,
        _permit: permit,
    })
}

/// Node `page_no` of the `index`-th index of segment `part` of `table`. Cached nodes (the
/// upper B+tree levels, mostly) cost no permit.
pub async fn index_page(
    table: &TableIo,
    part: usize,
    index: usize,
    page_no: u64,
    ctx: &StepCtx,
) -> Result<PageBuf> {
    if let Some(node) = table.cached_index_page(part, index, page_no, &ctx.counters) {
        return Ok(node.to_page());
    }
    let _permit = ctx.permit(None).await;
    table
        .index_page(part, index, page_no, &ctx.counters)
        .await
        .map_err(to_df)
}

fn no_index(index: usize) -> DataFusionError {
    to_df(StorageError::InvalidArgument(format!(
        "table has no index number {index}"
    )))
}

fn index_file(table: &TableIo, part: usize, index: usize, page_no: u64) -> Result<&Path> {
    table
        .index_file(part, index, page_no)
        .ok_or_else(|| no_index(index))
}

/// The `index`-th index of segment `part`.
fn index_meta(table: &TableIo, part: usize, index: usize) -> Result<&IndexMeta> {
    table
        .segment(part)
        .and_then(|t| t.indexes().get(index))
        .map(|i| &i.meta)
        .ok_or_else(|| no_index(index))
}

/// What a walk of an index collects from its leaves: row ids, or the keys decoded.
pub trait Found: LeafSink + Send + 'static {
    /// Entries collected.
    fn len(&self) -> usize;
    /// True when none was.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Makes the row ids from entry `from` on, found in segment `part`, the table's: its
    /// pages follow the pages of the segments before it.
    fn shift_from(&mut self, from: usize, table: &TableIo, part: usize);
}

impl Found for Vec<u64> {
    fn len(&self) -> usize {
        self.len()
    }

    fn shift_from(&mut self, from: usize, table: &TableIo, part: usize) {
        let base = table.heap_base(part) << 16;
        if base > 0 {
            self[from..].iter_mut().for_each(|id| *id += base);
        }
    }
}

impl Found for KeyRows {
    fn len(&self) -> usize {
        self.len()
    }

    fn shift_from(&mut self, _: usize, _: &TableIo, _: usize) {}
}

/// A walk of [`lookup_leaves`], boxed: operators park it between leaves.
pub type Leaves = futures::stream::BoxStream<'static, Result<Vec<u64>>>;
/// A walk of [`lookup_keys`], boxed: operators park it between leaves.
pub type KeyLeaves = futures::stream::BoxStream<'static, Result<KeyRows>>;

/// The row ids (or heap page row ids, for a sparse index) of the keys in `range` of the
/// `index`-th index of `table`, one leaf at a time: a long range is never gathered whole.
/// Over several segments, each segment's tree is walked at the same time.
pub fn lookup_leaves(
    table: Arc<TableIo>,
    index: usize,
    range: impl Into<Arc<KeyRange>>,
    ctx: StepCtx,
) -> impl Stream<Item = Result<Vec<u64>>> + Send + 'static {
    walk_leaves(table, index, range.into(), ctx, Vec::new)
}

/// The keys in `range` of the `index`-th index of `table`, decoded by `decoder`, one leaf at
/// a time, as [`lookup_leaves`] finds row ids: an index-only scan reads no heap page.
pub fn lookup_keys(
    table: Arc<TableIo>,
    index: usize,
    range: impl Into<Arc<KeyRange>>,
    ctx: StepCtx,
    decoder: Arc<KeyDecoder>,
) -> impl Stream<Item = Result<KeyRows>> + Send + 'static {
    walk_leaves(table, index, range.into(), ctx, move || decoder.rows())
}

fn walk_leaves<T: Found>(
    table: Arc<TableIo>,
    index: usize,
    range: Arc<KeyRange>,
    ctx: StepCtx,
    empty: impl Fn() -> T + Clone + Send + Sync + 'static,
) -> impl Stream<Item = Result<T>> + Send + 'static {
    let walks: Vec<_> = (0..table.segments())
        .map(|part| {
            futures::StreamExt::boxed(part_leaves(
                table.clone(),
                part,
                index,
                range.clone(),
                ctx.clone(),
                empty.clone(),
            ))
        })
        .collect();
    futures::stream::select_all(walks)
}

fn part_leaves<T: Found>(
    table: Arc<TableIo>,
    part: usize,
    index: usize,
    range: Arc<KeyRange>,
    ctx: StepCtx,
    empty: impl Fn() -> T + Send + Sync + 'static,
) -> impl Stream<Item = Result<T>> + Send + 'static {
    // TableIo verifies every page once, when it is read; the walk need not again.
    let meta = index_meta(&table, part, index);
    // In order reads nothing ahead: no search for the range's last leaf.
    let ahead = match &meta {
        Ok(m) if ctx.query().mode == ExecutionMode::OutOfOrder => {
            LeafReadAhead::new(&table, part, index, &m.tree, &range)
        }
        _ => LeafReadAhead::default(),
    };
    let cursor =
        meta.map(|m| RangeCursor::new(&m.tree, range, m.is_sparse()).with_verified_pages());
    futures::stream::try_unfold(
        (table, Some(cursor), ctx, ahead),
        move |(table, cursor, ctx, mut ahead)| {
            let mut out = empty();
            async move {
                let Some(cursor) = cursor else {
                    return Ok(None);
                };
                let mut cursor = cursor?;
                while let Some(page_no) = cursor.next_page() {
                    let first = cursor.at_first_leaf();
                    let page = match first || cursor.in_leaves() {
                        true => {
                            ahead
                                .page(&table, part, index, page_no, first, &ctx)
                                .await?
                        }
                        false => index_page(&table, part, index, page_no, &ctx).await?,
                    };
                    cursor
                        .feed(&page, index_file(&table, part, index, page_no)?, &mut out)
                        .map_err(to_df)?;
                    if !out.is_empty() {
                        out.shift_from(0, &table, part);
                        return Ok(Some((out, (table, Some(Ok(cursor)), ctx, ahead))));
                    }
                }
                Ok(None)
            }
        },
    )
}

/// Most leaves a walk reads ahead.
const LEAVES_AHEAD: u64 = 256;

/// Reads ahead the leaves of a long range walk. Leaves lie in key order, each the page after
/// the one before, so once a walk goes on to a next leaf the ones after it are read too:
/// when the inner nodes on the way to the range's upper bound are cached (pinned, mostly),
/// every leaf up to the range's last (at most [`LEAVES_AHEAD`] at a time), so a range of many
/// leaves costs about two dependent reads instead of one per leaf (a round trip each in
/// object storage); otherwise one more the first time, then twice as many each leaf, so a
/// walk reads at most about twice the leaves it uses.
///
/// Each read ahead is a task of its own that puts the page in the pool, where the walk's
/// own read finds it or joins it: a walk parked while its node's fetches are at their cap
/// would otherwise sit on the permits of reads nobody polls. Dropping the walk aborts them.
#[derive(Default)]
struct LeafReadAhead {
    leaf_pages: u64,
    /// The range's last leaf, when found from cached nodes.
    last_leaf: Option<u64>,
    window: u64,
    /// Pages being read ahead, in page order.
    reads: std::collections::VecDeque<(u64, AbortOnDrop)>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl LeafReadAhead {
    fn new(
        table: &TableIo,
        part: usize,
        index: usize,
        tree: &TreeShape,
        range: &Arc<KeyRange>,
    ) -> Self {
        let mut last = LastLeaf::new(tree, range.clone());
        let quiet = Counters::default();
        while let Some(page_no) = last.next_page() {
            let found = table
                .cached_index_page(part, index, page_no, &quiet)
                .zip(table.index_file(part, index, page_no));
            let Some((page, file)) = found else { break };
            if last.feed(&page, file).is_err() {
                break; // the walk reads the node itself, and reports the damage
            }
        }
        Self {
            leaf_pages: tree.leaf_pages,
            last_leaf: last.leaf(),
            window: 1,
            reads: Default::default(),
        }
    }

    /// Leaf `page_no` (`first`: the range's first), after starting the reads of the leaves
    /// that follow it. The first leaf reads ahead only when the range's last leaf is known:
    /// most ranges (a probe's key) end in their first leaf.
    async fn page(
        &mut self,
        table: &Arc<TableIo>,
        part: usize,
        index: usize,
        page_no: u64,
        first: bool,
        ctx: &StepCtx,
    ) -> Result<PageBuf> {
        // In order, one read at a time: the baseline reads nothing ahead.
        let out_of_order = ctx.query().mode == ExecutionMode::OutOfOrder;
        let wanted = out_of_order && (!first || self.last_leaf.is_some_and(|l| l > page_no));
        if let (true, Ok(runtime)) = (wanted, tokio::runtime::Handle::try_current()) {
            let end = match self.last_leaf {
                Some(last) => (last + 1).min(page_no + 1 + LEAVES_AHEAD),
                None => page_no + 1 + self.window,
            }
            .min(self.leaf_pages);
            let from = self.reads.back().map_or(page_no + 1, |r| r.0 + 1);
            for next in from.max(page_no + 1)..end {
                let (table, ctx) = (table.clone(), ctx.clone());
                let read = runtime.spawn(async move {
                    // An error is the walk's to report, when it reads the page itself.
                    let _ = index_page(&table, part, index, next, &ctx).await;
                });
                self.reads.push_back((next, AbortOnDrop(read)));
            }
            self.window = (self.window * 2).min(LEAVES_AHEAD);
        }
        let page = index_page(table, part, index, page_no, ctx).await;
        while self.reads.front().is_some_and(|r| r.0 <= page_no) {
            self.reads.pop_front();
        }
        page
    }
}

/// What a lookup from cached nodes found (see [`lookup_cached`]).
#[derive(Debug, PartialEq)]
pub enum CachedLookup<T> {
    /// Every value, no node read.
    Found(T),
    /// A node is neither pinned nor in the pool: a walk must read it (or wait for another
    /// probe's walk that does).
    Missing {
        /// The segment whose index lacks it.
        part: usize,
        /// The node's page number in that index.
        page_no: u64,
    },
    /// More values than the lookup gathers at once.
    TooMany,
}

impl<T> CachedLookup<T> {
    /// The values, if all were found.
    pub fn found(self) -> Option<T> {
        match self {
            Self::Found(values) => Some(values),
            _ => None,
        }
    }
}

/// The values [`lookup_leaves`] would find, gathered at once without a read or an await,
/// when every node the walk visits is pinned or in the pool and there are at most `max`;
/// else why not (the caller then walks asynchronously). A point query's upper B+tree levels
/// are pinned, so most probes of a join end here: no stream, no task wake-up per probe.
/// The row ids are gathered into `ids` (emptied first): a caller that copies them out can
/// hand the same vector to its next lookup.
pub fn lookup_cached(
    table: &TableIo,
    index: usize,
    range: &Arc<KeyRange>,
    counters: &Counters,
    max: usize,
    ahead: Option<Descended>,
    mut ids: Vec<u64>,
) -> Result<CachedLookup<Vec<u64>>> {
    ids.clear();
    // Room for a key's usual few rows: growing from nothing took two allocations a probe.
    ids.reserve(8);
    lookup_cached_into(table, index, range, counters, max, ids, ahead)
}

/// The keys [`lookup_keys`] would find, decoded at once when [`lookup_cached`] would find
/// their row ids at once.
pub fn lookup_cached_keys(
    table: &TableIo,
    index: usize,
    range: &Arc<KeyRange>,
    counters: &Counters,
    max: usize,
    decoder: &Arc<KeyDecoder>,
    ahead: Option<Descended>,
) -> Result<CachedLookup<KeyRows>> {
    lookup_cached_into(table, index, range, counters, max, decoder.rows(), ahead)
}

fn lookup_cached_into<T: Found>(
    table: &TableIo,
    index: usize,
    range: &Arc<KeyRange>,
    counters: &Counters,
    max: usize,
    mut out: T,
    ahead: Option<Descended>,
) -> Result<CachedLookup<T>> {
    let mut visited = ahead.as_ref().map_or(0, |d| d.visited);
    let mut ahead = ahead.map(|d| d.cursors.into_iter());
    let quiet = Counters::default();
    for part in 0..table.segments() {
        let meta = index_meta(table, part, index)?;
        let mut cursor = match ahead.as_mut().and_then(Iterator::next) {
            Some(cursor) => cursor,
            None => {
                RangeCursor::new(&meta.tree, range.clone(), meta.is_sparse()).with_verified_pages()
            }
        };
        let start = out.len();
        while let Some(page_no) = cursor.next_page() {
            let Some(node) = table.cached_index_page(part, index, page_no, &quiet) else {
                return Ok(CachedLookup::Missing { part, page_no });
            };
            visited += 1;
            let file = index_file(table, part, index, page_no)?;
            cursor
                .feed_node(&node, node.search_keys(), file, &mut out)
                .map_err(to_df)?;
            if out.len() > max {
                return Ok(CachedLookup::TooMany);
            }
        }
        out.shift_from(start, table, part);
    }
    // Counted once per lookup: each count is a locked addition on a line both cores write.
    counters.hits(visited);
    Ok(CachedLookup::Found(out))
}

/// A lookup's descent through pinned nodes, made a few probes ahead of it (see
/// [`descend_ahead`]): the lookup goes on from where it stopped.
#[derive(Debug)]
pub struct Descended {
    /// One per segment, at the first leaf (or at the first node not pinned).
    cursors: smallvec::SmallVec<[RangeCursor; 1]>,
    /// Nodes searched on the way (counted as hits by the lookup).
    visited: u64,
}

/// Descends towards `range` through the pinned nodes of each segment's `index` and asks the
/// CPU for what the search of the leaf it lands on reads first, without waiting for it. Made
/// a few probes ahead of the probe's [`lookup_cached`], which goes on from there: the leaf
/// search's misses then overlap the probes in between instead of being waited for one after
/// another. None where a node does not parse (the lookup then starts over, and reports it).
pub fn descend_ahead(table: &TableIo, index: usize, range: &Arc<KeyRange>) -> Option<Descended> {
    // Inline for a table of one segment: one allocation less per probe.
    let mut cursors = smallvec::SmallVec::new();
    let mut visited = 0;
    for part in 0..table.segments() {
        let meta = index_meta(table, part, index).ok()?;
        let mut cursor =
            RangeCursor::new(&meta.tree, range.clone(), meta.is_sparse()).with_verified_pages();
        while let Some(page_no) = cursor.next_page() {
            let Some((page, keys)) = table.pinned_index_node(part, index, page_no) else {
                break;
            };
            if cursor.at_first_leaf() {
                cursor.prefetch_node(page, Some(keys));
                break;
            }
            visited += 1;
            // Inner nodes hand out no entries (and an empty vector allocates nothing).
            (cursor.feed_node(page, Some(keys), Path::new(""), &mut Vec::new())).ok()?;
        }
        cursors.push(cursor);
    }
    Some(Descended { cursors, visited })
}

/// Every value [`lookup_leaves`] finds, gathered.
pub async fn lookup(
    table: &Arc<TableIo>,
    index: usize,
    range: KeyRange,
    ctx: &StepCtx,
) -> Result<Vec<u64>> {
    use futures::TryStreamExt;
    let leaves = lookup_leaves(table.clone(), index, range, ctx.clone());
    let parts: Vec<Vec<u64>> = leaves.try_collect().await?;
    Ok(parts.concat())
}

/// Entries of the `index`-th index of `table` in `range`, estimated from the inner nodes (see
/// [`CountCursor::estimate`]): in each segment its two bounds are looked up at the same time
/// (entries up to the upper bound, plus entries from the lower bound, minus all entries), all
/// segments together, so a cold count costs the inner levels' dependent reads, a warm one
/// none.
pub async fn count(table: &TableIo, index: usize, range: &KeyRange, ctx: &StepCtx) -> Result<u64> {
    let counts = futures::future::try_join_all(
        (0..table.segments()).map(|part| count_part(table, part, index, range, ctx)),
    )
    .await?;
    Ok(counts.iter().sum())
}

async fn count_part(
    table: &TableIo,
    part: usize,
    index: usize,
    range: &KeyRange,
    ctx: &StepCtx,
) -> Result<u64> {
    let tree = &index_meta(table, part, index)?.tree;
    let up_to_upper = KeyRange {
        lower: std::ops::Bound::Unbounded,
        upper: range.upper.clone(),
    };
    let from_lower = KeyRange {
        lower: range.lower.clone(),
        upper: std::ops::Bound::Unbounded,
    };
    let walk = |r: KeyRange| async move {
        let mut cursor = CountCursor::estimate(tree, r);
        while let Some(page_no) = cursor.next_page() {
            let page = index_page(table, part, index, page_no, ctx).await?;
            cursor
                .feed(&page, index_file(table, part, index, page_no)?)
                .map_err(to_df)?;
        }
        Ok::<_, DataFusionError>(cursor.count().unwrap_or(0))
    };
    let (upper, lower) = futures::try_join!(walk(up_to_upper), walk(from_lower))?;
    Ok((upper + lower).saturating_sub(tree.entries))
}

/// Columns of a table a step decodes, with their schema built once.
#[derive(Debug, Clone)]
pub struct Columns {
    /// Table columns.
    pub indices: Vec<usize>,
    /// The table's schema projected to them.
    pub schema: arrow::datatypes::SchemaRef,
}

impl Columns {
    /// Columns `indices` of `table`.
    pub fn new(table: &TableIo, indices: Vec<usize>) -> Result<Self> {
        let schema = Arc::new(table.table().schema().project(&indices)?);
        Ok(Self { indices, schema })
    }
}

/// Decodes `columns` of a heap page, keeping the rows at `slots` (all when None).
pub fn decode_rows(
    table: &TableIo,
    page_no: u64,
    page: &PageBuf,
    columns: &Columns,
    slots: Option<&[u16]>,
) -> Result<RecordBatch> {
    // TableIo verified the page when it arrived.
    let file = table.heap_file(page_no);
    let batch = table
        .table()
        .codec()
        .decode_projected(page, &columns.indices, &columns.schema, file, page_no)
        .map_err(to_df)?;
    match slots {
        None => Ok(batch),
        Some(slots) => take_slots(&batch, slots, table, page_no),
    }
}

/// [`decode_rows`] of every row, the columns slices of the page itself (no copy): for a
/// reader that keeps a few rows and drops the batch (the batch holds the page).
pub fn decode_page_shared(
    table: &TableIo,
    page_no: u64,
    page: &PageBuf,
    columns: &Columns,
) -> Result<RecordBatch> {
    let file = table.heap_file(page_no);
    table
        .table()
        .codec()
        .decode_projected_shared(
            &page.to_arrow(),
            &columns.indices,
            &columns.schema,
            file,
            page_no,
        )
        .map_err(to_df)
}

/// The rows at `slots` of `batch`, the decoded rows of heap page `page_no` of `table`; a slot
/// past the page's rows is damage (the index points nowhere), an error naming the page.
pub fn take_slots(
    batch: &RecordBatch,
    slots: &[u16],
    table: &TableIo,
    page_no: u64,
) -> Result<RecordBatch> {
    if let Some(&bad) = slots.iter().find(|&&s| s as usize >= batch.num_rows()) {
        return Err(to_df(StorageError::corrupted(
            table.heap_file(page_no),
            Some(page_no),
            format!(
                "index points at slot {bad}, the page has {} rows",
                batch.num_rows()
            ),
        )));
    }
    if slots.len() == batch.num_rows() && slots.iter().enumerate().all(|(i, &s)| s as usize == i) {
        return Ok(batch.clone());
    }
    // A run of consecutive slots is a slice: no copy.
    if let (Some(&first), Some(&last)) = (slots.first(), slots.last())
        && last >= first
        && (last - first) as usize + 1 == slots.len()
        && slots.windows(2).all(|w| w[1] == w[0] + 1)
    {
        return Ok(batch.slice(first as usize, slots.len()));
    }
    let idx = UInt32Array::from_iter_values(slots.iter().map(|&s| s as u32));
    Ok(take_record_batch(batch, &idx)?)
}

/// Row slots of one heap page: a key's few rows stay inline (no allocation per page).
pub type Slots = smallvec::SmallVec<[u16; 8]>;

/// Row slots grouped by heap page: a key's rows lie on a page or two, mostly, kept inline.
pub type PageGroups = smallvec::SmallVec<[(u64, Slots); 2]>;

/// Groups row ids by heap page, keeping pages in first-seen order.
pub fn group_by_page(row_ids: &[u64]) -> PageGroups {
    let mut groups = PageGroups::new();
    // A map only for many pages; a probe's few rows are grouped by a look at the groups.
    let mut index: Option<std::collections::HashMap<u64, usize>> = None;
    for &id in row_ids {
        let r = RowId(id);
        // Row ids of one key mostly come in page order: check the last group first.
        if let Some(last) = groups.last_mut()
            && last.0 == r.page()
        {
            last.1.push(r.slot());
            continue;
        }
        if groups.len() < 16 {
            match groups.iter_mut().find(|g| g.0 == r.page()) {
                Some(g) => g.1.push(r.slot()),
                None => groups.push((r.page(), smallvec::smallvec![r.slot()])),
            }
            continue;
        }
        let index =
            index.get_or_insert_with(|| groups.iter().enumerate().map(|(i, g)| (g.0, i)).collect());
        match index.get(&r.page()) {
            Some(&i) => groups[i].1.push(r.slot()),
            None => {
                index.insert(r.page(), groups.len());
                groups.push((r.page(), smallvec::smallvec![r.slot()]));
            }
        }
    }
    groups
}
