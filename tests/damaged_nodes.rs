//! B+tree nodes damaged behind a valid checksum (a bug in a writer, or a checksum collision):
//! every search over them ends with rows or an error naming the page, never a panic or an
//! endless walk, both as a plain reader walks them and as the engine does (nodes checked once
//! when read, then searched through their cached search keys). `btree_model.rs`'s
//! `damaged_nodes_never_panic` walks point lookups through the plain reader only.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use ooode::storage::btree::node::NodeRef;
use ooode::storage::btree::{CountCursor, LastLeaf, RangeCursor, SearchKeys, TreeShape};
use ooode::storage::key_decode::KeyDecoder;
use ooode::storage::page::{PageKind, seal_page, verify_page};
use ooode::storage::{IndexHandle, KeyEncoder, KeyRange, LoadOptions, Table, load_batches};

/// A table of 30,000 rows with an index on `grp`: 17 long values, so that the tree has inner
/// nodes below its root and runs of equal keys span leaves.
fn make_table(dir: &Path) -> Table {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("grp", DataType::Utf8, false),
    ]));
    let n = 30_000;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| group_name((i * 7 % 17) as i32)),
            )),
        ],
    )
    .unwrap();
    let path = dir.join("t");
    let options = LoadOptions {
        clustering_key: vec!["id".into()],
        indexes: vec![vec!["grp".into()]],
        ..Default::default()
    };
    load_batches(&path, schema, [Ok::<_, String>(batch)], options).unwrap();
    Table::open(&path).unwrap()
}

fn group_name(v: i32) -> String {
    format!("group {v:02} {}", "x".repeat(100))
}

fn grp_key(v: i32) -> Vec<u8> {
    let f: FieldRef = Arc::new(Field::new("grp", DataType::Utf8, false));
    KeyEncoder::new(&[f])
        .unwrap()
        .encode_row(&[Arc::new(StringArray::from(vec![group_name(v)]))], 0)
        .unwrap()
}

/// The ranges every damaged tree is searched with.
fn ranges() -> Vec<KeyRange> {
    let mut out: Vec<KeyRange> = [0, 5, 16, 40].map(|v| KeyRange::point(grp_key(v))).into();
    out.push(KeyRange::all());
    out.push(KeyRange {
        lower: Bound::Excluded(grp_key(3)),
        upper: Bound::Included(grp_key(11)),
    });
    out
}

/// How a walk reads its nodes.
#[derive(Clone, Copy)]
enum Reader {
    /// Checks each page as it is fed (a plain reader), collects row ids.
    Plain,
    /// Checks each page once when read, as the engine's buffer pool does, then searches it
    /// with its search keys; collects row ids.
    Engine,
    /// As the engine, decoding the keys found (an index-only scan).
    EngineKeys,
}

/// Every page of the tree, by number.
fn tree_pages(index: &IndexHandle) -> HashMap<u64, Vec<u8>> {
    (0..index.meta.tree.pages)
        .map(|p| (p, index.segment.read_page(p).unwrap().to_vec()))
        .collect()
}

/// The tree's pages, one of them (when given) replaced by a damaged copy.
struct Pages<'a> {
    intact: &'a HashMap<u64, Vec<u8>>,
    damaged: Option<(u64, &'a [u8])>,
}

impl Pages<'_> {
    /// Page `p`; a page outside the tree reads as an error.
    fn get(&self, p: u64) -> Result<&[u8], String> {
        match self.damaged {
            Some((d, page)) if d == p => Ok(page),
            _ => self
                .intact
                .get(&p)
                .map(Vec::as_slice)
                .ok_or(format!("no page {p}")),
        }
    }

    fn len(&self) -> usize {
        self.intact.len()
    }
}

/// Fails the test if a walk goes on past every page of the tree, twice (a cycle).
fn step(steps: &mut usize, pages: usize) {
    *steps += 1;
    assert!(*steps <= 2 * pages + 4, "a walk did not end");
}

