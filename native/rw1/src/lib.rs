//! The RW1 handoff protocol, sans-I/O: plain functions over text, no Python and no I/O, so that the bindings
//! (`rwcore._native`) stay thin and the logic is tested and fuzzed with cargo alone.
//!
//! It holds what has been ported from rwcore's Python so far (issue 33 ports the rest, then the decision engine):
//!
//! - [`acc`]: tier 4, the sender's criteria against the receiver's;
//! - [`checks`]: the HO against the record, the readback against the HO, the done report against the plan;
//! - [`canon`]: a message's canonical JSON, what the digest is taken over;
//! - [`digest`]: the protocol's tier-2 integrity digest, `h=`;
//! - [`encode`]: a twin's values to its line;
//! - [`grammar`]: a profile compiled for the parser;
//! - [`keys`]: maps and sets of a profile's short names, looked up once per token;
//! - [`legend`]: the text a model needs in its prompt to read and write lines under a profile;
//! - [`parse`]: a line to its JSON twin and its findings, in the reference's order and words;
//! - [`thread`]: the closing rule over a conversation, as an incremental state machine;
//! - [`translation`]: the pay profile's translation rules;
//! - [`pytext`]: Python's text semantics (digits, whitespace, `repr`) the grammar is defined by;
//! - [`value`]: a decoded value, with Python's equality and `str`.

pub mod acc;
pub mod canon;
pub mod checks;
pub mod digest;
pub mod encode;
pub mod grammar;
pub mod keys;
pub mod legend;
pub mod parse;
pub mod problem;
pub mod pytext;
pub mod thread;
pub mod translation;
pub mod value;
#[rustfmt::skip] // written by tools/pytext_tables.py, checked by a test against the Python that runs it
mod pytext_tables;

pub use digest::digest;
pub use grammar::{Grammar, Vocabulary};
pub use parse::{parse, Parsed, Problem, Twin, Value};
