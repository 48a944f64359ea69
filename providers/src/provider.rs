//! `OoodeTable`: an ooode table as a DataFusion TableProvider.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::config::TableParquetOptions;
use datafusion::common::not_impl_err;
use datafusion::common::stats::Precision;
use datafusion::common::{DFSchema, DataFusionError, Result, Statistics};
use datafusion::datasource::TableType;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use ooode::access::{OoodeRuntime, QueryIo, RemoteTable, to_df};
use ooode::config::OoodeConfig;
use ooode::exec::OoodeScanExec;
use ooode::optimizer::plan_reads;
use ooode::storage::Table;
use ooode::storage::columnar_sums::BlockSums;
use ooode::storage::segments::{SEGMENTS_FILE, SegmentList};

use crate::checked_store::CheckedStore;
use crate::parquet_copy::{CopyFile, ParquetCopyScan};

/// A table stored in the ooode format.
///
/// Scans read heap pages through the I/O layer; the ooode optimizer rule turns scans with
/// selective predicates into index scans and hash joins into index nested-loop joins. Filters
/// are reported `Inexact`: DataFusion keeps its FilterExec, which the rule folds into an index
/// scan where an index applies.
#[derive(Debug)]
pub struct OoodeTable {
    location: Location,
    name: String,
    schema: SchemaRef,
    /// Rows when last counted (opened, or planned over its segments).
    rows: std::sync::atomic::AtomicU64,
    /// Segments when last planned.
    segments: std::sync::atomic::AtomicUsize,
    /// The Parquet copies' metadata and statistics (one per segment), once a scan read them.
    columnar: parking_lot::Mutex<HashMap<PathBuf, Arc<ColumnarFile>>>,
    /// For a local table read as fixed segments (a shard whose shard map names them): their
    /// names (`.` is the directory itself), whatever its segment list says.
    pinned: Option<Vec<String>>,
}

/// Where a table lives.
#[derive(Debug)]
enum Location {
    /// A local directory (opened again per execution mode by the runtime).
    Local(PathBuf),
    /// Object storage: opened once (manifest, object sizes and versions), kept here, and
    /// opened again after this session's inserts.
    Remote(RemoteLocation),
}

/// A table in object storage as last opened.
#[derive(Debug, Clone)]
pub(crate) struct RemoteLocation {
    url: PathBuf,
    current: Arc<parking_lot::RwLock<Arc<RemoteTable>>>,
}

impl RemoteLocation {
    /// The table as last opened.
    pub(crate) fn get(&self) -> Arc<RemoteTable> {
        self.current.read().clone()
    }

    /// Opens the table again (after a commit), for the queries planned from now on.
    pub(crate) async fn reopen(&self) -> Result<()> {
        let now = self.get();
        let again = RemoteTable::open(now.store().clone(), &self.url.to_string_lossy())
            .await
            .map_err(to_df)?;
        *self.current.write() = Arc::new(again);
        Ok(())
    }
}

fn table_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

