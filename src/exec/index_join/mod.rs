//! Index nested-loop join: for each outer row, look its key up in an index of an ooode table.

mod exec;
mod inner_page;
mod outer_keys;
mod output;
mod stream;

pub use exec::{IndexJoinBuilder, IndexJoinExec, IndexJoinKind, InnerSide};

#[cfg(test)]
mod tests;
