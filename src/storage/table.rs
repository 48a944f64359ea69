//! An opened table: manifest, schema, and synchronous access to its pages.
//!
//! This is the convenience path for tools and tests: pages are read one at a time with
//! `pread`. The executor reads the same pages through the I/O layer, using [`Table::heap`] and
//! [`Table::index`] to learn where they are, and the same cursors and codec to interpret them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::SchemaRef;

use super::btree::{CountCursor, KeyRange, RangeCursor, RowId};
use super::columnar_sums::BlockSums;
use super::error::{Result, StorageError};
use super::heap::HeapCodec;
use super::key::KeyEncoder;
use super::loader::HEAP_SEGMENT;
use super::manifest::{IndexMeta, MANIFEST_FILE, Manifest};
use super::page::{PageKind, verify_page};
use super::segment::{SegmentReader, Striping};

/// The length of a table's object, named by its URL (for a table in object storage).
pub type SizeOf<'a> = dyn Fn(&Path) -> Result<u64> + 'a;

/// An index of an open table with its page files.
#[derive(Debug)]
pub struct IndexHandle {
    /// What the manifest says of it.
    pub meta: IndexMeta,
    /// Its pages.
    pub segment: SegmentReader,
}

impl IndexHandle {
    /// Row ids (secondary index) or heap page row ids (clustering index) of keys in `range`.
    pub fn lookup(&self, range: KeyRange) -> Result<Vec<u64>> {
        let mut cursor = RangeCursor::new(&self.meta.tree, range, self.meta.is_sparse());
        let mut out = Vec::new();
        while let Some(p) = cursor.next_page() {
            let page = self.segment.read_page(p)?;
            cursor.feed(&page, self.segment.file_of(p), &mut out)?;
        }
        Ok(out)
    }

    /// Number of index entries in `range` (two root-to-leaf descents).
    pub fn count(&self, range: &KeyRange) -> Result<u64> {
        let mut cursor = CountCursor::new(&self.meta.tree, range.clone());
        while let Some(p) = cursor.next_page() {
            let page = self.segment.read_page(p)?;
            cursor.feed(&page, self.segment.file_of(p))?;
        }
        Ok(cursor.count().unwrap_or(0))
    }
}

/// An ooode table opened for reading.
#[derive(Debug)]
pub struct Table {
    dir: PathBuf,
    manifest: Manifest,
    schema: SchemaRef,
    codec: HeapCodec,
    heap: SegmentReader,
    indexes: Vec<IndexHandle>,
    /// Size of the columnar (Parquet) copy when the table was opened, if it has one.
    columnar_bytes: Option<u64>,
    columnar_sums: Option<Arc<BlockSums>>,
    /// A local table's hold on its files while it is open (see [`super::segments::Pin`]).
    _pin: Option<super::segments::Pin>,
    /// In object storage.
    remote: bool,
}

