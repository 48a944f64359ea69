//! The B+tree against a `BTreeMap` model: point, range, IN-list and count lookups over random
//! keys with duplicates, long shared prefixes, empty ranges and bounds at node edges.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use ooode::storage::Result;
use ooode::storage::btree::node::NodeRef;
use ooode::storage::btree::{
    BTreeBuilder, CountCursor, KeyRange, LastLeaf, RangeCursor, SearchKeys, TreeShape,
};
use ooode::storage::page::PageKind;
use ooode::storage::segment::PageSink;
use proptest::prelude::*;

/// Pages kept in memory.
#[derive(Default)]
struct MemSink(Vec<Vec<u8>>);

impl PageSink for MemSink {
    fn append_page(&mut self, kind: PageKind, page: &mut [u8]) -> Result<u64> {
        let no = self.0.len() as u64;
        ooode::storage::page::seal_page(page, kind, no);
        self.0.push(page.to_vec());
        Ok(no)
    }
    fn pages_written(&self) -> u64 {
        self.0.len() as u64
    }
}

const FILE: &str = "mem.pages";

fn build(entries: &[(Vec<u8>, u64)], page_size: usize) -> (TreeShape, Vec<Vec<u8>>) {
    let mut b = BTreeBuilder::new(MemSink::default(), page_size);
    for (k, v) in entries {
        b.add(k, *v).unwrap();
    }
    let (shape, sink) = b.finish().unwrap();
    (shape, sink.0)
}

fn lookup(shape: &TreeShape, pages: &[Vec<u8>], range: KeyRange, sparse: bool) -> Vec<u64> {
    let mut c = RangeCursor::new(shape, range.clone(), sparse);
    let mut out = Vec::new();
    while let Some(p) = c.next_page() {
        c.feed(&pages[p as usize], Path::new(FILE), &mut out)
            .unwrap();
    }
    // The same walk with every node's search keys (as pinned nodes are searched) finds the same.
    let mut c = RangeCursor::new(shape, range.clone(), sparse);
    let mut searched = Vec::new();
    while let Some(p) = c.next_page() {
        let page = &pages[p as usize];
        let keys = NodeRef::parse(page, Path::new(FILE), p)
            .map(|n| SearchKeys::of(&n))
            .unwrap();
        c.feed_node(page, Some(&keys), Path::new(FILE), &mut searched)
            .unwrap();
    }
    assert_eq!(searched, out, "with search keys, {range:?}");
    out
}

/// The leaves a range walk reads, in order.
fn leaves_read(shape: &TreeShape, pages: &[Vec<u8>], range: KeyRange) -> Vec<u64> {
    let mut c = RangeCursor::new(shape, range, false);
    let (mut out, mut leaves) = (Vec::new(), Vec::new());
    while let Some(p) = c.next_page() {
        if c.at_first_leaf() || c.in_leaves() {
            leaves.push(p);
        }
        c.feed(&pages[p as usize], Path::new(FILE), &mut out)
            .unwrap();
    }
    leaves
}

fn last_leaf(shape: &TreeShape, pages: &[Vec<u8>], range: &KeyRange) -> u64 {
    let mut l = LastLeaf::new(shape, range.clone());
    while let Some(p) = l.next_page() {
        assert!(p >= shape.leaf_pages, "LastLeaf read leaf {p}");
        l.feed(&pages[p as usize], Path::new(FILE)).unwrap();
    }
    l.leaf().unwrap()
}

fn count(shape: &TreeShape, pages: &[Vec<u8>], range: &KeyRange) -> u64 {
    let mut c = CountCursor::new(shape, range.clone());
    while let Some(p) = c.next_page() {
        c.feed(&pages[p as usize], Path::new(FILE)).unwrap();
    }
    c.count().unwrap()
}

