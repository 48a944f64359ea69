//! Turns of long queries (`ooode.max_long_queries`): at most so many queries estimated to
//! read more than `ooode.short_query_reads` pages run their ooode operators at once; later
//! ones wait, first come first served, before their first read. Short queries never wait.
//!
//! ```text
//!   operator task about to poll reads ──> short, or not estimated ──> runs
//!        └─ long: its query holds a slot? ──> runs (one slot per query, not per task)
//!                 else: takes one (waits in arrival order) ──> runs
//!   task with nothing in flight (waits for its input or its consumer) ──> lets go
//!   last task of the query to let go ──> slot back
//! ```
//!
//! Why: admission shares the reads in flight fairly between all queries, so under load every
//! query progresses a little at a time, each with tasks in the caller's run queue, which tokio
//! serves first in, first out. Measured at 64 clients (SF 1, 2 cores), running 4 long
//! queries at a time, the others waiting, gave the same queries per second for ~20 % less CPU
//! per query and half the p99 latency (see docs/log.md).
//!
//! A task holds its query's slot only while it has reads in flight or about to start
//! ([`super::Turn`]); one whose output queue is full and whose reads are done lets go, so a
//! client that stops reading a long query's result holds no slot. The tasks of one query
//! share its slot (an operator waiting for its input's task must never queue that task
//! behind other queries: that would deadlock once every slot waits so).

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots of long queries of one runtime.
#[derive(Debug)]
pub struct LongQuerySlots {
    slots: usize,
    semaphore: Arc<Semaphore>,
}

impl LongQuerySlots {
    /// `slots` long queries at once (at least one).
    pub fn new(slots: usize) -> Arc<Self> {
        let slots = slots.max(1);
        Arc::new(Self {
            slots,
            semaphore: Arc::new(Semaphore::new(slots)),
        })
    }

    /// The slots of setting `ooode.max_long_queries = slots` (0: no limit, none).
    pub fn for_setting(slots: usize) -> Option<Arc<Self>> {
        (slots > 0).then(|| Self::new(slots))
    }

    /// Long queries that may run at once.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slots no query holds now.
    pub fn free(&self) -> usize {
        self.semaphore.available_permits()
    }
}

/// One query's side: the slot its running operator tasks share.
#[derive(Debug, Default)]
pub struct QuerySlot {
    state: Mutex<SlotState>,
    /// Held by the task taking the slot: the query's other tasks wait here for it, not in
    /// the semaphore's queue behind other queries.
    taking: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct SlotState {
    running: usize,
    permit: Option<OwnedSemaphorePermit>,
}

impl QuerySlot {
    /// Waits until the query holds a slot of `slots` and counts one of its tasks running
    /// until the returned guard drops.
    pub async fn enter(self: &Arc<Self>, slots: &LongQuerySlots) -> RunningTask {
        if let Some(running) = self.join() {
            return running;
        }
        let _taking = self.taking.lock().await;
        if let Some(running) = self.join() {
            return running;
        }
        // The semaphore is never closed: acquiring only waits.
        let permit = slots.semaphore.clone().acquire_owned().await.ok();
        let mut state = self.state.lock();
        state.permit = permit;
        state.running += 1;
        RunningTask(self.clone())
    }

    /// Counts one more task running if the query holds its slot.
    fn join(self: &Arc<Self>) -> Option<RunningTask> {
        let mut state = self.state.lock();
        state.permit.is_some().then(|| {
            state.running += 1;
            RunningTask(self.clone())
        })
    }

    /// Whether the query holds a slot now.
    pub fn holds(&self) -> bool {
        self.state.lock().permit.is_some()
    }
}

/// One operator task of a query running (see [`QuerySlot::enter`]); the last one to drop
/// gives the slot back.
#[derive(Debug)]
pub struct RunningTask(Arc<QuerySlot>);

impl Drop for RunningTask {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.running -= 1;
        if state.running == 0 {
            state.permit = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn settles() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_query_holds_one_slot_for_all_its_tasks() {
        let slots = LongQuerySlots::new(1);
        let (a, b) = (
            Arc::new(QuerySlot::default()),
            Arc::new(QuerySlot::default()),
        );
        let a1 = a.enter(&slots).await;
        let a2 = a.enter(&slots).await; // same query: no second slot needed
        assert_eq!(slots.free(), 0);
        let waiting = {
            let (b, slots) = (b.clone(), slots.clone());
            tokio::spawn(async move { b.enter(&slots).await })
        };
        settles().await;
        assert!(!waiting.is_finished(), "the only slot is the first query's");
        drop(a1);
        settles().await;
        assert!(
            !waiting.is_finished(),
            "a task of the first query still runs"
        );
        drop(a2);
        let b1 = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the slot came back")
            .unwrap();
        assert!(b.holds() && !a.holds());
        drop(b1);
        assert_eq!(slots.free(), 1);
    }

    /// The second task of a waiting query gets in with the first, not after the queries
    /// queued behind it (an operator and its input's task: the deadlock this prevents).
    #[tokio::test]
    async fn tasks_of_a_waiting_query_enter_together() {
        let slots = LongQuerySlots::new(1);
        let [holder, a, c] = [(); 3].map(|_| Arc::new(QuerySlot::default()));
        let held = holder.enter(&slots).await;
        let spawn_enter = |q: &Arc<QuerySlot>| {
            let (q, slots) = (q.clone(), slots.clone());
            tokio::spawn(async move { q.enter(&slots).await })
        };
        let a1 = spawn_enter(&a);
        settles().await;
        let c1 = spawn_enter(&c);
        settles().await;
        let a2 = spawn_enter(&a);
        settles().await;
        drop(held);
        let wait = |t| tokio::time::timeout(Duration::from_secs(5), t);
        let (a1, a2) = (
            wait(a1).await.unwrap().unwrap(),
            wait(a2).await.unwrap().unwrap(),
        );
        assert!(!c1.is_finished(), "the third query waits for the slot");
        drop((a1, a2));
        let c1 = wait(c1).await.expect("the third query's turn").unwrap();
        assert!(c.holds());
        drop(c1);
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_takes_no_slot() {
        let slots = LongQuerySlots::new(1);
        let (a, b) = (
            Arc::new(QuerySlot::default()),
            Arc::new(QuerySlot::default()),
        );
        let held = a.enter(&slots).await;
        let waiting = {
            let (b, slots) = (b.clone(), slots.clone());
            tokio::spawn(async move { b.enter(&slots).await })
        };
        settles().await;
        waiting.abort();
        let _ = waiting.await;
        drop(held);
        assert_eq!(slots.free(), 1);
        assert!(!b.holds());
    }
}
