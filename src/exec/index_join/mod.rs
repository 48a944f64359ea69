//! Index nested-loop join: for each outer row, look its key up in an index of an ooode table.

mod exec;
mod output;
mod stream;

pub use exec::{IndexJoinBuilder, IndexJoinExec, IndexJoinKind, InnerSide};

#[cfg(test)]
mod tests;
