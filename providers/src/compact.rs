//! Compaction: a table's segments merged into one, so index plans read one B+tree per index
//! again and scans one file per column. From SQL (`SELECT * FROM ooode_compact('t')`, a
//! table name or a directory), from Rust ([`compact_table`]), and after an insert when the
//! table has more segments than `ooode.compact_segments` (0, the default: never).
//!
//! ```text
//!   local:  take the write lock (inserts wait) ──> read segments.json
//!   remote: read segments.json and its e-tag
//!   ──> k-way merge of the segments' heap pages, read in order (each segment is sorted by
//!       the clustering key: no sort, `window` pages per segment in memory; access::merge)
//!   ──> load the rows as one new segment (remote: staged locally, uploaded)
//!   ──> commit [new] + the segments added meanwhile (remote: conditional PUT), the merged
//!       ones retired
//!   ──> remove retired segments no reader holds (local: pins; remote: older than
//!       `ooode.remote_retention_secs`) and uploads no commit named (remote, same age)
//! ```
//!
//! Like an insert it is atomic: a query sees the segments before or the one after. Files of
//! a replaced local segment go only when no query in any process has it open; their
//! descriptors in this process's engines are closed then.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use ooode::access::{OoodeRuntime, QueryIo, StepCtx, TableIo, to_df};
use ooode::storage::LoadOptions;
use ooode::storage::manifest::MANIFEST_FILE;
use ooode::storage::segments::{SEGMENT_PREFIX, SEGMENTS_FILE, SegmentList, remove_segment};

use crate::insert::{
    commit_remote_list, delete_prefix, fetch_list, load_staged, now_secs, options_like,
    segment_options, upload_segment, write_lock,
};
use crate::provider::{OoodeTable, RemoteLocation, ooode_config};
use crate::writer::load_from_stream;

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactReport {
    /// Segments before.
    pub segments_before: usize,
    /// Segments after (1, or the count before when there was nothing to merge).
    pub segments_after: usize,
    /// Rows of the table.
    pub rows: u64,
    /// Replaced segments whose files were removed now.
    pub removed: usize,
    /// Replaced segments kept (still open somewhere, or younger than the retention time of
    /// a table in object storage), removed by a later compaction.
    pub kept: usize,
    /// Segments written by inserts that never committed, removed now.
    pub uncommitted_removed: usize,
}

/// Memory for the pages read ahead of the merge, over all segments.
const MERGE_READ_AHEAD_BYTES: usize = 64 << 20;

/// The rows of every segment of `table` in clustering-key order (see [`ooode::access::merge`]).
fn merged_rows(state: &SessionState, table: Arc<TableIo>) -> Result<SendableRecordBatchStream> {
    let config = ooode_config(state);
    let runtime = OoodeRuntime::for_env(state.runtime_env());
    let query = QueryIo::new(&runtime, &config);
    let ctx = StepCtx::new(query, ooode::io::IoMetrics::new(), 0);
    let per_segment = MERGE_READ_AHEAD_BYTES / (table.segments().max(1) * table.page_size());
    let window = per_segment.clamp(2, 64);
    ooode::access::merge::merged_rows(table, ctx, window, state.config().batch_size())
}

/// Options for the merged segment: like the table's, taking the rows in order.
fn merged_options(mut options: LoadOptions) -> LoadOptions {
    options.presorted = true;
    options
}

/// Merges the segments of the local table in `dir` into one, reading them with `state`'s
/// settings and runtime.
pub async fn compact(state: &SessionState, dir: &Path) -> Result<CompactReport> {
    let lock = write_lock(dir).await?;
    let list = SegmentList::read(dir).map_err(to_df)?;
    let uncommitted = list.remove_uncommitted(dir, &lock).map_err(to_df)?.len();
    let before = list.segments.len();
    let mut list = if before > 1 {
        // The lock is held: the snapshot read is `list`.
        let table = OoodeTable::open(dir)?;
        let rows = merged_rows(state, table.segments_io(state)?)?;
        let name = list.next_segment_name();
        let options = merged_options(segment_options(dir)?);
        load_from_stream(rows, dir.join(&name), table.schema(), options).await?;
        let next = list
            .replace_prefix(&list.segments, &name, now_secs())
            .expect("a list starts with itself");
        next.commit(dir, &lock).map_err(to_df)?;
        next
    } else {
        list
    };
    // Local segments are pinned by their readers instead of kept for a time.
    list.retired_at.clear();
    let rows = OoodeTable::open(dir)?.row_count();
    // Retired segments nobody reads any more go; the list then stops naming them.
    let (mut removed, mut kept) = (0, Vec::new());
    for name in std::mem::take(&mut list.retired) {
        let seg = if name == "." {
            dir.to_path_buf()
        } else {
            dir.join(&name)
        };
        OoodeRuntime::forget_table_everywhere(&seg);
        match remove_segment(dir, &name, &lock).map_err(to_df)? {
            Some(dirs) => {
                for d in dirs {
                    OoodeRuntime::close_files_everywhere(&d);
                }
                removed += 1;
            }
            None => kept.push(name),
        }
    }
    if removed > 0 || before > 1 {
        list.retired = kept.clone();
        list.version += 1;
        list.commit(dir, &lock).map_err(to_df)?;
    }
    Ok(CompactReport {
        segments_before: before,
        segments_after: list.segments.len(),
        rows,
        removed,
        kept: kept.len(),
        uncommitted_removed: uncommitted,
    })
}

