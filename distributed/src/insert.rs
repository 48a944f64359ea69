//! `INSERT INTO` and `INSERT OVERWRITE` of a sharded table.
//!
//! ```text
//!   INSERT ──> DataSinkExec ──> ShardedInsertSink::write_all
//!                take the table's write lock (on the coordinator: one writer at a time)
//!                read the shard map
//!                send each row to its shard's worker, which writes the shard's rows as a
//!                  new segment seg-<n>-<id>/ beside the shard's files (listed nowhere)
//!                write the shard map naming the new segments   <- the commit, atomic
//!                (failure before: remove the new segments from the workers)
//! ```
//!
//! The shard map is the one commit point of all shards: a query planned before it reads
//! the segments the old map names, one planned after it reads the new ones, on every
//! worker; a worker reads only the segments a query's shard map names. `INSERT OVERWRITE`
//! is a sharded load with the table's settings under a new table id, replacing the old.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result, ScalarValue, not_impl_err};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use ooode::storage::segments::SegmentList;

use crate::load::ShardedSink;
use crate::service::SegmentRef;
use crate::shard_map::ShardMap;
use crate::stats::ColumnStats;

/// Writes inserted rows into a sharded table (see the module docs).
#[derive(Debug)]
pub struct ShardedInsertSink {
    dir: PathBuf,
    schema: SchemaRef,
    op: InsertOp,
    /// Seconds replaced shards stay on the workers (`ooode.remote_retention_secs`).
    retention_secs: u64,
}

impl ShardedInsertSink {
    /// A sink appending to (or, with [`InsertOp::Overwrite`], replacing) the rows of the
    /// sharded table whose shard map is in `dir`; shards it replaces stay on their workers
    /// `retention_secs` seconds.
    pub fn new(dir: PathBuf, schema: SchemaRef, op: InsertOp, retention_secs: u64) -> Result<Self> {
        if op == InsertOp::Replace {
            return not_impl_err!("REPLACE INTO is not supported on sharded ooode tables");
        }
        Ok(Self {
            dir,
            schema,
            op,
            retention_secs,
        })
    }

    async fn append(&self, data: SendableRecordBatchStream) -> Result<u64> {
        let _lock = write_lock(&self.dir).await?;
        let map = ShardMap::read(&self.dir)?;
        prune_uncommitted(&map).await;
        let sink = ShardedSink::for_map(
            self.dir.clone(),
            &map,
            self.schema.clone(),
            false,
            self.retention_secs,
        )?;
        let segment = SegmentList::initial().next_segment_name();
        let failed = |e: String, cleanup: String| {
            DataFusionError::Execution(format!(
                "INSERT into {} failed: {e}; {cleanup}",
                self.dir.display()
            ))
        };
        let (counts, new_stats) = match sink.send(data, &map.table_id, Some(&segment)).await {
            Ok(sent) => sent,
            Err(e) => {
                let cleanup = remove_segments(&map, &segment, |_| true).await;
                return Err(failed(e.to_string(), cleanup));
            }
        };
        if let Some((shard, (sent, done))) = counts
            .iter()
            .enumerate()
            .find(|(_, (sent, done))| *sent != done.rows)
        {
            let wrote = done.rows;
            let cleanup = remove_segments(&map, &segment, |_| true).await;
            return Err(failed(
                format!("shard {shard} was sent {sent} rows but its worker wrote {wrote}"),
                cleanup,
            ));
        }
        let added: u64 = counts.iter().map(|(sent, _)| sent).sum();
        let mut next = map.clone();
        for (entry, (sent, _)) in next.shards.iter_mut().zip(&counts) {
            if *sent == 0 {
                continue;
            }
            if entry.segments.is_empty() {
                entry.segments.push(".".into());
            }
            entry.segments.push(segment.clone());
            entry.rows += sent;
        }
        next.row_count += added;
        if map.scan_pages > 0 {
            next.scan_pages += counts.iter().map(|(_, done)| done.scan_pages).sum::<u64>();
        }
        let new_stats = sink.with_distinct_counts(new_stats, &counts);
        next.column_stats = merge_stats(
            &self.schema,
            &map.column_stats,
            &new_stats,
            &map.distribution_key,
        );
        if let Err(e) = next.write(&self.dir) {
            let cleanup = remove_segments(&map, &segment, |_| true).await;
            return Err(failed(e.to_string(), cleanup));
        }
        // Shards that received no row wrote an empty segment no map names.
        let empty: Vec<u32> = counts
            .iter()
            .enumerate()
            .filter(|(_, (sent, _))| *sent == 0)
            .map(|(shard, _)| shard as u32)
            .collect();
        if !empty.is_empty() {
            let left = remove_segments(&map, &segment, |shard| empty.contains(&shard)).await;
            log::debug!("ooode: empty segments of {}: {left}", self.dir.display());
        }
        if let Err(e) = next.remove_expired(&self.dir, self.retention_secs).await {
            log::warn!(
                "ooode: removing replaced shards of {}: {e}",
                self.dir.display()
            );
        }
        Ok(added)
    }
}

/// The sharded table's write lock (an exclusive `flock` on a file beside its shard map;
/// released when dropped): one insert at a time, from any process on this machine.
async fn write_lock(dir: &std::path::Path) -> Result<std::fs::File> {
    if !ShardMap::exists(dir) {
        return Err(DataFusionError::Execution(format!(
            "{} holds no sharded table",
            dir.display()
        )));
    }
    let path = dir.join(ooode::storage::segments::LOCK_FILE);
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    });
    locked
        .await
        .map_err(|e| DataFusionError::Execution(e.to_string()))?
        .map_err(|e| DataFusionError::Execution(format!("lock {}: {e}", dir.display())))
}

