//! `INSERT INTO t ...` and `INSERT OVERWRITE t ...` on a local ooode table: DataFusion's
//! `DataSinkExec` feeding an [`OoodeSink`], which writes the rows as a new segment and
//! commits it (see [`ooode::storage::segments`]).
//!
//! ```text
//!   INSERT ──> DataSinkExec ──> OoodeSink::write_all
//!                                 take the table's write lock (waits for other writers)
//!                                 read segments.json, remove segments no commit named
//!                                 load the rows into seg-<n>-<id>/ (sorted, indexed, columnar)
//!                                 commit segments.json + [seg] (OVERWRITE: [seg] alone)
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result, not_impl_err};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use ooode::access::to_df;
use ooode::storage::manifest::IndexKind;
use ooode::storage::segments::{SEGMENTS_FILE, SegmentList, WriteLock};
use ooode::storage::{LoadOptions, Table};

use crate::writer::load_from_stream;

/// Writes inserted rows as a segment of the table in `dir`.
#[derive(Debug)]
pub struct OoodeSink {
    dir: PathBuf,
    schema: SchemaRef,
    op: InsertOp,
    options: LoadOptions,
}

impl OoodeSink {
    /// A sink appending to (or, with [`InsertOp::Overwrite`], replacing) the table in `dir`.
    /// New segments are built like the table: same page size, clustering key, indexes and
    /// columnar copy; they are written in the table directory (striping over data paths
    /// applies to the bulk load only).
    pub fn new(dir: PathBuf, schema: SchemaRef, op: InsertOp) -> Result<Self> {
        if op == InsertOp::Replace {
            return not_impl_err!("REPLACE INTO is not supported on ooode tables");
        }
        let options = segment_options(&dir)?;
        Ok(Self {
            dir,
            schema,
            op,
            options,
        })
    }
}

/// Waits (on a blocking thread) for the write lock of the local table in `dir`.
pub async fn write_lock(dir: &Path) -> Result<WriteLock> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || WriteLock::acquire(&dir))
        .await
        .map_err(|e| DataFusionError::Execution(e.to_string()))?
        .map_err(to_df)
}

/// How segments of the table in `dir` are built: like its first listed segment (page size,
/// clustering key, secondary indexes, columnar copy), in their own directory.
pub fn segment_options(dir: &Path) -> Result<LoadOptions> {
    let list = SegmentList::read(dir).map_err(to_df)?;
    let first = list.dirs(dir).remove(0);
    let table = Table::open(&first).map_err(to_df)?;
    Ok(options_like(&table))
}

/// Load options that build a segment like `table`.
fn options_like(table: &Table) -> LoadOptions {
    let m = table.manifest();
    LoadOptions {
        page_size: m.page_size,
        clustering_key: m.clustering_key.clone(),
        indexes: m
            .indexes
            .iter()
            .filter(|i| i.kind == IndexKind::Secondary)
            .map(|i| i.columns.clone())
            .collect(),
        columnar: m.columnar.is_some(),
        ..LoadOptions::default()
    }
}

impl DisplayAs for OoodeSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let op = match self.op {
            InsertOp::Overwrite => "overwrite",
            _ => "append",
        };
        write!(f, "OoodeSink: {} ({op}, a new segment)", self.dir.display())
    }
}

#[async_trait]
impl DataSink for OoodeSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let lock = write_lock(&self.dir).await?;
        let list = SegmentList::read(&self.dir).map_err(to_df)?;
        list.remove_uncommitted(&self.dir, &lock).map_err(to_df)?;
        let name = list.next_segment_name();
        let segment = self.dir.join(&name);
        let manifest = load_from_stream(
            data,
            segment.clone(),
            self.schema.clone(),
            self.options.clone(),
        )
        .await?;
        let rows = manifest.row_count;
        let mut next = list.clone();
        next.version += 1;
        match self.op {
            InsertOp::Overwrite => {
                next.retired.append(&mut next.segments);
                next.segments = vec![name];
            }
            _ if rows == 0 => {
                // Nothing to add: no commit, and the empty segment goes.
                std::fs::remove_dir_all(&segment).map_err(|e| {
                    DataFusionError::Execution(format!("{}: {e}", segment.display()))
                })?;
                return Ok(0);
            }
            _ => next.segments.push(name),
        }
        next.commit(&self.dir, &lock).map_err(to_df)?;
        drop(lock);
        let limit = context
            .session_config()
            .options()
            .extensions
            .get::<ooode::config::OoodeConfig>()
            .map_or(0, |c| c.compact_segments);
        if limit > 0 && next.segments.len() > limit {
            // The insert is committed; a compaction that fails leaves it as it is.
            let state = crate::with_ooode(
                datafusion::execution::SessionStateBuilder::new()
                    .with_default_features()
                    .with_config(context.session_config().clone())
                    .with_runtime_env(context.runtime_env()),
            )
            .build();
            crate::compact::compact(&state, &self.dir).await?;
        }
        Ok(rows)
    }
}

