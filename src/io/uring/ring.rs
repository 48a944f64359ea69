//! The ring: reads are submitted by the tasks that ask for them; one completion thread waits
//! for the kernel and hands each finished page to its waiting task.
//!
//! ```text
//!   task: read() ──lock──> tracker.insert(op) + push SQE ──unlock──> io_uring_enter(submit)
//!          (at the in-flight limit the op waits in `overflow` instead)
//!                                                                     │ kernel
//!   completion thread: io_uring_enter(wait for 1) <──────────────────┘
//!          ──lock──> take finished ops from the tracker, move overflow into the SQ ──unlock──>
//!          send each page on its oneshot ──> the waiting task wakes
//! ```
//!
//! The tracker owns each read's buffer and file from submission to completion, so a reader
//! that gives up (drops its future) cannot free memory the kernel still writes to: the
//! completion finds the reply channel closed and the buffer goes back to the recycler.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use io_uring::{IoUring, opcode, squeue, types};
use parking_lot::Mutex;

use super::request::{InFlight, ReadOp};
use crate::io::buf::{PageBuf, Recycler};
use crate::io::files::{FileTable, short_read};
use crate::io::metrics::IoMetrics;
use crate::storage::StorageError;

/// `IORING_ENTER_GETEVENTS` of io_uring_enter(2): wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1;
/// user_data of the no-op that wakes the completion thread.
const WAKE_TOKEN: u64 = u64::MAX;

/// Reads handed to the kernel, and reads waiting for room.
#[derive(Debug, Default)]
pub struct Tracker {
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
    overflow: VecDeque<ReadOp>,
}

/// State shared by the engine handle, the reading tasks and the completion thread.
pub struct Shared {
    /// The ring. Submissions happen under `tracker`'s lock; only the completion thread reads
    /// the completion queue.
    pub ring: IoUring,
    /// In-flight reads and the overflow queue; also serializes pushes to the submission queue.
    pub tracker: Mutex<Tracker>,
    /// Most reads in flight.
    pub max_in_flight: usize,
    /// Use registered files (cleared if the kernel refuses an update).
    pub use_fixed: AtomicBool,
    /// Set when the engine is dropped.
    pub shutdown: AtomicBool,
    /// Entries pushed to the submission queue that no io_uring_enter has taken yet.
    pub unsubmitted: AtomicBool,
    /// Engine counters.
    pub metrics: Arc<IoMetrics>,
    /// Paths for error messages.
    pub files: Arc<FileTable>,
    /// Where buffers of cancelled or failed reads go.
    pub recycler: Arc<Recycler>,
}

impl Shared {
    /// Pushes `op` to the submission queue, or queues it when the in-flight limit is reached.
    /// The kernel sees it at the next [`Shared::flush`]: reads pushed by tasks that run in the
    /// same scheduler round share one io_uring_enter.
    pub fn submit(&self, op: ReadOp) {
        let mut t = self.tracker.lock();
        if t.in_flight >= self.max_in_flight || !t.overflow.is_empty() {
            t.overflow.push_back(op);
            return;
        }
        self.push(&mut t, op);
        self.unsubmitted.store(true, SeqCst);
    }

    /// Hands every pushed entry to the kernel, unless another caller already did.
    pub fn flush(&self) {
        if self.unsubmitted.swap(false, SeqCst) {
            self.enter_submit();
        }
    }

    /// Hands pushed entries to the kernel.
    fn enter_submit(&self) {
        if let Err(e) = self.ring.submit()
            && !matches!(
                e.raw_os_error(),
                Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
            )
        {
            eprintln!("ooode: io_uring submit failed: {e}");
        }
    }

