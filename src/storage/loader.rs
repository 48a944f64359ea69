//! Building a table from a stream of Arrow record batches.
//!
//! ```text
//!  batches ──> [sort by clustering key: ExternalSorter, spills past the budget]
//!          ──> HeapPacker ──> heap pages ──┬──> clustering index (first key of each page)
//!                                          └──> per secondary index: (key, row id) ──> sort
//!                                               ──> BTreeBuilder ──> index pages
//!          ──> manifest.json ──> fsync ──> rename into place
//! ```
//!
//! Everything is written into a temporary sibling directory `.<name>.loading-*` and made
//! visible by one rename (an exchange of directories when replacing a table), so a load that
//! fails or is interrupted leaves no table, old or new, half written. Page files in data paths
//! outside the table directory go to fresh `<path>/<name>-<load id>` directories, which the
//! manifest names; they are removed if the load fails.

use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow_row::{RowConverter, SortField};
use futures::{Stream, StreamExt};

use super::btree::{BTreeBuilder, RowId, TreeShape};
use super::columnar_sums::{self, BlockSums, SumsRef};
use super::error::{Result, StorageError};
use super::heap::{HeapCodec, HeapPacker};
use super::key::KeyEncoder;
use super::key_decode::first_column_len;
use super::manifest::{IndexKind, IndexMeta, MANIFEST_FILE, Manifest};
use super::page::{AlignedBuf, DEFAULT_PAGE_SIZE, FORMAT_VERSION, PageKind, validate_page_size};
use super::segment::{PageSink, SegmentWriter, Striping};
use super::sort::ExternalSorter;

/// Segment name of the heap.
pub const HEAP_SEGMENT: &str = "heap";
/// Name of the clustering index.
pub const CLUSTERING_INDEX: &str = "clustering";
/// File name of the columnar (Parquet) copy of the rows.
pub const COLUMNAR_FILE: &str = "columns.parquet";

/// How to build a table.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Page size in bytes (power of two, 4 KiB to 64 KiB).
    pub page_size: usize,
    /// Columns the rows are ordered by; a sparse clustering index is built on them.
    pub clustering_key: Vec<String>,
    /// Secondary indexes, each a list of key columns.
    pub indexes: Vec<Vec<String>>,
    /// Directories (one per device) to stripe page files over; empty: the table directory.
    pub data_paths: Vec<PathBuf>,
    /// Stripe unit in bytes (a multiple of the page size); 0: one page.
    pub stripe_unit: usize,
    /// Memory for sorting rows and index entries before spilling to disk.
    pub memory_budget: usize,
    /// Replace an existing table at the destination.
    pub replace: bool,
    /// Also write the rows as a Parquet file in the table directory: full scans read it
    /// (compressed, only the columns they need) while index plans read the heap.
    pub columnar: bool,
    /// The rows arrive already ordered by the clustering key (a merge of sorted segments):
    /// they go to heap pages as they come, without the sort; a row out of order fails the
    /// load.
    pub presorted: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            page_size: DEFAULT_PAGE_SIZE,
            clustering_key: Vec::new(),
            indexes: Vec::new(),
            data_paths: Vec::new(),
            stripe_unit: 0,
            memory_budget: 512 << 20,
            replace: false,
            columnar: true,
            presorted: false,
        }
    }
}

/// Phase of a load, for progress reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadPhase {
    /// Taking in input rows.
    Reading,
    /// Writing heap pages (after sorting).
    WritingHeap,
    /// Building the named index.
    BuildingIndex(String),
    /// Finished.
    Done,
}

/// A progress report.
#[derive(Debug, Clone)]
pub struct LoadProgress {
    /// Current phase.
    pub phase: LoadPhase,
    /// Rows taken in (Reading) or written (later phases).
    pub rows: u64,
    /// Bytes written so far.
    pub bytes_written: u64,
    /// Time since the load started.
    pub elapsed: std::time::Duration,
}

/// A progress callback.
pub type ProgressFn = Box<dyn FnMut(&LoadProgress) + Send>;

struct IndexBuild {
    name: String,
    columns: Vec<String>,
    column_ids: Vec<usize>,
    encoder: KeyEncoder,
    sorter: ExternalSorter,
}

