//! A table's pages through an engine and the buffer pool, verified.
//!
//! Maps (segment, page number) to (file, offset) with the table's striping, reads through the
//! [`BufferPool`] (so concurrent requests share one read and cached pages cost nothing), and
//! checks each page's header and checksum once, when it arrives: cached pages are verified.
//!
//! Inner (non-leaf) B+tree nodes are kept with the table once read, outside the buffer pool:
//! they are a fraction of a percent of an index, every lookup walks them, and emptying the
//! pool does not drop them. So are all nodes of a sparse clustering index (one entry per heap
//! page): it is the upper part of a clustered B+tree whose leaves are the heap pages, about a
//! third of a percent of the heap, and maps keys to data pages as a Parquet page index maps
//! values to row pages. This is ooode's counterpart of the Parquet footers and page indexes
//! that DataFusion keeps in its metadata cache: a "cold" query reads secondary index leaves and
//! data pages from disk, not the top of every tree again.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use parking_lot::Mutex;

use super::buf::PageBuf;
use super::metrics::IoMetrics;
use super::pool::{BufferPool, PageHint};
use super::{FileId, IoEngine};
use crate::storage::btree::node::NodeRef;
use crate::storage::btree::{CountCursor, KeyRange};
use crate::storage::page::{PageKind, verify_page};
use crate::storage::segment::{SegmentReader, Striping};
use crate::storage::{Result, StorageError, Table};

#[derive(Debug)]
struct SegmentFiles {
    files: Vec<FileId>,
    /// The buffer pool's keys of the same files.
    pool_keys: Vec<FileId>,
    striping: Striping,
    pages: u64,
    leaf_pages: u64,
    /// Nodes read so far that stay (index segments whose pinned part fits [`PINNED_BYTES`]).
    pinned: Option<Mutex<HashMap<u64, PageBuf>>>,
    /// Whether leaves are pinned too (a sparse clustering index), not only inner nodes.
    pin_leaves: bool,
}

/// Most bytes of nodes one index keeps pinned; a larger index leaves them to the pool.
/// 64 MiB of 8 KiB inner nodes route ~8 K x fan-out (hundreds) leaves: billions of rows; as a
/// whole sparse index, 64 MiB route ~20 GiB of 8 KiB heap pages.
const PINNED_BYTES: u64 = 64 << 20;

impl SegmentFiles {
    fn open(
        engine: &dyn IoEngine,
        pool: &BufferPool,
        segment: &SegmentReader,
        name: &str,
        leaf_pages: u64,
        sparse: bool,
    ) -> Result<Self> {
        let striping = segment.striping().clone();
        let files = (0..striping.dirs.len())
            .map(|i| engine.open(&striping.file(name, i)))
            .collect::<Result<Vec<_>>>()?;
        let pool_keys = (0..striping.dirs.len())
            .map(|i| pool.file_key(&striping.file(name, i)))
            .collect::<Result<Vec<_>>>()?;
        let pages = segment.pages();
        let page_bytes = striping.page_size as u64;
        let inner_bytes = (pages - leaf_pages.min(pages)) * page_bytes;
        let pin_leaves = sparse && pages * page_bytes <= PINNED_BYTES;
        let pinned = (leaf_pages > 0 && inner_bytes <= PINNED_BYTES).then(Mutex::default);
        Ok(Self {
            files,
            pool_keys,
            striping,
            pages,
            leaf_pages,
            pinned,
            pin_leaves,
        })
    }

    /// How node `page_no` of this index is read: its pool hint, its page kind, and whether it
    /// stays pinned once read (inner nodes; leaves too in a sparse clustering index).
    fn node_class(&self, page_no: u64) -> (PageHint, PageKind, bool) {
        if page_no < self.leaf_pages {
            (PageHint::IndexLeaf, PageKind::IndexLeaf, self.pin_leaves)
        } else {
            (PageHint::IndexInner, PageKind::IndexInner, true)
        }
    }
}

/// Reads the pages of one table.
#[derive(Debug)]
pub struct TableIo {
    table: Arc<Table>,
    engine: Arc<dyn IoEngine>,
    pool: Arc<BufferPool>,
    heap: SegmentFiles,
    indexes: Vec<SegmentFiles>,
}