    /// Records `op` as in flight and pushes its SQE. Caller holds the tracker lock.
    fn push(&self, t: &mut Tracker, mut op: ReadOp) {
        let len = op.buf.len() as u32;
        let ptr = op.buf.as_mut_ptr();
        let read = if self.use_fixed.load(SeqCst) {
            opcode::Read::new(types::Fixed(op.file.0), ptr, len)
        } else {
            opcode::Read::new(types::Fd(op.fd.as_raw_fd()), ptr, len)
        };
        let entry = read.offset(op.offset).build();
        let guard = self.metrics.start_read();
        let idx = t.free.pop().unwrap_or_else(|| {
            t.slots.push(None);
            t.slots.len() - 1
        });
        t.slots[idx] = Some(InFlight { op, guard });
        t.in_flight += 1;
        self.push_entry(&entry.user_data(idx as u64));
    }

    /// Pushes one SQE. Caller holds the tracker lock.
    fn push_entry(&self, entry: &squeue::Entry) {
        loop {
            // SAFETY: the tracker lock is held, so no other submission queue is in use; the
            // entry's buffer and file are owned by the tracker until its completion is reaped,
            // so the kernel never writes to freed memory or reads a closed descriptor.
            let pushed = unsafe { self.ring.submission_shared().push(entry) };
            if pushed.is_ok() {
                return;
            }
            // Queue full: let the kernel take what is there.
            self.enter_submit();
        }
    }

    /// Wakes the completion thread (a no-op completes at once).
    pub fn wake(&self) {
        {
            let _t = self.tracker.lock();
            self.push_entry(&opcode::Nop::new().build().user_data(WAKE_TOKEN));
        }
        self.enter_submit();
    }
}

/// The completion thread: runs until shutdown and every read has completed.
pub fn run(shared: Arc<Shared>) {
    let mut done: Vec<(ReadOp, i32)> = Vec::new();
    loop {
        {
            let t = shared.tracker.lock();
            if shared.shutdown.load(SeqCst) && t.in_flight == 0 && t.overflow.is_empty() {
                break;
            }
        }
        // SAFETY: plain io_uring_enter with no argument struct: wait for one completion.
        let waited = unsafe {
            shared
                .ring
                .submitter()
                .enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None)
        };
        if let Err(e) = waited
            && e.raw_os_error() != Some(libc::EINTR)
        {
            eprintln!("ooode: io_uring wait failed: {e}");
        }
        let mut pushed = false;
        {
            let mut t = shared.tracker.lock();
            // SAFETY: this thread is the only one that touches the completion queue.
            for cqe in unsafe { shared.ring.completion_shared() } {
                let token = cqe.user_data();
                if token == WAKE_TOKEN {
                    continue;
                }
                if let Some(InFlight { op, guard }) =
                    t.slots.get_mut(token as usize).and_then(Option::take)
                {
                    t.free.push(token as usize);
                    t.in_flight -= 1;
                    // Counted out here, under the lock, so the counters never show more reads
                    // in flight than the limit.
                    let len = op.buf.len();
                    let ok = cqe.result() >= 0 && cqe.result() as usize >= len;
                    guard.finish(ok.then_some(len));
                    done.push((op, cqe.result()));
                }
            }
            while t.in_flight < shared.max_in_flight {
                let Some(op) = t.overflow.pop_front() else {
                    break;
                };
                shared.push(&mut t, op);
                pushed = true;
            }
        }
        if pushed {
            shared.enter_submit();
        }
        for (op, result) in done.drain(..) {
            complete(op, result, &shared);
        }
    }
}
fn complete(op: ReadOp, result: i32, shared: &Shared) {
    let ReadOp {
        file,
        offset,
        buf,
        reply,
        ..
    } = op;
    let len = buf.len();
    let outcome = if result < 0 {
        shared.recycler.put(buf);
        Err(StorageError::io(
            shared.files.path(file),
            format!("read {len} bytes at offset {offset}"),
            std::io::Error::from_raw_os_error(-result),
        ))
    } else if (result as usize) < len {
        shared.recycler.put(buf);
        Err(short_read(
            &shared.files.path(file),
            offset,
            len,
            result as usize,
        ))
    } else {
        Ok(PageBuf::new(buf, Some(shared.recycler.clone())))
    };
    // A closed receiver is a cancelled read: the buffer is recycled by dropping the result.
    let _ = reply.send(outcome);
}
