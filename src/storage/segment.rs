//! Segments: the page files of a heap or an index, striped over a table's data paths.
//!
//! A segment is a sequence of pages numbered from 0. With d data paths and a stripe unit of s
//! pages, page p lives in data path `(p / s) % d` at byte offset
//! `((p / s) / d * s + p % s) * page_size` of the file `<segment>.<path index>.pages`:
//!
//! ```text
//!   stripe unit 2 pages, 3 paths:   path 0: p0 p1 | p6 p7 | ...
//!                                   path 1: p2 p3 | p8 p9 | ...
//!                                   path 2: p4 p5 | p10 ..
//! ```
//!
//! One data path per device of a flash array spreads random reads over all devices.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::{Result, StorageError};
use super::page::{AlignedBuf, PageKind, seal_page};

/// Maps page numbers of a segment to (file, offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Striping {
    /// Directories holding the segment's files, one per device.
    pub dirs: Vec<PathBuf>,
    /// Page size in bytes.
    pub page_size: usize,
    /// Pages per stripe unit.
    pub stripe_pages: u64,
}

impl Striping {
    /// Data path index and byte offset of page `page`.
    pub fn locate(&self, page: u64) -> (usize, u64) {
        let stripe = page / self.stripe_pages;
        let paths = self.dirs.len() as u64;
        let path = (stripe % paths) as usize;
        let local = (stripe / paths) * self.stripe_pages + page % self.stripe_pages;
        (path, local * self.page_size as u64)
    }

    /// Number of the segment's `pages` pages that live in data path `path`.
    pub fn pages_in_path(&self, pages: u64, path: usize) -> u64 {
        let unit = self.stripe_pages * self.dirs.len() as u64;
        let full_rounds = pages / unit;
        let rest = pages % unit;
        let before = path as u64 * self.stripe_pages;
        full_rounds * self.stripe_pages + rest.saturating_sub(before).min(self.stripe_pages)
    }

    /// File of `segment` in data path `path`.
    pub fn file(&self, segment: &str, path: usize) -> PathBuf {
        self.dirs[path].join(format!("{segment}.{path}.pages"))
    }
}

/// Where finished pages go: assigns page numbers in order and seals each page.
pub trait PageSink {
    /// Seals `page` (body filled in) as the next page and writes it; returns its number.
    fn append_page(&mut self, kind: PageKind, page: &mut [u8]) -> Result<u64>;
    /// Pages written so far (the number the next page gets).
    fn pages_written(&self) -> u64;
}

/// Writes a segment's pages, in page order, to its striped files.
#[derive(Debug)]
pub struct SegmentWriter {
    name: String,
    striping: Striping,
    files: Vec<(PathBuf, BufWriter<File>)>,
    pages: u64,
}

impl SegmentWriter {
    /// Creates the files of segment `name` (they must not exist).
    pub fn create(name: &str, striping: Striping) -> Result<Self> {
        let files = (0..striping.dirs.len())
            .map(|i| {
                let path = striping.file(name, i);
                let f = File::options()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| StorageError::io(&path, "create", e))?;
                Ok((path, BufWriter::with_capacity(1 << 20, f)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            name: name.to_string(),
            striping,
            files,
            pages: 0,
        })
    }

    /// Segment name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Flushes and fsyncs every file; returns the number of pages written.
    pub fn finish(&mut self) -> Result<u64> {
        for (path, w) in &mut self.files {
            w.flush()
                .map_err(|e| StorageError::io(path.as_path(), "flush", e))?;
            w.get_ref()
                .sync_all()
                .map_err(|e| StorageError::io(path.as_path(), "fsync", e))?;
        }
        Ok(self.pages)
    }
}

impl PageSink for SegmentWriter {
    fn append_page(&mut self, kind: PageKind, page: &mut [u8]) -> Result<u64> {
        let page_no = self.pages;
        seal_page(page, kind, page_no);
        // Pages arrive in order, so each file is written sequentially at `locate`'s offsets.
        let (path, _) = self.striping.locate(page_no);
        let (file, w) = &mut self.files[path];
        w.write_all(page)
            .map_err(|e| StorageError::io(file.as_path(), format!("write page {page_no}"), e))?;
        self.pages += 1;
        Ok(page_no)
    }

