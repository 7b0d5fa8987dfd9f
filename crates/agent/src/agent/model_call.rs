//! Model calls: one bounded, stop-cancellable call that accounts usage and time in the step's
//! [`StepAcc`] and turns errors and timeouts into text the model sees next step; parsing the
//! agent's output (long URLs restored); and asking for the step's `AgentOutput` (an empty action
//! list is retried once, then becomes `done(success=false)`).

use std::sync::Arc;
use std::time::Instant;

use browserd_llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Message};
use serde_json::{Value, json};

use super::{Agent, StepAcc};
use crate::views::{ActionCall, AgentOutput};

/// What a model call produced.
pub(super) enum ModelCall {
    Reply(ChatResponse),
    Failed(String),
    Stopped,
}

impl Agent {
    pub(super) async fn call_model(
        &self,
        model: &Arc<dyn ChatModel>,
        request: &ChatRequest,
        acc: &mut StepAcc,
    ) -> ModelCall {
        let t = Instant::now();
        let call = tokio::time::timeout(self.config.llm_timeout, model.complete(request));
        let outcome = tokio::select! {
            () = self.control.stopped() => return ModelCall::Stopped,
            outcome = call => outcome,
        };
        match outcome {
            Ok(Ok(response)) => {
                acc.add(&response, t.elapsed());
                ModelCall::Reply(response)
            }
            Ok(Err(error)) => {
                acc.model_time += t.elapsed();
                if let LlmError::InvalidOutput { usage, .. } = &error {
                    acc.usage += *usage;
                    acc.invocations += 1;
                }
                ModelCall::Failed(self.secrets.redact(&error.to_string()))
            }
            Err(_) => {
                acc.model_time += t.elapsed();
                ModelCall::Failed(format!(
                    "LLM call timed out after {}s. Keep your thinking and output short.",
                    self.config.llm_timeout.as_secs()
                ))
            }
        }
    }

    fn parse_output(&self, mut value: Value) -> Result<AgentOutput, String> {
        self.urls.restore(&mut value);
        serde_json::from_value::<AgentOutput>(value).map_err(|e| {
            format!("Invalid model output format. Please follow the correct schema.\nDetails: {e}")
        })
    }

    /// Asks the model for the step's output under `request`: a reply with an empty action list
    /// is answered with a reminder and retried once, a second empty list becomes
    /// `done(success=false)`. `Err` is the failure the model sees next step; `None` when the agent
    /// was stopped during the call.
    pub(super) async fn ask_for_output(
        &self,
        request: &mut ChatRequest,
        acc: &mut StepAcc,
    ) -> Option<Result<AgentOutput, String>> {
        let mut output = None;
        let mut failure = None;
        for attempt in 0..2 {
            match self.call_model(&self.model.clone(), request, acc).await {
                ModelCall::Stopped => return None,
                ModelCall::Failed(e) => {
                    failure = Some(e);
                    break;
                }
                ModelCall::Reply(response) => match self.parse_output(response.value) {
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                    Ok(parsed) if parsed.action.is_empty() && attempt == 0 => {
                        request.messages.push(Message::user(
                            "You forgot to return an action. Return at least one action in the `action` list; \
call done if the task is finished.",
                        ));
                    }
                    Ok(mut parsed) => {
                        if parsed.action.is_empty() {
                            parsed.action.push(ActionCall::new(
                                "done",
                                json!({"text": "No next action returned by LLM!", "success": false}),
                            ));
                        }
                        output = Some(parsed);
                        break;
                    }
                },
            }
        }
        Some(
            output
                .ok_or_else(|| failure.unwrap_or_else(|| "the model returned nothing".to_owned())),
        )
    }
}
