//! The queue edge: inference requests consumed from a NATS JetStream stream through a
//! durable pull consumer that every replica shares (each message goes to one of them),
//! each answered with one message whose body is what REST would answer.
//!
//! The edge only translates, as REST and gRPC do: a message's subject names the model, its
//! body is a REST request body, and it runs through the same [`InferCall`] and the same
//! status table ([`crate::api::ServeError::status`]). What the edge owns is delivery: a
//! message is acknowledged only once its answer is published, an overloaded model hands its
//! message back to the stream for later, a replica that dies leaves its messages to the
//! others, and a message nobody manages to answer gets an error answer after its last
//! delivery ([`poison`]). See docs/api.md ("NATS JetStream") and docs/operations.md.
//!
//! [`InferCall`]: crate::api::InferCall

mod consume;
mod message;
pub mod metrics;
mod poison;
mod publish;
mod settings;
mod setup;
mod status;

pub use consume::{serve, NatsEdge};
pub use settings::{NatsSettings, Readiness};
pub use status::NATS_EDGE;