impl OoodeTable {
    /// Opens the table in `dir` (checking its manifest and files).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let list = SegmentList::read(&dir).map_err(to_df)?;
        Self::open_local(list.dirs(&dir), dir, None)
    }

    /// Opens the local table in `dir` as exactly the segments `names` (`.` is `dir`
    /// itself), whatever its segment list says: a shard of a sharded table, whose shard map
    /// names the segments committed to it.
    pub fn open_segments(dir: impl AsRef<Path>, names: &[String]) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        Self::open_local(pinned_dirs(&dir, names)?, dir, Some(names.to_vec()))
    }

    /// The local table in `dir` of segments `segments` (checking their manifests).
    fn open_local(
        segments: Vec<PathBuf>,
        dir: PathBuf,
        pinned: Option<Vec<String>>,
    ) -> Result<Self> {
        let mut schema = None;
        let mut rows = 0;
        for seg in &segments {
            let table = Table::open(seg).map_err(to_df)?;
            rows += table.manifest().row_count;
            schema.get_or_insert_with(|| table.schema().clone());
        }
        let schema = schema
            .ok_or_else(|| DataFusionError::Execution(format!("{}: no segments", dir.display())))?;
        Ok(Self {
            schema,
            rows: rows.into(),
            segments: segments.len().into(),
            columnar: Default::default(),
            name: table_name(&dir),
            location: Location::Local(dir),
            pinned,
        })
    }

    /// Opens the table at `location`: a directory (or `file://` URL), or a URL in object
    /// storage (`s3://bucket/path/t`, ...) whose store is the session's, or one built from the
    /// `aws.*` entries of `options` (see [`crate::remote`]).
    pub async fn open_location(
        state: &dyn Session,
        location: &str,
        options: &std::collections::HashMap<String, String>,
    ) -> Result<Self> {
        if !crate::remote::is_remote(location) {
            return Self::open(location.strip_prefix("file://").unwrap_or(location));
        }
        let (store_url, _) = ooode::access::remote::split_url(location).map_err(to_df)?;
        let store = crate::remote::store_for(state, &store_url, options)?;
        Self::open_remote(store, location).await
    }

    /// Opens the table at `url` in `store` (`s3://bucket/path/t`).
    pub async fn open_remote(store: Arc<dyn object_store::ObjectStore>, url: &str) -> Result<Self> {
        let remote = RemoteTable::open(store, url).await.map_err(to_df)?;
        let table = remote.table();
        Ok(Self {
            schema: table.schema().clone(),
            rows: table.manifest().row_count.into(),
            segments: 1.into(),
            columnar: Default::default(),
            pinned: None,
            name: table_name(table.dir()),
            location: Location::Remote(RemoteLocation {
                url: remote.url().to_path_buf(),
                current: Arc::new(parking_lot::RwLock::new(Arc::new(remote))),
            }),
        })
    }

    /// Reads what every query of the table needs before its first one: the pinned index
    /// nodes (one large read per index instead of a read per tree level and lookup) and the
    /// columnar copy's footer, together. For a table in object storage that takes a round
    /// trip or two at `CREATE EXTERNAL TABLE` instead of several in each query of a fresh
    /// process. A failure here is only logged: the query that needs the page reads it again
    /// and reports the error.
    pub async fn prepare(&self, state: &dyn Session) {
        let config = ooode_config(state);
        let runtime = OoodeRuntime::for_env(state.runtime_env());
        runtime.configure(&config);
        let tables = match self.snapshot(&runtime, &config) {
            Ok(t) => t,
            Err(e) => return log::debug!("ooode: preparing {}: {e}", self.name),
        };
        for table in tables {
            let nodes = table.load_pinned();
            let footer = async {
                match table.table().manifest().columnar.clone() {
                    Some(file) if config.columnar_scan => {
                        let path = table.table().dir().join(file);
                        self.columnar_file(state, table.table(), &path)
                            .await
                            .map(drop)
                    }
                    _ => Ok(()),
                }
            };
            let (nodes, footer) = futures::join!(nodes, footer);
            if let Err(e) = nodes {
                log::debug!("ooode: pinning index nodes of {}: {e}", self.name);
            }
            if let Err(e) = footer {
                log::debug!(
                    "ooode: reading the columnar copy's footer of {}: {e}",
                    self.name
                );
            }
        }
    }

    /// The table's segments committed now, opened for `config`'s execution mode.
    fn snapshot(
        &self,
        runtime: &OoodeRuntime,
        config: &OoodeConfig,
    ) -> ooode::storage::Result<Vec<Arc<ooode::access::TableIo>>> {
        match &self.location {
            Location::Local(dir) => match &self.pinned {
                Some(names) => pinned_dirs(dir, names)
                    .map_err(|e| ooode::storage::StorageError::InvalidArgument(e.to_string()))?
                    .iter()
                    .map(|seg| runtime.table(seg, config.execution_mode, config.direct_io))
                    .collect(),
                None => local_snapshot(runtime, config, dir),
            },
            Location::Remote(remote) => runtime
                .remote_table(&remote.get(), config.execution_mode)
                .map(|t| vec![t]),
        }
    }

    /// Every committed segment of the table, opened for reading out of order in one
    /// [`TableIo`](ooode::access::TableIo) (a compaction's input).
    pub(crate) fn segments_io(&self, state: &dyn Session) -> Result<Arc<ooode::access::TableIo>> {
        let mut config = ooode_config(state);
        config.execution_mode = ooode::exec::ExecutionMode::OutOfOrder;
        let runtime = OoodeRuntime::for_env(state.runtime_env());
        runtime.configure(&config);
        let tables = self.snapshot(&runtime, &config).map_err(to_df)?;
        match tables.as_slice() {
            [one] => Ok(one.clone()),
            _ => Ok(Arc::new(
                ooode::access::TableIo::combine(&tables).map_err(to_df)?,
            )),
        }
    }

    /// Where the table lives in object storage (None: a local table).
    pub(crate) fn remote_location(&self) -> Option<&RemoteLocation> {
        match &self.location {
            Location::Local(_) => None,
            Location::Remote(r) => Some(r),
        }
    }

    /// The table in object storage as last opened (None: a local table).
    pub fn remote_table(&self) -> Option<Arc<RemoteTable>> {
        self.remote_location().map(RemoteLocation::get)
    }

    /// Opens a table in object storage again, for the queries planned from now on (another
    /// process committed to it); a local table is read afresh by every query anyway.
    pub async fn reopen(&self) -> Result<()> {
        match self.remote_location() {
            Some(remote) => remote.reopen().await,
            None => Ok(()),
        }
    }

    /// Where a Parquet scan of the columnar copy of `segment` (one of this table's) reads it
    /// in `state`'s runtime: its checking store is registered there. None: it has no copy.
    pub async fn columnar_store_url(
        &self,
        state: &dyn Session,
        segment: &Arc<Table>,
    ) -> Result<Option<ObjectStoreUrl>> {
        let Some(file) = segment.manifest().columnar.as_ref() else {
            return Ok(None);
        };
        let path = segment.dir().join(file);
        let columnar = self.columnar_file(state, segment, &path).await?;
        Ok(Some(columnar.register(state)))
    }

    /// Rows when last counted (at open, or when last planned).
    pub fn row_count(&self) -> u64 {
        self.rows.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the table lives in object storage.
    pub fn is_remote(&self) -> bool {
        matches!(self.location, Location::Remote(_))
    }

    /// Table directory (for a table in object storage, its URL).
    pub fn dir(&self) -> &Path {
        match &self.location {
            Location::Local(dir) => dir,
            Location::Remote(r) => &r.url,
        }
    }

    /// The scan of the columnar copies `copies` (of segments of this table), described: it is
    /// built only if no index plan replaces the ooode scan. A ListingTable lists and stats the
    /// files on every scan (a fifth of planning a point query); their metadata and statistics
    /// are kept here.
    async fn parquet_scan(
        &self,
        state: &dyn Session,
        copies: Vec<(&Arc<Table>, PathBuf)>,
        projection: &[usize],
        limit: Option<usize>,
    ) -> Result<ParquetCopyScan> {
        let mut files = Vec::with_capacity(copies.len());
        for (segment, path) in copies {
            let columnar = self.columnar_file(state, segment, &path).await?;
            files.push(CopyFile {
                meta: columnar.meta.clone(),
                statistics: columnar.statistics.clone(),
                store_url: columnar.register(state),
            });
        }
        // The session's `datafusion.execution.parquet.*` settings, as a ListingTable reads
        // them.
        let options = TableParquetOptions {
            global: state.config_options().execution.parquet.clone(),
            ..Default::default()
        };
        ParquetCopyScan::new(
            state.runtime_env().clone(),
            options,
            self.schema.clone(),
            files,
            projection,
            limit,
        )
    }

    /// The columnar copy's object metadata, checksums and statistics, read once per version
    /// of the file. For the segment opened when they were read, no more is asked of the file
    /// system: a segment replaced on disk is opened again (the runtime forgets the one it
    /// had), and its file is then checked by size and modification time.
    async fn columnar_file(
        &self,
        state: &dyn Session,
        table: &Arc<Table>,
        file: &Path,
    ) -> Result<Arc<ColumnarFile>> {
        if let Location::Remote(remote) = &self.location {
            return self
                .remote_columnar_file(state, &remote.get(), table, file)
                .await;
        }
        let io_err = |e: std::io::Error| {
            DataFusionError::Execution(format!(
                "ooode table {}: {}: {e}",
                self.name,
                file.display()
            ))
        };
        if let Some(known) = self.columnar.lock().get(file)
            && known.read_for(table)
        {
            return Ok(known.clone());
        }
        let fs_meta = std::fs::metadata(file).map_err(io_err)?;
        let stamp = (fs_meta.len(), fs_meta.modified().map_err(io_err)?);
        if let Some(known) = self.same_file_again(table, file, stamp) {
            return Ok(known);
        }
        let absolute = std::path::absolute(file).map_err(io_err)?;
        let location = object_store::path::Path::from_absolute_path(&absolute)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let store = state
            .runtime_env()
            .object_store(ObjectStoreUrl::local_filesystem())?;
        let meta = object_store::ObjectStoreExt::head(&store, &location).await?;
        let sums = table.columnar_sums().cloned();
        self.keep_columnar(state, store, sums, (table, file), stamp, meta)
            .await
    }

    /// The copy read before, if `file` is still what it was (`stamp`) for `segment`, opened
    /// again (or in another runtime): its statistics still hold.
    fn same_file_again(
        &self,
        segment: &Arc<Table>,
        file: &Path,
        stamp: (u64, std::time::SystemTime),
    ) -> Option<Arc<ColumnarFile>> {
        let mut columnar = self.columnar.lock();
        let known = columnar.get_mut(file).filter(|k| k.stamp == stamp)?;
        *known = Arc::new(ColumnarFile {
            segment: Arc::downgrade(segment),
            ..known.as_ref().clone()
        });
        Some(known.clone())
    }

    /// The columnar copy of a table in object storage: its size is known from opening the
    /// table (immutable since), so its statistics are read once, with no HEAD per query; its
    /// checksums are fetched then too.
    async fn remote_columnar_file(
        &self,
        state: &dyn Session,
        remote: &RemoteTable,
        segment: &Arc<Table>,
        file: &Path,
    ) -> Result<Arc<ColumnarFile>> {
        if let Some(known) = self.columnar.lock().get(file) {
            return Ok(known.clone());
        }
        let meta = object_store::ObjectMeta {
            location: remote.object_path(file).map_err(to_df)?,
            last_modified: Default::default(),
            size: segment.columnar_bytes().unwrap_or(0),
            e_tag: remote.version(file).map(str::to_string),
            version: None,
        };
        let sums = remote.columnar_sums(segment).await.map_err(to_df)?;
        let stamp = (meta.size, std::time::SystemTime::UNIX_EPOCH);
        self.keep_columnar(
            state,
            remote.store().clone(),
            sums,
            (segment, file),
            stamp,
            meta,
        )
        .await
    }

    async fn keep_columnar(
        &self,
        state: &dyn Session,
        store: Arc<dyn object_store::ObjectStore>,
        sums: Option<Arc<BlockSums>>,
        (segment, file): (&Arc<Table>, &Path),
        stamp: (u64, std::time::SystemTime),
        meta: object_store::ObjectMeta,
    ) -> Result<Arc<ColumnarFile>> {
        use datafusion::datasource::file_format::FileFormat;
        use datafusion::datasource::file_format::parquet::ParquetFormat;
        let (store, checked) = match sums {
            Some(sums) => {
                let checked = CheckedStore::new(store);
                checked.check(meta.location.clone(), sums, file.to_path_buf());
                (
                    checked.clone() as Arc<dyn object_store::ObjectStore>,
                    Some(checked),
                )
            }
            None => (store, None),
        };
        let statistics = ParquetFormat::default()
            .infer_stats_and_ordering(state, &store, self.schema.clone(), &meta)
            .await?
            .statistics;
        let store_url = match (&checked, &self.location) {
            (Some(c), _) => c.url().clone(),
            (None, Location::Local(_)) => ObjectStoreUrl::local_filesystem(),
            (None, Location::Remote(r)) => ObjectStoreUrl::parse(r.get().store_url())?,
        };
        let known = Arc::new(ColumnarFile {
            segment: Arc::downgrade(segment),
            stamp,
            meta,
            statistics: Arc::new(statistics),
            checked,
            store_url,
        });
        self.columnar
            .lock()
            .insert(file.to_path_buf(), known.clone());
        Ok(known)
    }
}

