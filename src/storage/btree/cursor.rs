//! B+tree searches as I/O-free state machines.
//!
//! A search never reads a page itself: it says which page it needs next
//! ([`RangeCursor::next_page`]) and is fed that page ([`RangeCursor::feed`]). The same code then
//! serves a synchronous caller (read, feed, repeat) and the out-of-order executor, which issues
//! the read asynchronously, ends the task, and feeds the page when the completion arrives.
//!
//! ```text
//!   new(range) ──> Descend{root} ──feed inner──> Descend{child} ── ... ──feed leaf──┐
//!                                                                                  v
//!          Done <──(key past the upper bound, or last leaf)── Scan{next leaf} <────┘
//! ```
//!
//! Descent rule, for duplicates spanning leaves: to find the first entry >= k, go to the last
//! child whose first key is < k (the first child if none); entries equal to k can only start
//! there or later, and the scan continues along the leaf chain. For "first entry > k" compare
//! with <= instead. Summing the entry counts of the children left of the path gives the rank of
//! the position, so counting a range costs two descents.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use super::builder::TreeShape;
use super::node::{NO_PAGE, NodeRef, SearchKeys};
use crate::storage::error::{Result, StorageError};
use crate::storage::key::{compare_keys, prefix_successor, share_between, spans_past};
use crate::storage::page::{PageKind, verify_header, verify_page};

/// A range of encoded keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound.
    pub lower: Bound<Vec<u8>>,
    /// Upper bound.
    pub upper: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        Self {
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
        }
    }

    /// Exactly `key`.
    pub fn point(key: Vec<u8>) -> Self {
        Self {
            lower: Bound::Included(key.clone()),
            upper: Bound::Included(key),
        }
    }

    /// Every key that starts with `prefix` (a lookup on the leading columns of a composite key).
    pub fn prefix(prefix: Vec<u8>) -> Self {
        let upper = match prefix_successor(&prefix) {
            Some(s) => Bound::Excluded(s),
            None => Bound::Unbounded,
        };
        Self {
            lower: Bound::Included(prefix),
            upper,
        }
    }

    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        let above_lower = match &self.lower {
            Bound::Unbounded => true,
            Bound::Included(l) => compare_keys(key, l).is_ge(),
            Bound::Excluded(l) => compare_keys(key, l).is_gt(),
        };
        above_lower && self.below_upper(key)
    }

    /// Whether `key` is at or below the upper bound.
    pub fn below_upper(&self, key: &[u8]) -> bool {
        match &self.upper {
            Bound::Unbounded => true,
            Bound::Included(u) => compare_keys(key, u).is_le(),
            Bound::Excluded(u) => compare_keys(key, u).is_lt(),
        }
    }
}

/// Where a descent goes: a bound of a range the search shares (a lookup per probe key then
/// copies no key for its descent).
#[derive(Debug, Clone)]
struct Target {
    range: Arc<KeyRange>,
    upper: bool,
}

/// A target resolved for one node's search.
enum Position<'a> {
    /// Before the first entry.
    Start,
    /// After the last entry.
    End,
    /// Before the first key above `key` (`past_equal`) or not below it.
    Key { key: &'a [u8], past_equal: bool },
}

impl Target {
    /// The first entry in `range`.
    fn lower(range: Arc<KeyRange>) -> Self {
        Self {
            range,
            upper: false,
        }
    }

    /// The first entry past `range`.
    fn upper(range: Arc<KeyRange>) -> Self {
        Self { range, upper: true }
    }

