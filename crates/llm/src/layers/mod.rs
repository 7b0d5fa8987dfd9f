//! Composable wrappers around a [`ChatModel`](crate::ChatModel), each itself a `ChatModel`.
//!
//! [`ModelRegistry::build`](crate::ModelRegistry::build) stacks them as
//! `Validating(Fallback(Timeout(Retry(primary)), <fallback chain>))`:
//!
//! - [`RetryModel`]: 429 / 5xx / 408 / connection errors, exponential backoff with jitter,
//!   `Retry-After` honoured, never sleeping past the call's deadline.
//! - [`TimeoutModel`]: one budget per model call (retries included), propagated as a deadline.
//! - [`FallbackModel`]: switches once and for good after 401 / 402 / 429 / 5xx / unreachable.
//! - [`ValidatingModel`]: JSON Schema validation with one corrective retry.

mod fallback;
mod retry;
mod timeout;
mod validate;

pub use fallback::FallbackModel;
pub use retry::{RetryModel, RetryPolicy};
pub use timeout::TimeoutModel;
pub use validate::ValidatingModel;
