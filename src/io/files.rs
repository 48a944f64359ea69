//! The files an engine has opened, shared by the engines.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::FileId;
use crate::storage::{Result, StorageError};

#[derive(Debug, Default)]
struct Files {
    /// Ids are never reused (pages cached under an id stay that file's); a closed file
    /// keeps its path for error text.
    by_id: Vec<(PathBuf, Option<Arc<File>>)>,
    by_path: HashMap<PathBuf, FileId>,
}

/// Opened files, by id; a path opened twice gets the same id.
#[derive(Debug, Default)]
pub struct FileTable {
    inner: RwLock<Files>,
}

impl FileTable {
    /// Opens `path` read-only, with O_DIRECT when `direct` (falling back to buffered I/O on
    /// file systems that refuse it, such as tmpfs). Returns the id and whether it is new.
    pub fn open(&self, path: &Path, direct: bool) -> Result<(FileId, Arc<File>, bool)> {
        let key = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        {
            let files = self.inner.read();
            if let Some(&id) = files.by_path.get(&key)
                && let Some(file) = &files.by_id[id.0 as usize].1
            {
                return Ok((id, file.clone(), false));
            }
        }
        let file = Arc::new(open_file(&key, direct)?);
        let mut files = self.inner.write();
        if let Some(&id) = files.by_path.get(&key)
            && let Some(file) = &files.by_id[id.0 as usize].1
        {
            return Ok((id, file.clone(), false));
        }
        let id = FileId(files.by_id.len() as u32);
        files.by_id.push((key.clone(), Some(file.clone())));
        files.by_path.insert(key, id);
        Ok((id, file, true))
    }

    /// The path of `id`.
    pub fn path(&self, id: FileId) -> PathBuf {
        self.inner
            .read()
            .by_id
            .get(id.0 as usize)
            .map(|f| f.0.clone())
            .unwrap_or_else(|| PathBuf::from(format!("<unknown file {}>", id.0)))
    }

    /// The open file `id`.
    pub fn file(&self, id: FileId) -> Option<Arc<File>> {
        self.inner
            .read()
            .by_id
            .get(id.0 as usize)
            .and_then(|f| f.1.clone())
    }

    /// Closes the files directly in directory `dir` (a removed segment's), returning their
    /// ids. Reads already submitted finish (the kernel holds the file); reads of a closed id
    /// fail, which only a table still open on removed files could ask for.
    pub fn close_in(&self, dir: &Path) -> Vec<FileId> {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let mut files = self.inner.write();
        let Files { by_id, by_path } = &mut *files;
        let mut closed = Vec::new();
        by_path.retain(|path, id| {
            let inside = path.parent() == Some(dir.as_path());
            if inside {
                by_id[id.0 as usize].1 = None;
                closed.push(*id);
            }
            !inside
        });
        closed
    }
}

fn open_file(path: &Path, direct: bool) -> Result<File> {
    let plain = || File::open(path).map_err(|e| StorageError::io(path, "open for reading", e));
    if !direct {
        return plain();
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => plain(),
        Err(e) => Err(StorageError::io(path, "open for reading (O_DIRECT)", e)),
    }
}

/// The error of a read of `len` bytes at `offset` of `path` that returned only `got` bytes.
pub fn short_read(path: &Path, offset: u64, len: usize, got: usize) -> StorageError {
    StorageError::io(
        path,
        format!("read {len} bytes at offset {offset}"),
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("short read: {got} of {len} bytes (file truncated?)"),
        ),
    )
}