/// Removes a failed load's directories when dropped before commit.
struct Cleanup {
    dirs: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Writes one table: [`create`](Self::create), [`write`](Self::write) batches,
/// [`finish`](Self::finish).
pub struct TableWriter {
    dest: PathBuf,
    tmp: PathBuf,
    cleanup: Cleanup,
    options: LoadOptions,
    schema: SchemaRef,
    codec: HeapCodec,
    striping: Striping,
    data_paths: Vec<String>,
    clustering: Option<(Vec<usize>, KeyEncoder)>,
    row_sorter: Option<(ExternalSorter, RowConverter)>,
    heap: SegmentWriter,
    packer: HeapPacker,
    clustering_tree: Option<BTreeBuilder<SegmentWriter>>,
    indexes: Vec<IndexBuild>,
    rows_in: u64,
    rows_out: u64,
    columnar: Option<parquet::arrow::ArrowWriter<std::fs::File>>,
    first_key_encoder: Option<KeyEncoder>,
    last_first_key: Option<Vec<u8>>,
    /// The last clustering key taken in, when the input is presorted (to check its order).
    last_key: Option<Vec<u8>>,
    distinct_first: u64,
    started: Instant,
    progress: Option<ProgressFn>,
}

impl std::fmt::Debug for TableWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableWriter")
            .field("dest", &self.dest)
            .field("rows_in", &self.rows_in)
            .finish_non_exhaustive()
    }
}