    fn position(&self) -> Position<'_> {
        let (bound, upper) = match self.upper {
            false => (&self.range.lower, false),
            true => (&self.range.upper, true),
        };
        match bound {
            Bound::Unbounded if upper => Position::End,
            Bound::Unbounded => Position::Start,
            // A lower bound's key is in the range, an upper one's past it when included.
            Bound::Included(key) => Position::Key {
                key,
                past_equal: upper,
            },
            Bound::Excluded(key) => Position::Key {
                key,
                past_equal: !upper,
            },
        }
    }

    /// An estimate of the entries of `node`'s child `child` that lie before the target, from
    /// the child's first key and `fence`, the first key past it (None: the tree's end).
    fn entries_within(&self, node: &NodeRef<'_>, child: usize, fence: Option<&[u8]>) -> u64 {
        let entries = node.child_entries(child);
        let (key, past_equal) = match self.position() {
            Position::Start => return 0,
            Position::End => return entries,
            Position::Key { key, past_equal } => (key, past_equal),
        };
        let first = node.key(child);
        let share = match fence {
            Some(fence) => share_between(key, past_equal, first, fence),
            None if compare_keys(key, first).is_lt() => 0.0,
            // The tree's last leaf: its keys spread as densely as its left neighbour's.
            None if child > 0 => {
                let spans = spans_past(key, past_equal, node.key(child - 1), first) - 1.0;
                let before = spans * node.child_entries(child - 1) as f64;
                (before / entries.max(1) as f64).clamp(0.0, 1.0)
            }
            None => 0.5,
        };
        (entries as f64 * share).round() as u64
    }

    /// The number of entries of `node` that lie before the target (`keys`: the node's, if
    /// kept).
    fn entries_before(&self, node: &NodeRef<'_>, keys: Option<&SearchKeys>) -> usize {
        match self.position() {
            Position::Start => 0,
            Position::End => node.len(),
            Position::Key { key, past_equal } => node.search(keys, key, past_equal),
        }
    }
}

/// One step of a root-to-leaf descent.
#[derive(Debug, Clone)]
struct Descent {
    target: Target,
    page: u64,
    level: u32,
    /// Entries before the path, summed only for counts (`ranked`): a lookup skips the sum,
    /// which reads every entry left of the path in each inner node (a few hundred) where the
    /// search itself reads about ten.
    rank: u64,
    ranked: bool,
    /// Estimates the rank within the leaf from the keys around it instead of reading the
    /// leaf (see [`CountCursor::estimate`]).
    estimate: bool,
    /// Estimating: the first key past the subtree the descent is in (None: the tree's end).
    upper_fence: Option<Vec<u8>>,
}

impl Descent {
    fn new(tree: &TreeShape, target: Target) -> Self {
        Self {
            target,
            page: tree.root,
            level: tree.height.saturating_sub(1),
            rank: 0,
            ranked: false,
            estimate: false,
            upper_fence: None,
        }
    }

    /// A descent that sums the entries before its path (see [`CountCursor`]).
    fn ranked(tree: &TreeShape, target: Target) -> Self {
        Self {
            ranked: true,
            ..Self::new(tree, target)
        }
    }

    /// A ranked descent that stops above the leaves (see [`CountCursor::estimate`]).
    fn estimating(tree: &TreeShape, target: Target) -> Self {
        Self {
            estimate: true,
            ..Self::ranked(tree, target)
        }
    }

    /// Consumes the node at `self.page`; returns the node and, once at the leaf, the position of
    /// the target within it (estimating: once above the leaf, where the rank is final).
    fn step<'p>(
        &mut self,
        page: &'p [u8],
        keys: Option<&SearchKeys>,
        file: &Path,
        verified: bool,
    ) -> Result<(NodeRef<'p>, Option<usize>)> {
        let node = open_node(page, self.page, self.level, file, verified)?;
        let pos = self.target.entries_before(&node, keys);
        if self.level == 0 {
            self.rank += pos as u64;
            return Ok((node, Some(pos)));
        }
        if node.is_empty() {
            return Err(StorageError::corrupted(
                file,
                Some(self.page),
                "empty inner node",
            ));
        }
        let child = pos.saturating_sub(1);
        if self.ranked {
            self.rank += (0..child).map(|j| node.child_entries(j)).sum::<u64>();
        }
        if self.estimate {
            if child + 1 < node.len() {
                self.upper_fence = Some(node.key(child + 1).to_vec());
            }
            if self.level == 1 {
                // The child's keys lie from its first key to the fence: the target's share
                // of that span, of the child's entries.
                self.rank += self
                    .target
                    .entries_within(&node, child, self.upper_fence.as_deref());
                return Ok((node, Some(0)));
            }
        }
        self.page = node.value(child);
        self.level -= 1;
        Ok((node, None))
    }
}

