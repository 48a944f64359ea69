//! TPC-H for ooode: data generation and loading (ooode tables and the Parquet baseline), and
//! the I/O benchmark against fio.

pub mod datagen;
pub mod fig4;
pub mod iobench;
pub mod runner;
pub mod tables;
