//! The shard map of a sharded table: which worker holds each shard, the table's schema and
//! row counts. A small JSON document in the table's directory on the coordinator, written
//! last by a load (the table appears whole or not at all).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use ooode::storage::manifest::{ColumnDef, Manifest, parse_type};
use serde::{Deserialize, Serialize};

/// File name of the shard map inside a sharded table's directory.
pub const SHARD_MAP_FILE: &str = "ooode-shards.json";

/// Version of the shard map document; a reader refuses any other.
pub const SHARD_MAP_VERSION: u32 = 1;

/// One shard: its number and the worker holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Shard number, 0-based: rows whose distribution key hashes to it (see [`crate::hash`]).
    pub shard: u32,
    /// `host:port` of the worker whose data directory holds the shard.
    pub worker: String,
    /// Rows in the shard.
    pub rows: u64,
    /// The segments committed to the shard by `INSERT`s, each a directory in the shard's
    /// (`.` is the shard's directory itself, as loaded); empty: the shard as loaded. The
    /// shard map is the commit point: a worker reads the segments named here and no other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<String>,
}

/// Shards a load replaced, kept a while for the queries planned before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredShards {
    /// Their table id on the workers.
    pub table_id: String,
    /// The workers holding them.
    pub workers: Vec<String>,
    /// When they were replaced (seconds since the Unix epoch).
    pub retired_at: u64,
}

/// The shard map of one sharded table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// [`SHARD_MAP_VERSION`].
    pub format_version: u32,
    /// Name of the table's directory in every worker's data directory (unique per load, so
    /// a reload never mixes with the shards it replaces).
    pub table_id: String,
    /// Columns.
    pub columns: Vec<ColumnDef>,
    /// Columns whose hash picks a row's shard.
    pub distribution_key: Vec<String>,
    /// The hash function ([`crate::hash::HASH_NAME`]).
    pub hash: String,
    /// Rows in the table.
    pub row_count: u64,
    /// Clustering key of every shard.
    #[serde(default)]
    pub clustering_key: Vec<String>,
    /// Secondary indexes of every shard, each its key columns.
    #[serde(default)]
    pub indexes: Vec<Vec<String>>,
    /// Statistics of each column over all shards.
    #[serde(default)]
    pub column_stats: Vec<crate::stats::ColumnStats>,
    /// Pages a full scan of all shards reads: each shard's columnar copy's size in pages (a
    /// scan reads it when there is one), else its heap pages. 0: not counted (older maps).
    #[serde(default)]
    pub scan_pages: u64,
    /// The shards, in shard order.
    pub shards: Vec<ShardEntry>,
    /// Shards of earlier loads (`ooode.replace`, `INSERT OVERWRITE`) not yet removed from
    /// their workers: a query planned before the replacement may still read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<RetiredShards>,
    /// Program that wrote the table.
    pub created_by: String,
}

impl ShardMap {
    /// Whether `dir` holds a sharded table.
    pub fn exists(dir: &Path) -> bool {
        dir.join(SHARD_MAP_FILE).is_file()
    }

    /// Reads and checks the shard map in `dir`.
    pub fn read(dir: &Path) -> Result<ShardMap> {
        let file = dir.join(SHARD_MAP_FILE);
        let bytes = std::fs::read(&file).map_err(|e| {
            DataFusionError::Execution(format!("read the shard map {}: {e}", file.display()))
        })?;
        let map: ShardMap = serde_json::from_slice(&bytes).map_err(|e| {
            DataFusionError::Execution(format!(
                "the shard map {} is not a valid document: {e}",
                file.display()
            ))
        })?;
        map.check(&file)?;
        Ok(map)
    }

    fn check(&self, file: &Path) -> Result<()> {
        let bad = |what: String| {
            Err(DataFusionError::Execution(format!(
                "the shard map {} {what}",
                file.display()
            )))
        };
        if self.format_version != SHARD_MAP_VERSION {
            return bad(format!(
                "has format version {}; this build reads version {SHARD_MAP_VERSION}",
                self.format_version
            ));
        }
        if self.hash != crate::hash::HASH_NAME {
            return bad(format!("uses hash '{}', unknown to this build", self.hash));
        }
        if self.shards.is_empty() {
            return bad("lists no shard".into());
        }
        for (i, s) in self.shards.iter().enumerate() {
            if s.shard as usize != i || s.worker.is_empty() {
                return bad(format!("has a bad entry at position {i}: {s:?}"));
            }
        }
        if !valid_table_id(&self.table_id) {
            return bad(format!("has a bad table id '{}'", self.table_id));
        }
        if self.shards.iter().map(|s| s.rows).sum::<u64>() != self.row_count {
            return bad("has shard row counts that do not add up to its row count".into());
        }
        self.schema_at(file).map(drop)
    }

    /// The table's Arrow schema.
    pub fn schema(&self) -> Result<SchemaRef> {
        self.schema_at(Path::new(SHARD_MAP_FILE))
    }

    fn schema_at(&self, file: &Path) -> Result<SchemaRef> {
        schema_of(&self.columns).map_err(|e| {
            DataFusionError::Execution(format!("the shard map {} {e}", file.display()))
        })
    }

    /// Columns of `schema` as the shard map records them.
    pub fn columns_of(schema: &Schema) -> Vec<ColumnDef> {
        Manifest::columns_of(schema)
    }