impl TableIo {
    /// Opens the files of `table` in `engine`.
    pub fn open(
        table: Arc<Table>,
        engine: Arc<dyn IoEngine>,
        pool: Arc<BufferPool>,
    ) -> Result<Self> {
        let heap = SegmentFiles::open(
            engine.as_ref(),
            &pool,
            table.heap(),
            crate::storage::loader::HEAP_SEGMENT,
            0,
            false,
        )?;
        let indexes = table
            .indexes()
            .iter()
            .map(|i| {
                SegmentFiles::open(
                    engine.as_ref(),
                    &pool,
                    &i.segment,
                    &i.meta.segment,
                    i.meta.tree.leaf_pages,
                    i.meta.is_sparse(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            table,
            engine,
            pool,
            heap,
            indexes,
        })
    }

    /// The table.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<dyn IoEngine> {
        &self.engine
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Heap page `page_no`, verified; reads and hits are counted in each of `metrics` (for
    /// example the plan node's and the query's counters).
    pub async fn heap_page(&self, page_no: u64, metrics: &[Arc<IoMetrics>]) -> Result<PageBuf> {
        self.read(&self.heap, page_no, PageHint::Data, PageKind::Heap, metrics)
            .await
    }

    /// Page `page_no` of the `index`-th index (in manifest order), verified.
    pub async fn index_page(
        &self,
        index: usize,
        page_no: u64,
        metrics: &[Arc<IoMetrics>],
    ) -> Result<PageBuf> {
        let seg = self.indexes.get(index).ok_or_else(|| {
            StorageError::InvalidArgument(format!("table has no index number {index}"))
        })?;
        let (hint, kind, pin) = seg.node_class(page_no);
        if pin && let Some(page) = pinned_node(seg, page_no, metrics) {
            return Ok(page);
        }
        let page = self.read(seg, page_no, hint, kind, metrics).await?;
        if pin && let Some(pinned) = &seg.pinned {
            pinned.lock().insert(page_no, page.clone());
        }
        Ok(page)
    }

    /// Entries of the `index`-th index in `range`, counted at planning time (two descents).
    ///
    /// Pages come as a lookup gets them: pinned nodes, the buffer pool, else a read through
    /// the engine that is cached; so on a cold pool the estimate costs real reads and the
    /// query then finds those pages cached. Meant for a table opened on a synchronous engine
    /// (in-order mode: its reads finish before they return); a page that another engine is
    /// reading right now, or any page when this engine is asynchronous, is read with a plain
    /// `pread` instead of waiting, since planning cannot wait for a read that a task on this
    /// very thread may still have to submit.
    pub fn count_entries_now(&self, index: usize, range: &KeyRange) -> Result<u64> {
        let idx = self.table.indexes().get(index).ok_or_else(|| {
            StorageError::InvalidArgument(format!("table has no index number {index}"))
        })?;
        let synchronous = self.engine.max_in_flight() == 1;
        let mut cursor = CountCursor::new(&idx.meta.tree, range);
        while let Some(p) = cursor.next_page() {
            let file = idx.segment.file_of(p);
            match synchronous
                .then(|| self.index_page(index, p, &[]).now_or_never())
                .flatten()
            {
                Some(page) => cursor.feed(&page?, file)?,
                None => cursor.feed(&idx.segment.read_page(p)?, file)?,
            }
        }
        Ok(cursor.count().unwrap_or(0))
    }

    /// Heap page `page_no` if the buffer pool holds it (no read, no waiting); counted as a hit.
    pub fn cached_heap_page(&self, page_no: u64, metrics: &[Arc<IoMetrics>]) -> Option<PageBuf> {
        self.cached(&self.heap, page_no, PageHint::Data, metrics)
    }

    /// Page `page_no` of the `index`-th index if the buffer pool holds it.
    pub fn cached_index_page(
        &self,
        index: usize,
        page_no: u64,
        metrics: &[Arc<IoMetrics>],
    ) -> Option<PageBuf> {
        let seg = self.indexes.get(index)?;
        let (hint, _, pin) = seg.node_class(page_no);
        pin.then(|| pinned_node(seg, page_no, metrics))
            .flatten()
            .or_else(|| self.cached(seg, page_no, hint, metrics))
    }

    fn cached(
        &self,
        seg: &SegmentFiles,
        page_no: u64,
        hint: PageHint,
        metrics: &[Arc<IoMetrics>],
    ) -> Option<PageBuf> {
        if page_no >= seg.pages {
            return None;
        }
        let (path_idx, offset) = seg.striping.locate(page_no);
        let page = self
            .pool
            .get_cached((seg.pool_keys[path_idx], offset), hint)?;
        metrics.iter().for_each(|m| m.hit());
        Some(page)
    }

    /// The file holding heap page `page_no` (for error messages).
    pub fn heap_file(&self, page_no: u64) -> std::path::PathBuf {
        self.heap.striping.file(
            crate::storage::loader::HEAP_SEGMENT,
            self.heap.striping.locate(page_no).0,
        )
    }

    async fn read(
        &self,
        seg: &SegmentFiles,
        page_no: u64,
        hint: PageHint,
        kind: PageKind,
        metrics: &[Arc<IoMetrics>],
    ) -> Result<PageBuf> {
        let (path_idx, offset) = seg.striping.locate(page_no);
        let file = seg.files[path_idx];
        if page_no >= seg.pages {
            return Err(StorageError::corrupted(
                self.engine.path(file),
                Some(page_no),
                format!("page {page_no} is past the segment's {} pages", seg.pages),
            ));
        }
        let len = seg.striping.page_size;
        let engine = self.engine.clone();
        let counters = metrics.to_vec();
        let load = move || {
            let guards: Vec<_> = counters.iter().map(|m| m.start_read()).collect();
            let path = engine.path(file);
            engine
                .read(file, offset, len)
                .map(move |r| {
                    let r = r.map_err(|e| page_error(e, page_no)).and_then(|page| {
                        verify_page(&page, page_no, &[kind], &path)?;
                        if matches!(kind, PageKind::IndexLeaf | PageKind::IndexInner) {
                            // Once per read: B+tree walks then skip the slot checks.
                            NodeRef::parse(&page, &path, page_no)?;
                        }
                        Ok(page)
                    });
                    for guard in guards {
                        guard.finish(r.as_ref().ok().map(|_| len));
                    }
                    r
                })
                .boxed()
        };
        let key = (seg.pool_keys[path_idx], offset);
        let (page, cached) = self.pool.get(key, len, hint, load).await?;
        if cached {
            metrics.iter().for_each(|m| m.hit());
        }
        Ok(page)
    }
}

/// Node `page_no` of `seg` if it is pinned; counted as a hit.
fn pinned_node(seg: &SegmentFiles, page_no: u64, metrics: &[Arc<IoMetrics>]) -> Option<PageBuf> {
    let page = seg.pinned.as_ref()?.lock().get(&page_no).cloned()?;
    metrics.iter().for_each(|m| m.hit());
    Some(page)
}

/// Names the page in a short-read error (a truncated file).
fn page_error(e: StorageError, page_no: u64) -> StorageError {
    match e {
        StorageError::Io { path, source, .. }
            if source.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            StorageError::corrupted(path, Some(page_no), format!("file is truncated: {source}"))
        }
        other => other,
    }
}
