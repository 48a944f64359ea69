//! The table manifest: `manifest.json` in the table directory.
//!
//! A human-readable JSON document: format version, schema, row count, page size, stripe unit,
//! data paths, clustering key, and per segment (heap, each index) its page count and, for an
//! index, the shape of its B+tree. Its `checksum` field is the CRC32C of the document as this
//! module serializes it with `checksum` set to 0, so any change to a value is detected while
//! reformatting the whitespace is not an error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use super::btree::TreeShape;
use super::error::{Result, StorageError};
use super::page::FORMAT_VERSION;

/// File name of the manifest inside a table directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// One column of the table schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// Column name.
    pub name: String,
    /// Arrow type, in the notation of [`type_name`].
    pub data_type: String,
    /// Whether the column may hold nulls.
    pub nullable: bool,
}

/// Kind of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Sparse index on the clustering key: one entry per heap page (its first key).
    Clustering,
    /// Dense secondary index: one entry per row, duplicates allowed.
    Secondary,
}

/// An index of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexMeta {
    /// Index name (unique in the table).
    pub name: String,
    /// Key columns, in key order.
    pub columns: Vec<String>,
    /// Clustering (sparse) or secondary (dense).
    pub kind: IndexKind,
    /// Segment name of its pages.
    pub segment: String,
    /// Shape of the built tree.
    pub tree: TreeShape,
    /// Distinct values of the first key column among the table's rows (0: unknown).
    #[serde(default)]
    pub distinct_first: u64,
}

impl IndexMeta {
    /// Whether entries point at heap pages (sparse) rather than rows.
    pub fn is_sparse(&self) -> bool {
        self.kind == IndexKind::Clustering
    }
}

/// The manifest of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// On-disk format version.
    pub format_version: u32,
    /// Columns.
    pub columns: Vec<ColumnDef>,
    /// Rows in the table.
    pub row_count: u64,
    /// Page size in bytes.
    pub page_size: usize,
    /// Stripe unit in bytes (a multiple of the page size).
    pub stripe_unit: usize,
    /// Directories of the page files: "." is the table directory itself.
    pub data_paths: Vec<String>,
    /// Clustering key columns (empty: rows in load order).
    pub clustering_key: Vec<String>,
    /// Pages of the heap segment.
    pub heap_pages: u64,
    /// Indexes.
    pub indexes: Vec<IndexMeta>,
    /// File (in the table directory) holding the same rows in Parquet, for full scans.
    #[serde(default)]
    pub columnar: Option<String>,
    /// Block checksums of the columnar copy (absent in tables loaded before they existed,
    /// whose copy is then read unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columnar_sums: Option<super::columnar_sums::SumsRef>,
    /// Program that wrote the table.
    pub created_by: String,
    /// CRC32C of the document with this field set to 0.
    pub checksum: u32,
}

