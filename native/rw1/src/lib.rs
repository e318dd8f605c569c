//! The RW1 handoff protocol, sans-I/O: plain functions over text, no Python and no I/O, so that the bindings
//! (`rwcore._native`) stay thin and the logic is tested and fuzzed with cargo alone.
//!
//! It holds what has been ported from rwcore's Python so far (issue 33 ports the rest, then the decision engine):
//!
//! - [`digest`]: the protocol's tier-2 integrity digest, `h=`;
//! - [`encode`]: a twin's values to its line;
//! - [`grammar`]: a profile compiled for the parser;
//! - [`parse`]: a line to its JSON twin and its findings, in the reference's order and words;
//! - [`pytext`]: Python's text semantics (digits, whitespace, `repr`) the grammar is defined by.

pub mod digest;
pub mod encode;
pub mod grammar;
pub mod parse;
pub mod pytext;
#[rustfmt::skip] // written by tools/pytext_tables.py, checked by a test against the Python that runs it
mod pytext_tables;

pub use digest::digest;
pub use grammar::{Grammar, Vocabulary};
pub use parse::{parse, Parsed, Problem, Twin, Value};
