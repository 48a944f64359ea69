//! CRC-32C (Castagnoli), the checksum of every page, manifest and sums file.
//!
//! Every page read from disk is checksummed once, so this is part of the CPU per page. Two
//! implementations, one chosen per process by what the CPU has ([`Backend::chosen`]; `ooode-tpch
//! checksum` times both):
//! - `crc-fast` (carry-less multiplication) where the CPU has AVX-512: 8 KiB pages in 141 ns
//!   from cache and 347 ns from memory, against 344 / 1030 ns with SSE 4.2's `crc32`
//!   instruction (the `crc32c` crate) on the machine measured then;
//! - the `crc32c` crate (SSE 4.2's `crc32` instruction on three streams) on x86-64 without
//!   AVX-512, where `crc-fast` falls back to 128-bit carry-less multiplication: on an AMD EPYC
//!   with AVX2 and 256-bit VPCLMULQDQ but no AVX-512, 463-471 ns a page in cache against
//!   551-554, and 1,222 ns against 1,308-1,317 for a page copied into 1 GiB of buffers and
//!   then checksummed (the copy included; docs/log.md, 2026-12-07).
//!
//! The values are the standard CRC-32C's either way: files written on one machine read the
//! same on another (the tests check both against each other and against known values).

use std::sync::OnceLock;

use crc_fast::{CrcAlgorithm, Digest};

/// Which implementation computes the checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The `crc-fast` crate.
    CrcFast,
    /// The `crc32c` crate.
    Crc32cCrate,
}

impl Backend {
    /// The faster of the two on this CPU (see the module's documentation).
    fn for_this_cpu() -> Self {
        #[cfg(target_arch = "x86_64")]
        if !std::is_x86_feature_detected!("avx512vl") && std::is_x86_feature_detected!("sse4.2") {
            return Self::Crc32cCrate;
        }
        Self::CrcFast
    }

    /// The one this process uses.
    pub fn chosen() -> Self {
        static CHOSEN: OnceLock<Backend> = OnceLock::new();
        *CHOSEN.get_or_init(Self::for_this_cpu)
    }

    /// CRC-32C of `bytes`.
    pub fn crc32c(self, bytes: &[u8]) -> u32 {
        match self {
            Self::CrcFast => crc_fast::crc32_iscsi(bytes),
            Self::Crc32cCrate => crc32c::crc32c(bytes),
        }
    }

    /// CRC-32C of the bytes whose checksum is `crc` followed by `bytes`.
    pub fn append(self, crc: u32, bytes: &[u8]) -> u32 {
        match self {
            Self::CrcFast => {
                // The running state is the checksum before its final inversion.
                let init = u64::from(!crc);
                let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, init);
                digest.update(bytes);
                digest.finalize() as u32
            }
            Self::Crc32cCrate => crc32c::crc32c_append(crc, bytes),
        }
    }
}

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    Backend::chosen().crc32c(bytes)
}

/// CRC-32C of the bytes whose checksum is `crc` followed by `bytes`.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    Backend::chosen().append(crc, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_compute_the_standard_crc32c() {
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for backend in [Backend::CrcFast, Backend::Crc32cCrate] {
            // The standard's check value, and the empty input.
            assert_eq!(backend.crc32c(b"123456789"), 0xe306_9283, "{backend:?}");
            assert_eq!(backend.crc32c(b""), 0, "{backend:?}");
            for len in [0, 1, 7, 8, 15, 16, 63, 64, 255, 256, 8191, 8192, 20_000] {
                let other = match backend {
                    Backend::CrcFast => Backend::Crc32cCrate,
                    Backend::Crc32cCrate => Backend::CrcFast,
                };
                let whole = backend.crc32c(&bytes[..len]);
                assert_eq!(whole, other.crc32c(&bytes[..len]), "{backend:?} {len}");
                for cut in [0, 1, 5, 16, len / 2, len] {
                    let (a, b) = bytes[..len].split_at(cut.min(len));
                    let appended = backend.append(backend.crc32c(a), b);
                    assert_eq!(appended, whole, "{backend:?} {len} cut at {cut}");
                }
            }
        }
        // Whichever this CPU uses is one of the two.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xe306_9283);
    }
}
