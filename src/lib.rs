//! # ooode: out-of-order execution for Apache DataFusion
//!
//! ooode runs selective analytic queries (index scans and chains of index nested-loop joins)
//! by keeping thousands of page reads in flight and letting each completion drive the next
//! computation, after the out-of-order database engine (OoODE) of the University of Tokyo.
//!
//! This crate holds the engine's layers below DataFusion's integration:
//! - [`storage`]: the table format (pages, manifest, B+tree indexes, heap codec) and the loader.
//! - [`io`]: page reads (io_uring, pread, object_store), the buffer pool and I/O metrics.
//! - [`access`]: reading tables: the runtime per DataFusion `RuntimeEnv`, admission and
//!   per-query budgets, B+tree and heap page steps, plan-time counts and read-ahead.
//! - [`exec`]: the plan nodes (index scan, index nested-loop join, full scan).
//! - [`optimizer`]: the rules that put them where they win.
//! - [`config`]: the `ooode.*` settings.
//!
//! ```
//! use std::sync::Arc;
//! use arrow::array::{Int64Array, RecordBatch, StringArray};
//! use arrow::datatypes::{DataType, Field, Schema};
//! use ooode::storage::{KeyEncoder, KeyRange, LoadOptions, Table, load_batches};
//!
//! let schema = Arc::new(Schema::new(vec![
//!     Field::new("id", DataType::Int64, false),
//!     Field::new("name", DataType::Utf8, false),
//! ]));
//! let batch = RecordBatch::try_new(schema.clone(), vec![
//!     Arc::new(Int64Array::from(vec![3, 1, 2])),
//!     Arc::new(StringArray::from(vec!["c", "a", "b"])),
//! ]).unwrap();
//! let dir = tempfile::tempdir().unwrap();
//! let options = LoadOptions { clustering_key: vec!["id".into()], indexes: vec![vec!["name".into()]],
//!                             ..Default::default() };
//! load_batches(dir.path().join("t"), schema.clone(), [Ok::<_, String>(batch)], options).unwrap();
//!
//! let table = Table::open(dir.path().join("t")).unwrap();
//! let index = table.index_on(&["name"]).unwrap();
//! let key = KeyEncoder::new(&[schema.field(1).clone().into()]).unwrap()
//!     .encode_row(&[Arc::new(StringArray::from(vec!["b"]))], 0).unwrap();
//! let rows = table.fetch_rows(&index.lookup(KeyRange::point(key)).unwrap(), None).unwrap();
//! assert_eq!(rows.num_rows(), 1);
//! ```

#![warn(missing_docs)]

pub mod access;
pub mod config;
pub mod exec;
pub mod io;
pub mod optimizer;
pub mod storage;