/// The estimated count of `range` (no leaf read but a root leaf's: checked here).
fn estimate(shape: &TreeShape, pages: &[Vec<u8>], range: &KeyRange) -> u64 {
    let mut c = CountCursor::estimate(shape, range.clone());
    while let Some(p) = c.next_page() {
        assert!(
            p >= shape.leaf_pages || shape.height == 1,
            "estimate read leaf {p}"
        );
        c.feed(&pages[p as usize], Path::new(FILE)).unwrap();
    }
    c.count().unwrap()
}

/// The most entries a leaf holds.
fn widest_leaf(shape: &TreeShape, pages: &[Vec<u8>]) -> u64 {
    (0..shape.leaf_pages)
        .map(|p| {
            NodeRef::parse(&pages[p as usize], Path::new(FILE), p)
                .unwrap()
                .len() as u64
        })
        .max()
        .unwrap_or(0)
}

fn model_range(model: &[(Vec<u8>, u64)], range: &KeyRange) -> Vec<u64> {
    model
        .iter()
        .filter(|(k, _)| {
            let lo = match &range.lower {
                Bound::Unbounded => true,
                Bound::Included(l) => k >= l,
                Bound::Excluded(l) => k > l,
            };
            let hi = match &range.upper {
                Bound::Unbounded => true,
                Bound::Included(u) => k <= u,
                Bound::Excluded(u) => k < u,
            };
            lo && hi
        })
        .map(|e| e.1)
        .collect()
}

fn bound(kind: u8, key: &[u8]) -> Bound<Vec<u8>> {
    match kind % 3 {
        0 => Bound::Unbounded,
        1 => Bound::Included(key.to_vec()),
        _ => Bound::Excluded(key.to_vec()),
    }
}

/// Keys over a small alphabet so duplicates and shared prefixes are common.
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, 1, 7, 0xFF]), 0..12).prop_map(|mut k| {
        // Long common prefixes stress separator comparisons; keep a few keys long.
        if k.len() > 9 {
            let mut long = vec![7u8; 200];
            long.extend(k);
            k = long;
        }
        k
    })
}