#[derive(Debug, Clone)]
enum ScanState {
    Descend(Descent),
    Scan { page: u64 },
    Done,
}

/// Finds the values (row ids) of all entries in a key range.
///
/// On a sparse clustering index (one entry per heap page, keyed by the page's first key) it
/// yields the heap pages that may hold keys of the range: one entry before the first key in
/// range, since that page may end with keys in range.
#[derive(Debug, Clone)]
pub struct RangeCursor {
    range: Arc<KeyRange>,
    sparse: bool,
    state: ScanState,
    /// Pages come checksummed already (from the buffer pool): check headers only.
    verified: bool,
}

impl RangeCursor {
    /// A search of `range` in `tree` (shared, not copied: many searches may use one range).
    pub fn new(tree: &TreeShape, range: impl Into<Arc<KeyRange>>, sparse: bool) -> Self {
        let range = range.into();
        let descent = Descent::new(tree, Target::lower(range.clone()));
        Self {
            range,
            sparse,
            state: ScanState::Descend(descent),
            verified: false,
        }
    }

    /// The same search, fed pages the caller verified when it read them (checksum and, for
    /// B+tree nodes, [`NodeRef::parse`]'s slot checks): a walk then costs neither per visit.
    pub fn with_verified_pages(self) -> Self {
        Self {
            verified: true,
            ..self
        }
    }

    /// Whether the search is past its descent, walking leaves (which lie in key order, each
    /// the page after the one before: a walker may read ahead).
    pub fn in_leaves(&self) -> bool {
        matches!(self.state, ScanState::Scan { .. })
    }

    /// Whether the page to feed next is the first leaf of the range (the descent's last
    /// step).
    pub fn at_first_leaf(&self) -> bool {
        matches!(&self.state, ScanState::Descend(d) if d.level == 0)
    }

    /// The page to feed next, or None when the search is complete.
    pub fn next_page(&self) -> Option<u64> {
        match &self.state {
            ScanState::Descend(d) => Some(d.page),
            ScanState::Scan { page } => Some(*page),
            ScanState::Done => None,
        }
    }

    /// Asks the CPU for what feeding `page` (the page [`next_page`](Self::next_page) asks
    /// for, kept in memory with its `keys`) will read first: see [`NodeRef::prefetch_search`].
    /// A page that does not parse is left alone (feeding it reports the damage).
    pub fn prefetch_node(&self, page: &[u8], keys: Option<&SearchKeys>) {
        let ScanState::Descend(d) = &self.state else {
            return;
        };
        let Position::Key { key, .. } = d.target.position() else {
            return;
        };
        if let Ok(node) = NodeRef::parse_checked_before(page, Path::new(""), d.page) {
            node.prefetch_search(keys, key);
        }
    }

    /// Feeds the page asked for by [`next_page`](Self::next_page); hands the entries found to
    /// `out`.
    pub fn feed<S: LeafSink>(&mut self, page: &[u8], file: &Path, out: &mut S) -> Result<()> {
        self.feed_node(page, None, file, out)
    }

    /// [`feed`](Self::feed) with the page's [`SearchKeys`], kept beside a page that stays in
    /// memory: its search then reads few of the page's keys.
    pub fn feed_node<S: LeafSink>(
        &mut self,
        page: &[u8],
        keys: Option<&SearchKeys>,
        file: &Path,
        out: &mut S,
    ) -> Result<()> {
        match &mut self.state {
            ScanState::Descend(d) => {
                let page_no = d.page;
                let (node, landed) = d.step(page, keys, file, self.verified)?;
                if let Some(pos) = landed {
                    let start = if self.sparse {
                        pos.saturating_sub(1)
                    } else {
                        pos
                    };
                    let leaf = Leaf::new(&node, keys, &self.range, page_no, file);
                    self.state = scan_leaf(&self.range, &leaf, start, out)?;
                }
            }
            ScanState::Scan { page: page_no } => {
                let page_no = *page_no;
                let node = open_node(page, page_no, 0, file, self.verified)?;
                let leaf = Leaf::new(&node, keys, &self.range, page_no, file);
                self.state = scan_leaf(&self.range, &leaf, 0, out)?;
            }
            ScanState::Done => {}
        }
        Ok(())
    }
}

