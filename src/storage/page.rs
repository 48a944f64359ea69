//! The common page header, page checksums and page-aligned buffers.
//!
//! Every page of every ooode file starts with the same 24-byte header:
//!
//! ```text
//! // Layout: common page header (little endian)
//! //   0..4    magic            b"OOPG"
//! //   4..6    format version   u16 (FORMAT_VERSION)
//! //   6       page kind        u8  (PageKind)
//! //   7       reserved         u8  (0)
//! //   8..16   page number      u64 (position within its segment)
//! //   16..20  CRC32C           u32 over the whole page with these 4 bytes zeroed
//! //   20..24  reserved         u32 (0)
//! //   24..    kind-specific body (heap: heap/page.rs, B+tree node: btree/node.rs)
//! ```
//!
//! A page is verified before any of its body is read: magic, version, kind, page number (a page
//! read from the wrong offset fails here) and checksum.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::ptr::NonNull;

use super::checksum::Backend;
use super::error::{Result, StorageError};

/// On-disk format version written into every page and the manifest.
pub const FORMAT_VERSION: u16 = 1;
/// Magic bytes at the start of every page.
pub const PAGE_MAGIC: [u8; 4] = *b"OOPG";
/// Length of the common header.
pub const HEADER_LEN: usize = 24;
/// Smallest page size.
pub const MIN_PAGE_SIZE: usize = 4 * 1024;
/// Largest page size.
pub const MAX_PAGE_SIZE: usize = 64 * 1024;
/// Default page size.
pub const DEFAULT_PAGE_SIZE: usize = 8 * 1024;
/// Alignment of page buffers: enough for O_DIRECT on any block device up to 4 KiB sectors.
pub const PAGE_ALIGN: usize = 4096;

const CRC_RANGE: std::ops::Range<usize> = 16..20;

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    /// Rows of a table in PAX layout.
    Heap = 1,
    /// B+tree leaf: keys and row ids.
    IndexLeaf = 2,
    /// B+tree inner node: separator keys, child pages, subtree counts.
    IndexInner = 3,
}

impl PageKind {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Heap),
            2 => Some(Self::IndexLeaf),
            3 => Some(Self::IndexInner),
            _ => None,
        }
    }
}

/// Checks that `size` is a valid page size: a power of two from 4 KiB to 64 KiB.
pub fn validate_page_size(size: usize) -> Result<()> {
    if size.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(StorageError::InvalidArgument(format!(
            "page size {size} must be a power of two from 4 KiB to 64 KiB"
        )))
    }
}

/// Parses a page size such as `8KiB`, `8K`, `16kb` or `4096`.
pub fn parse_page_size(text: &str) -> Result<usize> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, mult) = if let Some(d) = t
        .strip_suffix("kib")
        .or_else(|| t.strip_suffix("kb"))
        .or_else(|| t.strip_suffix('k'))
    {
        (d, 1024)
    } else {
        (t.strip_suffix('b').unwrap_or(&t), 1)
    };
    let n: usize = digits.trim().parse().map_err(|_| {
        StorageError::InvalidArgument(format!("page size '{text}' is not a size like 8KiB"))
    })?;
    let size = n.saturating_mul(mult);
    validate_page_size(size)?;
    Ok(size)
}

/// Writes the common header into `page` and seals it with its checksum. The body must already
/// be in place: the checksum covers it.
pub fn seal_page(page: &mut [u8], kind: PageKind, page_no: u64) {
    page[0..4].copy_from_slice(&PAGE_MAGIC);
    page[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    page[6] = kind as u8;
    page[7] = 0;
    page[8..16].copy_from_slice(&page_no.to_le_bytes());
    page[CRC_RANGE].fill(0);
    page[20..24].fill(0);
    let crc = page_crc(page);
    page[CRC_RANGE].copy_from_slice(&crc.to_le_bytes());
}

fn page_crc(page: &[u8]) -> u32 {
    page_checksum(page, Backend::chosen())
}

/// The checksum of a whole page (its stored checksum's bytes taken as zeros), computed by
/// `backend`: what reading a page costs in checksums (`ooode-tpch checksum` times it).
pub fn page_checksum(page: &[u8], backend: Backend) -> u32 {
    let crc = backend.crc32c(&page[..CRC_RANGE.start]);
    let crc = backend.append(crc, &[0u8; 4]);
    backend.append(crc, &page[CRC_RANGE.end..])
}

/// Verifies the header and checksum of `page`, read as page `page_no` of `file`, and that it is
/// one of the `expected` kinds. Returns the page's kind.
pub fn verify_page(
    page: &[u8],
    page_no: u64,
    expected: &[PageKind],
    file: &Path,
) -> Result<PageKind> {
    check_page(page, page_no, expected, file, true)
}

/// [`verify_page`] without the checksum, for pages whose checksum was verified when they were
/// read (the buffer pool keeps verified pages): magic, version, page number and kind.
pub fn verify_header(
    page: &[u8],
    page_no: u64,
    expected: &[PageKind],
    file: &Path,
) -> Result<PageKind> {
    check_page(page, page_no, expected, file, false)
}

fn check_page(
    page: &[u8],
    page_no: u64,
    expected: &[PageKind],
    file: &Path,
    checksum: bool,
) -> Result<PageKind> {
    let bad = |why: String| StorageError::corrupted(file, Some(page_no), why);
    if page.len() < MIN_PAGE_SIZE {
        return Err(bad(format!("page is {} bytes, too short", page.len())));
    }
    if page[0..4] != PAGE_MAGIC {
        return Err(bad(format!(
            "bad magic {:02x?} (not an ooode page)",
            &page[0..4]
        )));
    }
    let version = u16::from_le_bytes([page[4], page[5]]);
    let stored_crc = u32::from_le_bytes([page[16], page[17], page[18], page[19]]);
    let crc = if checksum { page_crc(page) } else { stored_crc };
    if crc != stored_crc {
        return Err(bad(format!(
            "checksum mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"
        )));
    }
    // Checked after the checksum so a flipped version byte reads as damage, and a clean page of
    // another version as a version problem.
    if version != FORMAT_VERSION {
        return Err(StorageError::FormatVersion {
            file: file.to_path_buf(),
            page: Some(page_no),
            found: version as u32,
            expected: FORMAT_VERSION as u32,
        });
    }
    let stored_no = u64::from_le_bytes(page[8..16].try_into().expect("8 bytes"));
    if stored_no != page_no {
        return Err(bad(format!("page header says page {stored_no}")));
    }
    let kind =
        PageKind::from_u8(page[6]).ok_or_else(|| bad(format!("unknown kind {}", page[6])))?;
    if !expected.contains(&kind) {
        return Err(bad(format!("expected a {expected:?} page, found {kind:?}")));
    }
    Ok(kind)
}

/// A zeroed, page-aligned, owned byte buffer (suitable for O_DIRECT reads and writes).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    origin: Origin,
}