/// Writes inserted rows as a segment of a table in object storage: the segment is loaded in
/// a local staging directory and uploaded (manifest last) under `<url>/seg-.../`, then
/// committed by a conditional PUT of `segments.json` (If-Match on the e-tag read, or
/// If-None-Match for the first), retried on a concurrent commit with the list read again;
/// a failed commit deletes the uploaded segment.
#[derive(Debug)]
pub struct RemoteSink {
    location: crate::provider::RemoteLocation,
    schema: SchemaRef,
    options: LoadOptions,
}

/// Commits tried before an insert gives up to concurrent writers.
const COMMIT_TRIES: usize = 16;

impl RemoteSink {
    /// A sink appending to the table in object storage at `location`.
    pub(crate) fn new(
        location: crate::provider::RemoteLocation,
        schema: SchemaRef,
    ) -> Result<Self> {
        let remote = location.get();
        let options = options_like(remote.table());
        Ok(Self {
            location,
            schema,
            options,
        })
    }
}

impl DisplayAs for RemoteSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "OoodeSink: {} (append, a new segment)",
            self.location.get().url().display()
        )
    }
}

/// The segment list of the table at `url` (`prefix` in `store`) and its e-tag (None: no
/// list yet, the bulk load alone).
async fn fetch_list(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
) -> Result<(SegmentList, Option<String>)> {
    let listed = ooode::access::remote::fetch_segment_list(store, url, prefix)
        .await
        .map_err(to_df)?;
    Ok(listed.unwrap_or_else(|| (SegmentList::initial(), None)))
}

#[async_trait]
impl DataSink for RemoteSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let remote = self.location.get();
        let url = remote.url().to_string_lossy().into_owned();
        let (_, prefix) = ooode::access::remote::split_url(&url).map_err(to_df)?;
        let store = remote.store().clone();
        let staging = tempfile::Builder::new()
            .prefix("ooode-insert-")
            .tempdir()
            .map_err(|e| DataFusionError::Execution(format!("create a staging directory: {e}")))?;
        let staged = staging.path().join("t");
        let manifest = load_from_stream(
            data,
            staged.clone(),
            self.schema.clone(),
            self.options.clone(),
        )
        .await?;
        let rows = manifest.row_count;
        if rows == 0 {
            return Ok(0);
        }
        let (mut list, mut e_tag) = fetch_list(&store, &url, &prefix).await?;
        let name = list.next_segment_name();
        let seg_prefix = prefix.clone().join(name.as_str());
        let seg_url = format!("{url}/{name}");
        crate::upload::upload_table(&staged, &store, &seg_url, &seg_prefix, false).await?;
        for _ in 0..COMMIT_TRIES {
            let mut next = list.clone();
            next.version += 1;
            next.segments.push(name.clone());
            let mode = match &e_tag {
                None => PutMode::Create,
                Some(tag) => PutMode::Update(UpdateVersion {
                    e_tag: Some(tag.clone()),
                    version: None,
                }),
            };
            let put = store
                .put_opts(
                    &prefix.clone().join(SEGMENTS_FILE),
                    next.to_text().into(),
                    PutOptions::from(mode),
                )
                .await;
            match put {
                Ok(_) => {
                    self.location.reopen().await?;
                    return Ok(rows);
                }
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => {
                    // Another writer committed since the list was read: read it again.
                    (list, e_tag) = fetch_list(&store, &url, &prefix).await?;
                }
                Err(e) => {
                    delete_prefix(&store, &seg_prefix).await;
                    return Err(DataFusionError::Execution(format!(
                        "commit of an insert into {url}: PUT {SEGMENTS_FILE}: {e} (its segment \
                         {name} was deleted again)"
                    )));
                }
            }
        }
        delete_prefix(&store, &seg_prefix).await;
        Err(DataFusionError::Execution(format!(
            "insert into {url}: {COMMIT_TRIES} other commits came first; nothing was added"
        )))
    }
}

/// Deletes the objects under `prefix` (an uncommitted segment), as far as it can.
async fn delete_prefix(store: &Arc<dyn ObjectStore>, prefix: &ObjectPath) {
    use futures::TryStreamExt;
    let Ok(objects) = store.list(Some(prefix)).try_collect::<Vec<_>>().await else {
        return;
    };
    for o in objects {
        let _ = store.delete(&o.location).await;
    }
}
