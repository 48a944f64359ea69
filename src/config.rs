//! The `ooode` session settings (`SET ooode.<name> = <value>`), a DataFusion ConfigExtension.
//!
//! Written out rather than made with DataFusion's `extensions_options!`: that macro lists an
//! extension's entries without their prefix, so `SHOW ooode.execution_mode` was refused and
//! `information_schema.df_settings` showed `execution_mode` instead of `ooode.execution_mode`.

use std::any::Any;
use std::fmt::Display;
use std::str::FromStr;

use datafusion::common::config::{
    ConfigEntry, ConfigExtension, ConfigField, ExtensionOptions, Visit,
};
use datafusion::common::{DataFusionError, Result};

/// How plans run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ExecutionMode {
    /// Many small tasks, thousands of reads in flight (default).
    #[default]
    OutOfOrder,
    /// Synchronous reads, one outstanding read, one step at a time: the paper's IODE baseline.
    InOrder,
}

/// When the optimizer uses index plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexJoinMode {
    /// Where the cost estimate says the index wins (default).
    #[default]
    Auto,
    /// Wherever an index fits (for experiments such as the paper's).
    Always,
    /// Never: DataFusion's own plans.
    Never,
}

macro_rules! enum_option {
    ($t:ty, $($variant:path => $text:literal),+) => {
        impl FromStr for $t {
            type Err = DataFusionError;
            fn from_str(s: &str) -> Result<Self> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($text => Ok($variant),)+
                    other => Err(DataFusionError::Configuration(format!(
                        "'{other}' is not a valid value: expected one of {}",
                        [$($text),+].join(", ")
                    ))),
                }
            }
        }
        impl Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let text = match self { $($variant => $text,)+ };
                f.write_str(text)
            }
        }
    };
}

enum_option!(ExecutionMode, ExecutionMode::OutOfOrder => "out_of_order", ExecutionMode::InOrder => "in_order");
enum_option!(IndexJoinMode, IndexJoinMode::Auto => "auto", IndexJoinMode::Always => "always", IndexJoinMode::Never => "never");

/// A number of bytes, written plainly (`1048576`) or with a unit (`64MiB`, `64M`, `1GB`; all
/// powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteSize(pub usize);

impl FromStr for ByteSize {
    type Err = DataFusionError;
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(bad_bytes(s)),
        };
        let n: usize = digits.parse().map_err(|_| bad_bytes(s))?;
        n.checked_mul(1 << shift)
            .map(ByteSize)
            .ok_or_else(|| bad_bytes(s))
    }
}

fn bad_bytes(s: &str) -> DataFusionError {
    DataFusionError::Configuration(format!(
        "'{s}' is not a size: expected a number of bytes, optionally with a unit (KiB, MiB, GiB)"
    ))
}