/// Where an [`AlignedBuf`]'s bytes come from.
enum Origin {
    /// Its own allocation, freed on drop.
    Alloc,
    /// A slice of a larger region kept alive by `owner` (an I/O engine's registered memory);
    /// `region` numbers that region for the kernel.
    Region {
        region: u32,
        _owner: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    },
}

// SAFETY: AlignedBuf owns its bytes exclusively, like a Vec<u8> (a region's slice is handed
// to one buffer only, see `from_region`).
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8]; mutation needs &mut self.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to [`PAGE_ALIGN`]. `len` must be non-zero.
    pub fn zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout has non-zero size (asserted in `layout`).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self {
            ptr,
            len,
            origin: Origin::Alloc,
        }
    }

    /// A buffer of the `len` bytes at `ptr`, inside region `region` of memory `owner` keeps.
    ///
    /// # Safety
    /// The bytes must be initialized, aligned to [`PAGE_ALIGN`], stay valid while `owner`
    /// lives, and belong to no other buffer while this one lives.
    pub unsafe fn from_region(
        ptr: NonNull<u8>,
        len: usize,
        region: u32,
        owner: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        Self {
            ptr,
            len,
            origin: Origin::Region {
                region,
                _owner: owner,
            },
        }
    }

    /// The region this buffer is a slice of, if it is one (see [`AlignedBuf::from_region`]).
    pub fn region(&self) -> Option<u32> {
        match self.origin {
            Origin::Alloc => None,
            Origin::Region { region, .. } => Some(region),
        }
    }

    /// The region this buffer is a slice of, if `owner` is the memory that holds it.
    pub fn region_of<T: std::any::Any + Send + Sync>(
        &self,
        owner: &std::sync::Arc<T>,
    ) -> Option<u32> {
        match &self.origin {
            Origin::Region { region, _owner }
                if std::ptr::addr_eq(
                    std::sync::Arc::as_ptr(_owner),
                    std::sync::Arc::as_ptr(owner),
                ) =>
            {
                Some(*region)
            }
            _ => None,
        }
    }

    fn layout(len: usize) -> Layout {
        assert!(len > 0, "AlignedBuf of zero length");
        Layout::from_size_align(len, PAGE_ALIGN).expect("page buffer layout")
    }

    /// Raw pointer for handing the buffer to the kernel.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to `len` initialized bytes (zeroed at allocation, or a region's,
        // see `from_region`) owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Origin::Alloc = self.origin {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// Asks the CPU to bring the first `max_lines` cache lines of `bytes` into its cache, without
/// waiting for them (several misses then overlap, where reading would take them one by one).
pub fn prefetch(bytes: &[u8], max_lines: usize) {
    for line in bytes.chunks(64).take(max_lines) {
        prefetch_at(line.as_ptr());
    }
}

/// Asks the CPU to bring the line at `at` into its cache: a hint, which reads nothing into
/// the program and cannot fault, whatever the address.
pub fn prefetch_at(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch never dereferences its address for the program and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Little-endian readers that return None instead of panicking past the end.
pub(crate) fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
pub(crate) fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
pub(crate) fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_verify_and_detect_flips() {
        let mut page = AlignedBuf::zeroed(DEFAULT_PAGE_SIZE);
        page[100] = 42;
        seal_page(&mut page, PageKind::Heap, 7);
        let f = Path::new("t/heap.0.pages");
        assert_eq!(
            verify_page(&page, 7, &[PageKind::Heap], f).unwrap(),
            PageKind::Heap
        );
        assert!(verify_page(&page, 8, &[PageKind::Heap], f).is_err());
        assert!(verify_page(&page, 7, &[PageKind::IndexLeaf], f).is_err());
        for pos in [0, 5, 9, 17, 100, DEFAULT_PAGE_SIZE - 1] {
            let mut copy = page.to_vec();
            copy[pos] ^= 0x10;
            let err = verify_page(&copy, 7, &[PageKind::Heap], f).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains("heap.0.pages") && msg.contains("page 7"),
                "{msg}"
            );
        }
    }

    #[test]
    fn page_sizes() {
        assert_eq!(parse_page_size("8KiB").unwrap(), 8192);
        assert_eq!(parse_page_size("64k").unwrap(), 65536);
        assert_eq!(parse_page_size("4096").unwrap(), 4096);
        assert!(parse_page_size("3KiB").is_err());
        assert!(parse_page_size("128KiB").is_err());
        assert!(parse_page_size("lots").is_err());
        let b = AlignedBuf::zeroed(8192);
        assert_eq!(b.as_ptr() as usize % PAGE_ALIGN, 0);
    }
}