/// Merges the segments of the table in object storage at `location` into one: staged
/// locally, uploaded, committed by a conditional PUT that keeps segments other writers added
/// meanwhile. Then removes what expired (see [`remove_expired`]).
pub(crate) async fn compact_remote(
    state: &SessionState,
    location: &RemoteLocation,
    table: &OoodeTable,
) -> Result<CompactReport> {
    let config = ooode_config(state);
    // The newest list: what is merged is what it names.
    location.reopen().await?;
    let remote = location.get();
    let url = remote.url().to_string_lossy().into_owned();
    let (_, prefix) = ooode::access::remote::split_url(&url).map_err(to_df)?;
    let store = remote.store().clone();
    let current = remote
        .segment_list()
        .cloned()
        .unwrap_or_else(|| (SegmentList::initial(), None));
    let merged = current.0.segments.clone();
    let before = merged.len();
    if before > 1 {
        let rows = merged_rows(state, table.segments_io(state)?)?;
        let options = merged_options(options_like(remote.table()));
        let (_staging, staged, _) = load_staged(rows, table.schema(), options).await?;
        let name = current.0.next_segment_name();
        let memory = state.runtime_env().memory_pool.clone();
        let seg_prefix = upload_segment(&staged, &store, &url, &prefix, &name, &memory).await?;
        let now = now_secs();
        let committed = commit_remote_list(&store, &url, &prefix, current, |l| {
            l.replace_prefix(&merged, &name, now)
        })
        .await;
        match committed {
            Ok(Some(_)) => {}
            Ok(None) => {
                delete_prefix(&store, &seg_prefix).await;
                return Err(DataFusionError::Execution(format!(
                    "compaction of {url}: another compaction or INSERT OVERWRITE changed the \
                     table meanwhile; nothing was changed"
                )));
            }
            Err(e) => {
                delete_prefix(&store, &seg_prefix).await;
                return Err(DataFusionError::Execution(format!(
                    "compaction of {url}: {e} (its segment {name} was deleted again)"
                )));
            }
        }
        location.reopen().await?;
    }
    let expired = remove_expired(&store, &url, &prefix, config.remote_retention_secs).await?;
    let rows = location
        .get()
        .segments()
        .iter()
        .map(|t| t.manifest().row_count)
        .sum();
    let segments_after = location.get().segments().len();
    Ok(CompactReport {
        segments_before: before,
        segments_after,
        rows,
        removed: expired.removed,
        kept: expired.kept,
        uncommitted_removed: expired.uncommitted,
    })
}

/// What [`remove_expired`] did.
struct Expired {
    removed: usize,
    kept: usize,
    uncommitted: usize,
}

/// Removes, from the table in object storage at `url`, the retired segments retired more than
/// `retention` seconds ago, and `seg-*` uploads no list names whose objects are all older
/// than that (inserts that stopped before their commit); then commits the list without the
/// removed ones. Object storage has no locks: a reader in another process that opened the
/// table before the retirement and still runs after the retention time fails (object not
/// found) instead of reading a half-deleted segment.
async fn remove_expired(
    store: &Arc<dyn ObjectStore>,
    url: &str,
    prefix: &ObjectPath,
    retention: u64,
) -> Result<Expired> {
    let (list, e_tag) = fetch_list(store, url, prefix).await?;
    let now = now_secs();
    let old = |t: u64| now.saturating_sub(t) >= retention;
    let (expired, kept): (Vec<String>, Vec<String>) = list
        .retired
        .iter()
        .cloned()
        .partition(|name| list.retired_at.get(name).is_none_or(|&t| old(t)));
    let mut uncommitted = 0;
    let top = store
        .list_with_delimiter(Some(prefix))
        .await
        .map_err(|e| DataFusionError::Execution(format!("compaction of {url}: LIST: {e}")))?;
    for dir in &top.common_prefixes {
        let Some(name) = dir.filename() else { continue };
        let named = list.segments.iter().chain(&list.retired).any(|s| s == name);
        if !name.starts_with(SEGMENT_PREFIX) || named {
            continue;
        }
        use futures::TryStreamExt;
        let objects: Vec<_> =
            store.list(Some(dir)).try_collect().await.map_err(|e| {
                DataFusionError::Execution(format!("compaction of {url}: LIST: {e}"))
            })?;
        let age_ok = objects
            .iter()
            .all(|o| old(o.last_modified.timestamp().max(0) as u64));
        if age_ok {
            delete_prefix(store, dir).await;
            uncommitted += 1;
        }
    }
    for name in &expired {
        if name == "." {
            // The bulk load's files at the top; its manifest stays (it marks the table).
            for o in &top.objects {
                let file = o.location.filename().unwrap_or_default();
                if file != MANIFEST_FILE && file != SEGMENTS_FILE {
                    let _ = store.delete(&o.location).await;
                }
            }
        } else {
            delete_prefix(store, &prefix.clone().join(name.as_str())).await;
        }
    }
    if !expired.is_empty() {
        let committed = commit_remote_list(store, url, prefix, (list, e_tag), |l| {
            let mut next = l.clone();
            next.version += 1;
            for name in &expired {
                next.drop_retired(name);
            }
            Some(next)
        })
        .await?;
        debug_assert!(committed.is_some());
    }
    Ok(Expired {
        removed: expired.len(),
        kept: kept.len(),
        uncommitted,
    })
}

