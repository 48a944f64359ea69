//! Compaction: a table's segments merged into one, so index plans apply again and scans read
//! one file per column. From SQL (`SELECT * FROM ooode_compact('t')`, a table name or a
//! directory), from Rust ([`compact`]), and after an insert when the table has more segments
//! than `ooode.compact_segments` (0, the default: never).
//!
//! ```text
//!   take the write lock (inserts wait) ──> read segments.json ──> scan every segment
//!   ──> load the rows as one new segment (sorted by the key within the loader's memory
//!       budget, spilling past it) ──> commit [new], the old ones retired
//!   ──> remove each retired segment no reader pins (the rest: at a later compaction)
//! ```
//!
//! Like an insert it is atomic: a query sees the segments before or the one after. Files of
//! a replaced segment go only when no query in any process has it open.

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
use ooode::access::{OoodeRuntime, to_df};
use ooode::storage::segments::{SegmentList, WriteLock, remove_segment};

use crate::insert::{segment_options, write_lock};
use crate::provider::OoodeTable;
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
    /// Replaced segments still open somewhere, removed by a later compaction.
    pub kept: usize,
}

/// Merges the segments of the local table in `dir` into one, reading them with `state`'s
/// settings and runtime.
pub async fn compact(state: &SessionState, dir: &Path) -> Result<CompactReport> {
    let lock = write_lock(dir).await?;
    let list = SegmentList::read(dir).map_err(to_df)?;
    let before = list.segments.len();
    let mut list = if before > 1 {
        merge(state, dir, &list, &lock).await?
    } else {
        list
    };
    let rows = OoodeTable::open(dir)?.row_count();
    // Retired segments nobody reads any more go; the list then stops naming them.
    let (mut removed, mut kept) = (0, Vec::new());
    for name in std::mem::take(&mut list.retired) {
        OoodeRuntime::forget_table_everywhere(&dir.join(&name));
        if remove_segment(dir, &name, &lock).map_err(to_df)? {
            removed += 1;
        } else {
            kept.push(name);
        }
    }
    if removed > 0 {
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
    })
}

/// Writes the rows of every segment of `list` as one new segment and commits it.
async fn merge(
    state: &SessionState,
    dir: &Path,
    list: &SegmentList,
    lock: &WriteLock,
) -> Result<SegmentList> {
    list.remove_uncommitted(dir, lock).map_err(to_df)?;
    // The lock is held: the scan's snapshot is `list`.
    let table = OoodeTable::open(dir)?;
    let schema = table.schema();
    let plan = table.scan(state, None, &[], None).await?;
    let rows = datafusion::physical_plan::execute_stream(plan, state.task_ctx())?;
    let name = list.next_segment_name();
    let options = segment_options(dir)?;
    load_from_stream(rows, dir.join(&name), schema, options).await?;
    let mut next = list.clone();
    next.version += 1;
    next.retired.append(&mut next.segments);
    next.segments = vec![name];
    next.commit(dir, lock).map_err(to_df)?;
    Ok(next)
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
    ]))
}

impl TableFunctionImpl for CompactFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [Expr::Literal(ScalarValue::Utf8(Some(name)), _)] = args.exprs() else {
            return plan_err!("ooode_compact takes one argument: a table name or directory");
        };
        let dir = table_dir(args.session(), name)?;
        let Some(state) = args.session().as_any().downcast_ref::<SessionState>() else {
            return plan_err!("ooode_compact needs a DataFusion SessionState");
        };
        let stream = CompactStream {
            dir,
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

/// The directory of the ooode table named `name` in the session, or `name` as a directory.
fn table_dir(session: &dyn Session, name: &str) -> Result<PathBuf> {
    if let Some(state) = session.as_any().downcast_ref::<SessionState>()
        && let Ok(schema) = state.schema_for_ref(name)
    {
        let table = datafusion::common::TableReference::from(name);
        let found = futures::executor::block_on(schema.table(table.table()))?;
        if let Some(found) = found {
            return match found.downcast_ref::<OoodeTable>() {
                Some(t) if !t.is_remote() => Ok(t.dir().to_path_buf()),
                Some(_) => plan_err!("ooode_compact: {name} is in object storage (not yet)"),
                None => plan_err!("ooode_compact: {name} is not an ooode table"),
            };
        }
    }
    let dir = PathBuf::from(name.strip_prefix("file://").unwrap_or(name));
    if dir.is_dir() {
        return Ok(dir);
    }
    plan_err!("ooode_compact: no table or table directory '{name}'")
}

#[derive(Debug)]
struct CompactStream {
    dir: PathBuf,
    state: Box<SessionState>,
    schema: SchemaRef,
}

impl PartitionStream for CompactStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (dir, state, schema) = (self.dir.clone(), self.state.clone(), self.schema.clone());
        let run = async move {
            let r = compact(&state, &dir).await?;
            let n = |v: usize| Arc::new(UInt64Array::from(vec![v as u64]));
            Ok(RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(StringArray::from(vec![dir.display().to_string()])),
                    n(r.segments_before),
                    n(r.segments_after),
                    Arc::new(UInt64Array::from(vec![r.rows])),
                    n(r.removed),
                    n(r.kept),
                ],
            )?)
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(run),
        ))
    }
}

/// Compacts the table `name` (a table of `ctx`, or a directory) from Rust.
pub async fn compact_table(ctx: &SessionContext, name: &str) -> Result<CompactReport> {
    let state = ctx.state();
    let dir = table_dir(&state, name)?;
    compact(&state, &dir).await
}
