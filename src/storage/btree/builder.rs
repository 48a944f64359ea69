//! Bottom-up bulk load of a static B+tree from entries in key order.
//!
//! Leaves are written first, in key order, as pages 0..L of the index segment, so a leaf's next
//! pointer is its page number + 1. Each finished level yields (first key, page, entry count)
//! per node; those become the entries of the level above, until one node, the root, is left.

use serde::{Deserialize, Serialize};

use super::node::{NO_PAGE, NodeBuilder, max_key_len};
use crate::storage::error::{Result, StorageError};
use crate::storage::segment::PageSink;

/// Where a built tree lives in its segment, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeShape {
    /// Root page.
    pub root: u64,
    /// Levels, leaves included (a single leaf: 1).
    pub height: u32,
    /// Number of leaf pages (pages 0..leaf_pages).
    pub leaf_pages: u64,
    /// Pages of the whole tree.
    pub pages: u64,
    /// Entries in the leaves.
    pub entries: u64,
    /// Distinct keys among the entries.
    #[serde(default)]
    pub distinct_keys: u64,
}

/// Builds a B+tree from (key, value) entries added in ascending key order.
#[derive(Debug)]
pub struct BTreeBuilder<S: PageSink> {
    sink: S,
    page_size: usize,
    leaf: NodeBuilder,
    last_key: Vec<u8>,
    children: Vec<(Vec<u8>, u64, u64)>,
    distinct_keys: u64,
}

impl<S: PageSink> BTreeBuilder<S> {
    /// A builder writing pages of `page_size` to `sink` (which must be empty).
    pub fn new(sink: S, page_size: usize) -> Self {
        Self {
            sink,
            page_size,
            leaf: NodeBuilder::new(page_size, 0),
            last_key: Vec::new(),
            children: Vec::new(),
            distinct_keys: 0,
        }
    }

    /// Adds an entry; keys must not decrease.
    pub fn add(&mut self, key: &[u8], value: u64) -> Result<()> {
        let limit = max_key_len(self.page_size);
        if key.len() > limit {
            return Err(StorageError::InvalidArgument(format!(
                "index key of {} bytes is longer than the {limit} bytes a {} byte page allows",
                key.len(),
                self.page_size
            )));
        }
        let started = !self.leaf.is_empty() || !self.children.is_empty();
        if !started || key != self.last_key.as_slice() {
            self.distinct_keys += 1;
        }
        if started && key < self.last_key.as_slice() {
            return Err(StorageError::InvalidArgument(
                "B+tree entries must be added in key order".into(),
            ));
        }
        if !self.leaf.try_add(key, value, 0) {
            // Another entry follows, so the next leaf is the next page.
            let next = self.sink.pages_written() + 1;
            self.flush_leaf(next)?;
            let added = self.leaf.try_add(key, value, 0);
            debug_assert!(added, "a key within max_key_len fits an empty leaf");
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        Ok(())
    }

    fn flush_leaf(&mut self, next: u64) -> Result<()> {
        let leaf = std::mem::replace(&mut self.leaf, NodeBuilder::new(self.page_size, 0));
        let entry = (leaf.first_key().to_vec(), 0, leaf.subtree_entries());
        let (mut page, kind) = leaf.finish(next);
        let page_no = self.sink.append_page(kind, &mut page)?;
        self.children.push((entry.0, page_no, entry.2));
        Ok(())
    }

    /// Writes the last leaf and the inner levels; returns the tree's shape and the sink.
    pub fn finish(mut self) -> Result<(TreeShape, S)> {
        self.flush_leaf(NO_PAGE)?;
        let leaf_pages = self.children.len() as u64;
        let entries = self.children.iter().map(|c| c.2).sum();
        let mut height = 1;
        let mut level_nodes = std::mem::take(&mut self.children);
        while level_nodes.len() > 1 {
            let mut parents = Vec::new();
            let mut node = NodeBuilder::new(self.page_size, height as u16);
            for (key, child, count) in level_nodes {
                if !node.try_add(&key, child, count) {
                    let full = std::mem::replace(
                        &mut node,
                        NodeBuilder::new(self.page_size, height as u16),
                    );
                    parents.push(self.write_inner(full)?);
                    node.try_add(&key, child, count);
                }
            }
            parents.push(self.write_inner(node)?);
            level_nodes = parents;
            height += 1;
        }
        let root = level_nodes[0].1;
        let shape = TreeShape {
            root,
            height,
            leaf_pages,
            pages: self.sink.pages_written(),
            entries,
            distinct_keys: self.distinct_keys,
        };
        Ok((shape, self.sink))
    }

    fn write_inner(&mut self, node: NodeBuilder) -> Result<(Vec<u8>, u64, u64)> {
        let key = node.first_key().to_vec();
        let count = node.subtree_entries();
        let (mut page, kind) = node.finish(NO_PAGE);
        let page_no = self.sink.append_page(kind, &mut page)?;
        Ok((key, page_no, count))
    }
}
