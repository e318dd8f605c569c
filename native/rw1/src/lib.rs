//! The RW1 handoff protocol, sans-I/O: plain functions over text, no Python and no I/O, so that the bindings
//! (`rwcore._native`) stay thin and the logic is tested and fuzzed with cargo alone.
//!
//! It holds what has been ported from rwcore's Python so far (issue 33 ports the rest, then the decision engine):
//!
//! - [`digest`]: the protocol's tier-2 integrity digest, `h=`.

pub mod digest;

pub use digest::digest;
