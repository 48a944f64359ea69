//! Layer 4: the physical optimizer rules: index plans where they win ([`OoodeIndexRule`]),
//! and small index plans kept in one pipeline ([`OoodeOnePipelineRule`]); and the read-ahead
//! of small index scans while they are planned ([`read_ahead`]).

pub mod cost;
pub mod pipeline;
pub mod ranges;
pub mod read_ahead;
pub mod rule;

pub use pipeline::OoodeOnePipelineRule;
pub use read_ahead::read_ahead;
pub use rule::OoodeIndexRule;