impl OoodeTable {
    /// The scan of the table's segments `table`.
    #[allow(clippy::too_many_arguments)]
    async fn scan_table(
        &self,
        state: &dyn Session,
        config: &OoodeConfig,
        runtime: &Arc<OoodeRuntime>,
        table: Arc<ooode::access::TableIo>,
        projection: &[usize],
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let partitions = match config.execution_mode {
            ooode::exec::ExecutionMode::InOrder => 1,
            ooode::exec::ExecutionMode::OutOfOrder => state.config().target_partitions(),
        };
        let query = QueryIo::new(runtime, config);
        let scan = OoodeScanExec::new(
            table.clone(),
            self.name.clone(),
            projection.to_vec(),
            partitions,
            query.clone(),
        )?;
        // The filters' index scans counted here, where waiting for reads is asynchronous (the
        // index rule finds the counts made), and a small one's pages read while the rest of
        // the query is planned. A filter that cannot be planned here is left to the FilterExec.
        let predicate = datafusion::logical_expr::utils::conjunction(filters.iter().cloned())
            .and_then(|f| {
                let schema = DFSchema::try_from(self.schema.clone()).ok()?;
                state.create_physical_expr(f, &schema).ok()
            });
        let scan = match predicate {
            Some(predicate) => {
                let io = scan.io_metrics().clone();
                let reads = plan_reads(&table, &predicate, projection, config, io, &query).await?;
                scan.with_plan_reads(reads)
            }
            None => scan,
        };
        // Full scans read the segments' columnar copies when they all have one.
        let segments: Vec<&Arc<Table>> = (0..table.segments())
            .filter_map(|part| table.segment(part))
            .collect();
        let copies: Option<Vec<_>> = segments
            .iter()
            .map(|t| {
                t.manifest()
                    .columnar
                    .as_ref()
                    .map(|f| (*t, t.dir().join(f)))
            })
            .collect();
        match copies {
            Some(copies) if config.columnar_scan => {
                let parquet = self.parquet_scan(state, copies, projection, limit).await?;
                Ok(Arc::new(scan.with_columnar_scan(Arc::new(parquet))))
            }
            _ => Ok(Arc::new(scan)),
        }
    }
}

