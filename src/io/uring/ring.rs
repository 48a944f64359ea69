//! One ring: reads are pushed by the tasks that want them; one completion thread per ring
//! waits for the kernel and hands each finished page to its waiting task.
//!
//! ```text
//!   task (first poll of its read): take a slot (in_flight < capacity, else wait for one)
//!        ──lock sq──> push SQE(user_data = boxed ReadOp) ──unlock──>
//!        inside a batch: mark the ring; the batch's end enters the kernel once
//!        otherwise:      io_uring_enter(submit) now
//!                                                                     │ kernel
//!   reaper (a task on the reactor, or a thread): woken by the kernel <─┘
//!        for each CQE: take back the ReadOp box, free its slot, send the page on its
//!        oneshot ──> the waiting task wakes
//! ```
//!
//! The only lock on the submission side is the queue's, held for the push of one entry; a ring
//! belongs to the threads that hash to it (one per core by default), so it is rarely
//! contended. Completions are taken by one reaper at a time ([`super::reap`]).

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst,
};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use io_uring::{IoUring, opcode, squeue, types};
use parking_lot::Mutex;

use super::queue::DeviceQueue;
use super::request::ReadOp;
use crate::io::arena::{Arena, MAX_REGIONS};
use crate::io::batch::Submit;
use crate::io::buf::{PageBuf, Recycler};
use crate::io::files::{FileTable, short_read};
use crate::io::priority::take_below;
use crate::storage::StorageError;

/// `IORING_ENTER_GETEVENTS` of io_uring_enter(2): wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1;
/// user_data of the no-op that wakes the completion thread.
const WAKE_TOKEN: u64 = u64::MAX;

/// A ring and what its reads share.
pub struct Ring {
    uring: IoUring,
    /// Serializes pushes to the submission queue.
    sq: Mutex<()>,
    /// Most reads in flight on this ring.
    capacity: usize,
    in_flight: AtomicUsize,
    /// Readers waiting for a slot (only when `capacity` reads are in flight).
    slot_waiters: Mutex<Vec<Waker>>,
    has_slot_waiters: AtomicBool,
    /// Entries pushed that no io_uring_enter has taken yet.
    unsubmitted: AtomicBool,
    /// Use registered files (shared by the engine's rings; cleared if the kernel refuses).
    pub use_fixed: Arc<AtomicBool>,
    shutdown: AtomicBool,
    files: Arc<FileTable>,
    recycler: Arc<Recycler>,
    /// Held while the completion queue is read (by the reactor task or a thread); it holds
    /// the reads taken from it, a list kept from one reaping to the next (not one made each
    /// time: a reaping takes a read or two, mostly).
    cq: Mutex<Vec<(Box<ReadOp>, i32)>>,
    /// Signalled by the kernel on every completion, when registered ([`Ring::register_eventfd`]).
    eventfd: Option<std::os::fd::OwnedFd>,
    /// The engine's queue for the device (shared by its rings): told of every completion.
    device: Arc<DeviceQueue>,
    /// The recycler's arena regions this ring has registered (fixed buffers), if any.
    buffers: Option<RegisteredRegions>,
    /// Set up with `IORING_SETUP_COOP_TASKRUN` (see [`super::UringConfig::coop_taskrun`]).
    coop_taskrun: bool,
}

/// The arena regions a ring has registered with the kernel: `0..count`, growing as reads
/// come in buffers of new regions.
#[derive(Debug, Default)]
struct RegisteredRegions {
    count: AtomicU32,
    /// Serializes registrations; true once the kernel refused one (no more are tried).
    refused: Mutex<bool>,
    /// Reads sent into a registered buffer.
    reads: AtomicU64,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity)
            .field("in_flight", &self.in_flight.load(SeqCst))
            .finish_non_exhaustive()
    }
}

/// Where a read goes: a registered file's slot, or a plain descriptor.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// Index in the ring's registered file table.
    Fixed(u32),
    /// Open descriptor (owned by the engine's file table for the engine's lifetime).
    Fd(RawFd),
}

