//! The io_uring engine: O_DIRECT reads at deep queues from any number of tasks, on one ring
//! per core.
//!
//! Design ([`ring`]): an engine has several rings (one per core by default); a read goes to
//! the ring of the CPU its thread runs on ([`choice`]), so threads running at the same time
//! (tokio workers, idle-lane threads) push into rings of their own and never wait for each
//! other's submissions. A read is pushed into its ring when its future is
//! first polled; inside a submission batch ([`crate::io::batch`], opened by the operators
//! around each poll of their read steps) the kernel is entered once for the whole batch,
//! otherwise at once. Completions are taken ([`reap`]) by a task on the tokio reactor of the
//! runtime the engine was made in (the kernel signals an eventfd; the worker parked in epoll
//! wakes and hands the pages to their readers on that same worker), or, outside tokio, by a
//! thread per ring; each read's state travels in its own box (its address is the
//! completion's token), not in a shared table.
//!
//! Bounds: a ring keeps at most `max_in_flight` reads in flight; a read that finds it full
//! waits (its future is pending until a completion frees a slot). Queries never get there:
//! their admission ([`crate::access`]) keeps the reads of all queries below it. Optionally
//! ([`UringConfig::device_queue_depth`]) fewer are sent to the device and the rest wait in
//! the engine's [`queue`], smaller queries' reads first.
//!
//! Tried and measured (`iobench`, random 8 KiB reads on this project's 2-core VM): see
//! README's Status (I/O engines). Files are registered with the ring (fixed files) where the kernel
//! allows it. Registered (fixed) buffers are an option ([`UringConfig::fixed_buffers`], off by
//! default, on in the runtime's engines): page buffers are then carved from the regions of the
//! recycler's [`crate::io::arena`], which the rings register, and stay there while the buffer
//! pool holds the page. They cut the kernel's CPU per read (`iobench`'s `uring regbuf` row;
//! README, Status: I/O engines).

pub mod choice;
pub mod queue;
pub mod reap;
pub mod request;
pub mod ring;

use std::future::Future;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed, Ordering::SeqCst};
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::channel::oneshot;

use self::choice::RingChoice;
use self::queue::{DeviceQueue, Queued};
use self::reap::Reaper;
use self::request::{ReadOp, Reply, SinkReply};
use self::ring::{Ring, Target};
use super::batch::{self, Submit};
use super::buf::{PageBuf, Recycler};
use super::files::FileTable;
use super::metrics::IoMetrics;
use super::priority::UNKNOWN_CLASS;
use super::read_log::ReadLog;
use super::{FileId, IoEngine, ReadFuture, ReadSink};
use crate::storage::{Result, StorageError};

/// Most files one engine registers with its rings.
const REGISTERED_FILES: u32 = 4096;

/// Settings of a [`UringEngine`].
#[derive(Debug, Clone)]
pub struct UringConfig {
    /// Most reads in flight per ring (default 4096; up to 32768).
    pub max_in_flight: usize,
    /// Open files with O_DIRECT (bypass the OS cache).
    pub direct: bool,
    /// Number of rings (0: one per core).
    pub rings: usize,
    /// Where freed page buffers go (None: a recycler of the engine's own).
    pub recycler: Option<Arc<Recycler>>,
    /// A kernel thread polls each ring's submission queue, sleeping after this many
    /// milliseconds idle (IORING_SETUP_SQPOLL); None: reads are submitted by system calls.
    pub sqpoll_idle_ms: Option<u32>,
    /// Completions are polled for, not interrupt-driven (IORING_SETUP_IOPOLL; the device must
    /// support polled I/O).
    pub iopoll: bool,
    /// Completions are taken by a task on the tokio reactor of the runtime the engine is made
    /// in (when there is one with an I/O driver), not by a thread per ring.
    pub reap_on_reactor: bool,
    /// Most reads at the device at once, over all rings; the others wait in the engine's
    /// queue, smaller size classes first ([`queue`]). 0: no limit of its own (nothing queued,
    /// nothing counted).
    pub device_queue_depth: usize,
    /// Read into buffers registered with the rings (the recycler's arena, see
    /// [`Recycler::with_arena`]), where the kernel allows it. Off by default (the runtime's
    /// engines turn it on, [`crate::io::default_engine`]).
    pub fixed_buffers: bool,
    /// The kernel posts a read's completion when the thread that submitted it next enters
    /// the kernel (or returns from an interrupt), instead of interrupting it at once
    /// (`IORING_SETUP_COOP_TASKRUN`, Linux 5.19; where refused, rings are set up without).
    /// On by default: the submitters are busy runtime threads that enter the kernel often,
    /// and each interruption is an inter-processor interrupt, a VM exit in a guest. Measured
    /// at 64 clients (SF 1, five pairs alternating): the device at 75-77 % of fio beside
    /// against 68-73 %, 155-167 queries/s against 144-161, 2.0-3.2 K rescheduling
    /// interrupts a second against 3.1-4.1 K.
    pub coop_taskrun: bool,
}

