//! One B+tree node per page: builder and accessor.
//!
//! ```text
//! // Layout: B+tree node body (after the 24-byte common header, little endian)
//! //   24..26  entry count n          u16
//! //   26..28  level                  u16 (0 = leaf; the root has level height-1)
//! //   28..36  next leaf page         u64 (leaves; NO_PAGE for the last leaf and inner nodes)
//! //   36..    slot array: n x u16, the page offset of entry i, in key order
//! //   entries, packed from the end of the page towards the slot array:
//! //     leaf entry:  key length u16 | key bytes | row id u64
//! //     inner entry: key length u16 | key bytes | child page u64 | entries under child u64
//! //   an inner entry's key is the first key stored under its child
//! ```
//!
//! Keys are the order-preserving encodings of `storage::key`; a row id is
//! `heap page << 16 | slot` (see [`RowId`]).

use std::cmp::Ordering;
use std::path::Path;

use crate::storage::error::{Result, StorageError};
use crate::storage::key::compare_keys;
use crate::storage::page::{HEADER_LEN, PageKind, prefetch_at, read_u16, read_u64};

/// "No page": the next pointer of the last leaf.
pub const NO_PAGE: u64 = u64::MAX;
const NODE_HEADER: usize = HEADER_LEN + 12;

/// A row's address: heap page number and slot within the page, packed in a u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowId(pub u64);

impl RowId {
    /// The row id of `slot` on heap page `page`.
    pub fn new(page: u64, slot: u16) -> Self {
        Self(page << 16 | slot as u64)
    }
    /// Heap page number.
    pub fn page(self) -> u64 {
        self.0 >> 16
    }
    /// Slot within the page.
    pub fn slot(self) -> u16 {
        self.0 as u16
    }
}

/// Longest key a tree with pages of `page_size` accepts (keeps at least four entries a node).
pub fn max_key_len(page_size: usize) -> usize {
    (page_size - NODE_HEADER) / 4 - 2 - 2 - 16
}

/// Fills one node page entry by entry.
#[derive(Debug)]
pub struct NodeBuilder {
    page: Vec<u8>,
    count: usize,
    data_start: usize,
    level: u16,
    first_key: Vec<u8>,
    subtree_entries: u64,
}

impl NodeBuilder {
    /// An empty node of `level` on a page of `page_size` bytes.
    pub fn new(page_size: usize, level: u16) -> Self {
        Self {
            page: vec![0; page_size],
            count: 0,
            data_start: page_size,
            level,
            first_key: Vec::new(),
            subtree_entries: 0,
        }
    }

    /// Number of entries so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when no entry was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// First key of the node (empty for an empty node).
    pub fn first_key(&self) -> &[u8] {
        &self.first_key
    }

    /// Index entries stored under this node (leaf: its entries; inner: sum of its children).
    pub fn subtree_entries(&self) -> u64 {
        self.subtree_entries
    }

    /// Adds an entry if it fits; `value` is a row id (leaf) and `count` is 0, or a child page
    /// and its subtree entry count (inner).
    pub fn try_add(&mut self, key: &[u8], value: u64, count: u64) -> bool {
        let value_len = if self.level == 0 { 8 } else { 16 };
        let entry_len = 2 + key.len() + value_len;
        let slots_end = NODE_HEADER + 2 * (self.count + 1);
        if slots_end + entry_len > self.data_start {
            return false;
        }
        let at = self.data_start - entry_len;
        self.page[at..at + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        self.page[at + 2..at + 2 + key.len()].copy_from_slice(key);
        let v = at + 2 + key.len();
        self.page[v..v + 8].copy_from_slice(&value.to_le_bytes());
        if self.level > 0 {
            self.page[v + 8..v + 16].copy_from_slice(&count.to_le_bytes());
        }
        let slot = NODE_HEADER + 2 * self.count;
        self.page[slot..slot + 2].copy_from_slice(&(at as u16).to_le_bytes());
        if self.count == 0 {
            self.first_key = key.to_vec();
        }
        self.count += 1;
        self.data_start = at;
        self.subtree_entries += if self.level == 0 { 1 } else { count };
        true
    }

    /// The finished page body (header still to be sealed) with the given next-leaf pointer.
    pub fn finish(mut self, next_leaf: u64) -> (Vec<u8>, PageKind) {
        self.page[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&(self.count as u16).to_le_bytes());
        self.page[HEADER_LEN + 2..HEADER_LEN + 4].copy_from_slice(&self.level.to_le_bytes());
        self.page[HEADER_LEN + 4..HEADER_LEN + 12].copy_from_slice(&next_leaf.to_le_bytes());
        let kind = if self.level == 0 {
            PageKind::IndexLeaf
        } else {
            PageKind::IndexInner
        };
        (self.page, kind)
    }
}

/// Read access to a verified node page. [`NodeRef::parse`] bounds-checks every slot;
/// [`NodeRef::parse_checked_before`] trusts a check made when the page was read (once per
/// read instead of once per visit). Accessors never panic either way: out-of-bounds slots of a
/// page that was not checked read as empty keys and [`NO_PAGE`] values.
#[derive(Debug)]
pub struct NodeRef<'a> {
    page: &'a [u8],
    count: usize,
    level: u16,
    next_leaf: u64,
}

