//! DataFusion integration of ooode (layer 5): the table provider, `STORED AS OOODE`, and the
//! one call that registers everything.
//!
//! ```no_run
//! # async fn demo() -> datafusion::common::Result<()> {
//! let ctx = ooode_providers::ooode_context(datafusion::prelude::SessionConfig::new());
//! ctx.sql("CREATE EXTERNAL TABLE orders STORED AS OOODE LOCATION 'data/sf0.1/ooode/orders'")
//!     .await?;
//! ctx.sql("SET ooode.execution_mode = 'in_order'").await?;
//! ctx.sql("SELECT count(*) FROM orders WHERE o_custkey = 42").await?.show().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod factory;
pub mod provider;
pub mod register;
pub mod writer;

pub use factory::OoodeTableFactory;
pub use provider::OoodeTable;
pub use register::{ooode_context, with_ooode};
pub use writer::{OoodeFormatFactory, OoodeWriteExec};
