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
use ooode::access::to_df;
use ooode::storage::manifest::IndexKind;
use ooode::storage::segments::{SegmentList, WriteLock};
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

/// How segments of the table in `dir` are built: like its first listed segment (page size,
/// clustering key, secondary indexes, columnar copy), in their own directory.
pub fn segment_options(dir: &Path) -> Result<LoadOptions> {
    let list = SegmentList::read(dir).map_err(to_df)?;
    let first = list.dirs(dir).remove(0);
    let table = Table::open(&first).map_err(to_df)?;
    let m = table.manifest();
    Ok(LoadOptions {
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
    })
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
        let dir = self.dir.clone();
        let lock = tokio::task::spawn_blocking(move || WriteLock::acquire(&dir))
            .await
            .map_err(|e| DataFusionError::Execution(e.to_string()))?
            .map_err(to_df)?;
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
