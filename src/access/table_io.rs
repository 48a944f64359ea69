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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;

use crate::io::metrics::ReadGuard;
use crate::io::pool::PageKey;
use crate::io::{BufferPool, FileId, IoEngine, IoMetrics, PageBuf, PageHint};
use crate::storage::btree::node::{NodeRef, SearchKeys};
use crate::storage::page::{PageKind, verify_page};
use crate::storage::segment::{SegmentReader, Striping};
use crate::storage::{Result, StorageError, Table};

use super::admission::Share;

/// The I/O counters a read is counted in: a plan node's and its query's (either may be
/// absent, for tools and tests); and the query's share of admission, whose size class orders
/// the read in the device's queue (absent: first class, as for the optimizer's counts).
///
/// Held behind one reference count of their own: each partition of a plan node makes its
/// own, so a read that keeps a copy touches a count only its core uses, not the node's and
/// the query's, which every read of every core would pass back and forth.
#[derive(Debug, Clone, Default)]
pub struct Counters(Arc<Targets>);

#[derive(Debug, Default)]
struct Targets {
    node: Option<Arc<IoMetrics>>,
    query: Option<Arc<IoMetrics>>,
    share: Option<Arc<Share>>,
}

impl Counters {
    /// Counting in `node` and `query`.
    pub fn new(node: Arc<IoMetrics>, query: Arc<IoMetrics>) -> Self {
        Self(Arc::new(Targets {
            node: Some(node),
            query: Some(query),
            share: None,
        }))
    }

    /// The same, ordering reads at the device by `share`'s size class.
    pub fn in_class_of(self, share: Arc<Share>) -> Self {
        Self(Arc::new(Targets {
            node: self.0.node.clone(),
            query: self.0.query.clone(),
            share: Some(share),
        }))
    }

    /// The size class reads are queued in at the device.
    pub(crate) fn class(&self) -> usize {
        self.0.share.as_ref().map_or(0, |s| s.class())
    }

    /// Counting in `metrics` only.
    pub fn one(metrics: Arc<IoMetrics>) -> Self {
        Self(Arc::new(Targets {
            node: Some(metrics),
            query: None,
            share: None,
        }))
    }

    /// The plan node's counters.
    pub fn node(&self) -> Option<&Arc<IoMetrics>> {
        self.0.node.as_ref()
    }

    /// Counts a read as started; the guard counts it done.
    fn start(&self) -> ReadGuard<&IoMetrics> {
        ReadGuard::start([self.0.node.as_deref(), self.0.query.as_deref()])
    }

    /// Counts a read as started, for [`Self::finish_started`]: when it started.
    pub(crate) fn start_detached(&self) -> Option<std::time::Instant> {
        self.start().into_started()
    }

    /// Counts a read begun by [`Self::start_detached`] as done: `Some(bytes)` read, or
    /// failed.
    pub(crate) fn finish_started(
        &self,
        started: Option<std::time::Instant>,
        bytes: Option<usize>,
        ended: std::time::Instant,
    ) {
        let metrics = [self.0.node.as_deref(), self.0.query.as_deref()];
        ReadGuard::resume(metrics, started).finish_at(bytes, ended);
    }

    /// Counts a page found without a read.
    pub fn hit(&self) {
        self.hits(1);
    }

    /// Counts `n` pages found without a read.
    pub fn hits(&self, n: u64) {
        if n > 0 {
            (self.0.node.iter().chain(&self.0.query)).for_each(|m| m.hits(n));
        }
    }
}

/// Where a page is: its key in the buffer pool, and its file and bytes in the engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageLocation {
    /// Its number in its segment's file (what its header says).
    pub page: u64,
    pub key: PageKey,
    pub file: FileId,
    pub offset: u64,
    pub len: usize,
}

/// How a table's files are named: in the buffer pool, and (with a version) in the engine.
pub struct FileKeys<'a> {
    /// The pool's key of a file.
    pub pool: &'a dyn Fn(&Path) -> Result<FileId>,
    /// A file's version (an object's e-tag), if it has one.
    pub version: &'a dyn Fn(&Path) -> Option<String>,
}

