//! Layer 4: the physical optimizer rules: index plans where they win ([`OoodeIndexRule`]),
//! and small index plans kept in one pipeline ([`OoodeOnePipelineRule`]); and what a table's
//! scan reads while the query is planned ([`plan_reads`](mod@plan_reads): the rule's range counts, the
//! read-ahead of small index scans).

pub mod cost;
pub mod pipeline;
pub mod plan_reads;
pub mod ranges;
pub mod rule;

pub use pipeline::OoodeOnePipelineRule;
pub use plan_reads::plan_reads;
pub use rule::OoodeIndexRule;
