//! Page buffers: aligned, owned by whoever holds them, recycled when the last holder lets go.
//!
//! An engine takes an [`AlignedBuf`] from the [`Recycler`], lends it to the kernel for the read
//! (the engine, not the waiting future, owns it until the kernel is done), and hands the filled
//! buffer out as a [`PageBuf`]. Clones of a `PageBuf` share the bytes (the buffer pool keeps one,
//! readers hold others); when the last one drops, the buffer goes back to the recycler.

use std::ops::Deref;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::page::AlignedBuf;

/// Keeps freed page buffers for reuse, per buffer size, up to a bound.
#[derive(Debug)]
pub struct Recycler {
    free: Mutex<Vec<AlignedBuf>>,
    keep: usize,
}

impl Recycler {
    /// A recycler keeping at most `keep` free buffers.
    pub fn new(keep: usize) -> Arc<Self> {
        Arc::new(Self {
            free: Mutex::new(Vec::new()),
            keep,
        })
    }

    /// A buffer of `len` bytes (contents unspecified).
    pub fn get(&self, len: usize) -> AlignedBuf {
        let mut free = self.free.lock();
        if let Some(i) = free.iter().rposition(|b| b.len() == len) {
            return free.swap_remove(i);
        }
        drop(free);
        AlignedBuf::zeroed(len)
    }

    /// Returns a buffer for reuse.
    pub fn put(&self, buf: AlignedBuf) {
        let mut free = self.free.lock();
        if free.len() < self.keep {
            free.push(buf);
        }
    }
}

#[derive(Debug)]
struct Inner {
    buf: Option<AlignedBuf>,
    recycler: Option<Arc<Recycler>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let (Some(buf), Some(r)) = (self.buf.take(), &self.recycler) {
            r.put(buf);
        }
    }
}

/// The bytes of one page read, shared and immutable.
#[derive(Debug, Clone)]
pub struct PageBuf(Arc<Inner>);

impl PageBuf {
    /// Wraps a filled buffer; it returns to `recycler` (if any) when the last clone drops.
    pub fn new(buf: AlignedBuf, recycler: Option<Arc<Recycler>>) -> Self {
        Self(Arc::new(Inner {
            buf: Some(buf),
            recycler,
        }))
    }

    /// Number of holders of these bytes.
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.buf.as_deref().unwrap_or(&[])
    }
}
