//! An external merge sort of (key, payload) records within a memory budget.
//!
//! Records collect in an arena; when it passes the budget they are sorted by key (stably: equal
//! keys keep their arrival order) and spilled to a run file in a temporary directory. Finishing
//! merges the runs with a heap, ties going to the earlier run, so the whole sort is stable.
//! The loader sorts table rows by clustering key with it, and index entries by index key.
//!
//! ```text
//! // Layout: spill run record
//! //   key length u32 | payload length u32 | key | payload        (little endian)
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::error::{Result, StorageError};

/// Sorts records by key, spilling sorted runs to `spill_dir` past `budget` bytes.
#[derive(Debug)]
pub struct ExternalSorter {
    budget: usize,
    spill_dir: PathBuf,
    arena: Vec<u8>,
    records: Vec<(usize, u32, u32)>,
    runs: Vec<PathBuf>,
}

impl ExternalSorter {
    /// A sorter that keeps at most about `budget` bytes in memory.
    pub fn new(budget: usize, spill_dir: &Path) -> Self {
        Self {
            budget: budget.max(1 << 16),
            spill_dir: spill_dir.to_path_buf(),
            arena: Vec::new(),
            records: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// Adds a record.
    pub fn push(&mut self, key: &[u8], payload: &[u8]) -> Result<()> {
        let start = self.arena.len();
        self.arena.extend_from_slice(key);
        self.arena.extend_from_slice(payload);
        self.records
            .push((start, key.len() as u32, payload.len() as u32));
        if self.arena.len() + self.records.len() * 16 > self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Number of runs spilled so far.
    pub fn spilled_runs(&self) -> usize {
        self.runs.len()
    }

    fn key(&self, r: &(usize, u32, u32)) -> &[u8] {
        &self.arena[r.0..r.0 + r.1 as usize]
    }

    fn sort_in_memory(&mut self) {
        let mut records = std::mem::take(&mut self.records);
        // Already sorted input (common: data generated in key order) skips the sort.
        if !records
            .windows(2)
            .all(|w| self.key(&w[0]) <= self.key(&w[1]))
        {
            records.sort_by(|a, b| self.key(a).cmp(self.key(b)));
        }
        self.records = records;
    }

    fn spill(&mut self) -> Result<()> {
        self.sort_in_memory();
        let path = self.spill_dir.join(format!("run-{}.sort", self.runs.len()));
        let file = File::create(&path).map_err(|e| StorageError::io(&path, "create run", e))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let io = |e| StorageError::io(&path, "write run", e);
        for &(start, klen, plen) in &self.records {
            w.write_all(&klen.to_le_bytes()).map_err(io)?;
            w.write_all(&plen.to_le_bytes()).map_err(io)?;
            w.write_all(&self.arena[start..start + (klen + plen) as usize])
                .map_err(io)?;
        }
        w.flush().map_err(io)?;
        self.runs.push(path);
        self.arena.clear();
        self.records.clear();
        Ok(())
    }

    /// Finishes the sort: records in key order.
    pub fn finish(mut self) -> Result<SortedRecords> {
        if self.runs.is_empty() {
            self.sort_in_memory();
            let records = std::mem::take(&mut self.records);
            return Ok(SortedRecords(Sorted::Memory {
                arena: std::mem::take(&mut self.arena),
                records: records.into_iter(),
            }));
        }
        if !self.records.is_empty() {
            self.spill()?;
        }
        let mut readers = Vec::with_capacity(self.runs.len());
        let mut heap = BinaryHeap::new();
        for (i, path) in self.runs.iter().enumerate() {
            let f = File::open(path).map_err(|e| StorageError::io(path, "open run", e))?;
            let mut r = RunReader {
                path: path.clone(),
                reader: BufReader::with_capacity(256 << 10, f),
            };
            if let Some(rec) = r.next_record()? {
                heap.push(Reverse(HeapItem { rec, run: i }));
            }
            readers.push(r);
        }
        Ok(SortedRecords(Sorted::Merge { readers, heap }))
    }
}

#[derive(Debug)]
struct RunReader {
    path: PathBuf,
    reader: BufReader<File>,
}

impl RunReader {
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let io = |e| StorageError::io(&self.path, "read run", e);
        let mut lens = [0u8; 8];
        match self.reader.read_exact(&mut lens) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io(e)),
        }
        let klen = u32::from_le_bytes(lens[0..4].try_into().expect("4")) as usize;
        let plen = u32::from_le_bytes(lens[4..8].try_into().expect("4")) as usize;
        let mut key = vec![0; klen];
        let mut payload = vec![0; plen];
        self.reader.read_exact(&mut key).map_err(io)?;
        self.reader.read_exact(&mut payload).map_err(io)?;
        Ok(Some((key, payload)))
    }
}

#[derive(Debug, PartialEq, Eq)]
struct HeapItem {
    rec: (Vec<u8>, Vec<u8>),
    run: usize,
}

impl Ord for HeapItem {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rec.0.cmp(&other.rec.0).then(self.run.cmp(&other.run))
    }
}

impl PartialOrd for HeapItem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The sorted output of an [`ExternalSorter`].
#[derive(Debug)]
pub struct SortedRecords(Sorted);

#[derive(Debug)]
enum Sorted {
    /// Everything fit in memory: record bytes and (start, key length, payload length), sorted.
    Memory {
        arena: Vec<u8>,
        records: std::vec::IntoIter<(usize, u32, u32)>,
    },
    /// A k-way merge of spilled runs: one reader per run, the smallest head record of each.
    Merge {
        readers: Vec<RunReader>,
        heap: BinaryHeap<Reverse<HeapItem>>,
    },
}

impl SortedRecords {
    /// Calls `f(key, payload)` for every record in key order.
    pub fn for_each(self, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        match self.0 {
            Sorted::Memory { arena, records } => {
                for (start, klen, plen) in records {
                    let k_end = start + klen as usize;
                    f(&arena[start..k_end], &arena[k_end..k_end + plen as usize])?;
                }
            }
            Sorted::Merge {
                mut readers,
                mut heap,
            } => {
                while let Some(Reverse(item)) = heap.pop() {
                    f(&item.rec.0, &item.rec.1)?;
                    if let Some(rec) = readers[item.run].next_record()? {
                        heap.push(Reverse(HeapItem { rec, run: item.run }));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilling_sort_is_stable_and_complete() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ExternalSorter::new(1 << 16, dir.path());
        let mut expect = Vec::new();
        let mut x: u64 = 12345;
        for i in 0..20_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = ((x >> 40) % 500).to_be_bytes().to_vec();
            s.push(&key, &i.to_le_bytes()).unwrap();
            expect.push((key, i.to_le_bytes().to_vec()));
        }
        assert!(s.spilled_runs() > 1);
        expect.sort_by(|a, b| a.0.cmp(&b.0));
        let mut got = Vec::new();
        s.finish()
            .unwrap()
            .for_each(|k, p| {
                got.push((k.to_vec(), p.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(got, expect);
    }
}
