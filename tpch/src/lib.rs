//! TPC-H for ooode: data generation and loading (ooode tables and the Parquet baseline).

pub mod datagen;
pub mod tables;