impl Default for UringConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 4096,
            direct: true,
            rings: 0,
            recycler: None,
            sqpoll_idle_ms: None,
            iopoll: false,
            reap_on_reactor: true,
            device_queue_depth: 0,
            fixed_buffers: false,
            coop_taskrun: true,
        }
    }
}

/// Page reads through io_uring.
pub struct UringEngine {
    rings: Box<[Arc<Ring>]>,
    choice: RingChoice,
    files: Arc<FileTable>,
    use_fixed: Arc<AtomicBool>,
    recycler: Arc<Recycler>,
    metrics: Arc<IoMetrics>,
    config: UringConfig,
    reapers: Vec<Arc<Reaper>>,
    device: Arc<DeviceQueue>,
    /// A record of the reads asked for, once one was started ([`IoEngine::record_reads`]).
    log: std::sync::OnceLock<ReadLog>,
}

impl std::fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringEngine")
            .field("config", &self.config)
            .field("rings", &self.rings.len())
            .finish_non_exhaustive()
    }
}

impl UringEngine {
    /// Where the kernel finds `file`: its registered slot, or its descriptor.
    fn target(&self, file: FileId) -> Option<Target> {
        match self.use_fixed.load(Relaxed) {
            true => Some(Target::Fixed(file.0)),
            false => self.files.file(file).map(|f| Target::Fd(f.as_raw_fd())),
        }
    }