fn check(mut keys: Vec<Vec<u8>>, probes: Vec<(Vec<u8>, Vec<u8>, u8, u8)>, page_size: usize) {
    keys.sort();
    // Values are positions: entries with equal keys keep insertion order, as the loader's are.
    let entries: Vec<(Vec<u8>, u64)> = keys
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, i as u64))
        .collect();
    let (shape, pages) = build(&entries, page_size);
    assert_eq!(shape.entries, entries.len() as u64);

    let widest = widest_leaf(&shape, &pages);
    let mut groups: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    for (k, v) in &entries {
        groups.entry(k.clone()).or_default().push(*v);
    }
    // Points: every distinct key (which includes the first and last key of every node) and
    // the probes (mostly absent keys).
    let mut points: Vec<Vec<u8>> = groups.keys().cloned().collect();
    points.extend(probes.iter().map(|p| p.0.clone()));
    for k in &points {
        let want = groups.get(k).cloned().unwrap_or_default();
        let range = KeyRange::point(k.clone());
        assert_eq!(
            lookup(&shape, &pages, range.clone(), false),
            want,
            "point {k:?}"
        );
        assert_eq!(count(&shape, &pages, &range), want.len() as u64);
    }
    // Ranges with every kind of bound, including empty and inverted ones.
    for (a, b, la, ub) in &probes {
        let range = KeyRange {
            lower: bound(*la, a),
            upper: bound(*ub, b),
        };
        let want = model_range(&entries, &range);
        assert_eq!(
            lookup(&shape, &pages, range.clone(), false),
            want,
            "range {range:?}"
        );
        // The last leaf a walk reads, found without reading leaves (read-ahead of long
        // walks): that one, or the one before when the first key past the range opens a leaf.
        let leaves = leaves_read(&shape, &pages, range.clone());
        assert!(leaves.windows(2).all(|w| w[1] == w[0] + 1), "{leaves:?}");
        if !want.is_empty() {
            let (walked, found) = (*leaves.last().unwrap(), last_leaf(&shape, &pages, &range));
            assert!(
                found <= walked && found + 1 >= walked,
                "range {range:?}: walk ended at leaf {walked}, LastLeaf found {found}"
            );
        }
        assert_eq!(
            count(&shape, &pages, &range),
            want.len() as u64,
            "count {range:?}"
        );
        // Off by at most a leaf at each end (exact in a one-leaf tree, which it reads).
        let off = estimate(&shape, &pages, &range).abs_diff(want.len() as u64);
        let slack = if shape.height == 1 { 0 } else { 2 * widest };
        assert!(off <= slack, "estimate of {range:?} off by {off}");
    }
    // IN-list: the union of point lookups, each key once.
    let mut in_list: Vec<Vec<u8>> = probes
        .iter()
        .map(|p| p.1.clone())
        .chain(points.iter().step_by(3).cloned())
        .collect();
    in_list.sort();
    in_list.dedup();
    let got: Vec<u64> = in_list
        .iter()
        .flat_map(|k| lookup(&shape, &pages, KeyRange::point(k.clone()), false))
        .collect();
    let want: Vec<u64> = in_list
        .iter()
        .flat_map(|k| groups.get(k).cloned().unwrap_or_default())
        .collect();
    assert_eq!(got, want);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn small_trees_agree_with_model(
        keys in prop::collection::vec(key_strategy(), 0..400),
        probes in prop::collection::vec((key_strategy(), key_strategy(), any::<u8>(), any::<u8>()), 1..20),
    ) {
        check(keys, probes, 4096);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Enough entries for three levels on 4 KiB pages.
    #[test]
    fn deep_trees_agree_with_model(
        keys in prop::collection::vec(key_strategy(), 20_000..40_000),
        probes in prop::collection::vec((key_strategy(), key_strategy(), any::<u8>(), any::<u8>()), 1..30),
    ) {
        check(keys, probes, 4096);
    }
}

/// Many duplicates of one key spanning several leaves, and integer keys at exact leaf edges.
#[test]
fn duplicates_spanning_leaves_and_edges() {
    let mut entries = Vec::new();
    for i in 0..3000u64 {
        entries.push((vec![1, 2, 3], i));
    }
    for i in 0..60_000u64 {
        entries.push(((i / 2).to_be_bytes().to_vec(), 3000 + i));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let (shape, pages) = build(&entries, 4096);
    assert!(shape.height >= 3, "height {}", shape.height);
    let got = lookup(&shape, &pages, KeyRange::point(vec![1, 2, 3]), false);
    assert_eq!(got, (0..3000).collect::<Vec<_>>());
    for i in (0..30_000u64).step_by(97) {
        let k = i.to_be_bytes().to_vec();
        let got = lookup(&shape, &pages, KeyRange::point(k), false);
        assert_eq!(got, vec![3000 + 2 * i, 3001 + 2 * i]);
    }
    let all = lookup(&shape, &pages, KeyRange::all(), false);
    assert_eq!(all.len(), entries.len());
}

/// Keys spread evenly (a table's integer key, or a foreign key's entries of about ten rows
/// per key): an estimated count is within a key or two of the exact one wherever the range
/// cuts the leaves, with included and excluded bounds.
#[test]
fn estimates_of_evenly_spread_keys_are_close() {
    // Encoded as ooode encodes a non-null Int64 first column: a tag byte, then big-endian
    // with the sign flipped; the second column makes entries of one key distinct.
    let key = |v: i64| {
        let mut k = vec![1u8];
        k.extend(((v as u64) ^ (1 << 63)).to_be_bytes());
        k
    };
    for per_key in [1u64, 10] {
        let entries: Vec<(Vec<u8>, u64)> = (0..200_000u64)
            .map(|i| {
                let mut k = key((i / per_key) as i64);
                k.extend(i.to_be_bytes());
                (k, i)
            })
            .collect();
        let (shape, pages) = build(&entries, 4096);
        assert!(shape.height >= 3, "height {}", shape.height);
        let keys = (200_000 / per_key) as i64;
        let mut x: u64 = 7;
        for _ in 0..500 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let first = (x >> 33) as i64 % keys;
            let last = (first + (x >> 13) as i64 % 300).min(keys - 1);
            // BETWEEN first AND last, as the rule makes it: first's entries to the prefix
            // successor of last's.
            let range = KeyRange {
                lower: Bound::Included(key(first)),
                upper: Bound::Excluded(key(last + 1)),
            };
            let want = count(&shape, &pages, &range);
            assert_eq!(want, (last - first + 1) as u64 * per_key);
            let got = estimate(&shape, &pages, &range);
            assert!(
                got.abs_diff(want) <= 2 * per_key,
                "{per_key} per key, {first}..={last}: {got} against {want}"
            );
            // A unique key's point, bounds included.
            if per_key == 1 {
                let mut k = key(first);
                k.extend((first as u64).to_be_bytes());
                let point = KeyRange::point(k);
                assert!(estimate(&shape, &pages, &point) <= 2, "point {first}");
            }
        }
    }
}

