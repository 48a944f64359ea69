//! A table that grows: its segments, each an immutable table of its own, listed in
//! `segments.json`.
//!
//! ```text
//!   orders/
//!     manifest.json, heap.0.pages, ...    segment "." (the bulk load; every table has it)
//!     seg-000001-<id>/manifest.json, ...  a segment per INSERT (rows sorted by the key)
//!     segments.json                       {"version": 2, "segments": [".", "seg-000001-..."]}
//!     .ooode-write.lock                   writers hold it (flock) from reading the list
//!                                         to committing the next one
//! ```
//!
//! A table without `segments.json` is one segment, ".". A writer takes the lock, writes its
//! segment (the loader writes into a temporary directory and renames it whole), then commits
//! by writing the next list to a temporary file, fsyncing it and renaming it over
//! `segments.json` (and fsyncing the directory): readers see the old list or the new one,
//! never a part, and a crash before the rename leaves a segment no list names, removed by the
//! next writer. A query reads the list once, when it is planned, and keeps the segments it
//! names open: inserts committed meanwhile are not in its snapshot.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{Result, StorageError};
use super::manifest::{MANIFEST_FILE, Manifest};

/// The list of a table's segments.
pub const SEGMENTS_FILE: &str = "segments.json";

/// The lock file writers hold.
pub const LOCK_FILE: &str = ".ooode-write.lock";

/// In each segment's directory: readers hold a shared lock on it while the segment is open.
pub const PIN_FILE: &str = ".ooode-pin";

/// Prefix of a segment directory written by an insert.
pub const SEGMENT_PREFIX: &str = "seg-";

const LIST_VERSION: u32 = 1;

/// The segments of a table, as committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentList {
    /// Format of this file.
    pub format_version: u32,
    /// Commits so far (0: the table as bulk-loaded).
    pub version: u64,
    /// Segment directories, relative to the table directory ("." is the table's own).
    pub segments: Vec<String>,
    /// Segments replaced by an `INSERT OVERWRITE`, kept until no query can read them.
    #[serde(default)]
    pub retired: Vec<String>,
    /// When each retired segment was retired (seconds since the epoch). Tables in object
    /// storage keep retired segments for a retention time (no locks there say who reads
    /// them); local tables use pins instead and leave this empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retired_at: BTreeMap<String, u64>,
    /// CRC32C of the document with this field set to 0.
    pub checksum: u32,
}

impl SegmentList {
    fn sealed(&self) -> Self {
        let mut copy = self.clone();
        copy.checksum = 0;
        let text = serde_json::to_string_pretty(&copy).expect("segment list serializes");
        copy.checksum = crate::storage::checksum::crc32c(text.as_bytes());
        copy
    }

