//! TPC-H for ooode: data generation and loading (ooode tables and the Parquet baseline), the
//! 22 queries, the paper's Fig. 4 sweep and Q3'...Q17', many clients at once, the I/O benchmark
//! against fio, and the JSON and SVG reports of a run.

pub mod ceiling;
pub mod concurrency;
pub mod datagen;
pub mod fig4;
pub mod fresh;
pub mod inserts;
pub mod iobench;
pub mod job;
pub mod paper;
pub mod remote;
pub mod report;
pub mod runner;
pub mod s3;
pub mod scale;
pub mod segments;
pub mod svg;
pub mod tables;