    /// Writes the map into `dir` atomically (a temporary file renamed over the old map).
    pub fn write(&self, dir: &Path) -> Result<()> {
        let io = |what: &str, path: &Path, e: std::io::Error| {
            DataFusionError::Execution(format!("{what} {}: {e}", path.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
        let file = dir.join(SHARD_MAP_FILE);
        let tmp: PathBuf = dir.join(format!(".{SHARD_MAP_FILE}.tmp"));
        let text = serde_json::to_vec_pretty(self)
            .map_err(|e| DataFusionError::Execution(format!("encode the shard map: {e}")))?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", &tmp, e))?;
            f.write_all(&text).map_err(|e| io("write", &tmp, e))?;
            f.sync_all().map_err(|e| io("sync", &tmp, e))?;
        }
        std::fs::rename(&tmp, &file).map_err(|e| io("rename into place", &file, e))?;
        // The rename itself is durable once the directory is.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// `self`'s shards as retired now, with those retired before.
    pub fn retire(&self) -> Vec<RetiredShards> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut out = self.retired.clone();
        out.push(RetiredShards {
            table_id: self.table_id.clone(),
            workers: self.workers(),
            retired_at: now,
        });
        out
    }

    /// Removes from the workers the retired shards older than `retention_secs`, and (if any
    /// went) writes the map without them in `dir`. What could not be removed stays listed.
    pub async fn remove_expired(&mut self, dir: &Path, retention_secs: u64) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let before = self.retired.len();
        let mut kept = Vec::new();
        for old in std::mem::take(&mut self.retired) {
            if old.retired_at.saturating_add(retention_secs) > now {
                kept.push(old);
                continue;
            }
            let mut left = false;
            for worker in &old.workers {
                if let Err(e) = crate::client::drop_table(worker, &old.table_id).await {
                    log::warn!(
                        "ooode: the replaced shards {} on {worker} were not removed: {e}",
                        old.table_id
                    );
                    left = true;
                }
            }
            if left {
                kept.push(old);
            }
        }
        self.retired = kept;
        if self.retired.len() != before {
            self.write(dir)?;
        }
        Ok(())
    }

    /// Table columns that lead an index (the clustering key's first column, each secondary
    /// index's first column).
    pub fn lookup_columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let firsts = self
            .clustering_key
            .first()
            .into_iter()
            .chain(self.indexes.iter().filter_map(|i| i.first()));
        for name in firsts {
            if let Some(i) = self.columns.iter().position(|c| c.name == *name)
                && !out.contains(&i)
            {
                out.push(i);
            }
        }
        out
    }

    /// Table columns of the distribution key.
    pub fn distribution_columns(&self) -> Vec<usize> {
        self.distribution_key
            .iter()
            .filter_map(|k| self.columns.iter().position(|c| c.name == *k))
            .collect()
    }

    /// The workers holding shards, each once, in shard order of first appearance.
    pub fn workers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in &self.shards {
            if !out.contains(&s.worker) {
                out.push(s.worker.clone());
            }
        }
        out
    }
}

/// The Arrow schema of `columns`; an unknown type is an error naming the column.
pub fn schema_of(columns: &[ColumnDef]) -> Result<SchemaRef> {
    let fields = columns
        .iter()
        .map(|c| {
            let t = parse_type(&c.data_type).ok_or_else(|| {
                DataFusionError::Execution(format!(
                    "gives column '{}' the unknown type '{}'",
                    c.name, c.data_type
                ))
            })?;
            Ok(Field::new(&c.name, t, c.nullable))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// A table id names a directory inside a worker's data directory: no separators, no dots
/// first, so it can never point outside.
pub fn valid_table_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::DataType;

    fn map() -> ShardMap {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]);
        ShardMap {
            format_version: SHARD_MAP_VERSION,
            table_id: "t-1".into(),
            columns: ShardMap::columns_of(&schema),
            distribution_key: vec!["k".into()],
            hash: crate::hash::HASH_NAME.into(),
            row_count: 5,
            clustering_key: vec!["k".into()],
            indexes: vec![vec!["v".into()]],
            column_stats: vec![],
            scan_pages: 7,
            retired: vec![],
            shards: vec![
                ShardEntry {
                    shard: 0,
                    worker: "127.0.0.1:1".into(),
                    rows: 2,
                    segments: vec![],
                },
                ShardEntry {
                    shard: 1,
                    worker: "127.0.0.1:2".into(),
                    rows: 3,
                    segments: vec![".".into(), "seg-000002-1-2".into()],
                },
            ],
            created_by: "test".into(),
        }
    }

    #[test]
    fn a_written_map_reads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        map().write(dir.path()).unwrap();
        assert_eq!(ShardMap::read(dir.path()).unwrap(), map());
        assert_eq!(
            ShardMap::read(dir.path())
                .unwrap()
                .schema()
                .unwrap()
                .fields()
                .len(),
            2
        );
    }

    #[test]
    fn a_bad_map_is_an_error_naming_the_file_and_the_fault() {
        let dir = tempfile::tempdir().unwrap();
        type Spoil = Box<dyn Fn(&mut ShardMap)>;
        let cases: Vec<(Spoil, &str)> = vec![
            (Box::new(|m| m.format_version = 9), "format version 9"),
            (Box::new(|m| m.hash = "md5".into()), "hash 'md5'"),
            (Box::new(|m| m.shards.clear()), "no shard"),
            (Box::new(|m| m.shards[1].shard = 7), "position 1"),
            (Box::new(|m| m.table_id = "../x".into()), "table id"),
            (Box::new(|m| m.row_count = 6), "do not add up"),
            (
                Box::new(|m| m.columns[0].data_type = "Blob".into()),
                "unknown type",
            ),
        ];
        for (spoil, expected) in cases {
            let mut m = map();
            spoil(&mut m);
            m.write(dir.path()).unwrap();
            let e = ShardMap::read(dir.path()).unwrap_err().to_string();
            assert!(e.contains(expected) && e.contains(SHARD_MAP_FILE), "{e}");
        }
        std::fs::write(dir.path().join(SHARD_MAP_FILE), b"{ not json").unwrap();
        let e = ShardMap::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a valid document"), "{e}");
    }
}