/// A sparse (clustering) index yields the page before the first key in range as well.
#[test]
fn sparse_lookup_includes_preceding_page() {
    // Heap pages start at keys 0, 10, 20, ...
    let entries: Vec<(Vec<u8>, u64)> = (0..5000u64)
        .map(|p| ((p * 10).to_be_bytes().to_vec(), p))
        .collect();
    let (shape, pages) = build(&entries, 4096);
    let key = |v: u64| v.to_be_bytes().to_vec();
    assert_eq!(
        lookup(&shape, &pages, KeyRange::point(key(25)), true),
        vec![2]
    );
    // 30 is a page's first key, but equal keys could end the previous page.
    assert_eq!(
        lookup(&shape, &pages, KeyRange::point(key(30)), true),
        vec![2, 3]
    );
    assert_eq!(
        lookup(&shape, &pages, KeyRange::point(key(0)), true),
        vec![0]
    );
    let r = KeyRange {
        lower: Bound::Included(key(41)),
        upper: Bound::Excluded(key(70)),
    };
    assert_eq!(lookup(&shape, &pages, r, true), vec![4, 5, 6]);
}

/// Page damage inside node bodies, with the checksum re-sealed so the parser itself is reached,
/// gives errors or wrong-but-safe answers, never a panic or a hang.
#[test]
fn damaged_nodes_never_panic() {
    let entries: Vec<(Vec<u8>, u64)> = (0..30_000u64)
        .map(|i| (i.to_be_bytes().to_vec(), i))
        .collect();
    let (shape, pages) = build(&entries, 4096);
    let mut x: u64 = 99;
    for _ in 0..2000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut damaged = pages.clone();
        let p = (x >> 33) as usize % damaged.len();
        let pos = 24 + (x >> 7) as usize % (4096 - 24);
        damaged[p][pos] ^= 1 << (x % 8);
        let kind = if p < shape.leaf_pages as usize {
            PageKind::IndexLeaf
        } else {
            PageKind::IndexInner
        };
        ooode::storage::page::seal_page(&mut damaged[p], kind, p as u64);
        let probe = KeyRange::point(((x >> 20) % 30_000).to_be_bytes().to_vec());
        let mut c = RangeCursor::new(&shape, probe, false);
        let mut out = Vec::new();
        let mut steps = 0;
        while let Some(page) = c.next_page() {
            let Some(bytes) = damaged.get(page as usize) else {
                break;
            };
            if c.feed(bytes, Path::new(FILE), &mut out).is_err() {
                break;
            }
            steps += 1;
            assert!(steps <= damaged.len(), "cursor loops");
        }
    }
}
