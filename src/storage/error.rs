//! Errors of the storage layer.
//!
//! Every error that comes from bytes read off disk names the file and, where it applies, the page,
//! so a user can tell which table and which file is damaged. Nothing in this layer panics on bad
//! input: decoders bounds-check every offset and length they read.

use std::path::PathBuf;

use arrow::datatypes::DataType;
use arrow::error::ArrowError;

/// Result alias of the storage layer.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// What can go wrong reading or writing an ooode table.
#[derive(Debug)]
#[non_exhaustive]
pub enum StorageError {
    /// An operating-system I/O error on `path`.
    Io {
        /// File or directory the operation was on.
        path: PathBuf,
        /// What the operation was doing ("open", "read page 7", ...).
        op: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Bytes on disk that do not decode: bad magic, checksum, bounds, or truncation.
    Corrupted {
        /// File that holds the damaged bytes.
        file: PathBuf,
        /// Page number within the table's segment, if the damage is in a page.
        page: Option<u64>,
        /// What is wrong.
        why: String,
    },
    /// A table or page written by another format version than this build reads.
    FormatVersion {
        /// File that carries the unexpected version.
        file: PathBuf,
        /// Page that carries it, or None for the manifest.
        page: Option<u64>,
        /// Version found on disk.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// A column type the page codec or key encoding does not store.
    UnsupportedType {
        /// Column name.
        column: String,
        /// Its Arrow type.
        data_type: DataType,
    },
    /// The table directory does not hold a table.
    NotATable {
        /// Directory given.
        path: PathBuf,
        /// Why it is not a table.
        why: String,
    },
    /// A load would overwrite an existing table without being asked to replace it.
    AlreadyExists {
        /// Directory of the existing table.
        path: PathBuf,
    },
    /// A caller-supplied argument is invalid (unknown column, bad page size, ...).
    InvalidArgument(String),
    /// An error from Arrow while building or converting arrays.
    Arrow(ArrowError),
    /// The input a table is loaded from failed.
    Input(String),
}

impl StorageError {
    /// A [`StorageError::Corrupted`] for `file` / `page`.
    pub fn corrupted(file: impl Into<PathBuf>, page: Option<u64>, why: impl Into<String>) -> Self {
        Self::Corrupted {
            file: file.into(),
            page,
            why: why.into(),
        }
    }

    /// An equal error for another waiter of the same failed read (errors are not `Clone`:
    /// an I/O error keeps its kind and message).
    pub fn duplicate(&self) -> Self {
        match self {
            Self::Io { path, op, source } => Self::Io {
                path: path.clone(),
                op: op.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Self::Corrupted { file, page, why } => Self::Corrupted {
                file: file.clone(),
                page: *page,
                why: why.clone(),
            },
            Self::FormatVersion {
                file,
                page,
                found,
                expected,
            } => Self::FormatVersion {
                file: file.clone(),
                page: *page,
                found: *found,
                expected: *expected,
            },
            Self::UnsupportedType { column, data_type } => Self::UnsupportedType {
                column: column.clone(),
                data_type: data_type.clone(),
            },
            Self::NotATable { path, why } => Self::NotATable {
                path: path.clone(),
                why: why.clone(),
            },
            Self::AlreadyExists { path } => Self::AlreadyExists { path: path.clone() },
            Self::InvalidArgument(m) => Self::InvalidArgument(m.clone()),
            Self::Arrow(e) => Self::Input(e.to_string()),
            Self::Input(m) => Self::Input(m.clone()),
        }
    }

    /// A [`StorageError::Io`] for `path` while doing `op`.
    pub fn io(path: impl Into<PathBuf>, op: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            op: op.into(),
            source,
        }
    }
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io { path, op, source } => {
                write!(f, "I/O error on {} ({op}): {source}", path.display())
            }
            Self::Corrupted {
                file,
                page: Some(page),
                why,
            } => write!(f, "corrupted page {page} in {}: {why}", file.display()),
            Self::Corrupted {
                file,
                page: None,
                why,
            } => write!(f, "corrupted file {}: {why}", file.display()),
            Self::FormatVersion {
                file,
                page,
                found,
                expected,
            } => {
                let at = page.map(|p| format!(" page {p}")).unwrap_or_default();
                write!(
                    f,
                    "{}{at} has ooode format version {found}, this build reads version {expected}",
                    file.display()
                )
            }
            Self::UnsupportedType { column, data_type } => write!(
                f,
                "unsupported type {data_type} of column '{column}': ooode stores integers, \
                 floats, booleans, decimals, dates, times, timestamps, strings and binary"
            ),
            Self::NotATable { path, why } => {
                write!(f, "{} is not an ooode table: {why}", path.display())
            }
            Self::AlreadyExists { path } => write!(
                f,
                "an ooode table already exists at {} (ask to replace it to overwrite)",
                path.display()
            ),
            Self::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Self::Arrow(e) => write!(f, "arrow error: {e}"),
            Self::Input(e) => write!(f, "reading the load input failed: {e}"),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Arrow(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ArrowError> for StorageError {
    fn from(e: ArrowError) -> Self {
        Self::Arrow(e)
    }
}