impl Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A count within `[MIN, MAX]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded<const MIN: usize, const MAX: usize>(pub usize);

impl<const MIN: usize, const MAX: usize> FromStr for Bounded<MIN, MAX> {
    type Err = DataFusionError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().parse::<usize>() {
            Ok(n) if (MIN..=MAX).contains(&n) => Ok(Self(n)),
            _ => Err(DataFusionError::Configuration(format!(
                "'{s}' is not a valid value: expected a whole number from {MIN} to {MAX}"
            ))),
        }
    }
}

impl<const MIN: usize, const MAX: usize> Display for Bounded<MIN, MAX> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A fraction in `[0, 1]` (or a positive ratio, for `index_cost_ratio`).
fn parse_ratio(s: &str, max: f64) -> Result<f64> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 && x <= max => Ok(x),
        _ => Err(DataFusionError::Configuration(format!(
            "'{s}' is not a valid value: expected a number from 0 to {max}"
        ))),
    }
}

fn parse_bool(s: &str) -> Result<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(DataFusionError::Configuration(format!(
            "'{s}' is not a valid value: expected true or false"
        ))),
    }
}

/// The default `ooode.max_long_queries`: twice the cores this process may use.
fn default_long_queries() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Largest `ooode.short_query_reads`.
const MAX_SHORT_QUERY_READS: usize = 1 << 40;

/// Most reads in flight one setting can ask for.
pub const MAX_READS_IN_FLIGHT: usize = 32768;

/// Settings of ooode, under the prefix `ooode.`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OoodeConfig {
    /// `out_of_order` (default) or `in_order` (synchronous reads, one at a time).
    pub execution_mode: ExecutionMode,
    /// `auto` (cost-based, default), `always` (index plans wherever an index fits) or
    /// `never` (DataFusion's own plans).
    pub index_join: IndexJoinMode,
    /// Most page reads in flight for one query.
    pub max_outstanding_io: usize,
    /// Most page reads in flight or read and not yet used, for all queries of a runtime
    /// together, shared fairly between them: bounds the pages they hold.
    pub max_outstanding_io_total: usize,
    /// Most reads of local tables at the device at once (0: no limit but the one above);
    /// the others wait in ooode's own queue, ordered by query size, where a small query's
    /// reads overtake a large one's. Trades throughput for latency: see docs/log.md.
    pub device_queue_depth: usize,
    /// In order, microseconds a thread polls for its read's completion before it sleeps
    /// (O_DIRECT files; 0: sleep at once).
    pub in_order_poll_us: u64,
    /// Most queries estimated to read more than `short_query_reads` pages that run their
    /// ooode operators' reads at once; later ones wait their turn (0: no limit; default
    /// twice the cores). See `access::slots`.
    pub max_long_queries: usize,
    /// Queries estimated to read at most this many pages never wait for a turn.
    pub short_query_reads: u64,
    /// Percent of `max_outstanding_io_total` that queries not estimated long (to read more
    /// than `short_query_reads` pages) may have in flight above it, so that a short query's
    /// read finds a permit at once whatever long queries hold. See `access::admission`.
    pub short_query_io_reserve_percent: usize,
    /// Beside short queries (another query executing, a short one started within the last
    /// 5 s), the operators of queries estimated to read more than `short_query_reads` pages
    /// run on threads of ooode's own at the OS's idle priority, so that short queries' work
    /// takes the cores first. See `access::idle_lane`.
    pub long_queries_idle_priority: bool,
    /// Index plans are used in `auto` when their estimated page reads are below this
    /// fraction of the pages a full scan reads.
    pub index_cost_ratio: f64,
    /// The same for tables in object storage.
    pub remote_index_cost_ratio: f64,
    /// Full scans read the table's Parquet copy instead of its heap pages.
    pub columnar_scan: bool,
    /// Index scans and index joins that need only an index's key columns read them from
    /// its leaves, not the heap.
    pub index_only_scans: bool,
    /// Read with O_DIRECT (bypassing the OS page cache).
    pub direct_io: bool,
    /// Buffer pool size in bytes (0: a quarter of physical memory).
    pub buffer_pool_bytes: usize,
    /// Under a finite DataFusion memory limit, the largest share of it the buffer pool
    /// takes (the rest stays for queries).
    pub buffer_pool_memory_fraction: f64,
    /// Directory of the local flash cache of pages of tables in object storage (empty: none).
    pub disk_cache_path: String,
    /// Most bytes that cache holds.
    pub disk_cache_bytes: usize,
    /// After an INSERT, the table is compacted when it has more segments than this (0:
    /// never).
    pub compact_segments: usize,
    /// Seconds a table in object storage keeps the segments a compaction or an `INSERT
    /// OVERWRITE` replaced (queries of other processes may still read them; object storage
    /// has no locks to tell) and the uploads of inserts that never committed; a later
    /// compaction removes what is older. Sharded tables keep the shards a replacing load
    /// or `INSERT OVERWRITE` replaced as long, removed by a later write of the table.
    pub remote_retention_secs: u64,
}