#[derive(Debug, Clone)]
struct SegmentFiles {
    files: Vec<FileId>,
    /// The same files, for error messages (shared, not copied per read).
    paths: Vec<Arc<Path>>,
    /// The buffer pool's keys of the same files.
    pool_keys: Vec<FileId>,
    striping: Striping,
    pages: u64,
    leaf_pages: u64,
    /// Nodes read so far that stay (index segments whose pinned part fits [`PINNED_BYTES`]),
    /// shared by the table's openings in each execution mode.
    pinned: Option<Arc<PinnedNodes>>,
    /// Whether leaves are pinned too (a sparse clustering index), not only inner nodes.
    pin_leaves: bool,
}

/// The nodes of an index that stay once read: a slot per page of the pinned range, each set
/// once, read without a lock (every descent of every lookup looks here first).
#[derive(Debug)]
struct PinnedNodes {
    first: u64,
    nodes: Box<[std::sync::OnceLock<PinnedNode>]>,
}

/// A node kept in memory, with its keys laid out for search: eight bytes an entry, up to about
/// 40 % of the page for the shortest keys (a sparse index of integers), for a search that
/// costs a fraction of a search of the page.
#[derive(Debug)]
struct PinnedNode {
    page: PageBuf,
    keys: SearchKeys,
}

impl PinnedNode {
    fn new(page: PageBuf, page_no: u64) -> Self {
        // The page was verified when read; a node that does not parse gets no search keys,
        // and its next reader reports the damage.
        let keys = NodeRef::parse_checked_before(&page, Path::new(""), page_no)
            .map(|node| SearchKeys::of(&node))
            .unwrap_or_default();
        Self { page, keys }
    }
}

/// A node found in memory: pinned (borrowed: a lookup takes no reference count, which every
/// lookup of every thread would contend on at the root), or held in the buffer pool.
#[derive(Debug)]
pub enum CachedNode<'a> {
    /// Pinned with the table.
    Pinned {
        /// The node's page.
        page: &'a PageBuf,
        /// Its keys laid out for search.
        keys: &'a SearchKeys,
    },
    /// In the buffer pool.
    Pooled(PageBuf),
}

impl CachedNode<'_> {
    /// The page, as a holder of its own.
    pub fn to_page(&self) -> PageBuf {
        match self {
            Self::Pinned { page, .. } => (*page).clone(),
            Self::Pooled(page) => page.clone(),
        }
    }

    /// The node's keys laid out for search, if kept.
    pub fn search_keys(&self) -> Option<&SearchKeys> {
        match self {
            Self::Pinned { keys, .. } => Some(keys),
            Self::Pooled(_) => None,
        }
    }
}

impl std::ops::Deref for CachedNode<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Pinned { page, .. } => page,
            Self::Pooled(page) => page,
        }
    }
}

impl PinnedNodes {
    fn new(pages: std::ops::Range<u64>) -> Self {
        Self {
            first: pages.start,
            nodes: (pages.start..pages.end.max(pages.start))
                .map(|_| std::sync::OnceLock::new())
                .collect(),
        }
    }

    /// The page numbers it has a slot for.
    fn pages(&self) -> std::ops::Range<u64> {
        self.first..self.first + self.nodes.len() as u64
    }

    fn slot(&self, page_no: u64) -> Option<&std::sync::OnceLock<PinnedNode>> {
        let i = usize::try_from(page_no.checked_sub(self.first)?).ok()?;
        self.nodes.get(i)
    }

    fn get(&self, page_no: u64) -> Option<&PinnedNode> {
        self.slot(page_no)?.get()
    }

    /// Pins `page` as node `page_no` unless it is pinned already (or outside the range).
    fn set(&self, page_no: u64, page: PageBuf) {
        if let Some(slot) = self.slot(page_no) {
            slot.get_or_init(|| PinnedNode::new(page, page_no));
        }
    }
}

/// Most bytes of nodes one index keeps pinned; a larger index leaves them to the pool.
/// 64 MiB of 8 KiB inner nodes route ~8 K x fan-out (hundreds) leaves: billions of rows; as a
/// whole sparse index, 64 MiB route ~20 GiB of 8 KiB heap pages.
const PINNED_BYTES: u64 = 64 << 20;