    /// The list of the table in `dir` (one segment, ".", if it has no `segments.json`).
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(SEGMENTS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::initial()),
            Err(e) => return Err(StorageError::io(&path, "read", e)),
        };
        Self::parse(&text, &path)
    }

    /// Parses and checks a list read from `path` (a file, or an object's URL).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let bad = |why: String| StorageError::corrupted(path, None, why);
        let list: SegmentList =
            serde_json::from_str(text).map_err(|e| bad(format!("not a segment list: {e}")))?;
        if list.format_version != LIST_VERSION {
            return Err(StorageError::FormatVersion {
                file: path.to_path_buf(),
                page: None,
                found: list.format_version,
                expected: LIST_VERSION,
            });
        }
        if list.sealed().checksum != list.checksum {
            return Err(bad("checksum mismatch".into()));
        }
        if list.segments.is_empty() {
            return Err(bad("no segments".into()));
        }
        for s in list.segments.iter().chain(&list.retired) {
            if s != "." && (!s.starts_with(SEGMENT_PREFIX) || s.contains(['/', '\\'])) {
                return Err(bad(format!("'{s}' is not a segment name")));
            }
        }
        Ok(list)
    }

    /// The list of a table that has none yet: its bulk load alone.
    pub fn initial() -> Self {
        Self {
            format_version: LIST_VERSION,
            version: 0,
            segments: vec![".".into()],
            retired: vec![],
            retired_at: BTreeMap::new(),
            checksum: 0,
        }
    }

    /// The list after a commit that replaces all of `old` (a prefix of the segments, in
    /// order) by `new`; the replaced ones are retired at `now` (seconds since the epoch).
    pub fn replace_prefix(&self, old: &[String], new: &str, now: u64) -> Option<Self> {
        if !self.segments.starts_with(old) {
            return None;
        }
        let mut next = self.clone();
        next.version += 1;
        next.segments = std::iter::once(new.to_string())
            .chain(self.segments[old.len()..].iter().cloned())
            .collect();
        for name in old {
            next.retired.push(name.clone());
            next.retired_at.insert(name.clone(), now);
        }
        Some(next)
    }

    /// Forgets retired segment `name` (its files are gone).
    pub fn drop_retired(&mut self, name: &str) {
        self.retired.retain(|r| r != name);
        self.retired_at.remove(name);
    }

    /// The document to store, checksum filled in.
    pub fn to_text(&self) -> String {
        serde_json::to_string_pretty(&self.sealed()).expect("segment list serializes") + "\n"
    }

    /// The segment directories.
    pub fn dirs(&self, dir: &Path) -> Vec<PathBuf> {
        self.segments
            .iter()
            .map(|s| {
                if s == "." {
                    dir.to_path_buf()
                } else {
                    dir.join(s)
                }
            })
            .collect()
    }

    /// A name for the segment the next commit adds.
    pub fn next_segment_name(&self) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!(
            "{SEGMENT_PREFIX}{:06}-{:x}-{:x}",
            self.version + 1,
            std::process::id(),
            nanos & 0xffff_ffff_ffff
        )
    }

    /// Commits `self` (with its version one past the list it was made from) as the table's
    /// list: temporary file, fsync, rename, fsync of the directory. Call with the lock held.
    pub fn commit(&self, dir: &Path, _lock: &WriteLock) -> Result<()> {
        let tmp = dir.join(format!("{SEGMENTS_FILE}.tmp"));
        let path = dir.join(SEGMENTS_FILE);
        std::fs::write(&tmp, self.to_text())
            .and_then(|_| File::open(&tmp)?.sync_all())
            .map_err(|e| StorageError::io(&tmp, "write", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| StorageError::io(&path, "replace", e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StorageError::io(dir, "fsync", e))
    }

    /// Removes segment directories no list names, and half-written ones (left by writers that
    /// stopped before their commit). Call with the lock held: then no writer is between writing and committing.
    pub fn remove_uncommitted(&self, dir: &Path, _lock: &WriteLock) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, "list", e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let known = self.segments.contains(&name) || self.retired.contains(&name);
            // A segment's loader writes into `.seg-....loading-...` and renames it whole.
            let loading =
                name.starts_with(&format!(".{SEGMENT_PREFIX}")) && name.contains(".loading-");
            let orphan = (name.starts_with(SEGMENT_PREFIX) && !known) || loading;
            if orphan && entry.path().is_dir() {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(|e| StorageError::io(&path, "remove", e))?;
                removed.push(name);
            }
        }
        Ok(removed)
    }
}

/// Opens (creating, never truncating) a file that is only ever locked.
fn open_lock_file(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| StorageError::io(path, "open", e))
}

/// A reader's hold on a segment: a shared `flock` on its [`PIN_FILE`], kept while the segment
/// is open (by any query's plan, or a runtime's cache), in any process. A retired segment is
/// removed only when its pin file can be locked exclusively.
#[derive(Debug)]
pub struct Pin {
    _file: File,
}

impl Pin {
    /// Pins the segment in `dir`; None where the pin file cannot be made (a read-only copy:
    /// then no writer removes anything there either).
    pub fn hold(dir: &Path) -> Option<Self> {
        let file = open_lock_file(&dir.join(PIN_FILE)).ok()?;
        file.lock_shared().ok()?;
        Some(Self { _file: file })
    }
}