/// The table function `ooode_compact('t')`: compacts table `t` (or the table directory
/// given) when the query runs, and returns one row saying what it did.
#[derive(Debug, Default)]
pub struct CompactFunction;

fn report_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table", DataType::Utf8, false),
        Field::new("segments_before", DataType::UInt64, false),
        Field::new("segments_after", DataType::UInt64, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("removed_segments", DataType::UInt64, false),
        Field::new("kept_segments", DataType::UInt64, false),
        Field::new("uncommitted_removed", DataType::UInt64, false),
    ]))
}

impl TableFunctionImpl for CompactFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [Expr::Literal(ScalarValue::Utf8(Some(name)), _)] = args.exprs() else {
            return plan_err!("ooode_compact takes one argument: a table name or directory");
        };
        let target = find_target(args.session(), name)?;
        let Some(state) = args.session().as_any().downcast_ref::<SessionState>() else {
            return plan_err!("ooode_compact needs a DataFusion SessionState");
        };
        let stream = CompactStream {
            target,
            state: Box::new(state.clone()),
            schema: report_schema(),
        };
        Ok(Arc::new(
            datafusion::catalog::streaming::StreamingTable::try_new(
                report_schema(),
                vec![Arc::new(stream)],
            )?,
        ))
    }
}

/// What to compact.
#[derive(Debug, Clone)]
enum Target {
    /// A local table directory.
    Dir(PathBuf),
    /// A registered table in object storage.
    Remote(Arc<dyn TableProvider>),
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::Dir(dir) => dir.display().to_string(),
            Target::Remote(t) => t
                .downcast_ref::<OoodeTable>()
                .map(|t| t.dir().display().to_string())
                .unwrap_or_default(),
        }
    }

    async fn compact(&self, state: &SessionState) -> Result<CompactReport> {
        match self {
            Target::Dir(dir) => compact(state, dir).await,
            Target::Remote(provider) => {
                let table = provider
                    .downcast_ref::<OoodeTable>()
                    .expect("checked when found");
                let location = table.remote_location().expect("checked when found");
                compact_remote(state, location, table).await
            }
        }
    }
}

/// The ooode table named `name` in the session, or `name` as a table directory.
fn find_target(session: &dyn Session, name: &str) -> Result<Target> {
    if let Some(state) = session.as_any().downcast_ref::<SessionState>()
        && let Ok(schema) = state.schema_for_ref(name)
    {
        let table = datafusion::common::TableReference::from(name);
        let found = futures::executor::block_on(schema.table(table.table()))?;
        if let Some(found) = found {
            return match found.downcast_ref::<OoodeTable>() {
                Some(t) if !t.is_remote() => Ok(Target::Dir(t.dir().to_path_buf())),
                Some(_) => Ok(Target::Remote(found)),
                None => plan_err!("ooode_compact: {name} is not an ooode table"),
            };
        }
    }
    let dir = PathBuf::from(name.strip_prefix("file://").unwrap_or(name));
    if dir.is_dir() {
        return Ok(Target::Dir(dir));
    }
    plan_err!("ooode_compact: no table or table directory '{name}'")
}

#[derive(Debug)]
struct CompactStream {
    target: Target,
    state: Box<SessionState>,
    schema: SchemaRef,
}

impl PartitionStream for CompactStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (target, state, schema) =
            (self.target.clone(), self.state.clone(), self.schema.clone());
        let run = async move {
            let r = target.compact(&state).await?;
            let n = |v: usize| Arc::new(UInt64Array::from(vec![v as u64]));
            Ok(RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(StringArray::from(vec![target.name()])),
                    n(r.segments_before),
                    n(r.segments_after),
                    Arc::new(UInt64Array::from(vec![r.rows])),
                    n(r.removed),
                    n(r.kept),
                    n(r.uncommitted_removed),
                ],
            )?)
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(run),
        ))
    }
}

/// Compacts the table `name` (a table of `ctx`, local or in object storage, or a table
/// directory) from Rust.
pub async fn compact_table(ctx: &SessionContext, name: &str) -> Result<CompactReport> {
    let state = ctx.state();
    find_target(&state, name)?.compact(&state).await
}