/// Where a range search puts the entries it finds.
pub trait LeafSink {
    /// One entry in range; an error says what is wrong with its key (the page is damaged).
    fn entry(&mut self, key: &[u8], value: u64) -> std::result::Result<(), String>;
}

/// Values (row ids) only.
impl LeafSink for Vec<u64> {
    fn entry(&mut self, _key: &[u8], value: u64) -> std::result::Result<(), String> {
        self.push(value);
        Ok(())
    }
}

/// A leaf being scanned.
struct Leaf<'a, 'p> {
    node: &'a NodeRef<'p>,
    page_no: u64,
    file: &'a Path,
    /// Where the range ends in the leaf, when its search keys found it (else each key read is
    /// compared with the range's upper bound, which reads one entry past the range).
    end: Option<usize>,
}

impl<'a, 'p> Leaf<'a, 'p> {
    fn new(
        node: &'a NodeRef<'p>,
        keys: Option<&SearchKeys>,
        range: &KeyRange,
        page_no: u64,
        file: &'a Path,
    ) -> Self {
        let end = keys.map(|keys| match &range.upper {
            Bound::Unbounded => node.len(),
            Bound::Included(key) => node.search(Some(keys), key, true),
            Bound::Excluded(key) => node.search(Some(keys), key, false),
        });
        Self {
            node,
            page_no,
            file,
            end,
        }
    }
}

fn scan_leaf<S: LeafSink>(
    range: &KeyRange,
    leaf: &Leaf<'_, '_>,
    start: usize,
    out: &mut S,
) -> Result<ScanState> {
    let Leaf {
        node,
        page_no,
        file,
        end,
    } = *leaf;
    let stop = end.unwrap_or(node.len());
    for i in start..stop {
        let key = node.key(i);
        if end.is_none() && !range.below_upper(key) {
            return Ok(ScanState::Done);
        }
        out.entry(key, node.value(i)).map_err(|why| {
            StorageError::corrupted(file, Some(page_no), format!("index key: {why}"))
        })?;
    }
    if stop < node.len() {
        return Ok(ScanState::Done);
    }
    match node.next_leaf() {
        NO_PAGE => Ok(ScanState::Done),
        // Leaves are laid out in key order, so a next pointer that does not move forward is
        // damage (and would otherwise loop forever).
        next if next <= page_no => Err(StorageError::corrupted(
            file,
            Some(page_no),
            format!("next leaf {next} does not follow this leaf"),
        )),
        next => Ok(ScanState::Scan { page: next }),
    }
}

/// Counts the entries in a key range with two descents (no leaf scan): exactly, reading the
/// two leaves where the range starts and ends, or estimated from the inner nodes alone.
#[derive(Debug, Clone)]
pub struct CountCursor {
    lower: Option<Descent>,
    upper: Option<Descent>,
    lower_rank: Option<u64>,
    upper_rank: Option<u64>,
}

impl CountCursor {
    /// A count of the entries of `tree` in `range` (shared, not copied).
    pub fn new(tree: &TreeShape, range: impl Into<Arc<KeyRange>>) -> Self {
        let range = range.into();
        let (lower, lower_rank) = match &range.lower {
            Bound::Unbounded => (None, Some(0)),
            _ => (
                Some(Descent::ranked(tree, Target::lower(range.clone()))),
                None,
            ),
        };
        let (upper, upper_rank) = match &range.upper {
            Bound::Unbounded => (None, Some(tree.entries)),
            _ => (
                Some(Descent::ranked(tree, Target::upper(range.clone()))),
                None,
            ),
        };
        Self {
            lower,
            upper,
            lower_rank,
            upper_rank,
        }
    }

