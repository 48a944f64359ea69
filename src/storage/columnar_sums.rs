//! Checksums of a table's columnar (Parquet) copy: a CRC32C per fixed block of the file.
//!
//! arrow-rs writes no Parquet page CRCs, so without these a damaged run of bytes in
//! `columns.parquet` could decode into wrong values and answer a full scan wrongly. The
//! loader computes them when it closes the copy and keeps them in a side file
//! (`columns.parquet.sums`) whose own CRC32C the manifest records; every byte range the
//! Parquet reader fetches is widened to whole blocks and checked before it is used.
//!
//! ```text
//!   columns.parquet.sums:  "OOCSUMS1" | block size u32 | file length u64 | count u64 |
//!                          count x CRC32C u32   (little endian)
//! ```

use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{Result, StorageError};

/// Suffix of the side file, after the columnar copy's name.
pub const SUMS_SUFFIX: &str = ".sums";

/// Bytes per checked block: a Parquet reader's ranges are mostly whole column chunks, much
/// larger, so widening a range to blocks costs little.
pub const BLOCK_SIZE: u32 = 64 << 10;

const MAGIC: &[u8; 8] = b"OOCSUMS1";
const HEADER: usize = 8 + 4 + 8 + 8;

/// What the manifest records of the side file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SumsRef {
    /// The side file, in the table directory.
    pub file: String,
    /// CRC32C of the whole side file.
    pub crc: u32,
}

/// The block checksums of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSums {
    block_size: u32,
    file_len: u64,
    crcs: Vec<u32>,
}

impl BlockSums {
    /// Checksums of `bytes` (a whole file) in blocks of `block_size`.
    pub fn of(bytes: &[u8], block_size: u32) -> Self {
        let crcs = bytes
            .chunks(block_size.max(1) as usize)
            .map(crate::storage::checksum::crc32c)
            .collect();
        Self {
            block_size: block_size.max(1),
            file_len: bytes.len() as u64,
            crcs,
        }
    }

    /// Checksums of the file at `path`, read in blocks.
    pub fn of_file(path: &Path, block_size: u32) -> Result<Self> {
        use std::io::Read;
        let io = |e| StorageError::io(path, "checksum the columnar copy", e);
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut block = vec![0u8; block_size.max(1) as usize];
        let (mut crcs, mut file_len) = (Vec::new(), 0u64);
        loop {
            let mut filled = 0;
            while filled < block.len() {
                match file.read(&mut block[filled..]).map_err(io)? {
                    0 => break,
                    n => filled += n,
                }
            }
            if filled == 0 {
                break;
            }
            crcs.push(crate::storage::checksum::crc32c(&block[..filled]));
            file_len += filled as u64;
            if filled < block.len() {
                break;
            }
        }
        Ok(Self {
            block_size: block_size.max(1),
            file_len,
            crcs,
        })
    }

    /// Length of the file they check.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Fails unless they cover exactly `columnar_len` bytes (the copy at `file`, as found).
    pub fn check_covers(&self, columnar_len: Option<u64>, file: &Path) -> Result<()> {
        if Some(self.file_len) == columnar_len {
            return Ok(());
        }
        Err(StorageError::corrupted(
            file,
            None,
            format!(
                "the columnar copy has {} bytes, its checksums cover {}",
                columnar_len.unwrap_or(0),
                self.file_len
            ),
        ))
    }

    /// The side file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 4 * self.crcs.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.block_size.to_le_bytes());
        out.extend_from_slice(&self.file_len.to_le_bytes());
        out.extend_from_slice(&(self.crcs.len() as u64).to_le_bytes());
        for crc in &self.crcs {
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }

    /// Parses a side file read from `file`, checking it against the manifest's `expected`.
    pub fn from_bytes(bytes: &[u8], expected: &SumsRef, file: &Path) -> Result<Self> {
        let bad = |why: String| StorageError::corrupted(file, None, why);
        let crc = crate::storage::checksum::crc32c(bytes);
        if crc != expected.crc {
            return Err(bad(format!(
                "checksum mismatch (manifest {:#010x}, file {crc:#010x})",
                expected.crc
            )));
        }
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(bad("not a block checksum file".into()));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let (block_size, file_len, count) = (u32_at(8), u64_at(12), u64_at(20));
        let blocks = if block_size == 0 {
            None
        } else {
            Some(file_len.div_ceil(block_size as u64))
        };
        if blocks != Some(count) || bytes.len() as u64 != HEADER as u64 + 4 * count {
            return Err(bad(format!(
                "{count} checksums of {block_size}-byte blocks do not cover {file_len} bytes"
            )));
        }
        let crcs = (0..count as usize)
            .map(|i| u32_at(HEADER + 4 * i))
            .collect();
        Ok(Self {
            block_size,
            file_len,
            crcs,
        })
    }

    /// The whole blocks covering `range` (clamped to the file).
    pub fn widen(&self, range: Range<u64>) -> Range<u64> {
        let b = self.block_size as u64;
        let start = (range.start.min(self.file_len) / b) * b;
        let end = range.end.min(self.file_len).div_ceil(b) * b;
        start..end.min(self.file_len)
    }

    /// Checks `bytes`, read at `start` (a block boundary) of `file`, block by block.
    pub fn verify(&self, start: u64, bytes: &[u8], file: &Path) -> Result<()> {
        let b = self.block_size as u64;
        if !start.is_multiple_of(b) {
            return Err(StorageError::InvalidArgument(format!(
                "checked read of {} at {start}, not a block boundary",
                file.display()
            )));
        }
        let first = start / b;
        for (i, chunk) in bytes.chunks(b as usize).enumerate() {
            let block = first + i as u64;
            let expected_len = b.min(self.file_len.saturating_sub(block * b));
            let crc = self.crcs.get(block as usize);
            if chunk.len() as u64 != expected_len
                || crc != Some(&crate::storage::checksum::crc32c(chunk))
            {
                return Err(StorageError::corrupted(
                    file,
                    None,
                    format!(
                        "block {block} (bytes {}..{}) fails its checksum",
                        block * b,
                        block * b + chunk.len() as u64
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_widen_and_catch_damage() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sums = BlockSums::of(&data, 1024);
        let bytes = sums.to_bytes();
        let sref = SumsRef {
            file: "x.sums".into(),
            crc: crate::storage::checksum::crc32c(&bytes),
        };
        let file = Path::new("columns.parquet");
        let back = BlockSums::from_bytes(&bytes, &sref, file).unwrap();
        assert_eq!(back, sums);
        assert_eq!(sums.widen(1500..2100), 1024..3072);
        assert_eq!(sums.widen(9000..10_000), 8192..10_000);
        let r = sums.widen(1500..2100);
        let (s, e) = (r.start as usize, r.end as usize);
        sums.verify(r.start, &data[s..e], file).unwrap();
        sums.verify(8192, &data[8192..], file).unwrap();
        let mut damaged = data.clone();
        damaged[2000] ^= 1;
        let e = sums.verify(1024, &damaged[1024..3072], file).unwrap_err();
        assert!(e.to_string().contains("block 1 (bytes 1024..2048)"), "{e}");
        // A truncated copy: its last block is short where it should be whole.
        let e = sums.verify(8192, &data[8192..9000], file).unwrap_err();
        assert!(e.to_string().contains("block 8"), "{e}");
        // A damaged side file, or one of another table.
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        assert!(BlockSums::from_bytes(&bad, &sref, file).is_err());
        let of_file = {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("f");
            std::fs::write(&p, &data).unwrap();
            BlockSums::of_file(&p, 1024).unwrap()
        };
        assert_eq!(of_file, sums);
    }
}