impl Default for OoodeConfig {
    fn default() -> Self {
        Self {
            execution_mode: ExecutionMode::OutOfOrder,
            index_join: IndexJoinMode::Auto,
            max_outstanding_io: 256,
            max_outstanding_io_total: 256,
            // Off: on this project's VM a queue of 64 cut the median latency at 16 clients
            // by a quarter and cost 6-13 % of the queries per second at 64 (docs/log.md).
            device_queue_depth: 0,
            // About one read of this project's disk at depth 1: in order at 10 % of Fig. 4
            // then read ~1.4x the pages per second of sleeping for each read (docs/log.md).
            in_order_poll_us: crate::io::sync_engine::DEFAULT_POLL_US,
            // Twice the cores: on this project's VM (2 cores), 4 at 64 clients gave the same
            // or more queries per second for ~20 % less CPU per query and half the p99
            // latency; 2 were too few, 8 no better (docs/log.md).
            max_long_queries: default_long_queries(),
            // A point lookup (the Fig. 4 chain over one customer) read 20-24 pages in the
            // concurrency benchmark; the other queries of its mix were estimated at a median
            // of 1-2 K reads (size class 10-11).
            short_query_reads: 256,
            // 64 of the default 256: at 64 clients (SF 1, 2 cores) it cut the point lookups'
            // p99 after the clients' first queries and their reads' time in the kernel, at
            // the same queries per second; a long query alone does not leave it (docs/log.md).
            short_query_io_reserve_percent: 25,
            // At 64 clients it halved the median latency at the same queries per second
            // (docs/log.md); alone, a long query never uses it.
            long_queries_idle_priority: true,
            // 0.5 lets the Fig. 4 chain at 0.1 % of customers run on indexes, where it beat
            // the Parquet scans 1.5x cold and 3.5x hot at SF 1 on one SSD and 2 cores.
            index_cost_ratio: 0.5,
            // Over a store with 20 ms per request (SF 1, 2 cores), the Fig. 4 chain at 0.1 %
            // of customers took 0.69 s on indexes reading orders' heap against 0.32 s
            // scanning the Parquet copies, hence 0.05 then. Read index-only (orders' keys from
            // their leaves) the index plan took 0.21 s cold against the scans' 0.23 s, and
            // 7 ms hot against 138 ms; at 1 % 2.2 s against 0.26 s. 0.2 puts 0.1 % (an
            // estimated 2.9 K lineitem pages against 0.2 x 18.7 K) on indexes, 1 % (30 K) on
            // scans.
            remote_index_cost_ratio: 0.2,
            columnar_scan: true,
            index_only_scans: true,
            direct_io: true,
            buffer_pool_bytes: 0,
            buffer_pool_memory_fraction: 0.5,
            disk_cache_path: String::new(),
            disk_cache_bytes: 1 << 30,
            compact_segments: 0,
            remote_retention_secs: 3600,
        }
    }
}

/// Name, description, and how to show and set each setting.
struct Setting {
    name: &'static str,
    description: &'static str,
    show: fn(&OoodeConfig) -> String,
    set: fn(&mut OoodeConfig, &str) -> Result<()>,
}

