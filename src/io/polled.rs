//! Synchronous reads that wait for their completion by polling first: the in-order engine's
//! way to the disk when files are opened with O_DIRECT.
//!
//! Each thread has a small io_uring of its own. A read is submitted to it and the thread then
//! watches the completion queue for up to a poll budget (default 100 us, about one read of
//! this project's disk at depth 1) before it sleeps in the kernel. Why: a thread that sleeps
//! for every read of ~60 us halts its (virtual) CPU, and each page it then processes costs 2-4x
//! the CPU of the same page hot (perf, Fig. 4 in order at 10 %: 20 us of user time per page cold
//! against 4.6 hot); polling keeps it running. Spinning without a bound was slower on this VM:
//! a vCPU that never halts takes the host's time from its disk emulation.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};

/// Entries of each thread's ring: one read at a time is ever in it.
const RING_ENTRIES: u32 = 4;

/// How often the clock is read while polling (spins between two looks).
const SPINS_PER_CLOCK: u32 = 64;

thread_local! {
    /// This thread's ring; None where io_uring cannot be set up (then reads use `pread`).
    static RING: RefCell<Option<IoUring>> = RefCell::new(IoUring::new(RING_ENTRIES).ok());
}

/// How a read was waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// Its completion came while the thread polled.
    Polled,
    /// The poll budget ran out and the thread slept in the kernel until it came.
    Slept,
}

/// Reads into `buf` at `offset` of `fd` through this thread's ring, polling for the
/// completion for up to `poll` before sleeping. Returns None, having read nothing, where the
/// thread has no ring (io_uring unavailable) or the kernel refused the submission; the caller
/// then reads another way. Errors of the read itself come back as `Some(Err(..))`.
pub fn read_at(
    fd: RawFd,
    buf: &mut [u8],
    offset: u64,
    poll: Duration,
) -> Option<(std::io::Result<usize>, Waited)> {
    RING.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        let ring = slot.as_mut()?;
        let len = u32::try_from(buf.len()).ok()?;
        let read = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len)
            .offset(offset)
            .build();
        // SAFETY: `buf` stays borrowed until this function returns, and it returns only after
        // this read's completion was taken from the ring, or after the read was never handed
        // to the kernel (the ring is then dropped, discarding it): the kernel never writes
        // into `buf` after the borrow ends.
        if unsafe { ring.submission().push(&read) }.is_err() {
            return None;
        }
        loop {
            match ring.submit() {
                Ok(n) if n >= 1 => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => {
                    // Not taken by the kernel: drop the ring (and the entry with it); this
                    // thread reads with pread from now on.
                    *slot = None;
                    return None;
                }
            }
        }
        Some(wait_for_completion(ring, poll))
    })
}

/// Takes the one completion the ring will produce, polling for up to `poll` first.
fn wait_for_completion(ring: &mut IoUring, poll: Duration) -> (std::io::Result<usize>, Waited) {
    let start = Instant::now();
    let mut waited = Waited::Polled;
    let mut spins = 0u32;
    loop {
        if let Some(cqe) = ring.completion().next() {
            let result = match cqe.result() {
                n if n >= 0 => Ok(n as usize),
                e => Err(std::io::Error::from_raw_os_error(-e)),
            };
            return (result, waited);
        }
        if waited == Waited::Slept || poll.is_zero() || {
            spins += 1;
            spins.is_multiple_of(SPINS_PER_CLOCK) && start.elapsed() >= poll
        } {
            waited = Waited::Slept;
            // An error here (a signal, or the kernel short of memory) leaves the read in
            // flight: look again and wait again, never return while it may still write.
            if ring.submit_and_wait(1).is_err() {
                std::thread::yield_now();
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    fn ring_read(fd: RawFd, buf: &mut [u8], offset: u64, poll: Duration) -> (usize, Waited) {
        let Some((result, waited)) = read_at(fd, buf, offset, poll) else {
            panic!("io_uring is not available on this machine: the polled read cannot run");
        };
        (result.unwrap(), waited)
    }

    #[test]
    fn reads_a_file_through_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; 4096];
        for poll in [Duration::from_millis(10), Duration::ZERO] {
            buf.fill(0);
            assert_eq!(ring_read(file.as_raw_fd(), &mut buf, 8192, poll).0, 4096);
            assert_eq!(&buf[..], &data[8192..12288]);
        }
        // Past the end: a short read, not an error.
        assert_eq!(
            ring_read(file.as_raw_fd(), &mut buf, 14336, Duration::ZERO).0,
            2048
        );
        // A bad descriptor: the read's error comes back.
        let (result, _) = read_at(-1, &mut buf, 0, Duration::ZERO).unwrap();
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EBADF));
    }

    /// A pipe's read completes when the other end writes: before the poll budget runs out it
    /// was polled for, after it the thread slept.
    #[test]
    fn polls_within_the_budget_and_sleeps_past_it() {
        for (poll, write_after, expected) in [
            (
                Duration::from_secs(5),
                Duration::from_millis(20),
                Waited::Polled,
            ),
            (
                Duration::from_millis(1),
                Duration::from_millis(50),
                Waited::Slept,
            ),
        ] {
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for the two descriptors pipe() writes.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: pipe() just opened both descriptors; each is owned once, here.
            let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            let writer = std::thread::spawn(move || {
                std::thread::sleep(write_after);
                std::fs::File::from(tx).write_all(b"page").unwrap();
            });
            let mut buf = [0u8; 16];
            let started = Instant::now();
            let (n, waited) = ring_read(rx.as_raw_fd(), &mut buf, 0, poll);
            writer.join().unwrap();
            assert_eq!(&buf[..n], b"page");
            assert!(started.elapsed() >= write_after);
            assert_eq!(
                waited, expected,
                "budget {poll:?}, data after {write_after:?}"
            );
        }
    }
}