impl<'a> NodeRef<'a> {
    /// Parses a node page whose header was verified, checking every slot; errors name `file`
    /// and `page_no`.
    pub fn parse(page: &'a [u8], file: &Path, page_no: u64) -> Result<Self> {
        let node = Self::parse_header(page, file, page_no)?;
        let bad = |why: String| StorageError::corrupted(file, Some(page_no), why);
        let slots_end = NODE_HEADER + 2 * node.count;
        let value_len = node.value_len();
        for i in 0..node.count {
            let at = read_u16(page, NODE_HEADER + 2 * i).unwrap_or(0) as usize;
            match read_u16(page, at).map(|l| l as usize) {
                Some(len) if at >= slots_end && at + 2 + len + value_len <= page.len() => {}
                _ => return Err(bad(format!("entry {i} at offset {at} is out of bounds"))),
            }
        }
        Ok(node)
    }

    /// Parses the node header only, for a page [`NodeRef::parse`] accepted when it was read.
    pub fn parse_checked_before(page: &'a [u8], file: &Path, page_no: u64) -> Result<Self> {
        Self::parse_header(page, file, page_no)
    }

    fn parse_header(page: &'a [u8], file: &Path, page_no: u64) -> Result<Self> {
        let bad = |why: String| StorageError::corrupted(file, Some(page_no), why);
        let count = read_u16(page, HEADER_LEN).ok_or_else(|| bad("no entry count".into()))?;
        let level = read_u16(page, HEADER_LEN + 2).ok_or_else(|| bad("no level".into()))?;
        let next_leaf = read_u64(page, HEADER_LEN + 4).ok_or_else(|| bad("no next".into()))?;
        if NODE_HEADER + 2 * count as usize > page.len() {
            return Err(bad(format!("{count} entries overflow the page")));
        }
        Ok(Self {
            page,
            count: count as usize,
            level,
            next_leaf,
        })
    }

    fn value_len(&self) -> usize {
        if self.level == 0 { 8 } else { 16 }
    }

    /// (key offset, key length) of entry `i`.
    fn entry(&self, i: usize) -> (usize, usize) {
        let at = read_u16(self.page, NODE_HEADER + 2 * i).unwrap_or(0) as usize;
        let len = read_u16(self.page, at).unwrap_or(0) as usize;
        (at + 2, len)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when the node has no entries.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Level (0 = leaf).
    pub fn level(&self) -> u16 {
        self.level
    }

    /// Next leaf page, or [`NO_PAGE`].
    pub fn next_leaf(&self) -> u64 {
        self.next_leaf
    }

    /// Key of entry `i` (`i < len()`).
    pub fn key(&self, i: usize) -> &'a [u8] {
        let (at, len) = self.entry(i);
        self.page.get(at..at + len).unwrap_or(&[])
    }

    /// Row id (leaf) or child page (inner) of entry `i`.
    pub fn value(&self, i: usize) -> u64 {
        let (at, len) = self.entry(i);
        read_u64(self.page, at + len).unwrap_or(NO_PAGE)
    }

    /// Entries under the child of inner entry `i`.
    pub fn child_entries(&self, i: usize) -> u64 {
        let (at, len) = self.entry(i);
        read_u64(self.page, at + len + 8).unwrap_or(0)
    }

    /// Index of the first entry for which `before(key)` is false, `before` being true for a
    /// prefix of the entries (binary search).
    pub fn partition_point(&self, before: impl Fn(&[u8]) -> bool) -> usize {
        self.partition_point_in(0, self.len(), before)
    }