impl Ring {
    /// A ring of `entries` submission slots keeping at most `capacity` reads in flight.
    pub fn new(
        entries: u32,
        config: &super::UringConfig,
        capacity: usize,
        use_fixed: Arc<AtomicBool>,
        files: Arc<FileTable>,
        recycler: Arc<Recycler>,
        device: Arc<DeviceQueue>,
    ) -> std::io::Result<Self> {
        let cq = (capacity as u32).next_power_of_two().clamp(entries, 65536) * 2;
        let mut builder = IoUring::builder();
        builder.setup_cqsize(cq);
        if let Some(idle) = config.sqpoll_idle_ms {
            builder.setup_sqpoll(idle);
        }
        if config.iopoll {
            builder.setup_iopoll();
        }
        let coop = config
            .coop_taskrun
            .then(|| builder.clone().setup_coop_taskrun().build(entries))
            .and_then(|built| {
                built
                    .inspect_err(|e| log::debug!("ooode: io_uring refused COOP_TASKRUN: {e}"))
                    .ok()
            });
        let coop_taskrun = coop.is_some();
        let uring = match coop {
            Some(uring) => uring,
            None => builder.build(entries)?,
        };
        // A sparse table the arena's regions are added to as they are allocated; where the
        // kernel refuses (before 5.19), reads use plain buffers.
        let buffers = (config.fixed_buffers && recycler.arena().is_some())
            .then(|| {
                uring
                    .submitter()
                    .register_buffers_sparse(MAX_REGIONS as u32)
            })
            .and_then(|r| r.ok())
            .map(|()| RegisteredRegions::default());
        Ok(Self {
            uring,
            sq: Mutex::new(()),
            capacity,
            in_flight: AtomicUsize::new(0),
            slot_waiters: Mutex::new(Vec::new()),
            has_slot_waiters: AtomicBool::new(false),
            unsubmitted: AtomicBool::new(false),
            use_fixed,
            shutdown: AtomicBool::new(false),
            files,
            recycler,
            cq: Mutex::new(Vec::new()),
            eventfd: None,
            device,
            buffers,
            coop_taskrun,
        })
    }

    /// Whether arena region `region` is registered with this ring, registering it (and the
    /// regions before it) first if need be; false where the kernel refuses (for instance
    /// over the locked-memory limit), and from then on.
    fn registered(&self, arena: &Arena, region: u32) -> bool {
        let Some(regs) = &self.buffers else {
            return false;
        };
        if region < regs.count.load(Relaxed) {
            return true;
        }
        let mut refused = regs.refused.lock();
        let from = regs.count.load(Relaxed);
        if *refused || region >= MAX_REGIONS as u32 {
            return false;
        }
        if region < from {
            return true;
        }
        let Some(iovecs) = (from..=region)
            .map(|i| arena.region(i))
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        // SAFETY: the regions are allocations of the arena, which the ring's recycler keeps
        // alive for the ring's lifetime; the kernel pins their pages while registered.
        match unsafe {
            self.uring
                .submitter()
                .register_buffers_update(from, &iovecs, None)
        } {
            Ok(()) => {
                regs.count.store(region + 1, Relaxed);
                true
            }
            Err(e) => {
                log::debug!("ooode: io_uring refused registered buffers, reading without: {e}");
                *refused = true;
                false
            }
        }
    }

    /// Whether the ring was set up with `IORING_SETUP_COOP_TASKRUN`.
    pub fn coop_taskrun(&self) -> bool {
        self.coop_taskrun
    }

    /// Reads sent into registered buffers so far.
    pub fn fixed_buffer_reads(&self) -> u64 {
        self.buffers.as_ref().map_or(0, |r| r.reads.load(Relaxed))
    }

