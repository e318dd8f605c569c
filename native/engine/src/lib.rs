//! The gatekeeper's decision engine, sans-I/O: plain functions over a line, its conversation's state and the
//! route's policy, no Python and no I/O (the bindings, `rwcore._native`, stay thin; cargo tests and fuzzes it alone).
//!
//! It holds what has been ported from `gatekeeper.policy` so far (issue 33 ports the rest: the batch):
//!
//! - [`decide`]: the verdict table, row by row, over an [`decide::Env`] that reads the conversation's state;
//! - [`authority`]: who may say what in a thread, as data;
//! - [`gate`]: the input rules a value meets before it is parsed, and the calendar rule after;
//! - [`rules`]: the message ids the gatekeeper keeps for itself, and the shapes of an answer to a question;
//! - [`state`]: a conversation's loaded state, its entries read and written in the stored JSON ([`json`]), the
//!   effects applied to it;
//! - [`lifecycle`]: a handoff's deadlines and its place in the lifecycle indexes;
//! - [`outcomes`]: the records a decided line produces, by trim level, their text masked ([`masking`]) and their
//!   JSON made inert ([`inert`]);
//! - [`notices`]: the refusal notice a dead-lettered line's sender is told;
//! - [`record_batch`]: the outcomes' records as the Kafka record batches the producer sends.

pub mod authority;
pub mod decide;
pub mod gate;
pub mod inert;
pub mod json;
pub mod lifecycle;
pub mod masking;
pub mod notices;
pub mod outcomes;
pub mod record_batch;
pub mod rules;
pub mod state;
