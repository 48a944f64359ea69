//! TPC-H for ooode: data generation and loading (ooode tables and the Parquet baseline), the
//! 22 queries, the paper's Fig. 4 sweep and Q3'...Q17', many clients at once, the I/O benchmark
//! against fio, and the JSON and SVG reports of a run.

pub mod alloc_count;
pub mod ceiling;
pub mod checksum;
pub mod cluster;
pub mod concurrency;
pub mod datagen;
pub mod depth;
pub mod fig4;
pub mod fresh;
pub mod inserts;
pub mod iobench;
pub mod job;
pub mod paper;
pub mod plans;
pub mod remote;
pub mod report;
pub mod rule_times;
pub mod runner;
pub mod s3;
pub mod scale;
pub mod segments;
pub mod servers;
pub mod svg;
pub mod tables;

/// mimalloc hands freed memory back to the OS after a second; the buffer pool frees and
/// refills gigabytes of page buffers (a cold run starts from an emptied pool), and faulting
/// them in again (zeroed, as huge pages) took 10-14 % of a cold 10 % Fig. 4 run. Ten seconds
/// of idle before memory goes back.
pub fn delay_memory_purge() {
    // mimalloc v3's `mi_option_purge_delay` (libmimalloc-sys names no constant for it).
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: mi_option_set only stores a number; any value is valid for this option.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10_000) };
}
