//! `ooode-tpch checksum`: what checksumming a page read from disk costs with each CRC-32C
//! implementation ooode has (see `ooode::storage::checksum`), side by side in one process.
//!
//! Two cases: a few pages that stay in the CPU's caches, and pages spread over a large
//! buffer, each first written by a copy as the kernel writes a page it reads (in batches, as
//! reads complete), then checksummed: the case of a page read under load.

use std::time::Instant;

use ooode::storage::checksum::Backend;
use ooode::storage::page::page_checksum;

const PAGE: usize = 8192;
/// Pages copied, then checksummed, together (about one io_uring submission's worth).
const BATCH: usize = 64;

/// Nanoseconds a page for each backend: (backend, in cache, after a copy over `spread_mib`).
pub fn run(spread_mib: usize, rounds: usize) -> Vec<(Backend, f64, f64)> {
    let spread_pages = (spread_mib << 20) / PAGE;
    let mut spread: Vec<u8> = (0..spread_pages.max(BATCH) * PAGE)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let source: Vec<u8> = (0..BATCH * PAGE).map(|i| (i * 13 % 241) as u8).collect();
    let mut results: Vec<(Backend, f64, f64)> = [Backend::CrcFast, Backend::Crc32cCrate]
        .into_iter()
        .map(|b| (b, f64::MAX, f64::MAX))
        .collect();
    let mut sink = 0u32;
    // Alternating, best of `rounds`: the machine's drift hits both alike.
    for _ in 0..rounds {
        for (backend, cached, copied) in results.iter_mut() {
            let hot = &spread[..BATCH * PAGE];
            let start = Instant::now();
            for _ in 0..64 {
                for page in hot.chunks_exact(PAGE) {
                    sink ^= page_checksum(page, *backend);
                }
            }
            *cached = cached.min(start.elapsed().as_nanos() as f64 / (64 * BATCH) as f64);
            let batches = spread.len() / (BATCH * PAGE);
            let start = Instant::now();
            for b in 0..batches {
                let pages = &mut spread[b * BATCH * PAGE..][..BATCH * PAGE];
                pages.copy_from_slice(&source);
                for page in pages.chunks_exact(PAGE) {
                    sink ^= page_checksum(page, *backend);
                }
            }
            *copied = copied.min(start.elapsed().as_nanos() as f64 / (batches * BATCH) as f64);
        }
    }
    std::hint::black_box(sink);
    results
}

/// The measurement as a table, the implementation this CPU uses marked.
pub fn format(results: &[(Backend, f64, f64)], spread_mib: usize) -> String {
    let chosen = Backend::chosen();
    let mut out = format!(
        "CRC-32C of an {PAGE}-byte page, ns (best of the rounds); after a copy: pages copied \
         in batches of {BATCH} over {spread_mib} MiB, then checksummed (the copy's time included)\n"
    );
    for (backend, cached, copied) in results {
        let mark = if *backend == chosen {
            " (used here)"
        } else {
            ""
        };
        out += &format!("  {backend:?}{mark}: {cached:.0} in cache, {copied:.0} after a copy\n");
    }
    out
}
