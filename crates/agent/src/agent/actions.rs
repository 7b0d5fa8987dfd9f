//! The step's actions: the action set offered on a page (browser actions filtered by domain and
//! vision mode, the agent's own, and `done`; only `done` on a done-only step), `multi_act` with
//! the sequence guards (done only first, stop on done / error / `terminates_sequence` / a URL or
//! tab change, stop between actions), and the dispatch of one action (done, placeholders filled,
//! workspace file actions, extract, else the browser under [`ACTION_TIMEOUT`]).

use std::time::Instant;

use browserd_views::{AGENT_OWNED_ACTIONS, ActionResult, BrowserFailure};
use serde_json::{Value, json};

use super::own_actions::extract_spec;
use super::{ACTION_TIMEOUT, Agent, StepAcc};
use crate::browser::{ActionSpec, BrowserState};
use crate::config::VisionMode;
use crate::domains::url_matches_pattern;
use crate::events::AgentEvent;
use crate::schema::done_spec;
use crate::secrets::Secrets;
use crate::views::ActionCall;
use crate::workspace::file_action_specs;

impl Agent {
    /// Actions offered on `url`: browser actions (domain-filtered), the agent's own, and done.
    pub(super) fn actions_for(&self, url: &str, done_only: bool) -> (Vec<ActionSpec>, Vec<String>) {
        let done = done_spec(self.config.output_schema.as_ref());
        if done_only {
            return (vec![done], Vec::new());
        }
        let own = file_action_specs();
        let mut specs = vec![done];
        let mut page_specific = Vec::new();
        let browser_specs = self.browser.action_specs();
        for spec in browser_specs {
            if AGENT_OWNED_ACTIONS.contains(&spec.name.as_str()) {
                continue;
            }
            if spec.name == "screenshot" && self.config.use_vision != VisionMode::Auto {
                continue;
            }
            if !spec.domains.is_empty() {
                if !spec.domains.iter().any(|d| url_matches_pattern(url, d)) {
                    continue;
                }
                let params = spec.params_schema["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "))
                    .unwrap_or_default();
                page_specific.push(format!(
                    "{}: {} (params: {params})",
                    spec.name, spec.description
                ));
            }
            specs.push(spec);
        }
        specs.push(extract_spec());
        if self.human.is_some() {
            specs.push(crate::human::ask_human_spec());
        }
        specs.extend(own);
        (specs, page_specific)
    }

    /// Runs the step's actions with the sequence guards.
    pub(super) async fn multi_act(
        &mut self,
        step: u32,
        actions: &[ActionCall],
        specs: &[ActionSpec],
        state: &BrowserState,
        acc: &mut StepAcc,
    ) -> (
        Vec<ActionResult>,
        Vec<Option<crate::views::InteractedElement>>,
        Option<String>,
    ) {
        let mut results = Vec::new();
        let mut interacted = Vec::new();
        let mut current_url = state.url.clone();
        for (i, action) in actions.iter().enumerate() {
            if action.name == "done" && i > 0 {
                break;
            }
            if i > 0 && self.control.is_stopped() {
                break;
            }
            let has_next = i + 1 < actions.len();
            let before = if has_next {
                self.browser.focused_tab().await.ok()
            } else {
                None
            };
            if let Some(b) = &before {
                current_url.clone_from(&b.url);
            }
            let mut element = match action.index() {
                Some(index) => self.browser.describe_element(index).await,
                None => None,
            };
            if let Some(el) = element.as_mut().filter(|_| !self.secrets.is_empty()) {
                let mut attributes = Value::Object(std::mem::take(&mut el.attributes));
                self.secrets.redact_value(&mut attributes);
                if let Value::Object(map) = attributes {
                    el.attributes = map;
                }
                self.secrets.redact_opt(&mut el.ax_name);
                self.secrets.redact_opt(&mut el.x_path);
                self.secrets.redact_opt(&mut el.region);
            }
            interacted.push(element);
            let spec = specs.iter().find(|s| s.name == action.name);
            let action_span = crate::telemetry::action_span(&action.name, i);
            let t_action = Instant::now();
            let (mut result, fatal) = match spec {
                None => {
                    let available: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
                    (
                        ActionResult::error(format!(
                            "Action `{}` is not available now. Available actions: {}",
                            action.name,
                            available.join(", ")
                        )),
                        None,
                    )
                }
                Some(_) => {
                    let run = self.execute_action(action, &current_url, (step, i), acc);
                    tracing::Instrument::instrument(run, action_span.clone()).await
                }
            };
            self.redact_result(&mut result);
            crate::telemetry::action_finished(
                &action_span,
                &action.name,
                spec.is_some(),
                &result,
                fatal.is_some(),
                t_action.elapsed(),
            );
            if result
                .metadata
                .as_ref()
                .and_then(|m| m.get("include_screenshot"))
                .and_then(Value::as_bool)
                == Some(true)
            {
                self.screenshot_requested = true;
            }
            self.sink
                .emit(AgentEvent::ActionResult {
                    step,
                    index: i,
                    action: self.redact_call(action),
                    result: result.clone(),
                })
                .await;
            let stop_here = result.is_done
                || result.error.is_some()
                || spec.is_some_and(|s| s.terminates_sequence);
            results.push(result);
            if let Some(message) = fatal {
                return (results, interacted, Some(message));
            }
            if stop_here || !has_next {
                break;
            }
            if let Some(b) = before
                && let Ok(after) = self.browser.focused_tab().await
                && (after.url != b.url || after.tab_id != b.tab_id)
            {
                break;
            }
        }
        (results, interacted, None)
    }

    async fn execute_action(
        &mut self,
        action: &ActionCall,
        url: &str,
        (step, index): (u32, usize),
        acc: &mut StepAcc,
    ) -> (ActionResult, Option<String>) {
        let mut params = match &action.params {
            Value::Null => json!({}),
            Value::Object(_) => action.params.clone(),
            _ => {
                return (
                    ActionResult::error(format!(
                        "The parameters of `{}` must be a JSON object",
                        action.name
                    )),
                    None,
                );
            }
        };
        if action.name == "done" {
            return (self.done(&params), None);
        }
        if action.name == crate::human::ASK_HUMAN {
            return self.ask_human(&params, step, index).await;
        }
        // A placeholder is filled for the page the step saw and the page the tab shows now
        // (one that went elsewhere since gets no value meant for the first).
        let live = if !self.secrets.is_empty() && Secrets::mentions_placeholder(&params) {
            self.browser.focused_tab().await.ok().map(|tab| tab.url)
        } else {
            None
        };
        let pages: Vec<&str> = std::iter::once(url).chain(live.as_deref()).collect();
        if let Err(e) = self
            .secrets
            .fill_for_action(&action.name, &mut params, &pages)
        {
            return (ActionResult::error(e.to_string()), None);
        }
        if let Some(result) =
            self.workspace
                .execute(&action.name, &params, &self.available_file_paths)
        {
            return (result, None);
        }
        if action.name == "extract" {
            return (self.extract(&params, acc).await, None);
        }
        match tokio::time::timeout(ACTION_TIMEOUT, self.browser.execute(&action.name, &params))
            .await
        {
            Ok(Ok(result)) => (result, None),
            Ok(Err(BrowserFailure { message, fatal })) => {
                let error = format!("Error executing action {}: {message}", action.name);
                let fatal = fatal.then(|| format!("browser failed: {message}"));
                (ActionResult::error(error), fatal)
            }
            Err(_) => (
                ActionResult::error(format!(
                    "Action {} timed out after {} seconds",
                    action.name,
                    ACTION_TIMEOUT.as_secs()
                )),
                None,
            ),
        }
    }
}
