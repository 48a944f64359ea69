//! What travels from a reading task to the ring thread, and back.

use std::fs::File;
use std::sync::Arc;

use futures::channel::oneshot;

use crate::io::FileId;
use crate::io::buf::PageBuf;
use crate::io::metrics::ReadGuard;
use crate::storage::Result;
use crate::storage::page::AlignedBuf;

/// A read waiting for, or in, the ring.
#[derive(Debug)]
pub struct ReadOp {
    /// File to read.
    pub file: FileId,
    /// The open file (kept alive while the read is in flight).
    pub fd: Arc<File>,
    /// Byte offset.
    pub offset: u64,
    /// The buffer the kernel writes into: owned here, not by the waiting future.
    pub buf: AlignedBuf,
    /// Where the result goes; a dropped receiver means the reader gave up (cancelled).
    pub reply: oneshot::Sender<Result<PageBuf>>,
}

/// A read the kernel is working on.
#[derive(Debug)]
pub struct InFlight {
    /// The request.
    pub op: ReadOp,
    /// Counts the read as in flight until dropped.
    pub guard: ReadGuard,
}