    fn pages_written(&self) -> u64 {
        self.pages
    }
}

/// Synchronous page reads of one segment (`pread`, through the OS cache). The tools' and tests'
/// path; the executor reads through the I/O layer instead. A segment in object storage has no
/// local files: its sizes were checked when the table was opened, and only the I/O layer reads
/// its pages.
#[derive(Debug)]
pub struct SegmentReader {
    striping: Striping,
    files: Vec<(PathBuf, Option<File>)>,
    pages: u64,
}

impl SegmentReader {
    /// Opens the files of segment `name` holding `pages` pages; fails naming a missing or
    /// truncated file.
    pub fn open(name: &str, striping: Striping, pages: u64) -> Result<Self> {
        let mut files = Vec::with_capacity(striping.dirs.len());
        for i in 0..striping.dirs.len() {
            let path = striping.file(name, i);
            let f = File::open(&path).map_err(|e| StorageError::io(&path, "open", e))?;
            let len = f
                .metadata()
                .map_err(|e| StorageError::io(&path, "stat", e))?
                .len();
            let want = striping.pages_in_path(pages, i) * striping.page_size as u64;
            if len < want {
                return Err(StorageError::corrupted(
                    &path,
                    None,
                    format!("file is truncated: {len} bytes, the manifest needs {want}"),
                ));
            }
            files.push((path, Some(f)));
        }
        Ok(Self {
            striping,
            files,
            pages,
        })
    }

    /// A segment whose files are not local (object storage): `size_of` gives each file's
    /// length (from a HEAD request); a missing or truncated file fails here, naming it.
    pub fn remote(
        name: &str,
        striping: Striping,
        pages: u64,
        size_of: &dyn Fn(&Path) -> Result<u64>,
    ) -> Result<Self> {
        let mut files = Vec::with_capacity(striping.dirs.len());
        for i in 0..striping.dirs.len() {
            let path = striping.file(name, i);
            let len = size_of(&path)?;
            let want = striping.pages_in_path(pages, i) * striping.page_size as u64;
            if len < want {
                return Err(StorageError::corrupted(
                    &path,
                    None,
                    format!("object is truncated: {len} bytes, the manifest needs {want}"),
                ));
            }
            files.push((path, None));
        }
        Ok(Self {
            striping,
            files,
            pages,
        })
    }

    /// Pages in the segment.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The segment's striping.
    pub fn striping(&self) -> &Striping {
        &self.striping
    }

    /// File holding page `page` (for error messages).
    pub fn file_of(&self, page: u64) -> &Path {
        &self.files[self.striping.locate(page).0].0
    }

    /// Reads page `page` (not verified: the caller checks kind and checksum).
    pub fn read_page(&self, page: u64) -> Result<AlignedBuf> {
        let (i, offset) = self.striping.locate(page);
        let (path, file) = &self.files[i];
        let Some(file) = file else {
            return Err(StorageError::InvalidArgument(format!(
                "{} is in object storage: its pages are read through the I/O layer",
                path.display()
            )));
        };
        if page >= self.pages {
            return Err(StorageError::corrupted(
                path,
                Some(page),
                format!("page {page} is past the segment's {} pages", self.pages),
            ));
        }
        let mut buf = AlignedBuf::zeroed(self.striping.page_size);
        file.read_exact_at(&mut buf, offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                StorageError::corrupted(path, Some(page), "file is truncated")
            } else {
                StorageError::io(path, format!("read page {page}"), e)
            }
        })?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striping_places_every_page_once() {
        for paths in 1..4usize {
            for stripe_pages in [1u64, 2, 3] {
                let s = Striping {
                    dirs: (0..paths).map(|i| PathBuf::from(format!("d{i}"))).collect(),
                    page_size: 4096,
                    stripe_pages,
                };
                let pages = 23u64;
                let mut seen = std::collections::HashSet::new();
                let mut next_offset = vec![0u64; paths];
                for p in 0..pages {
                    let (i, off) = s.locate(p);
                    assert!(seen.insert((i, off)));
                    // Sequential within each file.
                    assert_eq!(off, next_offset[i]);
                    next_offset[i] += 4096;
                }
                for (i, next) in next_offset.iter().enumerate() {
                    assert_eq!(s.pages_in_path(pages, i) * 4096, *next);
                }
            }
        }
    }
}
