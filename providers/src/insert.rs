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
use datafusion::execution::memory_pool::MemoryPool;
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
pub(crate) fn options_like(table: &Table) -> LoadOptions {
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
/// committed by a conditional PUT of `segments.json` (see `commit_remote_list`); a failed
/// commit deletes the uploaded segment. `INSERT OVERWRITE` commits the new segment alone,
/// the others retired (removed by a compaction after `ooode.remote_retention_secs`).
#[derive(Debug)]
pub struct RemoteSink {
    location: crate::provider::RemoteLocation,
    schema: SchemaRef,
    op: InsertOp,
    options: LoadOptions,
}

/// Commits tried before a writer gives up to concurrent writers.
const COMMIT_TRIES: usize = 16;

impl RemoteSink {
    /// A sink appending to (or replacing) the table in object storage at `location`.
    pub(crate) fn new(
        location: crate::provider::RemoteLocation,
        schema: SchemaRef,
        op: InsertOp,
    ) -> Result<Self> {
        if op == InsertOp::Replace {
            return not_impl_err!("REPLACE INTO is not supported on ooode tables");
        }
        let remote = location.get();
        let options = options_like(remote.table());
        Ok(Self {
            location,
            schema,
            op,
            options,
        })
    }
}

impl DisplayAs for RemoteSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let op = match self.op {
            InsertOp::Overwrite => "overwrite",
            _ => "append",
        };
        write!(
            f,
            "OoodeSink: {} ({op}, a new segment)",
            self.location.get().url().display()
        )
    }
}

/// The segment list of the table at `url` (`prefix` in `store`) and its e-tag (None: no
/// list yet, the bulk load alone).
pub(crate) async fn fetch_list(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
) -> Result<(SegmentList, Option<String>)> {
    let listed = ooode::access::remote::fetch_segment_list(store, url, prefix)
        .await
        .map_err(to_df)?;
    Ok(listed.unwrap_or_else(|| (SegmentList::initial(), None)))
}

/// Loads `rows` as a table in a new local staging directory (removed when the returned
/// guard drops), before it is uploaded as a segment.
pub(crate) async fn load_staged(
    rows: SendableRecordBatchStream,
    schema: SchemaRef,
    options: LoadOptions,
) -> Result<(tempfile::TempDir, PathBuf, ooode::storage::Manifest)> {
    let staging = tempfile::Builder::new()
        .prefix("ooode-segment-")
        .tempdir()
        .map_err(|e| DataFusionError::Execution(format!("create a staging directory: {e}")))?;
    let staged = staging.path().join("t");
    let manifest = load_from_stream(rows, staged.clone(), schema, options).await?;
    Ok((staging, staged, manifest))
}

/// Uploads the staged table `staged` as segment `name` of the table at `url` (`prefix` in
/// `store`), manifest last; returns the segment's prefix (to delete it if the commit fails).
pub(crate) async fn upload_segment(
    staged: &Path,
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
    name: &str,
    memory: &Arc<dyn MemoryPool>,
) -> Result<ObjectPath> {
    let seg_prefix = prefix.clone().join(name);
    let seg_url = format!("{url}/{name}");
    crate::upload::upload_table(staged, store, &seg_url, &seg_prefix, false, memory).await?;
    Ok(seg_prefix)
}

/// Seconds since the epoch (the time stamps of retired segments).
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Commits the next segment list of the table at `url` (`prefix` in `store`): `next` makes it
/// from the list as read (`current` first, then read again after each lost race) and may say
/// None (the change no longer applies: nothing is committed, None is returned). The PUT is
/// conditional (If-Match on the list's e-tag, If-None-Match for the first list), so two
/// writers never both commit on the same list.
pub(crate) async fn commit_remote_list(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
    current: (SegmentList, Option<String>),
    next: impl Fn(&SegmentList) -> Option<SegmentList>,
) -> Result<Option<SegmentList>> {
    let (mut list, mut e_tag) = current;
    for _ in 0..COMMIT_TRIES {
        let Some(proposed) = next(&list) else {
            return Ok(None);
        };
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
                proposed.to_text().into(),
                PutOptions::from(mode),
            )
            .await;
        match put {
            Ok(_) => return Ok(Some(proposed)),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => {
                // Another writer committed since the list was read: read it again.
                (list, e_tag) = fetch_list(store, url, prefix).await?;
            }
            Err(e) => {
                return Err(DataFusionError::Execution(format!(
                    "commit to {url}: PUT {SEGMENTS_FILE}: {e}"
                )));
            }
        }
    }
    Err(DataFusionError::Execution(format!(
        "commit to {url}: {COMMIT_TRIES} other commits came first"
    )))
}

#[async_trait]
impl DataSink for RemoteSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let remote = self.location.get();
        let url = remote.url().to_string_lossy().into_owned();
        let (_, prefix) = ooode::access::remote::split_url(&url).map_err(to_df)?;
        let store = remote.store().clone();
        let (_staging, staged, manifest) =
            load_staged(data, self.schema.clone(), self.options.clone()).await?;
        let rows = manifest.row_count;
        if rows == 0 && self.op != InsertOp::Overwrite {
            return Ok(0);
        }
        let current = fetch_list(&store, &url, &prefix).await?;
        let name = current.0.next_segment_name();
        let memory = context.memory_pool();
        let seg_prefix = upload_segment(&staged, &store, &url, &prefix, &name, memory).await?;
        let overwrite = self.op == InsertOp::Overwrite;
        let now = now_secs();
        let committed = commit_remote_list(&store, &url, &prefix, current, |list| {
            if overwrite {
                list.replace_prefix(&list.segments, &name, now)
            } else {
                let mut next = list.clone();
                next.version += 1;
                next.segments.push(name.clone());
                Some(next)
            }
        })
        .await;
        match committed {
            Ok(Some(_)) => {
                self.location.reopen().await?;
                Ok(rows)
            }
            Ok(None) => unreachable!("an insert's next list always applies"),
            Err(e) => {
                delete_prefix(&store, &seg_prefix).await;
                Err(DataFusionError::Execution(format!(
                    "insert into {url}: {e} (its segment {name} was deleted again; nothing \
                     was added)"
                )))
            }
        }
    }
}

/// Deletes the objects under `prefix` (an uncommitted or expired segment), as far as it can;
/// returns how many went.
pub(crate) async fn delete_prefix(store: &Arc<dyn ObjectStore>, prefix: &ObjectPath) -> usize {
    use futures::TryStreamExt;
    let Ok(objects) = store.list(Some(prefix)).try_collect::<Vec<_>>().await else {
        return 0;
    };
    let mut deleted = 0;
    for o in objects {
        deleted += usize::from(store.delete(&o.location).await.is_ok());
    }
    deleted
}