impl SegmentFiles {
    fn open(
        engine: &dyn IoEngine,
        keys: &FileKeys<'_>,
        segment: &SegmentReader,
        name: &str,
        leaf_pages: u64,
        sparse: bool,
    ) -> Result<Self> {
        let striping = segment.striping().clone();
        let paths: Vec<PathBuf> = (0..striping.dirs.len())
            .map(|i| striping.file(name, i))
            .collect();
        let files = paths
            .iter()
            .map(|p| match (keys.version)(p) {
                Some(v) => engine.open_version(p, &v),
                None => engine.open(p),
            })
            .collect::<Result<Vec<_>>>()?;
        let pool_keys = paths
            .iter()
            .map(|p| (keys.pool)(p))
            .collect::<Result<Vec<_>>>()?;
        let pages = segment.pages();
        let page_bytes = striping.page_size as u64;
        let inner_bytes = (pages - leaf_pages.min(pages)) * page_bytes;
        let pin_leaves = sparse && pages * page_bytes <= PINNED_BYTES;
        let pinned_range = match pin_leaves {
            true => 0..pages,
            false => leaf_pages.min(pages)..pages,
        };
        let pinned = (leaf_pages > 0 && inner_bytes <= PINNED_BYTES)
            .then(|| Arc::new(PinnedNodes::new(pinned_range)));
        Ok(Self {
            files,
            paths: paths.into_iter().map(Arc::from).collect(),
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

    /// Node `page_no` if it is pinned.
    fn pinned_node(&self, page_no: u64) -> Option<&PinnedNode> {
        self.pinned.as_ref()?.get(page_no)
    }

    /// The nodes that stay pinned once read, by page number.
    fn pinned_pages(&self) -> std::ops::Range<u64> {
        self.pinned.as_ref().map_or(0..0, |pinned| pinned.pages())
    }

    /// Runs of consecutive pinned nodes not pinned yet, each in one file: (data path, first
    /// page's offset, page numbers), at most [`PIN_RUN_BYTES`] each.
    fn unpinned_runs(&self) -> Vec<(usize, u64, Vec<u64>)> {
        let Some(pinned) = &self.pinned else {
            return vec![];
        };
        let mut wanted: Vec<(usize, u64, u64)> = self
            .pinned_pages()
            .filter(|&p| pinned.get(p).is_none())
            .map(|p| {
                let (path, offset) = self.striping.locate(p);
                (path, offset, p)
            })
            .collect();
        wanted.sort_unstable();
        let page = self.striping.page_size as u64;
        let most = (PIN_RUN_BYTES as u64 / page).max(1) as usize;
        let mut runs: Vec<(usize, u64, Vec<u64>)> = Vec::new();
        for (path, offset, page_no) in wanted {
            match runs.last_mut() {
                Some((p, start, pages))
                    if *p == path
                        && *start + pages.len() as u64 * page == offset
                        && pages.len() < most =>
                {
                    pages.push(page_no)
                }
                _ => runs.push((path, offset, vec![page_no])),
            }
        }
        runs
    }
}

/// Most bytes one read of [`TableIo::load_pinned`] asks for: a few such reads in flight load
/// an index's pinned nodes in about one round trip to object storage.
const PIN_RUN_BYTES: usize = 4 << 20;

/// Reads of [`TableIo::load_pinned`] in flight at once.
const PIN_READS_IN_FLIGHT: usize = 16;

/// Reads the pages of one table: of its one segment, or of several (a table that grew by
/// INSERT) as one. Heap pages are numbered across the segments (segment `p`'s page `n` is
/// page `heap_base(p) + n`), so row ids and page numbers mean one page of one segment
/// everywhere above; index nodes are named by segment and page (each segment has its own
/// B+trees, and a lookup walks each of them).
#[derive(Debug)]
pub struct TableIo {
    table: Arc<Table>,
    engine: Arc<dyn IoEngine>,
    pool: Arc<BufferPool>,
    parts: Vec<Part>,
    heap_pages: u64,
    rows: u64,
    /// The table's URL when it lives in object storage.
    remote_url: Option<std::path::PathBuf>,
}

/// Fails unless every segment has the first one's schema, page size and indexes.
fn check_alike(tables: &[Arc<Table>]) -> Result<()> {
    let Some(first) = tables.first() else {
        return Ok(());
    };
    for table in tables {
        let differs = table.schema() != first.schema()
            || table.manifest().page_size != first.manifest().page_size
            || table.indexes().len() != first.indexes().len()
            || table
                .indexes()
                .iter()
                .zip(first.indexes())
                .any(|(a, b)| a.meta.columns != b.meta.columns || a.meta.kind != b.meta.kind);
        if differs {
            return Err(StorageError::corrupted(
                table.dir().join(crate::storage::manifest::MANIFEST_FILE),
                None,
                format!(
                    "segment {} differs from {} in schema, page size or indexes",
                    table.dir().display(),
                    first.dir().display()
                ),
            ));
        }
    }
    Ok(())
}

/// One segment's files.
#[derive(Debug, Clone)]
struct Part {
    table: Arc<Table>,
    heap: SegmentFiles,
    indexes: Vec<SegmentFiles>,
    /// Heap pages of the segments before this one.
    heap_base: u64,
}

impl Part {
    fn open(
        table: Arc<Table>,
        engine: &dyn IoEngine,
        keys: &FileKeys<'_>,
        heap_base: u64,
    ) -> Result<Self> {
        let heap = SegmentFiles::open(
            engine,
            keys,
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
                    engine,
                    keys,
                    &i.segment,
                    &i.meta.segment,
                    i.meta.tree.leaf_pages,
                    i.meta.is_sparse(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            table,
            heap,
            indexes,
            heap_base,
        })
    }
}

impl TableIo {
    /// Opens the files of the local `table` in `engine`.
    pub fn open(
        table: Arc<Table>,
        engine: Arc<dyn IoEngine>,
        pool: Arc<BufferPool>,
    ) -> Result<Self> {
        Self::open_segments(vec![table], engine, pool)
    }

    /// Opens the local segments `tables` of one table (the same schema and indexes) as one.
    pub fn open_segments(
        tables: Vec<Arc<Table>>,
        engine: Arc<dyn IoEngine>,
        pool: Arc<BufferPool>,
    ) -> Result<Self> {
        let p = pool.clone();
        let keys = FileKeys {
            pool: &|path| p.file_key(path),
            version: &|_| None,
        };
        Self::open_parts(tables, engine, pool, &keys)
    }

    /// Opens the files of `table` in `engine`, named in the pool and the engine by `keys`
    /// (for a table in object storage: by the object's URL and version).
    pub fn open_with_keys(
        table: Arc<Table>,
        engine: Arc<dyn IoEngine>,
        pool: Arc<BufferPool>,
        keys: &FileKeys<'_>,
    ) -> Result<Self> {
        Self::open_parts(vec![table], engine, pool, keys)
    }

    /// Opens `tables`, the segments of one table (the same schema and indexes), as one,
    /// their files named by `keys` (for a table in object storage: by URL and version).
    pub fn open_parts(
        tables: Vec<Arc<Table>>,
        engine: Arc<dyn IoEngine>,
        pool: Arc<BufferPool>,
        keys: &FileKeys<'_>,
    ) -> Result<Self> {
        let Some(first) = tables.first().cloned() else {
            return Err(StorageError::InvalidArgument(
                "a table of no segments".into(),
            ));
        };
        let mut parts = Vec::with_capacity(tables.len());
        let (mut heap_pages, mut rows) = (0u64, 0u64);
        check_alike(&tables)?;
        for table in tables {
            let m = table.manifest();
            // Row ids keep the page number in 48 bits.
            if heap_pages + m.heap_pages >= 1 << 47 {
                return Err(StorageError::InvalidArgument("too many heap pages".into()));
            }
            let part = Part::open(table.clone(), engine.as_ref(), keys, heap_pages)?;
            heap_pages += m.heap_pages;
            rows += m.row_count;
            parts.push(part);
        }
        Ok(Self {
            table: first,
            engine,
            pool,
            parts,
            heap_pages,
            rows,
            remote_url: None,
        })
    }

    /// The segments of `singles` (each an opened table of one segment, all in one engine and
    /// pool) read as one table, sharing their open files and pinned nodes.
    pub fn combine(singles: &[Arc<TableIo>]) -> Result<Self> {
        let Some(first) = singles.first() else {
            return Err(StorageError::InvalidArgument(
                "a table of no segments".into(),
            ));
        };
        let tables: Vec<Arc<Table>> = singles.iter().map(|s| s.table.clone()).collect();
        let mut parts = Vec::with_capacity(singles.len());
        let (mut heap_pages, mut rows) = (0u64, 0u64);
        for single in singles {
            let same_io = Arc::ptr_eq(&single.engine, &first.engine)
                && Arc::ptr_eq(&single.pool, &first.pool);
            let [part] = single.parts.as_slice() else {
                return Err(StorageError::InvalidArgument(
                    "combine takes tables of one segment each".into(),
                ));
            };
            if !same_io {
                return Err(StorageError::InvalidArgument(
                    "combined segments must share engine and pool".into(),
                ));
            }
            let mut part = part.clone();
            part.heap_base = heap_pages;
            heap_pages += single.heap_pages;
            rows += single.rows;
            parts.push(part);
        }
        check_alike(&tables)?;
        if heap_pages >= 1 << 47 {
            return Err(StorageError::InvalidArgument("too many heap pages".into()));
        }
        Ok(Self {
            table: first.table.clone(),
            engine: first.engine.clone(),
            pool: first.pool.clone(),
            parts,
            heap_pages,
            rows,
            remote_url: None,
        })
    }

    /// The same table, known to live in object storage at `url`.
    pub fn with_remote_url(self, url: impl Into<std::path::PathBuf>) -> Self {
        Self {
            remote_url: Some(url.into()),
            ..self
        }
    }

    /// The table's URL when it lives in object storage (None: a local table).
    pub fn remote_url(&self) -> Option<&Path> {
        self.remote_url.as_deref()
    }

    /// Shares the pinned nodes of `other`, an opening of the same segments in another
    /// execution mode: nodes read by one are found by the other.
    pub fn share_pinned(&mut self, other: &TableIo) {
        for (mine, theirs) in self.parts.iter_mut().zip(&other.parts) {
            if !Arc::ptr_eq(&mine.table, &theirs.table) {
                continue;
            }
            for (a, b) in mine.indexes.iter_mut().zip(&theirs.indexes) {
                a.pinned = b.pinned.clone();
            }
        }
    }

    /// Reads every node that stays pinned and is not yet (inner nodes of each index; every
    /// node of a sparse clustering index) with a few large reads, so that the first query
    /// does not walk each tree one dependent read per level. For a table in object storage
    /// that is one round trip at open instead of several per lookup of a fresh process.
    /// Returns the nodes pinned. Reads go around the buffer pool and admission (no query
    /// owns them); a node that fails its checks is an error here and is simply read, and
    /// reported, again by the query that needs it.
    pub async fn load_pinned(&self) -> Result<usize> {
        use futures::{StreamExt, TryStreamExt};
        let mut runs: Vec<(usize, usize, usize, u64, Vec<u64>)> = Vec::new();
        for (part_no, part) in self.parts.iter().enumerate() {
            for (index, seg) in part.indexes.iter().enumerate() {
                for (path, offset, pages) in seg.unpinned_runs() {
                    runs.push((part_no, index, path, offset, pages));
                }
            }
        }
        futures::stream::iter(runs)
            .map(|(part, index, path, offset, pages)| {
                self.pin_run(part, index, path, offset, pages)
            })
            .buffer_unordered(PIN_READS_IN_FLIGHT)
            .try_fold(0, |total, n| async move { Ok(total + n) })
            .await
    }

    /// Reads the consecutive nodes `pages` of the `index`-th index of segment `part`, at
    /// `offset` of its `path`-th file, in one read; pins them if all pass their checks.
    async fn pin_run(
        &self,
        part: usize,
        index: usize,
        path: usize,
        offset: u64,
        pages: Vec<u64>,
    ) -> Result<usize> {
        let seg = &self.parts[part].indexes[index];
        let page_size = self.page_size();
        let file = &seg.paths[path];
        let bytes = self
            .engine
            .read_run(seg.files[path], offset, pages.len() * page_size)
            .await
            .map_err(|e| page_error(e, pages[0]))?;
        if bytes.len() < pages.len() * page_size {
            let why = format!("short read of {} bytes at offset {offset}", bytes.len());
            return Err(StorageError::corrupted(
                file.to_path_buf(),
                Some(pages[0]),
                why,
            ));
        }
        let mut nodes = Vec::with_capacity(pages.len());
        for (i, &page_no) in pages.iter().enumerate() {
            let part = &bytes[i * page_size..(i + 1) * page_size];
            verify_page(part, page_no, &[seg.node_class(page_no).1], file)?;
            NodeRef::parse(part, file, page_no)?;
            let mut buf = crate::storage::page::AlignedBuf::zeroed(page_size);
            buf.copy_from_slice(part);
            nodes.push((page_no, PageBuf::new(buf, None)));
        }
        let count = nodes.len();
        if let Some(pinned) = &seg.pinned {
            for (page_no, page) in nodes {
                pinned.set(page_no, page);
            }
        }
        Ok(count)
    }

    /// The table (of several segments: the first; they share schema and indexes).
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// Segments read as one.
    pub fn segments(&self) -> usize {
        self.parts.len()
    }

    /// Segment `part`'s table.
    pub fn segment(&self, part: usize) -> Option<&Arc<Table>> {
        self.parts.get(part).map(|p| &p.table)
    }

    /// The number of segment `part`'s first heap page among all heap pages.
    pub fn heap_base(&self, part: usize) -> u64 {
        self.parts.get(part).map_or(0, |p| p.heap_base)
    }

    /// Heap pages of all segments.
    pub fn heap_pages(&self) -> u64 {
        self.heap_pages
    }

    /// Rows of all segments.
    pub fn row_count(&self) -> u64 {
        self.rows
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<dyn IoEngine> {
        &self.engine
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.parts[0].heap.striping.page_size
    }

    /// The segment holding heap page `page_no` and the page's number there.
    fn heap_part(&self, page_no: u64) -> (&Part, u64) {
        let at = self
            .parts
            .partition_point(|p| p.heap_base <= page_no)
            .saturating_sub(1);
        let part = &self.parts[at];
        (part, page_no - part.heap_base)
    }

    /// Where heap page `page_no` is: None past the table's pages.
    pub(crate) fn heap_location(&self, page_no: u64) -> Option<PageLocation> {
        let (part, local) = self.heap_part(page_no);
        let seg = &part.heap;
        if local >= seg.pages {
            return None;
        }
        let (path_idx, offset) = seg.striping.locate(local);
        Some(PageLocation {
            page: local,
            key: (seg.pool_keys[path_idx], offset),
            file: seg.files[path_idx],
            offset,
            len: seg.striping.page_size,
        })
    }

    /// Heap page `page_no`, verified; reads and hits are counted in `counters`.
    pub async fn heap_page(&self, page_no: u64, counters: &Counters) -> Result<PageBuf> {
        let (part, local) = self.heap_part(page_no);
        self.read(&part.heap, local, PageHint::Data, PageKind::Heap, counters)
            .await
    }

    fn index(&self, part: usize, index: usize) -> Result<&SegmentFiles> {
        self.parts
            .get(part)
            .and_then(|p| p.indexes.get(index))
            .ok_or_else(|| {
                StorageError::InvalidArgument(format!(
                    "table has no index number {index} in segment {part}"
                ))
            })
    }

    /// Node `page_no` of the `index`-th index (in manifest order) of segment `part`,
    /// verified.
    pub async fn index_page(
        &self,
        part: usize,
        index: usize,
        page_no: u64,
        counters: &Counters,
    ) -> Result<PageBuf> {
        let seg = self.index(part, index)?;
        let (hint, kind, pin) = seg.node_class(page_no);
        if pin && let Some(node) = seg.pinned_node(page_no) {
            counters.hit();
            return Ok(node.page.clone());
        }
        let page = self.read(seg, page_no, hint, kind, counters).await?;
        if pin && let Some(pinned) = &seg.pinned {
            pinned.set(page_no, page.clone());
        }
        Ok(page)
    }

    /// Heap page `page_no` if the buffer pool holds it (no read, no waiting); counted as a hit.
    pub fn cached_heap_page(&self, page_no: u64, counters: &Counters) -> Option<PageBuf> {
        let (part, local) = self.heap_part(page_no);
        self.cached(&part.heap, local, PageHint::Data, counters)
    }

    /// [`cached_heap_page`](Self::cached_heap_page) of many pages at once (see
    /// [`BufferPool::get_cached_many`]): `out[i]` is heap page `page_nos[i]` if the pool
    /// holds it (`out` is cleared first).
    pub fn cached_heap_pages(
        &self,
        page_nos: &[u64],
        counters: &Counters,
        out: &mut Vec<Option<PageBuf>>,
    ) {
        let mut keys = Vec::with_capacity(page_nos.len());
        let mut at = Vec::with_capacity(page_nos.len());
        for (i, &page_no) in page_nos.iter().enumerate() {
            let (part, local) = self.heap_part(page_no);
            if local < part.heap.pages {
                let (path_idx, offset) = part.heap.striping.locate(local);
                keys.push((part.heap.pool_keys[path_idx], offset));
                at.push(i);
            }
        }
        let mut found = Vec::new();
        let hits = self.pool.get_cached_many(&keys, PageHint::Data, &mut found);
        counters.hits(hits as u64);
        out.clear();
        out.resize(page_nos.len(), None);
        for (i, page) in at.into_iter().zip(found) {
            out[i] = page;
        }
    }

    /// Node `page_no` of the `index`-th index of segment `part` if it is pinned (not counted:
    /// for a look ahead, not a read).
    pub fn pinned_index_node(
        &self,
        part: usize,
        index: usize,
        page_no: u64,
    ) -> Option<(&PageBuf, &SearchKeys)> {
        let seg = self.parts.get(part)?.indexes.get(index)?;
        let node = seg.pinned_node(page_no)?;
        Some((&node.page, &node.keys))
    }

    /// Node `page_no` of the `index`-th index of segment `part` if it is pinned or the
    /// buffer pool holds it.
    pub fn cached_index_page(
        &self,
        part: usize,
        index: usize,
        page_no: u64,
        counters: &Counters,
    ) -> Option<CachedNode<'_>> {
        let seg = self.parts.get(part)?.indexes.get(index)?;
        let (hint, _, pin) = seg.node_class(page_no);
        if pin && let Some(node) = seg.pinned_node(page_no) {
            counters.hit();
            return Some(CachedNode::Pinned {
                page: &node.page,
                keys: &node.keys,
            });
        }
        self.cached(seg, page_no, hint, counters)
            .map(CachedNode::Pooled)
    }

    fn cached(
        &self,
        seg: &SegmentFiles,
        page_no: u64,
        hint: PageHint,
        counters: &Counters,
    ) -> Option<PageBuf> {
        if page_no >= seg.pages {
            return None;
        }
        let (path_idx, offset) = seg.striping.locate(page_no);
        let page = self
            .pool
            .get_cached((seg.pool_keys[path_idx], offset), hint)?;
        counters.hit();
        Some(page)
    }

    /// The file holding heap page `page_no` (for error messages).
    pub fn heap_file(&self, page_no: u64) -> &Path {
        let (part, local) = self.heap_part(page_no);
        &part.heap.paths[part.heap.striping.locate(local).0]
    }

    /// The file holding node `page_no` of the `index`-th index of segment `part` (for error
    /// messages).
    pub fn index_file(&self, part: usize, index: usize, page_no: u64) -> Option<&Path> {
        let seg = self.parts.get(part)?.indexes.get(index)?;
        Some(&seg.paths[seg.striping.locate(page_no).0])
    }

    async fn read(
        &self,
        seg: &SegmentFiles,
        page_no: u64,
        hint: PageHint,
        kind: PageKind,
        counters: &Counters,
    ) -> Result<PageBuf> {
        let (path_idx, offset) = seg.striping.locate(page_no);
        if page_no >= seg.pages {
            return Err(StorageError::corrupted(
                seg.paths[path_idx].to_path_buf(),
                Some(page_no),
                format!("page {page_no} is past the segment's {} pages", seg.pages),
            ));
        }
        let file = seg.files[path_idx];
        let len = seg.striping.page_size;
        let engine = self.engine.clone();
        let path = seg.paths[path_idx].clone();
        let class = counters.class();
        // The partition's own count (see `Counters`).
        let counting = counters.clone();
        // Builds the read, which the pool may do under a lock: it is counted as started at its
        // first poll.
        let load = move || {
            async move {
                let guard = counting.start();
                let r = engine.read_in_class(file, offset, len, class).await;
                let r = r.map_err(|e| page_error(e, page_no)).and_then(|page| {
                    verify_page(&page, page_no, &[kind], &path)?;
                    if matches!(kind, PageKind::IndexLeaf | PageKind::IndexInner) {
                        // Once per read: B+tree walks then skip the slot checks.
                        NodeRef::parse(&page, &path, page_no)?;
                    }
                    Ok(page)
                });
                guard.finish(r.as_ref().ok().map(|_| len));
                r
            }
            .boxed()
        };
        let key = (seg.pool_keys[path_idx], offset);
        let (page, cached) = self.pool.get(key, len, hint, load).await?;
        if cached {
            counters.hit();
        }
        Ok(page)
    }
}

/// Names the page in a read error; a short read is a truncated file.
pub(crate) fn page_error(e: StorageError, page_no: u64) -> StorageError {
    match e {
        StorageError::Io { path, source, .. }
            if source.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            StorageError::corrupted(path, Some(page_no), format!("file is truncated: {source}"))
        }
        StorageError::Io { path, op, source } => StorageError::Io {
            path,
            op: format!("page {page_no}: {op}"),
            source,
        },
        other => other,
    }
}
