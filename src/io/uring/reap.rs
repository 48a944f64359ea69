//! Who takes a ring's completions: a task on the tokio reactor of the runtime that made the
//! engine, or a thread of its own.
//!
//! ```text
//!   reactor: kernel posts a CQE ──> eventfd readable ──> the worker parked in epoll wakes,
//!            runs the reaper task ──> pages sent to readers (woken on that same worker)
//!   thread:  kernel posts a CQE ──> thread in io_uring_enter wakes ──> pages sent ──> the
//!            readers' worker, parked, is woken from another thread
//! ```
//!
//! The reactor saves a thread hand-off per completion batch (a waking thread, a futex wake of
//! the worker). It needs a tokio runtime with its I/O driver; without one (tools on plain
//! threads) the engine uses a thread. If the runtime goes away while the engine lives on, the
//! reaper task's end starts a thread in its place, so reads never wait for a reaper that is
//! gone.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;

use super::ring::Ring;

/// How a ring's completions are taken.
#[derive(Debug, Default)]
pub struct Reaper {
    task: Mutex<Option<tokio::task::AbortHandle>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A completion thread: waits in the kernel, reaps, until shutdown and every read completed.
fn thread_loop(ring: Arc<Ring>) {
    while !ring.finished() {
        ring.wait_for_completion();
        ring.reap(true);
    }
}

impl Reaper {
    /// Starts reaping `ring`: a reactor task when called inside a tokio runtime with an I/O
    /// driver and `reactor` is true, else a thread.
    pub fn start(ring: &Arc<Ring>, index: usize, reactor: bool) -> std::io::Result<Arc<Self>> {
        let reaper = Arc::new(Self::default());
        let handle = tokio::runtime::Handle::try_current().ok();
        match (reactor, ring.eventfd(), handle) {
            (true, Some(fd), Some(handle)) => {
                // Registering with the reactor panics in a runtime without an I/O driver (tokio
                // offers no way to ask first): then a thread.
                let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let _enter = handle.enter();
                    // SAFETY: the eventfd stays open, the same file, for the AsyncFd's whole
                    // life: the ring owns it and outlives the task that owns the AsyncFd.
                    unsafe { AsyncFd::register(EventFd(fd)) }
                }));
                match registered {
                    Ok(Ok(afd)) => {
                        let task =
                            handle.spawn(reactor_loop(ring.clone(), afd, reaper.clone(), index));
                        *reaper.task.lock() = Some(task.abort_handle());
                    }
                    Ok(Err(_)) | Err(_) => reaper.start_thread(ring, index)?,
                }
            }
            _ => reaper.start_thread(ring, index)?,
        }
        Ok(reaper)
    }

    fn start_thread(&self, ring: &Arc<Ring>, index: usize) -> std::io::Result<()> {
        let ring = ring.clone();
        let t = std::thread::Builder::new()
            .name(format!("ooode-uring-{index}"))
            .spawn(move || thread_loop(ring))?;
        *self.thread.lock() = Some(t);
        Ok(())
    }

    /// Whether completions are taken by a reactor task (not a thread).
    pub fn on_reactor(&self) -> bool {
        self.task.lock().is_some() && self.thread.lock().is_none()
    }

    /// Ends reaping once `ring` (already told to shut down) has no read in flight: joins the
    /// thread, or stops the task and waits for the last completions here.
    pub fn stop(&self, ring: &Ring) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        // The kernel may still write into buffers of reads in flight: wait for them.
        while ring.in_flight() > 0 {
            if ring.reap(true) == 0 {
                ring.wait_for_completion();
            }
        }
    }
}

/// The eventfd, borrowed from the ring (which owns it and outlives the task).
struct EventFd(RawFd);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Starts a thread in place of a reactor task that ends early (its runtime shut down).
struct ThreadOnEnd {
    ring: Arc<Ring>,
    reaper: Arc<Reaper>,
    index: usize,
}

impl Drop for ThreadOnEnd {
    fn drop(&mut self) {
        if self.ring.shutting_down() {
            return;
        }
        if self.reaper.start_thread(&self.ring, self.index).is_err() {
            log::error!(
                "ooode: could not start a completion thread for io_uring ring {}",
                self.index
            );
        }
    }
}

async fn reactor_loop(ring: Arc<Ring>, afd: AsyncFd<EventFd>, reaper: Arc<Reaper>, index: usize) {
    let _on_end = ThreadOnEnd {
        ring: ring.clone(),
        reaper,
        index,
    };
    loop {
        let Ok(mut ready) = afd.readable().await else {
            return;
        };
        // Reset the counter first: a completion posted after this signals again.
        let mut count = [0u8; 8];
        // SAFETY: reads 8 bytes into a buffer of 8 from a non-blocking eventfd.
        while unsafe { libc::read(afd.get_ref().0, count.as_mut_ptr().cast(), 8) } == 8 {}
        ready.clear_ready();
        // Waits for a reaper inside a submitting thread rather than skipping: completions it
        // did not see were signalled to this task, and only this task is sure to come.
        ring.reap(true);
        // Let the readers just woken run before the next batch.
        tokio::task::yield_now().await;
    }
}
