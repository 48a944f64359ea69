//! Layer 4: the physical optimizer rule that puts index plans where they win.

pub mod cost;
pub mod ranges;
pub mod rule;

pub use rule::OoodeIndexRule;