/// The directories of segments `names` of the table in `dir` (`.` is `dir` itself); a name
/// that is not a segment of it is an error.
fn pinned_dirs(dir: &Path, names: &[String]) -> Result<Vec<PathBuf>> {
    names
        .iter()
        .map(|n| match n.as_str() {
            "." => Ok(dir.to_path_buf()),
            n if n.starts_with(ooode::storage::segments::SEGMENT_PREFIX)
                && !n.contains(['/', '\\'])
                && !n.contains("..") =>
            {
                Ok(dir.join(n))
            }
            n => Err(DataFusionError::Execution(format!(
                "'{n}' is not a segment name (of {})",
                dir.display()
            ))),
        })
        .collect()
}

/// The segments of the local table in `dir` committed now, opened. Retired segments leave
/// the runtime's cache (so that only plans still running hold them); a segment removed
/// between reading the list and opening it (a compaction committed meanwhile) makes the
/// list be read again.
fn local_snapshot(
    runtime: &OoodeRuntime,
    config: &OoodeConfig,
    dir: &Path,
) -> ooode::storage::Result<Vec<Arc<ooode::access::TableIo>>> {
    let mut attempts = 0;
    loop {
        let list = SegmentList::read(dir)?;
        for retired in &list.retired {
            runtime.forget_table(&dir.join(retired));
        }
        let opened: ooode::storage::Result<Vec<_>> = list
            .dirs(dir)
            .iter()
            .map(|seg| runtime.table(seg, config.execution_mode, config.direct_io))
            .collect();
        match opened {
            Err(_) if attempts == 0 && SegmentList::read(dir)?.version != list.version => {
                attempts += 1;
            }
            other => return other,
        }
    }
}

