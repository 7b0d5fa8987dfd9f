//! Composable wrappers around a [`ChatModel`](crate::ChatModel), each itself a `ChatModel`.
//!
//! [`ModelRegistry::build`](crate::ModelRegistry::build) stacks them as
//! `Instrumented(Validating(Fallback(Timeout(Retry(primary)), <fallback chain>)))`:
//!
//! - [`InstrumentedModel`]: the `model_call` span and the model metrics (latency, tokens,
//!   cost by model).
//! - [`RetryModel`]: 429 / 5xx / 408 / connection errors, exponential backoff with jitter,
//!   `Retry-After` honoured, never sleeping past the call's deadline.
//! - [`TimeoutModel`]: one budget per model call (retries included), propagated as a deadline.
//! - [`FallbackModel`]: switches once and for good after 401 / 402 / 429 / 5xx / unreachable.
//! - [`ValidatingModel`]: JSON Schema validation with one corrective retry.

mod fallback;
mod instrument;
mod retry;
mod timeout;
mod validate;

pub use fallback::FallbackModel;
pub use instrument::{InstrumentedModel, describe_metrics};
pub use retry::{RetryModel, RetryPolicy};
pub use timeout::TimeoutModel;
pub use validate::ValidatingModel;