    /// [`partition_point`](Self::partition_point) among entries `lo..hi`, `before` being
    /// true for all entries before `lo` and false for all from `hi`.
    fn partition_point_in(
        &self,
        mut lo: usize,
        mut hi: usize,
        before: impl Fn(&[u8]) -> bool,
    ) -> usize {
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(self.key(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Index of the first entry whose key is not below `key` (with `past_equal`: is above
    /// it). `keys`, when made of this node, spares reading most keys from the page.
    pub fn search(&self, keys: Option<&SearchKeys>, key: &[u8], past_equal: bool) -> usize {
        let before = |k: &[u8]| {
            let order = compare_keys(k, key);
            order.is_lt() || (past_equal && order.is_eq())
        };
        let Some(keys) = keys.filter(|keys| keys.next.len() == self.count) else {
            return self.partition_point(before);
        };
        // Every key of the node starts with `shared`: the target compares with all at once.
        let head = &key[..keys.shared.len().min(key.len())];
        match compare_keys(head, &keys.shared[..head.len()]) {
            Ordering::Less => return 0,
            Ordering::Greater => return self.count,
            // A proper prefix of every key is below all of them.
            Ordering::Equal if key.len() < keys.shared.len() => return 0,
            Ordering::Equal => {}
        }
        // Keys whose next eight bytes differ from the target's are ordered by them; only a
        // run of ties needs the keys themselves.
        let word = word_after(key, keys.shared.len());
        let lo = keys.first_not_below(word);
        let rest = &keys.next[lo..];
        // Ties are few: the run is looked for next to `lo`, in the lines just read.
        let ties = match rest.iter().take(8).position(|&w| w > word) {
            Some(n) => n,
            None => rest.partition_point(|&w| w <= word),
        };
        self.partition_point_in(lo, lo + ties, before)
    }
}

impl NodeRef<'_> {
    /// Asks the CPU for the lines a [`search`](Self::search) of `key` through `keys` reads
    /// after the fences (its block of words, and those entries' slots in the page), without
    /// waiting for them. Called a few lookups ahead of the search, it turns the search's
    /// dependent misses into hits.
    pub fn prefetch_search(&self, keys: Option<&SearchKeys>, key: &[u8]) {
        let Some(keys) = keys.filter(|keys| keys.next.len() == self.count) else {
            return;
        };
        let head = &key[..keys.shared.len().min(key.len())];
        if head != &keys.shared[..head.len()] || key.len() < keys.shared.len() {
            return; // the search ends at the shared prefix
        }
        let block = keys.block_of(word_after(key, keys.shared.len()));
        if let Some(words) = keys.next.get(block.clone()) {
            prefetch_at(words.as_ptr().cast());
            prefetch_at(words.as_ptr_range().end.cast::<u8>().wrapping_sub(1));
        }
        if let Some(slots) = self.page.get(NODE_HEADER + 2 * block.start..) {
            prefetch_at(slots.as_ptr());
        }
    }
}

/// A node's keys laid out for search: the prefix all of them share, and of each key the eight
/// bytes after it (big-endian, zero-padded) in one array. A search through a node kept in
/// memory compares these instead of following every entry's slot into the page (two
/// dependent loads a comparison: the largest part of a cached lookup's CPU), and reads a key
/// only where those eight bytes tie.
///
/// The words are searched in two steps, first every `FENCE_GAP`-th (a short array, hot in
/// the cache for all nodes at once), then one block of the gap between two: a few lines read
/// one after another instead of a line per halving of the whole array.
#[derive(Debug, Default)]
pub struct SearchKeys {
    shared: Box<[u8]>,
    next: Box<[u64]>,
    /// `next[j * FENCE_GAP]` for each block `j`.
    fences: Box<[u64]>,
}

/// Words per block of [`SearchKeys`] (two cache lines).
const FENCE_GAP: usize = 16;

impl SearchKeys {
    /// The search keys of `node` (sorted, as every verified node is: on a damaged one the
    /// search finds wrong positions, as the plain binary search would, and never panics).
    pub fn of(node: &NodeRef<'_>) -> Self {
        let Some(last) = node.len().checked_sub(1) else {
            return Self::default();
        };
        let (first, last) = (node.key(0), node.key(last));
        // In sorted keys, what the first and last share, all share.
        let shared = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        let next: Box<[u64]> = (0..node.len())
            .map(|i| word_after(node.key(i), shared))
            .collect();
        Self {
            shared: first[..shared].into(),
            fences: next.iter().step_by(FENCE_GAP).copied().collect(),
            next,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.shared.len() + 8 * (self.next.len() + self.fences.len())
    }

    /// Index of the first word not below `word`.
    fn first_not_below(&self, word: u64) -> usize {
        let block = self.block_of(word);
        block.start + self.next[block].partition_point(|&w| w < word)
    }

    /// The words among which the first not below `word` is searched, found through the
    /// fences (empty when it is the first word).
    fn block_of(&self, word: u64) -> std::ops::Range<usize> {
        // Blocks from the `blocks`-th start at or above `word`; the one before starts below.
        let blocks = self.fences.partition_point(|&f| f < word);
        let Some(block) = blocks.checked_sub(1) else {
            return 0..0;
        };
        let start = block * FENCE_GAP + 1;
        let end = (blocks * FENCE_GAP).min(self.next.len());
        start..end
    }
}

/// The eight bytes of `key` after its first `skip`, zero-padded, as a big-endian integer:
/// where two such words differ, they order their keys (a key that ends sooner is padded with
/// the smallest byte).
fn word_after(key: &[u8], skip: usize) -> u64 {
    let rest = key.get(skip..).unwrap_or(&[]);
    let mut word = [0; 8];
    let n = rest.len().min(8);
    word[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(keys: &[&[u8]]) -> Vec<u8> {
        let mut b = NodeBuilder::new(512, 0);
        for (i, k) in keys.iter().enumerate() {
            assert!(b.try_add(k, i as u64, 0));
        }
        b.finish(NO_PAGE).0
    }

    #[test]
    fn reads_back_entries_both_ways() {
        let page = leaf(&[b"a", b"bb", b"ccc"]);
        let path = Path::new("t");
        for node in [
            NodeRef::parse(&page, path, 1).unwrap(),
            NodeRef::parse_checked_before(&page, path, 1).unwrap(),
        ] {
            assert_eq!(node.len(), 3);
            assert_eq!(node.key(1), b"bb");
            assert_eq!(node.value(2), 2);
            assert_eq!(node.partition_point(|k| k < b"bb".as_slice()), 1);
        }
    }

    #[test]
    fn slot_out_of_bounds_is_an_error_or_reads_empty() {
        let mut page = leaf(&[b"a", b"bb"]);
        // Slot 1 points past the end of the page.
        let slot = NODE_HEADER + 2;
        page[slot..slot + 2].copy_from_slice(&600u16.to_le_bytes());
        let path = Path::new("t");
        let err = NodeRef::parse(&page, path, 7).unwrap_err().to_string();
        assert!(
            err.contains("entry 1 at offset 600 is out of bounds"),
            "{err}"
        );
        // Unchecked access never panics: the bad entry reads as an empty key and no page.
        let node = NodeRef::parse_checked_before(&page, path, 7).unwrap();
        assert_eq!(node.key(0), b"a");
        assert_eq!(node.key(1), b"");
        assert_eq!(node.value(1), NO_PAGE);
        // A count larger than the page can hold fails either way.
        page[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(NodeRef::parse_checked_before(&page, path, 7).is_err());
    }

    proptest::proptest! {
        #[test]
        fn search_keys_find_what_the_plain_search_finds(
            keys in proptest::collection::btree_set(proptest::collection::vec(0u8..3, 0..14), 1..90),
            shared in proptest::collection::vec(0u8..3, 0..10),
            targets in proptest::collection::vec(proptest::collection::vec(0u8..3, 0..24), 1..20),
        ) {
            // Few byte values and a common head: long shared prefixes, ties within the eight
            // bytes after them, keys that are prefixes of one another.
            let keys: Vec<Vec<u8>> = keys.into_iter().map(|k| [shared.as_slice(), &k].concat()).collect();
            let mut b = NodeBuilder::new(4096, 0);
            for (i, k) in keys.iter().enumerate() {
                proptest::prop_assert!(b.try_add(k, i as u64, 0));
            }
            let page = b.finish(NO_PAGE).0;
            let node = NodeRef::parse(&page, Path::new("t"), 1).unwrap();
            let search = SearchKeys::of(&node);
            let probes = targets.iter().map(|t| [shared.as_slice(), t].concat()).chain(targets.clone());
            for target in probes {
                for past_equal in [false, true] {
                    let want = keys
                        .iter()
                        .filter(|k| k.as_slice() < target.as_slice() || (past_equal && **k == target))
                        .count();
                    proptest::prop_assert_eq!(node.search(None, &target, past_equal), want);
                    proptest::prop_assert_eq!(node.search(Some(&search), &target, past_equal), want);
                }
            }
        }
    }

    #[test]
    fn search_keys_of_another_node_are_ignored() {
        let (a, b) = (leaf(&[b"a", b"b", b"c"]), leaf(&[b"a", b"b"]));
        let path = Path::new("t");
        let (a, b) = (
            NodeRef::parse(&a, path, 1).unwrap(),
            NodeRef::parse(&b, path, 2).unwrap(),
        );
        let of_b = SearchKeys::of(&b);
        assert_eq!(a.search(Some(&of_b), b"c", true), 3);
        assert_eq!(SearchKeys::of(&a).bytes(), 32);
    }
}
