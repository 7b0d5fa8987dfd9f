//! Secrets out of what the agent emits: action results, model outputs and action calls have every
//! secret value replaced by its placeholder before they reach events, history or the model.

use browserd_views::ActionResult;

use super::Agent;
use crate::views::{ActionCall, AgentOutput};

impl Agent {
    pub(super) fn redact_result(&self, result: &mut ActionResult) {
        if self.secrets.is_empty() {
            return;
        }
        self.secrets.redact_opt(&mut result.error);
        self.secrets.redact_opt(&mut result.long_term_memory);
        self.secrets.redact_opt(&mut result.extracted_content);
        if let Some(meta) = &mut result.metadata {
            meta.values_mut()
                .for_each(|value| self.secrets.redact_value(value));
        }
    }

    pub(super) fn redact_output(&self, output: &AgentOutput) -> AgentOutput {
        if self.secrets.is_empty() {
            return output.clone();
        }
        let Ok(mut value) = serde_json::to_value(output) else {
            return output.clone();
        };
        self.secrets.redact_value(&mut value);
        serde_json::from_value(value).unwrap_or_else(|_| output.clone())
    }

    pub(super) fn redact_call(&self, action: &ActionCall) -> ActionCall {
        let mut params = action.params.clone();
        self.secrets.redact_value(&mut params);
        ActionCall::new(action.name.clone(), params)
    }
}