    /// Sets up the rings and their completion threads; fails where io_uring is unavailable.
    pub fn new(config: UringConfig) -> std::io::Result<Self> {
        let max_in_flight = config.max_in_flight.clamp(1, 32768);
        let rings = match config.rings {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let entries = (max_in_flight as u32).next_power_of_two().clamp(8, 4096);
        let files = Arc::new(FileTable::default());
        let recycler = config.recycler.clone().unwrap_or_else(|| {
            let keep = crate::io::pool::default_budget();
            match config.fixed_buffers {
                true => Recycler::with_arena(keep),
                false => Recycler::new(keep),
            }
        });
        if config.fixed_buffers
            && let Some(arena) = recycler.arena()
        {
            // Asked for registered buffers: regions are made ready from the start.
            arena.make_ready();
        }
        let use_fixed = Arc::new(AtomicBool::new(true));
        let metrics = IoMetrics::new();
        let device = DeviceQueue::new(config.device_queue_depth, metrics.clone());
        let mut built = Vec::with_capacity(rings);
        for _ in 0..rings {
            let mut ring = Ring::new(
                entries,
                &config,
                max_in_flight,
                use_fixed.clone(),
                files.clone(),
                recycler.clone(),
                device.clone(),
            )?;
            if !ring.register_files(REGISTERED_FILES) {
                use_fixed.store(false, SeqCst);
            }
            if config.reap_on_reactor {
                // Without it the ring is reaped by a thread.
                ring.register_eventfd();
            }
            built.push(Arc::new(ring));
        }
        let mut reapers = Vec::with_capacity(rings);
        for (i, ring) in built.iter().enumerate() {
            match Reaper::start(ring, i, config.reap_on_reactor) {
                Ok(r) => reapers.push(r),
                Err(e) => {
                    // Stop the reapers already started before failing.
                    for (r, ring) in reapers.iter().zip(&built) {
                        ring.shut_down();
                        r.stop(ring);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Self {
            choice: RingChoice::new(built.len()),
            rings: built.into_boxed_slice(),
            files,
            use_fixed,
            recycler,
            metrics,
            device,
            config: UringConfig {
                max_in_flight,
                rings,
                ..config
            },
            reapers,
            log: std::sync::OnceLock::new(),
        })
    }

    /// Number of rings.
    pub fn rings(&self) -> usize {
        self.rings.len()
    }

    /// Reads sent into registered buffers so far, over all rings.
    pub fn fixed_buffer_reads(&self) -> u64 {
        self.rings.iter().map(|r| r.fixed_buffer_reads()).sum()
    }

    /// Whether every ring runs completion work cooperatively ([`UringConfig::coop_taskrun`]
    /// asked for and granted by the kernel).
    pub fn coop_taskrun(&self) -> bool {
        self.rings.iter().all(|r| r.coop_taskrun())
    }

    /// Whether completions are taken on the tokio reactor (else by threads).
    pub fn reaps_on_reactor(&self) -> bool {
        self.reapers.iter().all(|r| r.on_reactor())
    }

    /// The recycler freed page buffers go back to.
    pub fn recycler(&self) -> &Arc<Recycler> {
        &self.recycler
    }
}

impl IoEngine for UringEngine {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn open(&self, path: &Path) -> Result<FileId> {
        let (id, file, new) = self.files.open(path, self.config.direct)?;
        if new && self.use_fixed.load(SeqCst) {
            let registered = id.0 < REGISTERED_FILES
                && self
                    .rings
                    .iter()
                    .all(|r| r.register_file(id.0, file.as_raw_fd()));
            if !registered {
                // Table full or an old kernel: plain descriptors work everywhere.
                self.use_fixed.store(false, SeqCst);
            }
        }
        Ok(id)
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.files.path(file)
    }

    fn read(&self, file: FileId, offset: u64, len: usize) -> ReadFuture {
        self.read_in_class(file, offset, len, UNKNOWN_CLASS)
    }

    fn read_in_class(&self, file: FileId, offset: u64, len: usize, class: usize) -> ReadFuture {
        let Some(target) = self.target(file) else {
            let err = StorageError::InvalidArgument(format!("file id {} was not opened", file.0));
            return futures::future::ready(Err(err)).boxed();
        };
        if let Some(log) = self.log.get() {
            log.note(file, offset, len);
        }
        let ring = self.rings[self.choice.ring()].clone();
        Box::pin(UringRead {
            state: ReadState::Start {
                ring,
                target,
                file,
                offset,
                len,
                recycler: self.recycler.clone(),
                metrics: self.metrics.clone(),
                device: self.device.clone(),
                class,
            },
        })
    }

    fn starts_reads(&self) -> bool {
        true
    }

    fn start_read(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        class: usize,
        sink: &Arc<dyn ReadSink>,
        token: u64,
    ) -> bool {
        let Some(target) = self.target(file) else {
            return false;
        };
        let ring = &self.rings[self.choice.ring()];
        // A full ring: the caller reads through a future, which waits for a slot.
        if !ring.try_slot() {
            return false;
        }
        if let Some(log) = self.log.get() {
            log.note(file, offset, len);
        }
        let reply = Reply::Sink(SinkReply::new(sink.clone(), token));
        let issue = Issue {
            ring,
            target,
            recycler: &self.recycler,
            metrics: &self.metrics,
            device: &self.device,
            class,
        };
        // Not reaped here: a sink hears of a read only after this call returned.
        issue.send(file, offset, len, reply, false);
        true
    }

    fn metrics(&self) -> &Arc<IoMetrics> {
        &self.metrics
    }

    fn max_in_flight(&self) -> usize {
        self.config.max_in_flight
    }

    fn record_reads(&self, capacity: usize) -> bool {
        let log = self.log.get_or_init(|| ReadLog::new(capacity));
        if log.capacity() != capacity {
            // The log's size is set once; a different one is refused rather than half kept.
            return false;
        }
        log.restart();
        true
    }

    fn recorded_reads(&self) -> Vec<(PathBuf, u64, usize)> {
        let Some(log) = self.log.get() else {
            return Vec::new();
        };
        log.stop();
        let mut paths = std::collections::HashMap::new();
        log.reads()
            .into_iter()
            .map(|(file, offset, len)| {
                let path = paths.entry(file).or_insert_with(|| self.files.path(file));
                (path.clone(), offset, len)
            })
            .collect()
    }

    fn close_in(&self, dir: &Path) -> usize {
        let closed = self.files.close_in(dir);
        for id in &closed {
            if id.0 < REGISTERED_FILES {
                // The registered slot holds the file too: empty it (-1), or the space stays.
                for ring in self.rings.iter() {
                    ring.register_file(id.0, -1);
                }
            }
        }
        closed.len()
    }

    fn set_device_queue_depth(&self, depth: usize) {
        self.device.set_depth(depth);
    }

    fn reap_now(&self) -> bool {
        // Every ring, not just until one had completions.
        self.rings.iter().map(|r| r.reap(false)).sum::<usize>() > 0
    }
}

/// A read: pushed into its ring at the first poll, then waiting for its completion.
/// What sending one read into a ring takes (its slot already held).
struct Issue<'a> {
    ring: &'a Arc<Ring>,
    target: Target,
    recycler: &'a Recycler,
    metrics: &'a Arc<IoMetrics>,
    device: &'a DeviceQueue,
    class: usize,
}

impl Issue<'_> {
    /// Pushes the read into the ring (submitted when the open batch closes, else now, and
    /// then reaped at once if `reap_now`), or queues it for the device when the engine limits
    /// the device's queue and it is full.
    fn send(self, file: FileId, offset: u64, len: usize, reply: Reply, reap_now: bool) {
        let counted = self.device.limited();
        let op = Box::new(ReadOp {
            file,
            offset,
            buf: self.recycler.get(len),
            reply,
            guard: self.metrics.start_read(),
            counted,
        });
        if !counted || self.device.try_enter() {
            self.ring.push(self.target, op);
            let submit: Arc<dyn Submit> = self.ring.clone();
            if !batch::defer(&submit) {
                match reap_now {
                    true => submit.submit_pushed(),
                    false => self.ring.submit_now(),
                }
            }
        } else {
            let queued = Queued::new(self.ring.clone(), self.target, op);
            self.device.enqueue(self.class, queued);
        }
    }
}

struct UringRead {
    state: ReadState,
}

enum ReadState {
    Start {
        ring: Arc<Ring>,
        target: Target,
        file: FileId,
        offset: u64,
        len: usize,
        recycler: Arc<Recycler>,
        metrics: Arc<IoMetrics>,
        device: Arc<DeviceQueue>,
        class: usize,
    },
    Waiting(oneshot::Receiver<Result<PageBuf>>, PathOf),
    Done,
}

/// What names the file if the engine goes away before the read completes.
struct PathOf(Arc<Ring>, FileId);

impl Future for UringRead {
    type Output = Result<PageBuf>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<PageBuf>> {
        loop {
            match &mut self.state {
                ReadState::Start {
                    ring,
                    target,
                    file,
                    offset,
                    len,
                    recycler,
                    metrics,
                    device,
                    class,
                } => {
                    if ring.poll_slot(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let (reply, rx) = oneshot::channel();
                    let issue = Issue {
                        ring,
                        target: *target,
                        recycler,
                        metrics,
                        device,
                        class: *class,
                    };
                    issue.send(*file, *offset, *len, Reply::Future(reply), true);
                    let path_of = PathOf(ring.clone(), *file);
                    self.state = ReadState::Waiting(rx, path_of);
                }
                ReadState::Waiting(rx, path_of) => {
                    let result = match rx.poll_unpin(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(r)) => r,
                        Poll::Ready(Err(_)) => Err(StorageError::io(
                            path_of.0.files().path(path_of.1),
                            "read",
                            std::io::Error::other("the io_uring engine stopped"),
                        )),
                    };
                    self.state = ReadState::Done;
                    return Poll::Ready(result);
                }
                ReadState::Done => panic!("UringRead polled after it completed"),
            }
        }
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        for ring in self.rings.iter() {
            ring.shut_down();
        }
        for (reaper, ring) in self.reapers.iter().zip(self.rings.iter()) {
            reaper.stop(ring);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_share_the_given_recycler() {
        let recycler = Recycler::new(1 << 20);
        let engine = UringEngine::new(UringConfig {
            rings: 3,
            recycler: Some(recycler.clone()),
            ..Default::default()
        })
        .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        assert_eq!(engine.rings(), 3);
        assert!(Arc::ptr_eq(engine.recycler(), &recycler));
    }

    /// Reads `pages` pages of 8 KiB (page i filled with byte i % 251) through `engine`, all
    /// held at once, and checks their bytes.
    fn read_held_pages(engine: &UringEngine, pages: u64) {
        let (_dir, path) = page_file(pages);
        let file = engine.open(&path).unwrap();
        let reads = (0..pages).map(|i| engine.read(file, i * 8192, 8192));
        let held = futures::executor::block_on(futures::future::try_join_all(reads)).unwrap();
        for (i, page) in held.iter().enumerate() {
            assert_page(i as u64, page);
        }
    }

    /// A file of `pages` pages of 8 KiB, page i filled with byte i % 251 (in a directory
    /// removed when the returned guard drops).
    fn page_file(pages: u64) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pages");
        let data: Vec<u8> = (0..pages)
            .flat_map(|i| std::iter::repeat_n((i % 251) as u8, 8192))
            .collect();
        std::fs::write(&path, &data).unwrap();
        (dir, path)
    }

    /// Checks that `page` holds page `i` of a [`page_file`].
    fn assert_page(i: u64, page: &[u8]) {
        assert!(page.iter().all(|&b| b == (i % 251) as u8), "page {i}");
    }

    #[test]
    fn reads_go_into_registered_buffers_across_regions() {
        use crate::io::arena::REGION_BYTES;
        let recycler = Recycler::with_arena(2 * REGION_BYTES);
        recycler.arena().unwrap().prepare(2).unwrap();
        let engine = UringEngine::new(UringConfig {
            rings: 1,
            recycler: Some(recycler.clone()),
            fixed_buffers: true,
            ..Default::default()
        })
        .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        // More pages than one region holds, all held at once: a second region is carved and
        // registered while the first one's reads are done.
        let pages = (REGION_BYTES / 8192 + 100) as u64;
        read_held_pages(&engine, pages);
        assert_eq!(recycler.arena().unwrap().regions(), 2);
        assert_eq!(
            engine.fixed_buffer_reads(),
            pages,
            "the kernel refused registered buffers (needs Linux 5.19 and room under the \
             locked-memory limit, `ulimit -l`)"
        );
    }

    #[test]
    fn past_the_arena_and_with_fixed_buffers_off_reads_use_plain_buffers() {
        use crate::io::arena::REGION_BYTES;
        // An arena of one region: the pages past it get buffers of their own.
        let recycler = Recycler::with_arena(REGION_BYTES);
        recycler.arena().unwrap().prepare(1).unwrap();
        let engine = UringEngine::new(UringConfig {
            rings: 1,
            recycler: Some(recycler),
            fixed_buffers: true,
            ..Default::default()
        })
        .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        let pages = (REGION_BYTES / 8192 + 50) as u64;
        read_held_pages(&engine, pages);
        assert_eq!(engine.fixed_buffer_reads(), pages - 50);
        let off = UringEngine::new(UringConfig {
            rings: 1,
            recycler: Some(Recycler::with_arena(REGION_BYTES)),
            ..Default::default()
        })
        .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        read_held_pages(&off, 64);
        assert_eq!(off.fixed_buffer_reads(), 0);
    }

    #[test]
    fn reads_complete_with_completion_work_run_cooperatively_or_not() {
        let pages = 256u64;
        let (_dir, path) = page_file(pages);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for coop in [true, false] {
            // Made inside the runtime: completions are taken by a reactor task, and the
            // reads are submitted by the runtime's workers, the threads the kernel then
            // either interrupts or leaves to come in on their own.
            let engine = runtime.block_on(async {
                UringEngine::new(UringConfig {
                    coop_taskrun: coop,
                    ..Default::default()
                })
                .expect(
                    "io_uring is required by this test (kernel support, not blocked by seccomp)",
                )
            });
            assert!(engine.reaps_on_reactor());
            assert_eq!(
                engine.coop_taskrun(),
                coop,
                "the kernel refused IORING_SETUP_COOP_TASKRUN (needs Linux 5.19)"
            );
            let engine = Arc::new(engine);
            let file = engine.open(&path).unwrap();
            let tasks: Vec<_> = (0..8u64)
                .map(|t| {
                    let engine = engine.clone();
                    runtime.spawn(async move {
                        for i in (t..pages).step_by(8) {
                            assert_page(i, &engine.read(file, i * 8192, 8192).await.unwrap());
                        }
                    })
                })
                .collect();
            runtime.block_on(async {
                for t in tasks {
                    t.await.unwrap();
                }
            });
        }
    }

    #[test]
    fn a_record_of_reads_names_their_files_in_the_order_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![1u8; 4 * 4096]).unwrap();
        std::fs::write(&b, vec![2u8; 4 * 4096]).unwrap();
        let engine = UringEngine::new(UringConfig::default())
            .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        let (fa, fb) = (engine.open(&a).unwrap(), engine.open(&b).unwrap());
        let read = |f, off| futures::executor::block_on(engine.read(f, off, 4096)).unwrap();
        read(fa, 0);
        assert!(
            engine.recorded_reads().is_empty(),
            "nothing kept before recording"
        );
        assert!(engine.record_reads(8));
        read(fb, 8192);
        read(fa, 4096);
        assert_eq!(
            engine.recorded_reads(),
            vec![(b.clone(), 8192, 4096), (a.clone(), 4096, 4096)]
        );
        read(fb, 0);
        assert_eq!(
            engine.recorded_reads(),
            vec![(b.clone(), 8192, 4096), (a.clone(), 4096, 4096)],
            "taking the record stops it: a later read is not kept"
        );
        assert!(engine.record_reads(8));
        assert!(
            engine.recorded_reads().is_empty(),
            "a restart starts afresh"
        );
        assert!(
            !engine.record_reads(16),
            "the log's size is fixed once made"
        );
    }

    #[test]
    fn device_queue_lets_a_small_query_pass_a_large_ones_backlog() {
        use futures::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pages");
        std::fs::write(&path, vec![7u8; 64 * 4096]).unwrap();
        let engine = UringEngine::new(UringConfig {
            device_queue_depth: 1,
            ..Default::default()
        })
        .expect("io_uring is required by this test (kernel support, not blocked by seccomp)");
        let file = engine.open(&path).unwrap();
        // The device's one place is taken (as by a read there): every read below queues.
        assert!(engine.device.try_enter());
        let mut reads = futures::stream::FuturesUnordered::new();
        for page in 0..8u64 {
            let read = engine.read_in_class(file, page * 4096, 4096, 20);
            reads.push(read.map(move |r| (page, r)).boxed());
        }
        let small = engine.read_in_class(file, 60 * 4096, 4096, 2);
        reads.push(small.map(|r| (60, r)).boxed());
        futures::executor::block_on(futures::future::poll_fn(|cx| {
            assert!(
                reads.poll_next_unpin(cx).is_pending(),
                "nothing can complete yet"
            );
            Poll::Ready(())
        }));
        assert_eq!(engine.device.waiting(), 9);
        // The place frees: the small class goes first, then the large one in its order.
        engine.device.left(1);
        let order: Vec<u64> = futures::executor::block_on(
            reads
                .map(|(page, r)| {
                    assert_eq!(r.unwrap().len(), 4096);
                    page
                })
                .collect(),
        );
        assert_eq!(order, vec![60, 0, 1, 2, 3, 4, 5, 6, 7]);
        let stats = engine.metrics().snapshot();
        assert_eq!((stats.queued, stats.in_flight), (9, 0));
    }
}
