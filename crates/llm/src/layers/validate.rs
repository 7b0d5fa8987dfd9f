use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::truncate_chars;
use crate::output::prune_optional_nulls;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Message, TokenUsage};

/// Longest copy of a bad reply echoed back to the model in the corrective message.
const MAX_ECHOED_REPLY_CHARS: usize = 4_000;
/// Schema violations listed in an error or corrective message.
const MAX_LISTED_VIOLATIONS: usize = 5;

/// Validates replies against the request's output schema (with the `jsonschema` crate) and gives
/// the model one corrective retry when the reply does not parse or does not validate.
///
/// Before validating, `null` members the schema does not require are removed (see
/// [`prune_optional_nulls`](crate::output::prune_optional_nulls)). The corrective retry appends the
/// bad reply as an assistant message and a user message listing what was wrong; both are marked
/// as non-cache-breakpoints so the original state message stays the cache breakpoint. Token usage
/// and cost of both calls are summed.
pub struct ValidatingModel {
    inner: Arc<dyn ChatModel>,
    /// The last compiled schema: an agent sends the same schema every step, and compiling it
    /// costs more than comparing it.
    compiled: Mutex<Option<(Value, Arc<jsonschema::Validator>)>>,
}

impl ValidatingModel {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ChatModel>) -> Self {
        Self {
            inner,
            compiled: Mutex::new(None),
        }
    }

    fn validator(&self, schema: &Value) -> Result<Arc<jsonschema::Validator>, LlmError> {
        let mut cache = self
            .compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((cached_schema, validator)) = cache.as_ref()
            && cached_schema == schema
        {
            return Ok(validator.clone());
        }
        let validator =
            Arc::new(
                jsonschema::validator_for(schema).map_err(|e| LlmError::InvalidRequest {
                    model: self.inner.name().to_owned(),
                    message: format!("the output schema is not a valid JSON Schema: {e}"),
                })?,
            );
        *cache = Some((schema.clone(), validator.clone()));
        Ok(validator)
    }
}

/// A reply that failed: what the model said and why it is wrong.
struct Rejected {
    reply_text: String,
    reason: String,
    usage: TokenUsage,
    cost_usd: Option<f64>,
    model: String,
}

enum Checked {
    Accepted(ChatResponse),
    Rejected(Rejected),
}

impl ValidatingModel {
    async fn attempt(
        &self,
        request: &ChatRequest,
        validator: &jsonschema::Validator,
    ) -> Result<Checked, LlmError> {
        match self.inner.complete(request).await {
            Ok(mut response) => {
                prune_optional_nulls(&mut response.value, &request.output_schema.schema);
                let violations: Vec<String> = validator
                    .iter_errors(&response.value)
                    .take(MAX_LISTED_VIOLATIONS)
                    .map(|e| {
                        let path = e.instance_path().to_string();
                        let at = if path.is_empty() {
                            "(root)".to_owned()
                        } else {
                            path
                        };
                        format!("at {at}: {e}")
                    })
                    .collect();
                if violations.is_empty() {
                    return Ok(Checked::Accepted(response));
                }
                Ok(Checked::Rejected(Rejected {
                    reply_text: response.value.to_string(),
                    reason: format!(
                        "the reply does not match the schema: {}",
                        violations.join("; ")
                    ),
                    usage: response.usage,
                    cost_usd: response.cost_usd,
                    model: response.model,
                }))
            }
            Err(LlmError::InvalidOutput {
                model,
                reason,
                raw_output,
                usage,
            }) => Ok(Checked::Rejected(Rejected {
                reply_text: raw_output,
                reason,
                usage,
                cost_usd: None,
                model,
            })),
            Err(other) => Err(other),
        }
    }
}

fn add_cost(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

fn corrective_request(request: &ChatRequest, rejected: &Rejected) -> ChatRequest {
    let mut corrected = request.clone();
    let echoed = if rejected.reply_text.is_empty() {
        "(empty reply)".to_owned()
    } else {
        truncate_chars(&rejected.reply_text, MAX_ECHOED_REPLY_CHARS)
    };
    corrected
        .messages
        .push(Message::assistant(echoed).with_cache(false));
    corrected.messages.push(
        Message::user(format!(
            "Your previous reply was invalid: {}. Reply again with only a JSON object that \
             matches the required `{}` schema exactly — no prose, no code fences.",
            rejected.reason, request.output_schema.name
        ))
        .with_cache(false),
    );
    corrected
}

#[async_trait]
impl ChatModel for ValidatingModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let validator = self.validator(&request.output_schema.schema)?;
        let first = match self.attempt(request, &validator).await? {
            Checked::Accepted(mut response) => {
                response.latency = started.elapsed();
                return Ok(response);
            }
            Checked::Rejected(rejected) => rejected,
        };
        tracing::warn!(
            model = %first.model,
            reason = %first.reason,
            "invalid model output; sending one corrective retry"
        );
        let retry_request = corrective_request(request, &first);
        match self.attempt(&retry_request, &validator).await {
            Ok(Checked::Accepted(mut response)) => {
                response.usage = first.usage + response.usage;
                response.cost_usd = add_cost(first.cost_usd, response.cost_usd);
                response.latency = started.elapsed();
                Ok(response)
            }
            Ok(Checked::Rejected(second)) => Err(LlmError::InvalidOutput {
                model: second.model,
                reason: format!("{} (after one corrective retry)", second.reason),
                raw_output: second.reply_text,
                usage: first.usage + second.usage,
            }),
            Err(error) => Err(error),
        }
    }
}
