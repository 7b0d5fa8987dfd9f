//! The run's record: each step's history item (shown to the model as text) and its
//! [`AgentHistory`] (timings, usage, cost), emitted as `StepFinished`; history compaction by the
//! extraction model when due; and [`Agent::resume_from`], which rebuilds the loop's state from
//! the records of a run continued elsewhere.

use std::sync::Arc;

use browserd_llm::{ChatRequest, Message, OutputSchema};
use browserd_views::ActionResult;
use serde_json::{Value, json};

use super::model_call::ModelCall;
use super::{Agent, StepAcc, StepEnd, epoch_secs, millis};
use crate::events::AgentEvent;
use crate::messages::HistoryItem;
use crate::prompts;
use crate::views::{
    AgentHistory, AgentHistoryList, AgentOutput, BrowserStateHistory, StepMetadata,
};

/// Time the step's actions waited for the page to settle, from the browser's reports in each
/// result's `metadata.settle.ms`.
fn settle_ms(results: &[ActionResult]) -> u64 {
    results
        .iter()
        .filter_map(|r| r.metadata.as_ref()?.get("settle")?.get("ms")?.as_u64())
        .sum()
}

impl Agent {
    /// Continues a run whose earlier steps are `prior` (persisted by a worker that is gone):
    /// the step number, the consecutive-failure count, the history shown to the model, the
    /// plan, the loop detector's action window and the usage are rebuilt from it, and the
    /// initial navigation is not repeated. What `prior` cannot tell (the page fingerprints of
    /// the stagnation check, a compaction summary) starts afresh. An empty `prior` changes
    /// nothing.
    #[must_use]
    pub fn resume_from(mut self, prior: AgentHistoryList) -> Self {
        if prior.history.is_empty() {
            return self;
        }
        for item in &prior.history {
            let step = item.metadata.step_number;
            let output = item.model_output.as_ref();
            self.messages.add_step(
                HistoryItem::from_step(step, output, &item.result),
                &item.result,
            );
            let failed = (item.result.len() == 1 && item.result[0].error.is_some())
                || item.result.is_empty();
            if failed {
                self.consecutive_failures += 1;
            } else {
                self.consecutive_failures = 0;
            }
            if step > 0
                && let Some(output) = output
            {
                self.loop_detector.record_actions(&output.action);
                self.update_plan(output);
            }
            self.n_steps = self.n_steps.max(step + 1);
            self.last_step_end = Some(item.metadata.step_end_time);
        }
        self.history = prior;
        self.resumed = true;
        self
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record(
        &mut self,
        step: u32,
        output: Option<AgentOutput>,
        results: Vec<ActionResult>,
        state: BrowserStateHistory,
        started: f64,
        acc: StepAcc,
        (capture_ms, actions_ms): (u64, u64),
        state_message: Option<String>,
    ) {
        self.record_item(
            step,
            output,
            results,
            state,
            started,
            acc,
            (capture_ms, actions_ms),
            state_message,
        )
        .await;
        self.n_steps += 1;
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_item(
        &mut self,
        step: u32,
        output: Option<AgentOutput>,
        results: Vec<ActionResult>,
        state: BrowserStateHistory,
        started: f64,
        acc: StepAcc,
        (capture_ms, actions_ms): (u64, u64),
        state_message: Option<String>,
    ) {
        let item = HistoryItem::from_step(step, output.as_ref(), &results);
        self.messages.add_step(item, &results);
        let ended = epoch_secs();
        let usage = &mut self.history.usage;
        usage.total += acc.usage;
        usage.invocations += acc.invocations;
        if let Some(c) = acc.cost {
            usage.total_cost_usd = Some(usage.total_cost_usd.unwrap_or(0.0) + c);
        }
        let settle_ms = settle_ms(&results);
        let record = AgentHistory {
            model_output: output,
            result: results,
            state,
            metadata: StepMetadata {
                step_number: step,
                step_start_time: started,
                step_end_time: ended,
                capture_ms,
                model_ms: millis(acc.model_time),
                actions_ms,
                settle_ms,
                usage: acc.usage,
                invocations: acc.invocations,
                cost_usd: acc.cost,
            },
            state_message,
        };
        crate::telemetry::step_recorded(
            &record.state.url,
            record.result.len(),
            &acc.usage,
            acc.cost,
            acc.invocations,
            record.result.iter().find_map(|r| r.error.as_deref()),
        );
        self.last_step_end = Some(ended);
        self.history.history.push(record.clone());
        self.sink
            .emit(AgentEvent::StepFinished {
                record: Box::new(record),
            })
            .await;
    }

    pub(super) async fn compact(&mut self, step: u32, acc: &mut StepAcc) -> StepEnd {
        let input = self
            .secrets
            .redact(&self.messages.compaction_input(&self.config.task));
        let system = prompts::COMPACTION.replace(
            "{max_chars}",
            &self.config.compaction_summary_max_chars.to_string(),
        );
        let request = ChatRequest::new(
            vec![Message::system(system), Message::user(input)],
            OutputSchema::new(
                "history_summary",
                json!({
                    "type": "object",
                    "properties": {"summary": {"type": "string"}},
                    "required": ["summary"],
                    "additionalProperties": false
                }),
            ),
        );
        let model = Arc::clone(&self.extraction_model);
        match self.call_model(&model, &request, acc).await {
            ModelCall::Stopped => StepEnd::Stopped,
            ModelCall::Failed(e) => {
                tracing::warn!(step, error = %e, "history compaction failed; keeping the full history");
                StepEnd::Continue
            }
            ModelCall::Reply(response) => {
                if let Some(summary) = response.value.get("summary").and_then(Value::as_str) {
                    let (capped, _) = crate::messages::truncate_chars(
                        summary,
                        self.config.compaction_summary_max_chars,
                    );
                    let summary = self.secrets.redact(capped);
                    self.messages
                        .apply_compaction(summary, step, self.config.compaction_keep_last);
                }
                StepEnd::Continue
            }
        }
    }
}