impl Manifest {
    /// The Arrow schema of the table.
    pub fn schema(&self, file: &Path) -> Result<SchemaRef> {
        let fields = self
            .columns
            .iter()
            .map(|c| {
                let t = parse_type(&c.data_type).ok_or_else(|| {
                    StorageError::corrupted(
                        file,
                        None,
                        format!("column '{}' has unknown type '{}'", c.name, c.data_type),
                    )
                })?;
                Ok(Field::new(&c.name, t, c.nullable))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Column definitions of `schema`.
    pub fn columns_of(schema: &Schema) -> Vec<ColumnDef> {
        schema
            .fields()
            .iter()
            .map(|f| ColumnDef {
                name: f.name().clone(),
                data_type: type_name(f.data_type()),
                nullable: f.is_nullable(),
            })
            .collect()
    }

    /// Data path directories resolved against the table directory `dir`.
    pub fn resolved_data_paths(&self, dir: &Path) -> Vec<PathBuf> {
        self.data_paths
            .iter()
            .map(|p| {
                if p == "." {
                    dir.to_path_buf()
                } else {
                    PathBuf::from(p)
                }
            })
            .collect()
    }

    /// Index named `name`.
    pub fn index(&self, name: &str) -> Option<&IndexMeta> {
        self.indexes.iter().find(|i| i.name == name)
    }

    fn checksum_of(&self) -> u32 {
        let mut copy = self.clone();
        copy.checksum = 0;
        let text = serde_json::to_string_pretty(&copy).expect("manifest serializes");
        crate::storage::checksum::crc32c(text.as_bytes())
    }

    /// Serializes the manifest with its checksum filled in.
    pub fn to_json(&self) -> String {
        let mut sealed = self.clone();
        sealed.checksum = self.checksum_of();
        serde_json::to_string_pretty(&sealed).expect("manifest serializes") + "\n"
    }

    /// Parses and verifies a manifest read from `file`.
    pub fn from_json(text: &str, file: &Path) -> Result<Self> {
        let bad = |why: String| StorageError::corrupted(file, None, why);
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let version = value
            .get("format_version")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| bad("no format_version".into()))?;
        if version != FORMAT_VERSION as u64 {
            return Err(StorageError::FormatVersion {
                file: file.to_path_buf(),
                page: None,
                found: version.min(u32::MAX as u64) as u32,
                expected: FORMAT_VERSION as u32,
            });
        }
        let m: Manifest =
            serde_json::from_value(value).map_err(|e| bad(format!("malformed manifest: {e}")))?;
        let computed = m.checksum_of();
        if computed != m.checksum {
            return Err(bad(format!(
                "checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                m.checksum
            )));
        }
        m.validate(file)?;
        Ok(m)
    }

    fn validate(&self, file: &Path) -> Result<()> {
        let bad = |why: String| StorageError::corrupted(file, None, why);
        super::page::validate_page_size(self.page_size).map_err(|e| bad(e.to_string()))?;
        if self.data_paths.is_empty() {
            return Err(bad("no data paths".into()));
        }
        if self.stripe_unit == 0 || !self.stripe_unit.is_multiple_of(self.page_size) {
            return Err(bad(format!(
                "stripe unit {} is not a multiple of the page size",
                self.stripe_unit
            )));
        }
        for idx in &self.indexes {
            let t = &idx.tree;
            if t.height == 0 || t.root >= t.pages || t.leaf_pages > t.pages {
                return Err(bad(format!("index '{}' has an impossible shape", idx.name)));
            }
        }
        Ok(())
    }
}

fn unit_name(u: &TimeUnit) -> &'static str {
    match u {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

fn parse_unit(s: &str) -> Option<TimeUnit> {
    Some(match s.trim() {
        "s" => TimeUnit::Second,
        "ms" => TimeUnit::Millisecond,
        "us" => TimeUnit::Microsecond,
        "ns" => TimeUnit::Nanosecond,
        _ => return None,
    })
}

/// The manifest's name of an Arrow type, e.g. `Decimal128(15,2)` or `Timestamp(us,UTC)`.
pub fn type_name(t: &DataType) -> String {
    use DataType::*;
    match t {
        Time32(u) | Time64(u) | Duration(u) => {
            let base = match t {
                Time32(_) => "Time32",
                Time64(_) => "Time64",
                _ => "Duration",
            };
            format!("{base}({})", unit_name(u))
        }
        Timestamp(u, None) => format!("Timestamp({})", unit_name(u)),
        Timestamp(u, Some(tz)) => format!("Timestamp({},{tz})", unit_name(u)),
        Decimal32(p, s) => format!("Decimal32({p},{s})"),
        Decimal64(p, s) => format!("Decimal64({p},{s})"),
        Decimal128(p, s) => format!("Decimal128({p},{s})"),
        Decimal256(p, s) => format!("Decimal256({p},{s})"),
        FixedSizeBinary(w) => format!("FixedSizeBinary({w})"),
        other => format!("{other:?}"),
    }
}

/// Inverse of [`type_name`] for the types ooode stores.
pub fn parse_type(s: &str) -> Option<DataType> {
    use DataType::*;
    let (base, args) = match s.split_once('(') {
        Some((b, rest)) => (b, rest.strip_suffix(')')?),
        None => (s, ""),
    };
    let mut parts = args.splitn(2, ',');
    let a0 = parts.next().unwrap_or("").trim();
    let a1 = parts.next().map(str::trim);
    let ps = || -> Option<(u8, i8)> { Some((a0.parse().ok()?, a1?.parse().ok()?)) };
    Some(match base {
        "Boolean" => Boolean,
        "Int8" => Int8,
        "Int16" => Int16,
        "Int32" => Int32,
        "Int64" => Int64,
        "UInt8" => UInt8,
        "UInt16" => UInt16,
        "UInt32" => UInt32,
        "UInt64" => UInt64,
        "Float16" => Float16,
        "Float32" => Float32,
        "Float64" => Float64,
        "Date32" => Date32,
        "Date64" => Date64,
        "Utf8" => Utf8,
        "LargeUtf8" => LargeUtf8,
        "Utf8View" => Utf8View,
        "Binary" => Binary,
        "LargeBinary" => LargeBinary,
        "BinaryView" => BinaryView,
        "Time32" => Time32(parse_unit(a0)?),
        "Time64" => Time64(parse_unit(a0)?),
        "Duration" => Duration(parse_unit(a0)?),
        "Timestamp" => Timestamp(parse_unit(a0)?, a1.map(Into::into)),
        "Decimal32" => ps().map(|(p, s)| Decimal32(p, s))?,
        "Decimal64" => ps().map(|(p, s)| Decimal64(p, s))?,
        "Decimal128" => ps().map(|(p, s)| Decimal128(p, s))?,
        "Decimal256" => ps().map(|(p, s)| Decimal256(p, s))?,
        "FixedSizeBinary" => FixedSizeBinary(a0.parse().ok()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_round_trip() {
        use DataType::*;
        for t in [
            Int32,
            UInt64,
            Float64,
            Date32,
            Utf8View,
            Decimal128(15, 2),
            Decimal256(40, -3),
            Timestamp(TimeUnit::Microsecond, None),
            Timestamp(TimeUnit::Nanosecond, Some("Europe/Paris".into())),
            Time32(TimeUnit::Millisecond),
            Duration(TimeUnit::Second),
            FixedSizeBinary(25),
            Boolean,
        ] {
            assert_eq!(parse_type(&type_name(&t)), Some(t.clone()), "{t}");
        }
        assert_eq!(parse_type("List(Int32)"), None);
    }
}
