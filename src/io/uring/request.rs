//! One read travelling through a ring: built by the reading task, owned by the ring while the
//! kernel works on it, completed by whoever takes the ring's completions.

use std::sync::Arc;

use futures::channel::oneshot;

use crate::io::buf::PageBuf;
use crate::io::metrics::ReadGuard;
use crate::io::{FileId, ReadSink};
use crate::storage::page::AlignedBuf;
use crate::storage::{Result, StorageError};

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
    /// Where the result goes.
    pub reply: Reply,
    /// Counts the read as in flight in the engine's counters until the completion.
    pub guard: ReadGuard,
    /// Whether the read holds a place in the engine's device queue ([`super::queue`]).
    pub counted: bool,
}

/// Where a read's result goes.
pub enum Reply {
    /// To a read future; a dropped receiver means the reader gave up (cancelled).
    Future(oneshot::Sender<Result<PageBuf>>),
    /// To a sink, with the read's token (see [`crate::io::IoEngine::start_read`]).
    Sink(SinkReply),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Future(_) => f.write_str("Reply::Future"),
            Self::Sink(s) => write!(f, "Reply::Sink({})", s.token),
        }
    }
}

impl Reply {
    /// Whether nobody waits for the result any more.
    pub fn is_canceled(&self) -> bool {
        match self {
            Self::Future(tx) => tx.is_canceled(),
            // A sink hears every read it started.
            Self::Sink(_) => false,
        }
    }

    /// Hands over the read's outcome, taken at `ended`.
    pub fn send(self, outcome: Result<PageBuf>, ended: std::time::Instant) {
        match self {
            // A closed receiver is a cancelled read: dropping the result recycles the buffer.
            Self::Future(tx) => drop(tx.send(outcome)),
            Self::Sink(mut reply) => {
                if let Some(sink) = reply.sink.take() {
                    sink.complete(reply.token, outcome, ended);
                }
            }
        }
    }
}

/// A sink's read. Dropped without an outcome (its engine stopped first), it tells the sink
/// so: a sink's reader waits for every read it started.
pub struct SinkReply {
    sink: Option<Arc<dyn ReadSink>>,
    token: u64,
}

impl SinkReply {
    /// The read `token` of `sink`.
    pub fn new(sink: Arc<dyn ReadSink>, token: u64) -> Self {
        Self {
            sink: Some(sink),
            token,
        }
    }
}

impl Drop for SinkReply {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            let stopped = std::io::Error::other("the io_uring engine stopped");
            sink.complete(
                self.token,
                Err(StorageError::io(std::path::PathBuf::new(), "read", stopped)),
                std::time::Instant::now(),
            );
        }
    }
}
