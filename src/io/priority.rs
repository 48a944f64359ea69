//! Size classes of queries, and whose turn it is: shared by admission (permits, in
//! [`crate::access`]) and the device queue of the io_uring engine.
//!
//! A query's class is log2 of the page reads the optimizer estimated for its plan. Waiting
//! requests are served smallest class first, so a point lookup's few reads overtake a large
//! query's thousands; one grant in [`FAIR_EVERY`] goes to the classes in turn instead, so
//! that large queries keep moving however many small ones arrive.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Number of size classes.
pub const CLASSES: usize = 24;

/// The class of a read whose query was not estimated (yet): a few thousand reads.
pub const UNKNOWN_CLASS: usize = 12;

/// One grant in this many goes to the classes in turn rather than to the smallest.
pub const FAIR_EVERY: u64 = 8;

/// The class of a query estimated to read `reads` pages.
pub fn size_class(reads: u64) -> usize {
    ((u64::BITS - reads.leading_zeros()) as usize).min(CLASSES - 1)
}

/// Adds one to `count` if it stays at most `limit` (never overshooting, even for a moment).
pub fn take_below(count: &AtomicUsize, limit: usize) -> bool {
    let mut n = count.load(SeqCst);
    loop {
        if n >= limit {
            return false;
        }
        match count.compare_exchange_weak(n, n + 1, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(now) => n = now,
        }
    }
}

/// Whose turn it is among classes with waiters.
#[derive(Debug, Default)]
pub struct ClassTurns {
    /// Grants made so far.
    grants: u64,
    /// The class the last fair turn went to.
    fair_class: usize,
}

impl ClassTurns {
    /// The classes in the order the next grant tries them: smallest first, or (one grant in
    /// [`FAIR_EVERY`]) starting after the class the last fair turn went to.
    pub fn order(&self) -> impl Iterator<Item = usize> + use<> {
        let start = match self.fair_turn() {
            true => self.fair_class + 1,
            false => 0,
        };
        (0..CLASSES).map(move |k| (start + k) % CLASSES)
    }

    /// Notes a grant to a waiter of `class`.
    pub fn granted(&mut self, class: usize) {
        if self.fair_turn() {
            self.fair_class = class;
        }
        self.grants += 1;
    }

    /// Whether the next grant is a fair turn.
    pub fn fair_turn(&self) -> bool {
        self.grants % FAIR_EVERY == FAIR_EVERY - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_log2_of_reads() {
        assert_eq!(size_class(0), 0);
        assert_eq!(size_class(1), 1);
        assert_eq!(size_class(25), 5);
        assert_eq!(size_class(4000), 12);
        assert_eq!(size_class(u64::MAX), CLASSES - 1);
    }

    #[test]
    fn one_grant_in_eight_goes_round_the_classes() {
        let mut turns = ClassTurns::default();
        let mut granted = Vec::new();
        for _ in 0..24 {
            // Only classes 3 and 9 wait: the grant goes to the first of them in order.
            let class = turns.order().find(|c| [3, 9].contains(c)).unwrap();
            turns.granted(class);
            granted.push(class);
        }
        let nines: Vec<usize> = (0..24).filter(|&i| granted[i] == 9).collect();
        // Smallest first, except each eighth grant: from the class after the last fair one.
        assert_eq!(nines, vec![15]);
        assert_eq!(granted.iter().filter(|&&c| c == 3).count(), 23);
    }
}