/// Removes the retired segment `name` of the table in `dir` if no reader pins it: None if
/// one does, else the directories whose files went (for closing descriptors still open on
/// them). Call with the write lock held. For ".", the table directory's own segment files
/// go (the list, the lock and other segments stay), and its data paths if it was striped.
pub fn remove_segment(dir: &Path, name: &str, _lock: &WriteLock) -> Result<Option<Vec<PathBuf>>> {
    let seg = if name == "." {
        dir.to_path_buf()
    } else {
        dir.join(name)
    };
    if !seg.is_dir() {
        return Ok(Some(vec![]));
    }
    let pin_path = seg.join(PIN_FILE);
    let pin = open_lock_file(&pin_path)?;
    match pin.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(StorageError::io(&pin_path, "lock", e)),
    }
    // Page files striped over other directories (a bulk load with data paths) go too.
    let striped: Vec<PathBuf> = std::fs::read_to_string(seg.join(MANIFEST_FILE))
        .ok()
        .and_then(|text| Manifest::from_json(&text, &seg.join(MANIFEST_FILE)).ok())
        .map(|m| m.resolved_data_paths(&seg))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p != &seg && p.is_dir())
        .collect();
    let mut removed = vec![seg.clone()];
    for path in striped {
        std::fs::remove_dir_all(&path).map_err(|e| StorageError::io(&path, "remove", e))?;
        removed.push(path);
    }
    if name != "." {
        std::fs::remove_dir_all(&seg).map_err(|e| StorageError::io(&seg, "remove", e))?;
        return Ok(Some(removed));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, "list", e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let keep = name.starts_with(SEGMENT_PREFIX)
            || name.starts_with(SEGMENTS_FILE)
            || name == LOCK_FILE
            || name == PIN_FILE;
        if !keep && entry.path().is_file() {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| StorageError::io(&path, "remove", e))?;
        }
    }
    Ok(Some(removed))
}

/// The table's write lock (an exclusive `flock` on [`LOCK_FILE`]); released when dropped.
#[derive(Debug)]
pub struct WriteLock {
    _file: File,
}

impl WriteLock {
    /// Waits for the write lock of the table in `dir`.
    pub fn acquire(dir: &Path) -> Result<Self> {
        if !dir.join(MANIFEST_FILE).is_file() && !dir.join(SEGMENTS_FILE).is_file() {
            return Err(StorageError::NotATable {
                path: dir.to_path_buf(),
                why: format!("it has no {MANIFEST_FILE}"),
            });
        }
        let path = dir.join(LOCK_FILE);
        let file = open_lock_file(&path)?;
        file.lock()
            .map_err(|e| StorageError::io(&path, "lock", e))?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_commit_atomically_and_reject_damage() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), "{}").unwrap();
        let list = SegmentList::read(dir.path()).unwrap();
        assert_eq!(list.segments, vec!["."]);
        let lock = WriteLock::acquire(dir.path()).unwrap();
        let name = list.next_segment_name();
        std::fs::create_dir(dir.path().join(&name)).unwrap();
        std::fs::create_dir(dir.path().join("seg-000009-crashed")).unwrap();
        std::fs::create_dir(dir.path().join(".seg-000010-x.loading-1f")).unwrap();
        let mut next = list.clone();
        next.version += 1;
        next.segments.push(name.clone());
        next.commit(dir.path(), &lock).unwrap();
        let back = SegmentList::read(dir.path()).unwrap();
        assert_eq!(back.segments, vec![".".to_string(), name.clone()]);
        assert_eq!(back.version, 1);
        let removed = back.remove_uncommitted(dir.path(), &lock).unwrap();
        let mut removed = removed;
        removed.sort();
        assert_eq!(
            removed,
            vec![".seg-000010-x.loading-1f", "seg-000009-crashed"]
        );
        assert!(dir.path().join(&name).is_dir());
        drop(lock);
        let path = dir.path().join(SEGMENTS_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"version\": 1", "\"version\": 2")).unwrap();
        let e = SegmentList::read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        std::fs::write(&path, text.replace(&name, "../elsewhere")).unwrap();
        assert!(SegmentList::read(dir.path()).is_err());
    }
}