/// Searches `range` over `pages`, as `reader` would.
fn search(
    tree: &TreeShape,
    sparse: bool,
    range: KeyRange,
    pages: &Pages<'_>,
    reader: Reader,
) -> Result<usize, String> {
    let file = Path::new("index_grp.0.pages");
    let mut cursor = RangeCursor::new(tree, range.clone(), sparse);
    if !matches!(reader, Reader::Plain) {
        cursor = cursor.with_verified_pages();
    }
    let mut found = Vec::new();
    let field: FieldRef = Arc::new(Field::new("grp", DataType::Utf8, false));
    let decoder = Arc::new(KeyDecoder::new(&[field], &[0]).unwrap());
    let mut keys_found = decoder.rows();
    let mut steps = 0;
    while let Some(p) = cursor.next_page() {
        step(&mut steps, pages.len());
        let page = pages.get(p)?;
        if let Reader::Plain = reader {
            cursor
                .feed(page, file, &mut found)
                .map_err(|e| e.to_string())?;
            continue;
        }
        let kinds = [PageKind::IndexLeaf, PageKind::IndexInner];
        verify_page(page, p, &kinds, file).map_err(|e| e.to_string())?;
        let node = NodeRef::parse(page, file, p).map_err(|e| e.to_string())?;
        let keys = SearchKeys::of(&node);
        cursor.prefetch_node(page, Some(&keys));
        match reader {
            Reader::EngineKeys => cursor.feed_node(page, Some(&keys), file, &mut keys_found),
            _ => cursor.feed_node(page, Some(&keys), file, &mut found),
        }
        .map_err(|e| e.to_string())?;
    }
    if let Reader::EngineKeys = reader {
        let rows = keys_found.len();
        let columns = keys_found.finish().map_err(|e| e.to_string())?;
        assert!(columns.iter().all(|c| c.len() == rows));
        return Ok(rows);
    }
    // Counting and finding the last leaf descend by their own rules.
    let mut count = CountCursor::new(tree, range.clone());
    steps = 0;
    while let Some(p) = count.next_page() {
        step(&mut steps, pages.len());
        let page = pages.get(p)?;
        count.feed(page, file).map_err(|e| e.to_string())?;
    }
    let mut last = LastLeaf::new(tree, range);
    steps = 0;
    while let Some(p) = last.next_page() {
        step(&mut steps, pages.len());
        let page = pages.get(p)?;
        last.feed(page, file).map_err(|e| e.to_string())?;
    }
    Ok(found.len())
}

#[test]
fn damaged_nodes_behind_valid_checksums_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let table = make_table(dir.path());
    let index = table.index_on(&["grp"]).unwrap();
    let (tree, sparse) = (&index.meta.tree, index.meta.is_sparse());
    let pages = tree_pages(index);
    let mut numbers: Vec<u64> = pages.keys().copied().collect();
    numbers.sort_unstable();
    // Inner nodes are few: half the damage goes to them.
    let inner: Vec<u64> = numbers
        .iter()
        .copied()
        .filter(|p| pages[p][6] == 3)
        .collect();
    assert!(
        numbers.len() >= 100 && tree.height >= 3,
        "a tree of {} pages, {} levels: too small to damage its inner nodes",
        numbers.len(),
        tree.height
    );
    // The intact tree answers every search, the same way for all three readers.
    let intact = Pages {
        intact: &pages,
        damaged: None,
    };
    for range in ranges() {
        let plain = search(tree, sparse, range.clone(), &intact, Reader::Plain).unwrap();
        let engine = search(tree, sparse, range.clone(), &intact, Reader::Engine).unwrap();
        let keys = search(tree, sparse, range, &intact, Reader::EngineKeys).unwrap();
        assert_eq!((plain, plain), (engine, keys));
    }
    let mut x: u64 = 11;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 16
    };
    let (mut searches, mut errors) = (0, 0);
    for _ in 0..1500 {
        let victim = match next() % 2 {
            0 => inner[next() as usize % inner.len()],
            _ => numbers[next() as usize % numbers.len()],
        };
        let mut page = pages[&victim].clone();
        let kind = match page[6] {
            2 => PageKind::IndexLeaf,
            _ => PageKind::IndexInner,
        };
        // A few bytes, mostly in the node header and slot directory (offsets, counts, child
        // pointers), where damage leads a search astray rather than just changing a key.
        for _ in 0..1 + next() % 3 {
            let len = page.len() as u64;
            let at = match next() % 3 {
                0 => 20 + next() % 64,
                1 => 20 + next() % 512,
                _ => 20 + next() % (len - 20),
            };
            page[at as usize] = next() as u8;
        }
        seal_page(&mut page, kind, victim);
        let damaged = Pages {
            intact: &pages,
            damaged: Some((victim, &page)),
        };
        for range in ranges() {
            // Decoding the whole tree's keys each time would be most of the test's time.
            let decode = range != KeyRange::all();
            for reader in [Reader::Plain, Reader::Engine, Reader::EngineKeys] {
                if let (Reader::EngineKeys, false) = (reader, decode) {
                    continue;
                }
                searches += 1;
                if search(tree, sparse, range.clone(), &damaged, reader).is_err() {
                    errors += 1;
                }
            }
        }
    }
    // Damage that changes only a key, or a node no search passes, goes unnoticed; the rest
    // must be reported.
    assert!(
        errors > searches / 20,
        "damage went unnoticed: {errors} errors in {searches} searches"
    );
}
