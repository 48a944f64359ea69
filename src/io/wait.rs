//! Waiting for reads on a thread that must not wait for anyone else: the optimizer's counts
//! run inside DataFusion's planning, on a runtime worker, and block it until their pages
//! arrive. Completions are normally taken by a reactor task on that same runtime, which a
//! blocked worker (or all of them) cannot run; so the waiting thread takes its engines'
//! completions itself between polls.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::Duration;

use super::IoEngine;

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` to completion on this thread, taking completions of `engines` while it waits.
pub fn block_on_reads<F: Future>(engines: &[Arc<dyn IoEngine>], fut: F) -> F::Output {
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    // Reads started in the polls below go to the kernel at once: nobody closes a batch here.
    super::batch::unbatched(|| {
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
            let reaped = engines.iter().filter(|e| e.reap_now()).count() > 0;
            if !reaped {
                // Woken at once by a completion taken elsewhere; else look again soon.
                std::thread::park_timeout(Duration::from_micros(50));
            }
        }
    })
}
