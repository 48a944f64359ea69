//! Submission batching: reads issued while a batch is open on a thread reach the kernel in one
//! system call when it closes.
//!
//! An operator polls many read steps in one go (a `FuturesUnordered` of them); each step that
//! starts a read pushes it into its ring. Inside [`batched`] the ring is only marked; the
//! batch's end enters the kernel once for all of them. Outside a batch every read is submitted
//! as it starts, so a read polled on its own (a tool, a plan-time count under `block_on`) never
//! waits for a submission that nobody will make.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Something holding pushed but not yet submitted reads (an io_uring ring).
pub trait Submit: Send + Sync {
    /// Hands pushed reads to the kernel.
    fn submit_pushed(&self);
}

#[derive(Default)]
struct Batch {
    depth: u32,
    pending: Vec<Arc<dyn Submit>>,
    /// When the outermost open batch opened (the poll of an operator's task).
    opened: Option<Instant>,
}

thread_local! {
    static BATCH: RefCell<Batch> = RefCell::new(Batch::default());
}

/// Whether a batch is open on this thread.
pub fn in_batch() -> bool {
    BATCH.with(|b| b.borrow().depth > 0)
}

/// Notes that `ring` holds pushed reads to submit when the open batch closes; returns false
/// (and notes nothing) when no batch is open: the caller submits now.
pub fn defer(ring: &Arc<dyn Submit>) -> bool {
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.depth == 0 {
            return false;
        }
        if !b.pending.iter().any(|r| Arc::ptr_eq(r, ring)) {
            b.pending.push(ring.clone());
        }
        true
    })
}

struct Depth;

impl Depth {
    fn open() -> Self {
        BATCH.with(|b| {
            let mut b = b.borrow_mut();
            if b.depth == 0 {
                b.opened = Some(Instant::now());
            }
            b.depth += 1;
        });
        Depth
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        let pending = BATCH.with(|b| {
            let mut b = b.borrow_mut();
            b.depth -= 1;
            if b.depth == 0 {
                b.opened = None;
                std::mem::take(&mut b.pending)
            } else {
                Vec::new()
            }
        });
        for ring in pending {
            ring.submit_pushed();
        }
    }
}

/// Runs `f` with a batch open: reads it starts are submitted together when it returns.
pub fn batched<R>(f: impl FnOnce() -> R) -> R {
    let _depth = Depth::open();
    f()
}

/// Runs `f` with no batch open (reads are submitted as they start), even inside one: for
/// code that blocks the thread until reads complete.
pub fn unbatched<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            BATCH.with(|b| b.borrow_mut().depth = self.0);
        }
    }
    let (depth, pending) = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        (std::mem::take(&mut b.depth), std::mem::take(&mut b.pending))
    });
    // What the outer batch pushed so far goes now: `f` may wait for it.
    for ring in pending {
        ring.submit_pushed();
    }
    let _restore = Restore(depth);
    f()
}

/// Longest an operator's task works in one poll before it lets others run (see
/// [`yield_if_long`]).
pub const TIME_SLICE: Duration = Duration::from_micros(200);

/// Yields to the scheduler when the current poll (the open batch) has run for longer than
/// [`TIME_SLICE`]; otherwise returns at once.
///
/// tokio runs woken tasks first in, first out and cannot preempt a poll: an operator that
/// decodes every page that completed in one poll (hundreds under load) keeps every other
/// query's woken task waiting that long, each time. Slicing the work keeps the wait of a
/// short query's next step near the slice times the tasks ahead of it.
pub async fn yield_if_long() {
    let long = BATCH.with(|b| b.borrow().opened.is_some_and(|t| t.elapsed() > TIME_SLICE));
    if long {
        tokio::task::yield_now().await;
    }
}

/// A future whose every poll runs as one batch.
pub struct Batched<F>(pub F);

impl<F: Future + Unpin> Future for Batched<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        batched(|| Pin::new(&mut self.0).poll(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    #[derive(Default)]
    struct Counting(AtomicUsize);
    impl Submit for Counting {
        fn submit_pushed(&self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn one_submission_per_batch_and_none_deferred_outside() {
        let ring = Arc::new(Counting::default());
        let dynring: Arc<dyn Submit> = ring.clone();
        assert!(!defer(&dynring), "no batch open: submit now");
        batched(|| {
            assert!(defer(&dynring));
            assert!(defer(&dynring));
            batched(|| assert!(defer(&dynring)));
            assert_eq!(ring.0.load(SeqCst), 0, "an inner batch does not submit");
            unbatched(|| {
                assert_eq!(ring.0.load(SeqCst), 1, "pushed reads go before blocking");
                assert!(!defer(&dynring));
            });
            assert!(defer(&dynring));
        });
        assert_eq!(ring.0.load(SeqCst), 2);
        assert!(!in_batch());
    }

    /// Polls `task` once inside a batch, as an operator's task is polled.
    fn poll_batched<F: Future + Unpin>(task: &mut Batched<F>) -> Poll<F::Output> {
        let waker = futures::task::noop_waker();
        Pin::new(task).poll(&mut Context::from_waker(&waker))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_poll_yields_only_after_its_time_slice() {
        let mut short = Batched(Box::pin(yield_if_long()));
        assert!(poll_batched(&mut short).is_ready(), "a short poll goes on");

        let mut long = Batched(Box::pin(async {
            let start = Instant::now();
            while start.elapsed() <= TIME_SLICE {
                std::hint::spin_loop();
            }
            yield_if_long().await;
        }));
        assert!(
            poll_batched(&mut long).is_pending(),
            "a long poll lets others run"
        );
        assert!(
            poll_batched(&mut long).is_ready(),
            "the next poll starts a new slice"
        );
        assert!(!in_batch());
    }
}
