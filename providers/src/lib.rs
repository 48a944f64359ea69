//! DataFusion integration of ooode (layer 5): the table provider, `STORED AS OOODE`,
//! `COPY ... STORED AS OOODE`, the `ooode.*` settings and the one call that registers them with
//! ooode's optimizer rule ([`with_ooode`] on a `SessionStateBuilder`, or [`ooode_context`]).
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> datafusion::common::Result<()> {
//! use datafusion::arrow::array::AsArray;
//! use datafusion::arrow::datatypes::Int64Type;
//!
//! let dir = tempfile::tempdir()?;
//! let table = dir.path().join("t").display().to_string();
//! let ctx = ooode_providers::ooode_context(datafusion::prelude::SessionConfig::new());
//! // A table from any query: clustered by id, with a secondary index on grp.
//! ctx.sql(&format!(
//!     "COPY (SELECT value AS id, value % 100 AS grp FROM generate_series(1, 10000)) \
//!      TO '{table}' STORED AS OOODE \
//!      OPTIONS ('ooode.clustering_key' 'id', 'ooode.indexes' 'grp')"
//! )).await?.collect().await?;
//! ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{table}'"))
//!     .await?.collect().await?;
//! // Read through the grp index: out of order by default; `in_order` is the baseline.
//! ctx.sql("SET ooode.execution_mode = 'in_order'").await?.collect().await?;
//! let batches = ctx.sql("SELECT count(*) FROM t WHERE grp = 42").await?.collect().await?;
//! assert_eq!(batches[0].column(0).as_primitive::<Int64Type>().value(0), 100);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod checked_store;
pub mod compact;
pub mod factory;
pub mod insert;
mod parquet_copy;
pub mod plan_cache;
pub mod prepared;
pub mod provider;
pub mod register;
pub mod remote;
pub mod upload;
pub mod writer;

pub use compact::{CompactFunction, CompactReport, compact_table};
pub use factory::OoodeTableFactory;
pub use plan_cache::{PlanCache, PlanCacheStats, PlannedSql};
pub use prepared::PreparedQuery;
pub use provider::OoodeTable;
pub use register::{ooode_context, ooode_runtime, with_ooode};
pub use writer::{Destination, OoodeCopyOptions, OoodeCopySink, OoodeFormatFactory};