    /// Makes the kernel signal a new eventfd on every completion (so a reactor can wait for
    /// completions); false where that fails.
    pub fn register_eventfd(&mut self) -> bool {
        // SAFETY: eventfd has no preconditions; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        if self.uring.submitter().register_eventfd(fd).is_err() {
            return false;
        }
        self.eventfd = Some(owned);
        true
    }

    /// The registered eventfd, if any.
    pub fn eventfd(&self) -> Option<RawFd> {
        self.eventfd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd)
    }

    /// Waits in the kernel for at least one completion (for a completion thread).
    pub fn wait_for_completion(&self) {
        // SAFETY: plain io_uring_enter with no argument struct: wait for one completion.
        let waited = unsafe {
            self.uring
                .submitter()
                .enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None)
        };
        if let Err(e) = waited
            && e.raw_os_error() != Some(libc::EINTR)
        {
            log::error!("ooode: io_uring wait failed: {e}");
        }
    }

    /// Whether the engine is shutting down and every read has completed.
    pub fn finished(&self) -> bool {
        self.shutdown.load(SeqCst) && self.in_flight.load(SeqCst) == 0
    }

    /// Whether the engine is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(SeqCst)
    }

    /// Takes the completions the kernel has posted and hands each page to its reader;
    /// returns how many. With `wait` false it gives up at once if another reaper is at it.
    pub fn reap(&self, wait: bool) -> usize {
        let mut done = match wait {
            true => self.cq.lock(),
            false => match self.cq.try_lock() {
                Some(g) => g,
                None => return 0,
            },
        };
        // SAFETY: the `cq` lock is held: no one else reads the completion queue.
        for cqe in unsafe { self.uring.completion_shared() } {
            let token = cqe.user_data();
            if token == WAKE_TOKEN {
                continue;
            }
            // SAFETY: every other token is the address of a ReadOp box leaked by `push`,
            // completed exactly once.
            let op = unsafe { Box::from_raw(token as *mut ReadOp) };
            done.push((op, cqe.result()));
        }
        if done.is_empty() {
            return 0;
        }
        let n = done.len();
        // One clock read for the batch, after the kernel posted all of it (see `ReadSink`).
        let ended = Instant::now();
        let counted = done.iter().filter(|(op, _)| op.counted).count();
        if counted > 0 {
            // Queued reads go to the device before the finished ones' readers run.
            self.device.left(counted);
        }
        self.free_slots(n);
        for (op, result) in done.drain(..) {
            complete(*op, result, self, ended);
        }
        n
    }

    /// Registers a sparse table of `n` files; false where the kernel refuses.
    pub fn register_files(&self, n: u32) -> bool {
        self.uring.submitter().register_files_sparse(n).is_ok()
    }

    /// Puts `fd` in registered slot `slot`; false where the kernel refuses.
    pub fn register_file(&self, slot: u32, fd: RawFd) -> bool {
        self.uring
            .submitter()
            .register_files_update(slot, &[fd])
            .is_ok()
    }

    /// Takes a slot for one read, or registers the reader to be woken when one frees up.
    pub fn poll_slot(&self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.try_slot() {
                return Poll::Ready(());
            }
            let mut waiters = self.slot_waiters.lock();
            waiters.push(cx.waker().clone());
            self.has_slot_waiters.store(true, SeqCst);
            // A slot freed between the check and the registration is seen here.
            if self.in_flight.load(SeqCst) < self.capacity {
                continue;
            }
            return Poll::Pending;
        }
    }

    /// Takes a slot if one is free now.
    pub fn try_slot(&self) -> bool {
        take_below(&self.in_flight, self.capacity)
    }

    /// Gives back `n` slots and wakes the readers waiting for one.
    fn free_slots(&self, n: usize) {
        self.in_flight.fetch_sub(n, SeqCst);
        if self.has_slot_waiters.load(SeqCst) {
            let waiters = std::mem::take(&mut *self.slot_waiters.lock());
            self.has_slot_waiters.store(false, SeqCst);
            waiters.into_iter().for_each(Waker::wake);
        }
    }

    /// Drops `op` (holding a slot) without reading: its reader gave up before it was sent.
    pub fn discard(&self, op: ReadOp) {
        self.recycler.put(op.buf);
        self.free_slots(1);
    }

    /// Hands what was pushed to the kernel now (no reaping: the caller may be reaping).
    pub fn submit_now(&self) {
        if self.unsubmitted.swap(false, SeqCst) {
            self.enter_submit();
        }
    }

    /// Pushes `op` (holding a slot taken with [`Ring::poll_slot`]) into the submission queue.
    pub fn push(&self, target: Target, mut op: Box<ReadOp>) {
        let len = op.buf.len() as u32;
        let ptr = op.buf.as_mut_ptr();
        let offset = op.offset;
        // Only a buffer of this ring's own arena: another's region numbers other memory.
        let region = self
            .recycler
            .arena()
            .and_then(|arena| (op.buf.region_of(arena)).filter(|&r| self.registered(arena, r)));
        let entry = match (target, region) {
            (Target::Fixed(slot), None) => opcode::Read::new(types::Fixed(slot), ptr, len)
                .offset(offset)
                .build(),
            (Target::Fd(fd), None) => opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build(),
            (Target::Fixed(slot), Some(r)) => {
                opcode::ReadFixed::new(types::Fixed(slot), ptr, len, r as u16)
                    .offset(offset)
                    .build()
            }
            (Target::Fd(fd), Some(r)) => opcode::ReadFixed::new(types::Fd(fd), ptr, len, r as u16)
                .offset(offset)
                .build(),
        };
        if region.is_some()
            && let Some(regs) = &self.buffers
        {
            regs.reads.fetch_add(1, Relaxed);
        }
        let token = Box::into_raw(op) as u64;
        let entry = entry.user_data(token);
        let _sq = self.sq.lock();
        self.push_entry(&entry);
        self.unsubmitted.store(true, SeqCst);
    }

    /// Pushes one SQE. Caller holds the `sq` lock.
    fn push_entry(&self, entry: &squeue::Entry) {
        loop {
            // SAFETY: the `sq` lock is held, so no other submission queue handle is in use;
            // the entry's buffer is owned by its ReadOp box until its completion is reaped,
            // and its file stays open for the engine's lifetime, so the kernel never writes
            // to freed memory or reads a closed descriptor; a read into a registered buffer
            // names the registered region that holds the buffer.
            let pushed = unsafe { self.uring.submission_shared().push(entry) };
            if pushed.is_ok() {
                return;
            }
            // Queue full: let the kernel take what is there.
            self.enter_submit();
        }
    }

    /// Hands pushed entries to the kernel.
    fn enter_submit(&self) {
        if let Err(e) = self.uring.submit()
            && !matches!(
                e.raw_os_error(),
                Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
            )
        {
            log::error!("ooode: io_uring submit failed: {e}");
        }
    }

    /// Wakes the completion thread (a no-op completes at once).
    pub fn wake(&self) {
        {
            let _sq = self.sq.lock();
            self.push_entry(&opcode::Nop::new().build().user_data(WAKE_TOKEN));
        }
        self.enter_submit();
    }

    /// Asks the completion thread to end once every read has completed.
    pub fn shut_down(&self) {
        self.shutdown.store(true, SeqCst);
        self.wake();
    }

    /// The engine's open files.
    pub fn files(&self) -> &Arc<FileTable> {
        &self.files
    }

    /// Reads in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(SeqCst)
    }
}

