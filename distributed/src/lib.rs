//! ooode on several machines, through datafusion-distributed.
//!
//! A **sharded table** is split by a hash of its distribution key into shards, each an
//! ordinary ooode table on one worker's local disk; a small shard map in a directory of the
//! coordinator says which worker holds which shard. **Workers** (`ooode worker`, or
//! [`worker::serve`]) hold shards and run query stages; the **coordinator** (`ooode
//! --workers`, or a session built with [`with_ooode_distributed`]) plans queries, and
//! datafusion-distributed runs the stage that reads each shard on the worker holding it.
//!
//! ```sql
//! COPY (SELECT * FROM 'lineitem.parquet') TO 'tables/lineitem' STORED AS OOODE
//!   OPTIONS ('ooode.clustering_key' 'l_orderkey', 'ooode.shards' '6',
//!            'ooode.workers' '10.0.0.1:7001,10.0.0.2:7001,10.0.0.3:7001');
//! CREATE EXTERNAL TABLE lineitem STORED AS OOODE LOCATION 'tables/lineitem';
//! ```

#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod hash;
pub mod insert;
pub mod load;
pub mod lookup;
mod node_codec;
pub mod planner;
pub mod rule;
pub mod scan;
pub mod service;
pub mod session;
pub mod shard_map;
pub mod stats;
pub mod stores;
pub mod table;
pub mod table_codec;
pub mod worker;

pub use codec::OoodeCodec;
pub use scan::{ShardScanExec, ShardScanSpec};
pub use session::with_ooode_distributed;
pub use shard_map::ShardMap;
pub use table::ShardedTable;
pub use table_codec::OoodeTableCodec;
pub use worker::{LocalShards, WorkerReads, serve, serve_with_runtime};
