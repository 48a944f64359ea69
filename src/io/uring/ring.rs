//! The ring thread: owns the io_uring instance, submits queued reads, reaps completions.
//!
//! ```text
//!            tasks                      ring thread
//!   read() ──push──> queue ──drain (up to max in flight)──> SQ ──> kernel
//!          └─ eventfd write if the ring thread sleeps        │
//!   future <── oneshot ── complete <── CQ <──────────────────┘
//! ```
//!
//! The thread sleeps in `submit_and_wait(1)`. A read of an eventfd is always armed in the ring,
//! so a task that queues work while the thread sleeps wakes it by writing the eventfd; the
//! thread announces it is about to sleep (`sleeping`) and checks the queue once more before
//! sleeping, so no wake-up is lost.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use io_uring::{IoUring, opcode, types};
use parking_lot::Mutex;

use super::request::{Command, InFlight, ReadOp};
use crate::io::buf::{PageBuf, Recycler};
use crate::io::files::{FileTable, short_read};
use crate::io::metrics::IoMetrics;
use crate::storage::StorageError;

const EVENTFD_TOKEN: u64 = u64::MAX;

/// State shared by the engine handle and the ring thread.
#[derive(Debug)]
pub struct Shared {
    /// Commands not yet taken by the ring thread.
    pub queue: Mutex<VecDeque<Command>>,
    /// The ring thread is (about to be) asleep in the kernel.
    pub sleeping: AtomicBool,
    /// Set when the engine is dropped.
    pub shutdown: AtomicBool,
    /// Wakes the ring thread.
    pub eventfd: std::os::fd::OwnedFd,
    /// Engine counters.
    pub metrics: Arc<IoMetrics>,
    /// Paths for error messages.
    pub files: Arc<FileTable>,
    /// Where buffers of cancelled or failed reads go.
    pub recycler: Arc<Recycler>,
}

impl Shared {
    /// Queues a command and wakes the ring thread if it sleeps.
    pub fn submit(&self, cmd: Command) {
        self.queue.lock().push_back(cmd);
        if self.sleeping.load(SeqCst) {
            self.wake();
        }
    }

    /// Wakes the ring thread.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

/// Reads the ring thread is tracking.
struct Tracker {
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
    efd_armed: bool,
}

impl Tracker {
    fn insert(&mut self, read: InFlight) -> usize {
        let idx = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[idx] = Some(read);
        self.in_flight += 1;
        idx
    }

    fn reap(&mut self, ring: &mut IoUring, shared: &Shared) {
        for cqe in ring.completion() {
            let token = cqe.user_data();
            if token == EVENTFD_TOKEN {
                self.efd_armed = false;
                continue;
            }
            let Some(done) = self.slots.get_mut(token as usize).and_then(Option::take) else {
                continue;
            };
            self.free.push(token as usize);
            self.in_flight -= 1;
            complete(done, cqe.result(), shared);
        }
    }
}

/// Runs the ring until shutdown and every in-flight read has completed.
pub fn run(mut ring: IoUring, shared: Arc<Shared>, max_in_flight: usize, fixed_files: bool) {
    let mut t = Tracker {
        slots: Vec::new(),
        free: Vec::new(),
        in_flight: 0,
        efd_armed: false,
    };
    let mut efd_buf = Box::new(0u64);
    let mut use_fixed = fixed_files;
    loop {
        if !t.efd_armed && !shared.shutdown.load(SeqCst) {
            let sqe = opcode::Read::new(
                types::Fd(shared.eventfd.as_raw_fd()),
                (&mut *efd_buf as *mut u64).cast(),
                8,
            )
            .build()
            .user_data(EVENTFD_TOKEN);
            // SAFETY: efd_buf is boxed and outlives the read: before returning, the loop
            // below completes an armed eventfd read (by writing the eventfd) and reaps it.
            if unsafe { ring.submission().push(&sqe) }.is_ok() {
                t.efd_armed = true;
            }
        }
        // Move queued commands into the submission queue.
        let mut queue = shared.queue.lock();
        while t.in_flight < max_in_flight {
            let Some(cmd) = queue.pop_front() else { break };
            match cmd {
                Command::Register { slot, fd } => {
                    if use_fixed && ring.submitter().register_files_update(slot, &[fd]).is_err() {
                        // Old kernel or exhausted table: plain descriptors work everywhere.
                        use_fixed = false;
                    }
                }
                Command::PlainDescriptors => use_fixed = false,
                Command::Read(mut op) => {
                    let len = op.buf.len() as u32;
                    let ptr = op.buf.as_mut_ptr();
                    let read = if use_fixed {
                        opcode::Read::new(types::Fixed(op.file.0), ptr, len)
                    } else {
                        opcode::Read::new(types::Fd(op.fd.as_raw_fd()), ptr, len)
                    };
                    let guard = shared.metrics.start_read();
                    let offset = op.offset;
                    let idx = t.insert(InFlight { op, guard });
                    let entry = read.offset(offset).build().user_data(idx as u64);
                    // SAFETY: the buffer and the file stay in the tracker (owned by this
                    // thread) until the completion for `idx` is reaped, so the kernel never
                    // writes to freed memory or reads a closed descriptor.
                    while unsafe { ring.submission().push(&entry) }.is_err() {
                        // Submission queue full: hand what is there to the kernel.
                        drop(ring.submit());
                    }
                }
            }
        }
        drop(queue);
        if shared.shutdown.load(SeqCst) && t.in_flight == 0 && shared.queue.lock().is_empty() {
            break;
        }
        shared.sleeping.store(true, SeqCst);
        // Checked after announcing sleep: a command queued before this point is seen here,
        // one queued after it finds `sleeping` set and writes the eventfd.
        let more = {
            let q = shared.queue.lock();
            !q.is_empty() && t.in_flight < max_in_flight
        };
        let stopping = shared.shutdown.load(SeqCst) && t.in_flight == 0;
        let wait = if more || stopping { 0 } else { 1 };
        if let Err(e) = ring.submit_and_wait(wait)
            && e.raw_os_error() != Some(libc::EINTR)
        {
            eprintln!("ooode: io_uring submit failed: {e}");
        }
        shared.sleeping.store(false, SeqCst);
        t.reap(&mut ring, &shared);
    }
    // The eventfd read must not outlive efd_buf: complete it and reap it.
    while t.efd_armed {
        shared.wake();
        if ring.submit_and_wait(1).is_err() {
            break;
        }
        t.reap(&mut ring, &shared);
    }
    if t.efd_armed {
        // The ring failed while a read into efd_buf may be pending: never free it.
        std::mem::forget(efd_buf);
    }
}

fn complete(done: InFlight, result: i32, shared: &Shared) {
    let InFlight { op, guard } = done;
    let ReadOp {
        file,
        offset,
        buf,
        reply,
        ..
    } = op;
    let len = buf.len();
    let outcome = if result < 0 {
        guard.finish(None);
        shared.recycler.put(buf);
        Err(StorageError::io(
            shared.files.path(file),
            format!("read {len} bytes at offset {offset}"),
            std::io::Error::from_raw_os_error(-result),
        ))
    } else if (result as usize) < len {
        guard.finish(None);
        shared.recycler.put(buf);
        Err(short_read(
            &shared.files.path(file),
            offset,
            len,
            result as usize,
        ))
    } else {
        guard.finish(Some(len));
        Ok(PageBuf::new(buf, Some(shared.recycler.clone())))
    };
    // A closed receiver is a cancelled read: the buffer is recycled by dropping the result.
    let _ = reply.send(outcome);
}