/// Removes the segments no shard map names from every shard: those of inserts that never
/// committed (a coordinator that died mid-insert). Under the table's write lock no insert
/// is in flight; no query reads them. Failures are only logged: the insert goes on.
async fn prune_uncommitted(map: &ShardMap) {
    for entry in &map.shards {
        let prune = crate::service::PruneSegments {
            table_id: map.table_id.clone(),
            shard: entry.shard,
            keep: entry
                .segments
                .iter()
                .filter(|s| s.as_str() != ".")
                .cloned()
                .collect(),
        };
        match crate::client::prune_segments(&entry.worker, &prune).await {
            Ok(removed) if !removed.is_empty() => log::info!(
                "ooode: removed uncommitted segments {removed:?} of shard {} of {}",
                entry.shard,
                map.table_id
            ),
            Ok(_) => {}
            Err(e) => log::warn!(
                "ooode: uncommitted segments of shard {} of {}: {e}",
                entry.shard,
                map.table_id
            ),
        }
    }
}

/// Removes segment `segment` from the shards `which` selects; what could not be removed.
async fn remove_segments(map: &ShardMap, segment: &str, which: impl Fn(u32) -> bool) -> String {
    let mut left = Vec::new();
    for entry in map.shards.iter().filter(|s| which(s.shard)) {
        let target = SegmentRef {
            table_id: map.table_id.clone(),
            shard: entry.shard,
            segment: segment.to_string(),
        };
        if let Err(e) = crate::client::drop_segment(&entry.worker, &target).await {
            left.push(format!("shard {} on {} ({e})", entry.shard, entry.worker));
        }
    }
    if left.is_empty() {
        format!("the segments it wrote ({segment}) were removed from the workers")
    } else {
        format!(
            "segment {segment}, if written, could not be removed (no shard map names it, no \
             query reads it) from: {}",
            left.join(", ")
        )
    }
}

/// The statistics of the table after an insert: `old`'s and `new`'s (the inserted rows')
/// together. Distinct counts add up for a single distribution key (an upper bound: a value
/// may be in both) and take the larger otherwise.
fn merge_stats(
    schema: &SchemaRef,
    old: &[ColumnStats],
    new: &[ColumnStats],
    distribution_key: &[String],
) -> Vec<ColumnStats> {
    let single_key = match distribution_key {
        [one] => Some(one.as_str()),
        _ => None,
    };
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let (Some(a), Some(b)) = (old.get(i), new.get(i)) else {
                return ColumnStats::default();
            };
            let typed = |v: &Option<String>| {
                v.as_ref()
                    .and_then(|s| ScalarValue::try_from_string(s.clone(), field.data_type()).ok())
            };
            let pick = |x: &Option<String>, y: &Option<String>, smaller: bool| {
                match (typed(x), typed(y)) {
                    (Some(p), Some(q)) => {
                        let keep_q = match p.partial_cmp(&q) {
                            Some(std::cmp::Ordering::Greater) => smaller,
                            Some(std::cmp::Ordering::Less) => !smaller,
                            _ => false,
                        };
                        Some(if keep_q { y.clone()? } else { x.clone()? })
                    }
                    // A side with no value (no non-null row) leaves the other's.
                    (Some(_), None) if y.is_none() => x.clone(),
                    (None, Some(_)) if x.is_none() => y.clone(),
                    _ => None,
                }
            };
            let distinct = match (a.distinct, b.distinct) {
                (Some(x), Some(y)) if single_key == Some(field.name().as_str()) => Some(x + y),
                (Some(x), Some(y)) => Some(x.max(y)),
                _ => None,
            };
            ColumnStats {
                min: pick(&a.min, &b.min, true),
                max: pick(&a.max, &b.max, false),
                nulls: a.nulls + b.nulls,
                distinct,
            }
        })
        .collect()
}

impl DisplayAs for ShardedInsertSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let op = match self.op {
            InsertOp::Overwrite => "overwrite: a new load",
            _ => "append: a new segment in every shard",
        };
        write!(f, "ShardedInsertSink: {} ({op})", self.dir.display())
    }
}

#[async_trait]
impl DataSink for ShardedInsertSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> Result<u64> {
        match self.op {
            InsertOp::Overwrite => {
                let _lock = write_lock(&self.dir).await?;
                let map = ShardMap::read(&self.dir)?;
                ShardedSink::for_map(
                    self.dir.clone(),
                    &map,
                    self.schema.clone(),
                    true,
                    self.retention_secs,
                )?
                .write_all(data, context)
                .await
            }
            _ => self.append(data).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn stats(
        min: Option<&str>,
        max: Option<&str>,
        nulls: u64,
        distinct: Option<u64>,
    ) -> ColumnStats {
        ColumnStats {
            min: min.map(str::to_string),
            max: max.map(str::to_string),
            nulls,
            distinct,
        }
    }

    #[test]
    fn statistics_merge_typed_and_distinct_counts_add_for_the_key() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let old = [
            stats(Some("9"), Some("10"), 0, Some(2)),
            stats(Some("b"), Some("c"), 1, Some(2)),
        ];
        let new = [
            stats(Some("100"), Some("200"), 0, Some(5)),
            stats(None, None, 3, None),
        ];
        let merged = merge_stats(&schema, &old, &new, &["k".to_string()]);
        // Numbers compare as numbers ("100" > "9"), not as text.
        assert_eq!(merged[0], stats(Some("9"), Some("200"), 0, Some(7)));
        assert_eq!(merged[1], stats(Some("b"), Some("c"), 4, None));
    }
}
