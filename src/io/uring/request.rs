//! One read travelling through a ring: built by the reading task, owned by the ring while the
//! kernel works on it, completed by the ring's completion thread.

use futures::channel::oneshot;

use crate::io::FileId;
use crate::io::buf::PageBuf;
use crate::io::metrics::ReadGuard;
use crate::storage::Result;
use crate::storage::page::AlignedBuf;

/// A read handed to the kernel. Boxed, and its address is the completion's `user_data`: the
/// completion thread takes the box back, so no table of reads (and no lock on one) is needed.
#[derive(Debug)]
pub struct ReadOp {
    /// File read (for error messages).
    pub file: FileId,
    /// Byte offset.
    pub offset: u64,
    /// The buffer the kernel writes into: owned here, not by the waiting future, so a reader
    /// that gives up cannot free memory the kernel still writes to.
    pub buf: AlignedBuf,
    /// Where the result goes; a dropped receiver means the reader gave up (cancelled).
    pub reply: oneshot::Sender<Result<PageBuf>>,
    /// Counts the read as in flight in the engine's counters until the completion.
    pub guard: ReadGuard,
    /// Whether the read holds a place in the engine's device queue ([`super::queue`]).
    pub counted: bool,
}