impl Table {
    /// Opens the table in `dir`, checking its manifest and that every page file is there and
    /// long enough.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(StorageError::NotATable {
                path: dir,
                why: "no such directory".into(),
            });
        }
        let manifest_path = dir.join(MANIFEST_FILE);
        let text = match std::fs::read(&manifest_path) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
                StorageError::corrupted(&manifest_path, None, "manifest is not UTF-8 text")
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StorageError::NotATable {
                    path: dir,
                    why: format!("it has no {MANIFEST_FILE}"),
                });
            }
            Err(e) => return Err(StorageError::io(&manifest_path, "read", e)),
        };
        Self::from_manifest(dir, &text, None)
    }

    /// Opens a table kept in object storage: `dir` is its URL (`s3://bucket/path/t`, used as
    /// the directory its files are named under), `manifest_text` its manifest as fetched, and
    /// `size_of` the length of each of its objects (from HEAD requests). A missing or
    /// truncated object fails here, naming it. Its pages are read only through the I/O layer.
    pub fn open_remote(
        dir: PathBuf,
        manifest_text: &str,
        size_of: &dyn Fn(&Path) -> Result<u64>,
    ) -> Result<Self> {
        Self::from_manifest(dir, manifest_text, Some(size_of))
    }

    fn from_manifest(dir: PathBuf, text: &str, remote: Option<&SizeOf>) -> Result<Self> {
        let manifest_path = dir.join(MANIFEST_FILE);
        let manifest = Manifest::from_json(text, &manifest_path)?;
        let schema = manifest.schema(&manifest_path)?;
        let codec = HeapCodec::new(schema.clone(), manifest.page_size)?;
        if remote.is_some() && manifest.data_paths.iter().any(|p| p != ".") {
            return Err(StorageError::corrupted(
                &manifest_path,
                None,
                "a table in object storage cannot stripe its pages over local data paths",
            ));
        }
        let striping = Striping {
            dirs: manifest.resolved_data_paths(&dir),
            page_size: manifest.page_size,
            stripe_pages: (manifest.stripe_unit / manifest.page_size) as u64,
        };
        let segment = |name: &str, pages: u64| match remote {
            Some(size_of) => SegmentReader::remote(name, striping.clone(), pages, size_of),
            None => SegmentReader::open(name, striping.clone(), pages),
        };
        let heap = segment(HEAP_SEGMENT, manifest.heap_pages)?;
        let columnar_bytes = match (&manifest.columnar, remote) {
            (Some(columnar), Some(size_of)) => Some(size_of(&dir.join(columnar))?),
            (Some(columnar), None) => {
                let path = dir.join(columnar);
                match std::fs::metadata(&path) {
                    Ok(meta) if meta.is_file() => Some(meta.len()),
                    Ok(_) => {
                        return Err(StorageError::io(
                            &path,
                            "open the columnar copy",
                            std::io::Error::from(std::io::ErrorKind::NotFound),
                        ));
                    }
                    Err(e) => return Err(StorageError::io(&path, "open the columnar copy", e)),
                }
            }
            (None, _) => None,
        };
        let indexes = manifest
            .indexes
            .iter()
            .map(|meta| {
                Ok(IndexHandle {
                    segment: segment(&meta.segment, meta.tree.pages)?,
                    meta: meta.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // A local copy's checksums are read now (a few KB); a remote table's by its provider,
        // with the store at hand.
        let columnar_sums = match (&manifest.columnar_sums, remote) {
            (Some(sums), None) => {
                let path = dir.join(&sums.file);
                let bytes = std::fs::read(&path)
                    .map_err(|e| StorageError::io(&path, "read the columnar checksums", e))?;
                let parsed = BlockSums::from_bytes(&bytes, sums, &path)?;
                let copy = dir.join(manifest.columnar.as_deref().unwrap_or_default());
                parsed.check_covers(columnar_bytes, &copy)?;
                Some(Arc::new(parsed))
            }
            _ => None,
        };
        let pin = remote
            .is_none()
            .then(|| super::segments::Pin::hold(&dir))
            .flatten();
        Ok(Self {
            dir,
            manifest,
            schema,
            codec,
            heap,
            indexes,
            columnar_bytes,
            columnar_sums,
            _pin: pin,
            remote: remote.is_some(),
        })
    }

    /// The block checksums of a local table's columnar copy (None for tables loaded before
    /// they existed, and for tables in object storage: their provider fetches them).
    pub fn columnar_sums(&self) -> Option<&Arc<BlockSums>> {
        self.columnar_sums.as_ref()
    }

    /// Whether the table lives in object storage (its `dir` is then a URL).
    pub fn is_remote(&self) -> bool {
        self.remote
    }

    /// Size in bytes of the table's columnar (Parquet) copy, if it has one (tables are
    /// immutable: a table loaded again is opened again).
    pub fn columnar_bytes(&self) -> Option<u64> {
        self.columnar_bytes
    }

    /// Table directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Arrow schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Heap page codec.
    pub fn codec(&self) -> &HeapCodec {
        &self.codec
    }

    /// The heap segment.
    pub fn heap(&self) -> &SegmentReader {
        &self.heap
    }

    /// All indexes.
    pub fn indexes(&self) -> &[IndexHandle] {
        &self.indexes
    }

    /// Index named `name`.
    pub fn index(&self, name: &str) -> Option<&IndexHandle> {
        self.indexes.iter().find(|i| i.meta.name == name)
    }

    /// An index whose key columns are exactly `columns` (the clustering index first).
    pub fn index_on(&self, columns: &[&str]) -> Option<&IndexHandle> {
        self.indexes.iter().find(|i| {
            i.meta
                .columns
                .iter()
                .map(String::as_str)
                .eq(columns.iter().copied())
        })
    }

    /// Reads and decodes heap page `page_no` (columns `projection`, or all).
    pub fn read_heap_page(
        &self,
        page_no: u64,
        projection: Option<&[usize]>,
    ) -> Result<RecordBatch> {
        let page = self.heap.read_page(page_no)?;
        let file = self.heap.file_of(page_no);
        verify_page(&page, page_no, &[PageKind::Heap], file)?;
        self.codec.decode(&page, projection, file, page_no)
    }

    /// Every row, page by page.
    pub fn scan(
        &self,
        projection: Option<Vec<usize>>,
    ) -> impl Iterator<Item = Result<RecordBatch>> + '_ {
        (0..self.manifest.heap_pages).map(move |p| self.read_heap_page(p, projection.as_deref()))
    }

    /// The rows whose key is in `range`, found through `index`: a dense index names the rows; a
    /// sparse (clustering) index names pages, whose rows are then filtered by key.
    pub fn lookup_rows(
        &self,
        index: &IndexHandle,
        range: KeyRange,
        projection: Option<&[usize]>,
    ) -> Result<RecordBatch> {
        let found = index.lookup(range.clone())?;
        if !index.meta.is_sparse() {
            return self.fetch_rows(&found, projection);
        }
        let key_ids = index
            .meta
            .columns
            .iter()
            .map(|c| self.schema.index_of(c))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let fields: Vec<_> = key_ids
            .iter()
            .map(|&i| self.schema.fields()[i].clone())
            .collect();
        let encoder = KeyEncoder::new(&fields)?;
        let mut matches = Vec::new();
        for page_id in found {
            let page_no = RowId(page_id).page();
            let keys = self.read_heap_page(page_no, Some(&key_ids))?;
            let encoded = encoder.encode_rows(keys.columns())?;
            matches.extend(
                encoded
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| range.contains(k))
                    .map(|(slot, _)| RowId::new(page_no, slot as u16).0),
            );
        }
        self.fetch_rows(&matches, projection)
    }

    /// The rows at `row_ids` (in the given order).
    pub fn fetch_rows(&self, row_ids: &[u64], projection: Option<&[usize]>) -> Result<RecordBatch> {
        let mut parts = Vec::new();
        let mut i = 0;
        while i < row_ids.len() {
            let page_no = RowId(row_ids[i]).page();
            let mut slots = Vec::new();
            while i < row_ids.len() && RowId(row_ids[i]).page() == page_no {
                slots.push(RowId(row_ids[i]).slot() as u32);
                i += 1;
            }
            let page = self.read_heap_page(page_no, projection)?;
            if let Some(&bad) = slots.iter().find(|&&s| s as usize >= page.num_rows()) {
                return Err(StorageError::corrupted(
                    self.heap.file_of(page_no),
                    Some(page_no),
                    format!(
                        "index points at slot {bad}, the page has {} rows",
                        page.num_rows()
                    ),
                ));
            }
            parts.push(take_record_batch(&page, &UInt32Array::from(slots))?);
        }
        let schema = match projection {
            Some(p) => SchemaRef::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        Ok(concat_batches(&schema, &parts)?)
    }
}