fn column_ids(schema: &SchemaRef, names: &[String], what: &str) -> Result<Vec<usize>> {
    names
        .iter()
        .map(|n| {
            schema.index_of(n).map_err(|_| {
                StorageError::InvalidArgument(format!(
                    "{what} column '{n}' does not exist (columns: {})",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        })
        .collect()
}

fn key_encoder(schema: &SchemaRef, ids: &[usize]) -> Result<KeyEncoder> {
    let fields: Vec<_> = ids.iter().map(|&i| schema.fields()[i].clone()).collect();
    KeyEncoder::new(&fields)
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| StorageError::io(path, "create directory", e))
}

fn fsync_dir(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(path, "fsync directory", e))
}

impl TableWriter {
    /// Starts a table of `schema` at directory `dest`.
    pub fn create(dest: impl AsRef<Path>, schema: SchemaRef, options: LoadOptions) -> Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        validate_page_size(options.page_size)?;
        let stripe_unit = if options.stripe_unit == 0 {
            options.page_size
        } else {
            options.stripe_unit
        };
        if !stripe_unit.is_multiple_of(options.page_size) {
            return Err(StorageError::InvalidArgument(format!(
                "stripe unit {stripe_unit} is not a multiple of the page size {}",
                options.page_size
            )));
        }
        let codec = HeapCodec::new(schema.clone(), options.page_size)?;
        let clustering = if options.clustering_key.is_empty() {
            None
        } else {
            let ids = column_ids(&schema, &options.clustering_key, "clustering key")?;
            let enc = key_encoder(&schema, &ids)?;
            Some((ids, enc))
        };
        let mut index_specs = Vec::new();
        for cols in &options.indexes {
            if cols.is_empty() {
                return Err(StorageError::InvalidArgument(
                    "an index needs a column".into(),
                ));
            }
            let ids = column_ids(&schema, cols, "index")?;
            let name = cols.join("_");
            if name == CLUSTERING_INDEX || index_specs.iter().any(|(n, _, _)| n == &name) {
                return Err(StorageError::InvalidArgument(format!(
                    "index on ({}) is given twice",
                    cols.join(", ")
                )));
            }
            let enc = key_encoder(&schema, &ids)?;
            index_specs.push((name, ids, enc));
        }
        Self::check_destination(&dest, options.replace)?;

        let name = dest
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
                StorageError::InvalidArgument(format!("bad table path {}", dest.display()))
            })?
            .to_string();
        let parent = dest.parent().map(Path::to_path_buf).unwrap_or_default();
        let parent = if parent.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            parent
        };
        create_dir(&parent)?;
        let suffix = unique_suffix();
        let tmp = parent.join(format!(".{name}.loading-{suffix}"));
        let mut cleanup = Cleanup { dirs: vec![] };
        create_dir(&tmp)?;
        cleanup.dirs.push(tmp.clone());
        let (dirs, data_paths) = if options.data_paths.is_empty() {
            (vec![tmp.clone()], vec![".".to_string()])
        } else {
            let mut dirs = Vec::new();
            let mut names = Vec::new();
            for dp in &options.data_paths {
                let d = std::path::absolute(dp.join(format!("{name}-{suffix}")))
                    .map_err(|e| StorageError::io(dp, "resolve data path", e))?;
                create_dir(&d)?;
                cleanup.dirs.push(d.clone());
                names.push(d.to_string_lossy().into_owned());
                dirs.push(d);
            }
            (dirs, names)
        };
        let striping = Striping {
            dirs,
            page_size: options.page_size,
            stripe_pages: (stripe_unit / options.page_size) as u64,
        };
        let spill = tmp.join("spill");
        create_dir(&spill)?;
        let per_index_budget = options.memory_budget / index_specs.len().max(1);
        let indexes = index_specs
            .into_iter()
            .map(|(name, column_ids, encoder)| {
                let dir = spill.join(&name);
                create_dir(&dir)?;
                Ok(IndexBuild {
                    columns: column_ids
                        .iter()
                        .map(|&i| schema.field(i).name().clone())
                        .collect(),
                    sorter: ExternalSorter::new(per_index_budget, &dir),
                    name,
                    column_ids,
                    encoder,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let row_sorter = match &clustering {
            Some(_) if !options.presorted => {
                let fields = schema
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect();
                let dir = spill.join("rows");
                create_dir(&dir)?;
                Some((
                    ExternalSorter::new(options.memory_budget, &dir),
                    RowConverter::new(fields)?,
                ))
            }
            _ => None,
        };
        let clustering_tree = match &clustering {
            Some(_) => Some(BTreeBuilder::new(
                SegmentWriter::create(&format!("index_{CLUSTERING_INDEX}"), striping.clone())?,
                options.page_size,
            )),
            None => None,
        };
        let columnar = if options.columnar {
            let path = tmp.join(COLUMNAR_FILE);
            let file =
                std::fs::File::create(&path).map_err(|e| StorageError::io(&path, "create", e))?;
            let props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::ZSTD(
                    parquet::basic::ZstdLevel::try_new(3)
                        .map_err(|e| StorageError::InvalidArgument(format!("zstd level: {e}")))?,
                ))
                .build();
            Some(
                parquet::arrow::ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(
                    |e| StorageError::io(&path, "start Parquet copy", std::io::Error::other(e)),
                )?,
            )
        } else {
            None
        };
        let first_key_encoder = match &clustering {
            Some((ids, _)) => Some(key_encoder(&schema, &ids[..1])?),
            None => None,
        };
        Ok(Self {
            heap: SegmentWriter::create(HEAP_SEGMENT, striping.clone())?,
            packer: HeapPacker::new(codec.clone()),
            dest,
            tmp,
            cleanup,
            schema,
            codec,
            striping,
            data_paths,
            clustering,
            row_sorter,
            clustering_tree,
            indexes,
            rows_in: 0,
            rows_out: 0,
            columnar,
            first_key_encoder,
            last_first_key: None,
            last_key: None,
            distinct_first: 0,
            started: Instant::now(),
            progress: None,
            options,
        })
    }

    fn check_destination(dest: &Path, replace: bool) -> Result<()> {
        if !dest.exists() {
            return Ok(());
        }
        if dest.join(MANIFEST_FILE).exists() {
            if replace {
                return Ok(());
            }
            return Err(StorageError::AlreadyExists {
                path: dest.to_path_buf(),
            });
        }
        let empty = std::fs::read_dir(dest)
            .map_err(|e| StorageError::io(dest, "list directory", e))?
            .next()
            .is_none();
        if empty {
            Ok(())
        } else {
            Err(StorageError::InvalidArgument(format!(
                "{} exists, is not empty and holds no ooode table; not writing into it",
                dest.display()
            )))
        }
    }

    /// Reports progress to `f` (about every 64k rows and at phase changes).
    pub fn with_progress(mut self, f: impl FnMut(&LoadProgress) + Send + 'static) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    fn report(&mut self, phase: LoadPhase, rows: u64) {
        let bytes_written = self.heap.pages_written() * self.options.page_size as u64;
        let elapsed = self.started.elapsed();
        if let Some(f) = &mut self.progress {
            f(&LoadProgress {
                phase,
                rows,
                bytes_written,
                elapsed,
            });
        }
    }

    /// Adds the rows of `batch` (its schema must match the table's column types).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let fields = batch.schema();
        let same = fields.fields().len() == self.schema.fields().len()
            && fields
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(a, b)| a.data_type() == b.data_type());
        if !same {
            return Err(StorageError::InvalidArgument(format!(
                "batch schema {fields} does not match the table schema {}",
                self.schema
            )));
        }
        let before = self.rows_in;
        self.rows_in += batch.num_rows() as u64;
        match (&self.clustering, &mut self.row_sorter) {
            (Some((ids, enc)), Some((sorter, converter))) => {
                let key_cols: Vec<ArrayRef> =
                    ids.iter().map(|&i| batch.column(i).clone()).collect();
                let keys = enc.encode_rows(&key_cols)?;
                let rows = converter.convert_columns(batch.columns())?;
                for (i, key) in keys.iter().enumerate() {
                    sorter.push(key, rows.row(i).as_ref())?;
                }
            }
            (Some((ids, enc)), None) => {
                // Presorted: check the order, since the indexes are built assuming it.
                let key_cols: Vec<ArrayRef> =
                    ids.iter().map(|&i| batch.column(i).clone()).collect();
                let keys = enc.encode_rows(&key_cols)?;
                for (i, key) in keys.iter().enumerate() {
                    let prev = match i {
                        0 => self.last_key.as_ref(),
                        _ => Some(&keys[i - 1]),
                    };
                    if prev.is_some_and(|p| p > key) {
                        return Err(StorageError::InvalidArgument(format!(
                            "presorted input is out of clustering-key order at row {}",
                            before + i as u64
                        )));
                    }
                }
                self.last_key = keys.last().cloned().or(self.last_key.take());
                self.write_heap(batch)?;
            }
            _ => self.write_heap(batch)?,
        }
        if before >> 16 != self.rows_in >> 16 {
            self.report(LoadPhase::Reading, self.rows_in);
        }
        Ok(())
    }

    fn write_heap(&mut self, batch: &RecordBatch) -> Result<()> {
        for page_rows in self.packer.push(batch)? {
            self.write_page(&page_rows)?;
        }
        Ok(())
    }

    fn write_page(&mut self, rows: &RecordBatch) -> Result<()> {
        let mut page = AlignedBuf::zeroed(self.options.page_size);
        self.codec.encode(rows, &mut page)?;
        let page_no = self.heap.append_page(PageKind::Heap, &mut page)?;
        if let Some(w) = &mut self.columnar {
            let path = self.tmp.join(COLUMNAR_FILE);
            w.write(rows).map_err(|e| {
                StorageError::io(&path, "write Parquet copy", std::io::Error::other(e))
            })?;
        }
        if let Some(first) = &self.first_key_encoder {
            let col = rows.column(self.clustering.as_ref().map_or(0, |c| c.0[0]));
            for key in first.encode_rows(std::slice::from_ref(col))? {
                if self.last_first_key.as_deref() != Some(key.as_slice()) {
                    self.distinct_first += 1;
                    self.last_first_key = Some(key);
                }
            }
        }
        if let (Some((ids, enc)), Some(tree)) = (&self.clustering, &mut self.clustering_tree) {
            let first: Vec<ArrayRef> = ids.iter().map(|&i| rows.column(i).slice(0, 1)).collect();
            let key = enc.encode_row(&first, 0)?;
            tree.add(&key, RowId::new(page_no, 0).0)?;
        }
        for idx in &mut self.indexes {
            let cols: Vec<ArrayRef> = idx
                .column_ids
                .iter()
                .map(|&i| rows.column(i).clone())
                .collect();
            for (slot, key) in idx.encoder.encode_rows(&cols)?.iter().enumerate() {
                let row_id = RowId::new(page_no, slot as u16);
                idx.sorter.push(key, &row_id.0.to_le_bytes())?;
            }
        }
        let before = self.rows_out;
        self.rows_out += rows.num_rows() as u64;
        if before >> 16 != self.rows_out >> 16 {
            self.report(LoadPhase::WritingHeap, self.rows_out);
        }
        Ok(())
    }

    /// Sorts, writes the heap and indexes, and makes the table visible at its destination.
    pub fn finish(mut self) -> Result<Manifest> {
        if let Some((sorter, converter)) = self.row_sorter.take() {
            self.report(LoadPhase::WritingHeap, 0);
            let parser = converter.parser();
            let mut chunk: Vec<u8> = Vec::new();
            let mut ends: Vec<usize> = Vec::new();
            let flush = |me: &mut Self, chunk: &mut Vec<u8>, ends: &mut Vec<usize>| {
                let mut start = 0;
                let rows: Vec<_> = ends
                    .iter()
                    .map(|&end| {
                        let r = parser.parse(&chunk[start..end]);
                        start = end;
                        r
                    })
                    .collect();
                let columns = converter.convert_rows(rows)?;
                let batch = RecordBatch::try_new(me.schema.clone(), columns)?;
                chunk.clear();
                ends.clear();
                me.write_heap(&batch)
            };
            sorter.finish()?.for_each(|_, row| {
                chunk.extend_from_slice(row);
                ends.push(chunk.len());
                if ends.len() == 8192 {
                    flush(&mut self, &mut chunk, &mut ends)?;
                }
                Ok(())
            })?;
            if !ends.is_empty() {
                flush(&mut self, &mut chunk, &mut ends)?;
            }
        }
        if let Some(last) = self.packer.finish()? {
            self.write_page(&last)?;
        }
        let heap_pages = self.heap.pages_written();
        let mut indexes = Vec::new();
        if let Some(tree) = self.clustering_tree.take() {
            let (shape, mut seg) = tree.finish()?;
            seg.finish()?;
            let mut meta = self.index_meta(
                CLUSTERING_INDEX,
                self.options.clustering_key.clone(),
                IndexKind::Clustering,
                shape,
            );
            meta.distinct_first = self.distinct_first;
            indexes.push(meta);
        }
        for idx in std::mem::take(&mut self.indexes) {
            self.report(LoadPhase::BuildingIndex(idx.name.clone()), self.rows_out);
            let segment =
                SegmentWriter::create(&format!("index_{}", idx.name), self.striping.clone())?;
            let mut tree = BTreeBuilder::new(segment, self.options.page_size);
            // Distinct values of the first column (the statistics of a composite index's
            // leading column): keys come sorted, so a new value starts a new prefix.
            let first_type = self.schema.field(idx.column_ids[0]).data_type().clone();
            let (mut distinct_first, mut last_first) = (0u64, Vec::new());
            idx.sorter.finish()?.for_each(|key, value| {
                let row_id = u64::from_le_bytes(value.try_into().map_err(|_| {
                    StorageError::InvalidArgument("index entry payload is not a row id".into())
                })?);
                let first = first_column_len(&first_type, key)
                    .map_err(|why| StorageError::InvalidArgument(format!("index key: {why}")))?;
                if distinct_first == 0 || key[..first] != last_first[..] {
                    distinct_first += 1;
                    last_first.clear();
                    last_first.extend_from_slice(&key[..first]);
                }
                tree.add(key, row_id)
            })?;
            let (shape, mut seg) = tree.finish()?;
            seg.finish()?;
            let mut meta = self.index_meta(&idx.name, idx.columns, IndexKind::Secondary, shape);
            meta.distinct_first = distinct_first;
            indexes.push(meta);
        }
        self.heap.finish()?;
        let (columnar, columnar_sums) = match self.columnar.take() {
            Some(w) => {
                let path = self.tmp.join(COLUMNAR_FILE);
                w.close().map_err(|e| {
                    StorageError::io(&path, "finish Parquet copy", std::io::Error::other(e))
                })?;
                std::fs::File::open(&path)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| StorageError::io(&path, "fsync", e))?;
                let sums = BlockSums::of_file(&path, columnar_sums::BLOCK_SIZE)?.to_bytes();
                let sums_name = format!("{COLUMNAR_FILE}{}", columnar_sums::SUMS_SUFFIX);
                let sums_path = self.tmp.join(&sums_name);
                std::fs::write(&sums_path, &sums)
                    .and_then(|_| std::fs::File::open(&sums_path)?.sync_all())
                    .map_err(|e| StorageError::io(&sums_path, "write", e))?;
                let sums_ref = SumsRef {
                    file: sums_name,
                    crc: crate::storage::checksum::crc32c(&sums),
                };
                (Some(COLUMNAR_FILE.to_string()), Some(sums_ref))
            }
            None => (None, None),
        };
        let manifest = Manifest {
            format_version: FORMAT_VERSION as u32,
            columns: Manifest::columns_of(&self.schema),
            row_count: self.rows_out,
            page_size: self.options.page_size,
            stripe_unit: self.striping.stripe_pages as usize * self.options.page_size,
            data_paths: self.data_paths.clone(),
            clustering_key: self.options.clustering_key.clone(),
            heap_pages,
            indexes,
            columnar,
            columnar_sums,
            created_by: format!("ooode {}", env!("CARGO_PKG_VERSION")),
            checksum: 0,
        };
        self.commit(&manifest)?;
        self.report(LoadPhase::Done, self.rows_out);
        Ok(manifest)
    }

    fn index_meta(
        &self,
        name: &str,
        columns: Vec<String>,
        kind: IndexKind,
        tree: TreeShape,
    ) -> IndexMeta {
        IndexMeta {
            name: name.to_string(),
            columns,
            kind,
            segment: format!("index_{name}"),
            tree,
            distinct_first: 0,
        }
    }

    fn commit(&mut self, manifest: &Manifest) -> Result<()> {
        let spill = self.tmp.join("spill");
        std::fs::remove_dir_all(&spill).map_err(|e| StorageError::io(&spill, "remove", e))?;
        let path = self.tmp.join(MANIFEST_FILE);
        std::fs::write(&path, manifest.to_json())
            .and_then(|_| std::fs::File::open(&path)?.sync_all())
            .map_err(|e| StorageError::io(&path, "write manifest", e))?;
        for dir in &self.striping.dirs {
            fsync_dir(dir)?;
        }
        let parent = self.tmp.parent().map(Path::to_path_buf).unwrap_or_default();
        if self.dest.join(MANIFEST_FILE).exists() {
            let old = super::table::Table::open(&self.dest).ok();
            exchange_dirs(&self.tmp, &self.dest)?;
            // self.tmp now holds the old table: it and its external data paths go.
            self.cleanup.dirs = vec![self.tmp.clone()];
            if let Some(old) = old {
                self.cleanup.dirs.extend(
                    old.manifest()
                        .data_paths
                        .iter()
                        .filter(|p| p.as_str() != ".")
                        .map(PathBuf::from),
                );
            }
        } else {
            if self.dest.exists() {
                // An empty directory (checked at create): rename cannot replace it otherwise.
                std::fs::remove_dir(&self.dest)
                    .map_err(|e| StorageError::io(&self.dest, "remove empty directory", e))?;
            }
            std::fs::rename(&self.tmp, &self.dest)
                .map_err(|e| StorageError::io(&self.dest, "rename into place", e))?;
            self.cleanup.dirs.clear();
        }
        fsync_dir(&parent)
    }
}