/// What a scan of a table's Parquet copy needs to know about the file.
#[derive(Debug, Clone)]
struct ColumnarFile {
    /// The opened segment it was read (or last checked) for; weak, so that a segment the
    /// runtime forgot is not kept open here (and its address is not taken by another).
    segment: std::sync::Weak<Table>,
    /// Size and modification time when it was read: a file replaced since is read again.
    stamp: (u64, std::time::SystemTime),
    meta: object_store::ObjectMeta,
    statistics: Arc<Statistics>,
    /// The store checking the file's blocks (tables loaded with checksums).
    checked: Option<Arc<CheckedStore>>,
    /// Where the Parquet scan reads the file from.
    store_url: ObjectStoreUrl,
}

impl ColumnarFile {
    /// Whether it was read or checked for `segment`, opened as it is now.
    fn read_for(&self, segment: &Arc<Table>) -> bool {
        std::ptr::eq(self.segment.as_ptr(), Arc::as_ptr(segment))
    }

    /// The store URL to scan, with its checking store registered in the session's runtime
    /// (a session other than the one that read the file may scan it).
    fn register(&self, state: &dyn Session) -> ObjectStoreUrl {
        if let Some(checked) = &self.checked {
            let env = state.runtime_env();
            // Registered every time, not when missing: a registry may answer for any URL
            // (a worker's does for the coordinator's checking stores).
            let registered = env
                .object_store(checked.url())
                .is_ok_and(|s| std::ptr::addr_eq(Arc::as_ptr(&s), Arc::as_ptr(checked)));
            if !registered {
                env.register_object_store(checked.url().as_ref(), checked.clone());
            }
        }
        self.store_url.clone()
    }
}