const SETTINGS: &[Setting] = &[
    Setting {
        name: "execution_mode",
        description: "out_of_order (default: many small tasks, thousands of reads in flight) or \
                      in_order (synchronous reads, one at a time: the paper's IODE baseline)",
        show: |c| c.execution_mode.to_string(),
        set: |c, v| {
            c.execution_mode = v.parse()?;
            Ok(())
        },
    },
    Setting {
        name: "index_join",
        description: "auto (cost-based, default), always (index plans wherever an index fits) \
                      or never (DataFusion's own plans)",
        show: |c| c.index_join.to_string(),
        set: |c, v| {
            c.index_join = v.parse()?;
            Ok(())
        },
    },
    Setting {
        name: "max_outstanding_io",
        description: "Most page reads in flight for one query",
        show: |c| c.max_outstanding_io.to_string(),
        set: |c, v| {
            c.max_outstanding_io = v.parse::<Bounded<1, MAX_READS_IN_FLIGHT>>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "max_outstanding_io_total",
        description: "Most page reads in flight or read and not yet used, for all queries of a \
                      runtime together, shared fairly between the queries that want more \
                      (default 256); queries not estimated long may go above it by \
                      short_query_io_reserve_percent",
        show: |c| c.max_outstanding_io_total.to_string(),
        set: |c, v| {
            c.max_outstanding_io_total = v.parse::<Bounded<1, MAX_READS_IN_FLIGHT>>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "device_queue_depth",
        description: "Most reads of local tables at the device at once (default 0: no limit \
                      but max_outstanding_io_total); the others wait in ooode's queue, smaller \
                      queries first: lower latency for small queries, fewer queries per second",
        show: |c| c.device_queue_depth.to_string(),
        set: |c, v| {
            c.device_queue_depth = v.parse::<Bounded<0, MAX_READS_IN_FLIGHT>>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "in_order_poll_us",
        description: "In in_order mode, microseconds a thread polls for its read to complete \
                      before it sleeps (default 100; 0: sleep at once). Polling keeps the CPU \
                      running between reads: faster in order, at the cost of a busy core",
        show: |c| c.in_order_poll_us.to_string(),
        set: |c, v| {
            c.in_order_poll_us = v.parse::<Bounded<0, 1_000_000>>()?.0 as u64;
            Ok(())
        },
    },
    Setting {
        name: "max_long_queries",
        description: "Most queries estimated to read more than short_query_reads pages that \
                      read at once; others wait for a turn (default: twice the cores; 0: no \
                      limit). Fewer queries at once use less CPU per query under load. A query \
                      holds its turn only while its operators have reads to do",
        show: |c| c.max_long_queries.to_string(),
        set: |c, v| {
            c.max_long_queries = v.parse::<Bounded<0, 65536>>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "short_query_reads",
        description: "Queries estimated to read at most this many pages never wait for a turn \
                      among long queries (default 256)",
        show: |c| c.short_query_reads.to_string(),
        set: |c, v| {
            c.short_query_reads = v.parse::<Bounded<0, MAX_SHORT_QUERY_READS>>()?.0 as u64;
            Ok(())
        },
    },
    Setting {
        name: "short_query_io_reserve_percent",
        description: "Percent of max_outstanding_io_total that queries not estimated to \
                      read more than short_query_reads pages may have in flight above it, so \
                      that short queries' reads find a permit at once whatever long queries \
                      hold (default 25; 0: none). One grant in eight to the classes in turn \
                      may use it for a long query too, so long queries keep moving",
        show: |c| c.short_query_io_reserve_percent.to_string(),
        set: |c, v| {
            c.short_query_io_reserve_percent = v.parse::<Bounded<0, 90>>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "long_queries_idle_priority",
        description: "Beside short queries (another query executing and a short one started \
                      within 5 s), operators of queries estimated to read more than \
                      short_query_reads pages run on ooode's own threads at the OS's idle \
                      priority, so short queries' work takes the cores first (default true)",
        show: |c| c.long_queries_idle_priority.to_string(),
        set: |c, v| {
            c.long_queries_idle_priority = parse_bool(v)?;
            Ok(())
        },
    },
    Setting {
        name: "index_cost_ratio",
        description: "In auto, index plans are used when their estimated page reads are below \
                      this fraction of the pages a full scan reads",
        show: |c| c.index_cost_ratio.to_string(),
        set: |c, v| {
            c.index_cost_ratio = parse_ratio(v, 1e6)?;
            Ok(())
        },
    },
    Setting {
        name: "remote_index_cost_ratio",
        description: "ooode.index_cost_ratio for tables in object storage, where an index \
                      plan's pages are a request each (default 0.05)",
        show: |c| c.remote_index_cost_ratio.to_string(),
        set: |c, v| {
            c.remote_index_cost_ratio = parse_ratio(v, 1e6)?;
            Ok(())
        },
    },
    Setting {
        name: "columnar_scan",
        description: "Full scans read the table's Parquet copy instead of its heap pages",
        show: |c| c.columnar_scan.to_string(),
        set: |c, v| {
            c.columnar_scan = parse_bool(v)?;
            Ok(())
        },
    },
    Setting {
        name: "index_only_scans",
        description: "Index scans and index joins that need only an index's key columns read \
                      them from its leaves, not the heap",
        show: |c| c.index_only_scans.to_string(),
        set: |c, v| {
            c.index_only_scans = parse_bool(v)?;
            Ok(())
        },
    },
    Setting {
        name: "direct_io",
        description: "Read pages with O_DIRECT, bypassing the OS page cache",
        show: |c| c.direct_io.to_string(),
        set: |c, v| {
            c.direct_io = parse_bool(v)?;
            Ok(())
        },
    },
    Setting {
        name: "buffer_pool_bytes",
        description: "Buffer pool size in bytes, or with a unit (64MiB); 0: a quarter of \
                      physical memory. Takes effect at the next query",
        show: |c| c.buffer_pool_bytes.to_string(),
        set: |c, v| {
            c.buffer_pool_bytes = v.parse::<ByteSize>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "buffer_pool_memory_fraction",
        description: "Under a finite DataFusion memory limit, the largest share of it the \
                      buffer pool takes (the rest stays for queries)",
        show: |c| c.buffer_pool_memory_fraction.to_string(),
        set: |c, v| {
            c.buffer_pool_memory_fraction = parse_ratio(v, 1.0)?;
            Ok(())
        },
    },
    Setting {
        name: "disk_cache_path",
        description: "Directory of a local flash cache of the pages of tables in object \
                      storage (empty, the default: no cache). Takes effect for tables opened \
                      after it is set; emptied when a process starts using it",
        show: |c| c.disk_cache_path.clone(),
        set: |c, v| {
            c.disk_cache_path = v.trim().to_string();
            Ok(())
        },
    },
    Setting {
        name: "disk_cache_bytes",
        description: "Most bytes the disk cache holds (default 1GiB)",
        show: |c| c.disk_cache_bytes.to_string(),
        set: |c, v| {
            c.disk_cache_bytes = v.parse::<ByteSize>()?.0;
            Ok(())
        },
    },
    Setting {
        name: "compact_segments",
        description: "After an INSERT, compact the table (merge its segments into one) when \
                      it has more segments than this; 0, the default: never (compact with \
                      SELECT * FROM ooode_compact('t'))",
        show: |c| c.compact_segments.to_string(),
        set: |c, v| {
            c.compact_segments = v.trim().parse().map_err(|_| {
                DataFusionError::Configuration(format!(
                    "ooode.compact_segments must be a number of segments, not '{v}'"
                ))
            })?;
            Ok(())
        },
    },
    Setting {
        name: "remote_retention_secs",
        description: "Tables in object storage: seconds the segments replaced by a compaction \
                      or INSERT OVERWRITE, and uploads of inserts that never committed, are \
                      kept (queries in other processes may still read them) before a later \
                      compaction removes them; sharded tables: seconds replaced shards are \
                      kept on the workers before a later write removes them",
        show: |c| c.remote_retention_secs.to_string(),
        set: |c, v| {
            c.remote_retention_secs = v.trim().parse().map_err(|_| {
                DataFusionError::Configuration(format!(
                    "ooode.remote_retention_secs must be a number of seconds, not '{v}'"
                ))
            })?;
            Ok(())
        },
    },
];

impl ConfigExtension for OoodeConfig {
    const PREFIX: &'static str = "ooode";
}

impl ExtensionOptions for OoodeConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        ConfigField::set(self, key, value)
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        SETTINGS
            .iter()
            .map(|s| ConfigEntry {
                key: format!("{}.{}", Self::PREFIX, s.name),
                value: Some((s.show)(self)),
                description: s.description,
            })
            .collect()
    }
}

impl ConfigField for OoodeConfig {
    fn visit<V: Visit>(&self, v: &mut V, key_prefix: &str, _description: &'static str) {
        for s in SETTINGS {
            let key = if key_prefix.is_empty() {
                s.name.to_string()
            } else {
                format!("{key_prefix}.{}", s.name)
            };
            v.some(&key, (s.show)(self), s.description);
        }
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let Some(setting) = SETTINGS.iter().find(|s| s.name == key) else {
            let names: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
            return Err(DataFusionError::Configuration(format!(
                "'ooode.{key}' is not an ooode setting: expected one of {}",
                names.join(", ")
            )));
        };
        (setting.set)(self, value)
            .map_err(|e| DataFusionError::Configuration(format!("ooode.{key}: {}", e.message())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_show_and_refuse() {
        let mut c = OoodeConfig::default();
        ConfigField::set(&mut c, "execution_mode", "IN_ORDER").unwrap();
        ConfigField::set(&mut c, "buffer_pool_bytes", "64MiB").unwrap();
        ConfigField::set(&mut c, "max_outstanding_io", "1024").unwrap();
        ConfigField::set(&mut c, "in_order_poll_us", "0").unwrap();
        assert_eq!(c.in_order_poll_us, 0);
        assert_eq!(c.execution_mode, ExecutionMode::InOrder);
        assert_eq!(c.buffer_pool_bytes, 64 << 20);
        let entries = c.entries();
        let get = |k: &str| entries.iter().find(|e| e.key == k).unwrap().value.clone();
        assert_eq!(get("ooode.execution_mode").as_deref(), Some("in_order"));
        assert_eq!(get("ooode.max_outstanding_io").as_deref(), Some("1024"));
        assert_eq!(get("ooode.in_order_poll_us").as_deref(), Some("0"));
        assert_eq!(entries.len(), SETTINGS.len());
        for (key, value) in [
            ("max_outstanding_io", "0"),
            ("max_outstanding_io", "many"),
            ("buffer_pool_bytes", "12 parsecs"),
            ("buffer_pool_memory_fraction", "1.5"),
            ("direct_io", "maybe"),
            ("in_order_poll_us", "-1"),
            ("in_order_poll_us", "2000000"),
            ("no_such_thing", "1"),
        ] {
            let e = ConfigField::set(&mut c, key, value)
                .unwrap_err()
                .to_string();
            assert!(e.contains("ooode."), "{key}={value}: {e}");
        }
        assert_eq!(
            c.max_outstanding_io, 1024,
            "a refused value changes nothing"
        );
    }
}