impl Submit for Ring {
    fn submit_pushed(&self) {
        if self.unsubmitted.swap(false, SeqCst) {
            self.enter_submit();
            // Reads of pages in the OS cache complete inside the submitting call: taken here,
            // their readers (mostly the task submitting) run on without a trip through the
            // eventfd and the reaper. The eventfd still fires, so nothing is left behind if
            // another reaper holds the queue now.
            self.reap(false);
        }
    }
}

fn complete(op: ReadOp, result: i32, ring: &Ring, ended: Instant) {
    let ReadOp {
        file,
        offset,
        buf,
        reply,
        guard,
        counted: _,
    } = op;
    let len = buf.len();
    let ok = result >= 0 && result as usize >= len;
    guard.finish_at(ok.then_some(len), ended);
    let outcome = if result < 0 {
        ring.recycler.put(buf);
        Err(StorageError::io(
            ring.files.path(file),
            format!("read {len} bytes at offset {offset}"),
            std::io::Error::from_raw_os_error(-result),
        ))
    } else if (result as usize) < len {
        ring.recycler.put(buf);
        Err(short_read(
            &ring.files.path(file),
            offset,
            len,
            result as usize,
        ))
    } else {
        Ok(PageBuf::new(buf, Some(ring.recycler.clone())))
    };
    reply.send(outcome, ended);
}