/// Atomically swaps two directories (Linux `renameat2(RENAME_EXCHANGE)`).
fn exchange_dirs(a: &Path, b: &Path) -> Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())
        .map_err(|_| StorageError::InvalidArgument(format!("bad path {}", a.display())))?;
    let cb = CString::new(b.as_os_str().as_bytes())
        .map_err(|_| StorageError::InvalidArgument(format!("bad path {}", b.display())))?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(StorageError::io(
            b,
            "exchange with the new table",
            std::io::Error::last_os_error(),
        ))
    }
}

/// Loads a table at `dest` from a stream of batches of `schema`.
pub async fn load_stream<S, E>(
    dest: impl AsRef<Path>,
    schema: SchemaRef,
    mut stream: S,
    options: LoadOptions,
    progress: Option<ProgressFn>,
) -> Result<Manifest>
where
    S: Stream<Item = std::result::Result<RecordBatch, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut writer = TableWriter::create(dest, schema, options)?;
    if let Some(p) = progress {
        writer.progress = Some(p);
    }
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| StorageError::Input(e.to_string()))?;
        writer.write(&batch)?;
    }
    writer.finish()
}

/// Loads a table at `dest` from an iterator of batches of `schema`.
pub fn load_batches<I, E>(
    dest: impl AsRef<Path>,
    schema: SchemaRef,
    batches: I,
    options: LoadOptions,
) -> Result<Manifest>
where
    I: IntoIterator<Item = std::result::Result<RecordBatch, E>>,
    E: std::fmt::Display,
{
    let mut writer = TableWriter::create(dest, schema, options)?;
    for batch in batches {
        writer.write(&batch.map_err(|e| StorageError::Input(e.to_string()))?)?;
    }
    writer.finish()
}