/// The session's ooode settings (defaults if the extension is not registered).
pub fn ooode_config(state: &dyn Session) -> OoodeConfig {
    state
        .config_options()
        .extensions
        .get::<OoodeConfig>()
        .cloned()
        .unwrap_or_default()
}

#[async_trait]
impl TableProvider for OoodeTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let config = ooode_config(state);
        let runtime = OoodeRuntime::for_env(state.runtime_env());
        runtime.configure(&config);
        // The query's snapshot: the segments committed now, each kept open by the plan.
        let tables = self.snapshot(&runtime, &config).map_err(to_df)?;
        let segments = tables.len();
        // Several segments (a table that grew by INSERT) are read as one table: scans read
        // each segment's pages or columnar copy, index plans probe every segment's index.
        let table = match tables.as_slice() {
            [one] => one.clone(),
            _ => Arc::new(ooode::access::TableIo::combine(&tables).map_err(to_df)?),
        };
        self.rows
            .store(table.row_count(), std::sync::atomic::Ordering::Relaxed);
        self.segments
            .store(segments, std::sync::atomic::Ordering::Relaxed);
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        self.scan_table(state, &config, &runtime, table, &projection, filters, limit)
            .await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut stats = Statistics::new_unknown(&self.schema);
        let rows = self.rows.load(std::sync::atomic::Ordering::Relaxed) as usize;
        // Exact for a table that cannot have grown since it was counted: one loaded once.
        let grown = self.pinned.is_none()
            && (self.segments.load(std::sync::atomic::Ordering::Relaxed) != 1
                || matches!(&self.location, Location::Local(dir) if dir.join(SEGMENTS_FILE).exists()));
        stats.num_rows = if grown {
            Precision::Inexact(rows)
        } else {
            Precision::Exact(rows)
        };
        Some(stats)
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if self.pinned.is_some() {
            return not_impl_err!(
                "{} is read as fixed segments (a shard): insert through its sharded table",
                self.name
            );
        }
        let dir = match &self.location {
            Location::Local(dir) => dir,
            Location::Remote(remote) => {
                let sink =
                    crate::insert::RemoteSink::new(remote.clone(), self.schema.clone(), insert_op)?;
                return Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)));
            }
        };
        let sink = crate::insert::OoodeSink::new(dir.clone(), self.schema.clone(), insert_op)?;
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn delete_from(
        &self,
        _state: &dyn Session,
        _filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        not_impl_err!(
            "DELETE is not supported on ooode tables (their segments are immutable); \
             INSERT OVERWRITE replaces a table's rows"
        )
    }

    async fn update(
        &self,
        _state: &dyn Session,
        _assignments: Vec<(String, Expr)>,
        _filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        not_impl_err!(
            "UPDATE is not supported on ooode tables (their segments are immutable); \
             INSERT OVERWRITE replaces a table's rows"
        )
    }
}