    /// An estimate of the entries of `tree` in `range` that reads no leaf: exact for the
    /// leaves between the two where the range starts and ends, and in those two the share of
    /// their entries the bounds cut off, interpolated between the keys around each leaf (see
    /// [`share_between`]). The inner nodes stay in memory once read, so a cold count costs no
    /// read, where an exact one waits for two leaves; it is off by at most a leaf's entries
    /// at each end, and close when keys are spread evenly within a leaf.
    pub fn estimate(tree: &TreeShape, range: impl Into<Arc<KeyRange>>) -> Self {
        let mut cursor = Self::new(tree, range);
        for descent in [&mut cursor.lower, &mut cursor.upper].into_iter().flatten() {
            *descent = Descent::estimating(tree, descent.target.clone());
        }
        cursor
    }

    /// The page to feed next, or None when the count is known.
    pub fn next_page(&self) -> Option<u64> {
        self.lower.as_ref().or(self.upper.as_ref()).map(|d| d.page)
    }

    /// Feeds the page asked for by [`next_page`](Self::next_page).
    pub fn feed(&mut self, page: &[u8], file: &Path) -> Result<()> {
        let (slot, rank) = if self.lower.is_some() {
            (&mut self.lower, &mut self.lower_rank)
        } else {
            (&mut self.upper, &mut self.upper_rank)
        };
        if let Some(d) = slot
            && d.step(page, None, file, false)?.1.is_some()
        {
            *rank = Some(d.rank);
            *slot = None;
        }
        Ok(())
    }

    /// The count, once [`next_page`](Self::next_page) returned None.
    pub fn count(&self) -> Option<u64> {
        Some(self.upper_rank?.saturating_sub(self.lower_rank?))
    }
}

/// Finds the leaf that holds the last entries of a range (or the one after them): a descent
/// of the inner levels toward the upper bound; the leaf itself is not read. A walk of a long
/// range then knows which leaves it will need and can read them all at once.
#[derive(Debug, Clone)]
pub struct LastLeaf {
    descent: Option<Descent>,
    leaf: Option<u64>,
}

impl LastLeaf {
    /// The search of `range`'s last leaf in `tree` (shared, not copied).
    pub fn new(tree: &TreeShape, range: impl Into<Arc<KeyRange>>) -> Self {
        let range = range.into();
        if range.upper == Bound::Unbounded {
            return Self {
                descent: None,
                leaf: Some(tree.leaf_pages.saturating_sub(1)),
            };
        }
        let target = Target::upper(range);
        let descent = Descent::new(tree, target);
        match descent.level {
            0 => Self {
                leaf: Some(descent.page),
                descent: None,
            },
            _ => Self {
                descent: Some(descent),
                leaf: None,
            },
        }
    }

    /// The inner node to feed next, or None once the leaf is known.
    pub fn next_page(&self) -> Option<u64> {
        self.descent.as_ref().map(|d| d.page)
    }

    /// Feeds the node asked for by [`next_page`](Self::next_page) (verified by the caller).
    pub fn feed(&mut self, page: &[u8], file: &Path) -> Result<()> {
        if let Some(d) = &mut self.descent {
            d.step(page, None, file, true)?;
            if d.level == 0 {
                self.leaf = Some(d.page);
                self.descent = None;
            }
        }
        Ok(())
    }

    /// The leaf, once found.
    pub fn leaf(&self) -> Option<u64> {
        self.leaf
    }
}

fn open_node<'p>(
    page: &'p [u8],
    page_no: u64,
    level: u32,
    file: &Path,
    verified: bool,
) -> Result<NodeRef<'p>> {
    let kind = if level == 0 {
        PageKind::IndexLeaf
    } else {
        PageKind::IndexInner
    };
    let node = if verified {
        verify_header(page, page_no, &[kind], file)?;
        NodeRef::parse_checked_before(page, file, page_no)?
    } else {
        verify_page(page, page_no, &[kind], file)?;
        NodeRef::parse(page, file, page_no)?
    };
    if node.level() as u32 != level {
        return Err(StorageError::corrupted(
            file,
            Some(page_no),
            format!("node has level {}, expected {level}", node.level()),
        ));
    }
    Ok(node)
}
