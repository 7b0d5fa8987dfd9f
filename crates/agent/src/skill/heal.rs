//! [`ModelHealer`]: one recorded step carried out by the real [`Agent`], a step at a time
//! ([`Agent::step_once`]) from the page as it is, at most `max_model_calls` model calls. Its
//! task is the skill's goal, the parameters' values, the recorded step (goal, actions, the
//! elements they used) and why it must be healed. After each step the purpose is checked: the
//! expected page reached, or, when the step went nowhere, the agent's actions ran without
//! error. The healer gets no secrets: a step that must type one cannot be healed.

use std::fmt::Write as _;

use serde_json::Value;

use super::expect::same_place;
use super::{HealOutcome, HealRequest, ModelHealer};
use crate::agent::Agent;
use crate::config::TaskConfig;
use crate::views::AgentHistory;

pub(super) async fn heal(healer: &ModelHealer, request: HealRequest<'_>) -> HealOutcome {
    let max_calls = healer.max_model_calls.max(1);
    let mut config = TaskConfig::new(task_text(healer, &request));
    config.directly_open_url = false;
    config.start_url = None;
    config.max_steps = config.max_steps.max(max_calls + request.next_step_number);
    let mut outcome = HealOutcome::default();
    let agent = Agent::new(
        config,
        healer.browser.clone(),
        healer.model.clone(),
        healer.sink.clone(),
    );
    let mut agent = match agent {
        Ok(agent) => agent
            .with_next_step(request.next_step_number)
            .with_control(request.control.clone()),
        Err(e) => {
            outcome.error = Some(format!("the healer could not start: {e}"));
            return outcome;
        }
    };
    let mut why = String::from("no step was taken");
    for _ in 0..max_calls {
        if outcome.model_calls >= max_calls {
            break;
        }
        let record = match agent.step_once().await {
            Ok(record) => record,
            Err(e) => {
                outcome.error = Some(e);
                return outcome;
            }
        };
        outcome.model_calls += record.metadata.invocations.max(1);
        outcome.records.push(record.clone());
        if let Some(done) = record.result.iter().find(|r| r.is_done)
            && done.success != Some(true)
        {
            outcome.error = Some(
                done.extracted_content
                    .clone()
                    .unwrap_or_else(|| "the model gave up".into()),
            );
            return outcome;
        }
        match reached(healer, &request, &record).await {
            Ok(()) => {
                outcome.healed = true;
                return outcome;
            }
            Err(reason) => why = reason,
        }
    }
    outcome.error = Some(format!(
        "not healed after {} model call(s): {why}",
        outcome.model_calls
    ));
    outcome
}

/// Whether the step's purpose is reached after `record`.
async fn reached(
    healer: &ModelHealer,
    request: &HealRequest<'_>,
    record: &AgentHistory,
) -> Result<(), String> {
    if let Some(expected) = &request.expected_url {
        let now = healer
            .browser
            .focused_tab()
            .await
            .map(|tab| tab.url)
            .unwrap_or_default();
        return if same_place(expected, &now) {
            Ok(())
        } else {
            Err(format!("expected to reach {expected}, now on {now}"))
        };
    }
    if let Some(error) = record.result.iter().find_map(|r| r.error.as_deref()) {
        return Err(error.to_owned());
    }
    let acted = record
        .model_output
        .as_ref()
        .is_some_and(|o| !o.action.is_empty());
    if acted {
        Ok(())
    } else {
        Err("the model took no action".into())
    }
}

/// The healer agent's task.
fn task_text(healer: &ModelHealer, request: &HealRequest<'_>) -> String {
    let recorded = request.recorded;
    let mut text = String::from(
        "You repair ONE step of a recorded browser workflow: the website changed, so the \
recorded step cannot be replayed as it was. Do only what that step did, on the current page, \
then stop; do not do the workflow's later steps. If it cannot be done, call done with \
success=false and say why.\n\n",
    );
    let _ = writeln!(text, "Workflow goal: {}", healer.goal);
    if !healer.values.is_empty() {
        text.push_str("Parameters:\n");
        for (name, value) in &healer.values {
            let _ = writeln!(text, "- {name} = {value}");
        }
    }
    let number = recorded.metadata.step_number;
    let _ = writeln!(
        text,
        "\nRecorded step {number} (on {}):",
        recorded.state.url
    );
    if let Some(output) = &recorded.model_output {
        if let Some(goal) = output.next_goal.as_deref().filter(|g| !g.is_empty()) {
            let _ = writeln!(text, "Its goal: {goal}");
        }
        for (position, call) in output.action.iter().enumerate() {
            let mut params = call.params.clone();
            if let Value::Object(map) = &mut params {
                map.remove("index");
            }
            let _ = write!(text, "- {} {}", call.name, params);
            let element = recorded
                .state
                .interacted_element
                .get(position)
                .and_then(Option::as_ref);
            if let Some(element) = element {
                let _ = write!(text, " on <{}>", element.node_name.to_lowercase());
                if let Some(name) = element.ax_name.as_deref().filter(|n| !n.is_empty()) {
                    let _ = write!(text, " \"{name}\"");
                }
                if let Some(near) = element.near.as_deref() {
                    let _ = write!(text, " (the one next to \"{near}\")");
                }
            }
            text.push('\n');
        }
    }
    let _ = writeln!(text, "\nWhy it must be repaired: {}", request.reason);
    if let Some(expected) = &request.expected_url {
        let _ = writeln!(
            text,
            "The step is done when the browser is on {expected} (ids in it may differ)."
        );
    }
    text
}
