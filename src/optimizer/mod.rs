//! Layer 4: the physical optimizer rules: index plans where they win ([`OoodeIndexRule`]),
//! and small index plans kept in one pipeline ([`OoodeOnePipelineRule`]).

pub mod cost;
pub mod pipeline;
pub mod ranges;
pub mod rule;

pub use pipeline::OoodeOnePipelineRule;
pub use rule::OoodeIndexRule;
