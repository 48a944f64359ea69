//! A record of an engine's reads (file, offset, length) in the order they were asked for, so
//! that another reader can replay them: the `concurrency` benchmark has fio replay a run's own
//! reads, which tells whether the device is slower for the reads themselves or for the way the
//! engine keeps them in flight.
//!
//! Recording costs a read two atomic stores and one counter increment; nothing is allocated
//! after the log is made, and reads past its capacity are not recorded.

use std::sync::atomic::{AtomicBool, Ordering::Release};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed};

use super::FileId;

/// The reads noted since the last [`ReadLog::restart`], up to a capacity.
#[derive(Debug)]
pub struct ReadLog {
    /// Two words per read: its offset, then its file id (high half) and length (low half).
    /// The second is stored last, so a reader that sees it non-zero sees the offset too.
    words: Box<[AtomicU64]>,
    next: AtomicUsize,
    on: AtomicBool,
}

impl ReadLog {
    /// A log with room for `capacity` reads, not recording yet.
    pub fn new(capacity: usize) -> Self {
        Self {
            words: (0..capacity * 2).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicUsize::new(0),
            on: AtomicBool::new(false),
        }
    }

    /// Reads it has room for.
    pub fn capacity(&self) -> usize {
        self.words.len() / 2
    }

    /// Empties the log and starts recording. Not for use while another thread restarts or
    /// takes the log (reads noted meanwhile may be lost, never torn).
    pub fn restart(&self) {
        self.on.store(false, Release);
        for w in self.words.iter() {
            w.store(0, Relaxed);
        }
        self.next.store(0, Release);
        self.on.store(true, Release);
    }

    /// Stops recording.
    pub fn stop(&self) {
        self.on.store(false, Release);
    }

    /// Notes a read, when recording and there is room. A read of length 0 or of 4 GiB or
    /// more is not noted (the engines never issue one).
    pub fn note(&self, file: FileId, offset: u64, len: usize) {
        if !self.on.load(Relaxed) || len == 0 || len > u32::MAX as usize {
            return;
        }
        let i = self.next.fetch_add(1, Relaxed);
        if i >= self.capacity() {
            return;
        }
        self.words[2 * i].store(offset, Relaxed);
        self.words[2 * i + 1].store((u64::from(file.0) << 32) | len as u64, Release);
    }

    /// The reads noted, in the order their places were taken (reads still being noted are
    /// left out).
    pub fn reads(&self) -> Vec<(FileId, u64, usize)> {
        let n = self.next.load(Acquire).min(self.capacity());
        (0..n)
            .filter_map(|i| {
                let tag = self.words[2 * i + 1].load(Acquire);
                (tag != 0).then(|| {
                    let offset = self.words[2 * i].load(Relaxed);
                    (
                        FileId((tag >> 32) as u32),
                        offset,
                        (tag & 0xFFFF_FFFF) as usize,
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_reads_in_order_only_while_on_and_up_to_its_capacity() {
        let log = ReadLog::new(3);
        log.note(FileId(1), 8192, 8192);
        assert!(log.reads().is_empty(), "not recording before restart");
        log.restart();
        log.note(FileId(0), 0, 8192);
        log.note(FileId(7), 1 << 40, 16384);
        log.note(FileId(2), 4096, 0);
        log.note(FileId(3), 24576, 8192);
        log.note(FileId(4), 32768, 8192);
        assert_eq!(
            log.reads(),
            vec![
                (FileId(0), 0, 8192),
                (FileId(7), 1 << 40, 16384),
                (FileId(3), 24576, 8192)
            ]
        );
        log.stop();
        log.restart();
        assert!(log.reads().is_empty(), "restart empties it");
        log.note(FileId(5), 40960, 8192);
        log.stop();
        log.note(FileId(6), 49152, 8192);
        assert_eq!(log.reads(), vec![(FileId(5), 40960, 8192)]);
    }

    #[test]
    fn reads_noted_from_many_threads_are_all_kept() {
        let log = std::sync::Arc::new(ReadLog::new(4000));
        log.restart();
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for k in 0..1000u64 {
                        log.note(FileId(t), k * 8192, 8192);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut reads = log.reads();
        assert_eq!(reads.len(), 4000);
        reads.sort();
        for (i, (file, offset, len)) in reads.into_iter().enumerate() {
            assert_eq!(
                (file.0, offset, len),
                ((i / 1000) as u32, (i % 1000) as u64 * 8192, 8192)
            );
        }
    }
}
