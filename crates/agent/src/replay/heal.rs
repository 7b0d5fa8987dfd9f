//! Healing in a replay (a skill execution with a [`StepHealer`]): after a recorded step, the
//! step is handed to the healer when an action failed before reaching the page (its element
//! not found after the retries), or when every action ran but the page is not the one the
//! recording reached next (compared with [`same_place`]). An action that failed after
//! reaching the page is never healed (never twice): the replay fails naming the step. A
//! healed step counts as done and the replay goes on; one the healer could not heal ends it.

use std::time::{Duration, Instant};

use super::{Progress, Replayer, StepFailure};
use crate::skill::expect::same_place;
use crate::skill::{HealRequest, HealedStep, StepHealer};
use crate::views::AgentHistory;

/// How long the page may take to reach the expected URL after the step's actions settled
/// (checked again every [`URL_POLL`]); only spent when it is not there at once.
const URL_GRACE: Duration = Duration::from_secs(3);
const URL_POLL: Duration = Duration::from_millis(100);

/// What the healer did for one step.
pub(super) enum Healing {
    /// Healed; the healer's records.
    Done(Vec<AgentHistory>),
    /// Not healed (the failure is in the progress); the healer's records.
    Failed(Vec<AgentHistory>),
    /// Not asked: the step went as recorded, or failed in a way that is never healed.
    NotNeeded(Option<StepFailure>),
}

/// The URL the recorded run reached after `item`, when it went to another page.
fn expected_after(item: &AgentHistory, next: Option<&AgentHistory>) -> Option<String> {
    let next = next?;
    let expected = next.state.url.trim();
    (!expected.is_empty() && !same_place(&item.state.url, expected)).then(|| expected.to_owned())
}

impl Replayer<'_, '_> {
    /// Asks `healer` for `item` when it needs it (see the module).
    pub(super) async fn heal_if_needed(
        &self,
        healer: &dyn StepHealer,
        item: &AgentHistory,
        next: Option<&AgentHistory>,
        failure: Option<StepFailure>,
        number: &mut u32,
        progress: &mut Progress,
    ) -> Healing {
        let recorded_step = item.metadata.step_number;
        let expected_url = expected_after(item, next);
        let reason = match failure {
            Some(failure) if failure.reached_page => return Healing::NotNeeded(Some(failure)),
            Some(failure) => match failure.not_found {
                Some(described) => format!("element not found: {described}"),
                None => failure.message,
            },
            None => {
                let Some(expected) = &expected_url else {
                    return Healing::NotNeeded(None);
                };
                match self.missed_page(expected).await {
                    Some(now) => format!(
                        "expected to reach {expected} after step {recorded_step}, now on {now}"
                    ),
                    None => return Healing::NotNeeded(None),
                }
            }
        };
        if self.run.control.is_stopped() {
            progress.stopped = true;
            return Healing::Failed(Vec::new());
        }
        tracing::info!(step = recorded_step, %reason, "healing a replayed step");
        let outcome = healer
            .heal(HealRequest {
                recorded: item,
                reason: reason.clone(),
                expected_url,
                next_step_number: *number,
                control: self.run.control.clone(),
            })
            .await;
        *number += u32::try_from(outcome.records.len()).unwrap_or(u32::MAX);
        if outcome.healed {
            progress.healed.push(HealedStep {
                step: recorded_step,
                reason,
                model_calls: outcome.model_calls,
            });
            Healing::Done(outcome.records)
        } else if self.run.control.is_stopped() {
            progress.stopped = true;
            Healing::Failed(outcome.records)
        } else {
            let why = outcome
                .error
                .unwrap_or_else(|| format!("the healer gave up ({reason})"));
            progress.failure = Some(format!("step {recorded_step} could not be healed: {why}"));
            Healing::Failed(outcome.records)
        }
    }

    /// The URL the focused tab shows when it is not `expected` (after a short grace for a
    /// navigation still arriving), `None` when it is.
    async fn missed_page(&self, expected: &str) -> Option<String> {
        let started = Instant::now();
        loop {
            let now = self
                .browser
                .focused_tab()
                .await
                .map(|tab| tab.url)
                .unwrap_or_default();
            if same_place(expected, &now) {
                return None;
            }
            if started.elapsed() >= URL_GRACE || self.run.control.is_stopped() {
                return Some(self.secrets.redact(&now));
            }
            tokio::select! {
                () = tokio::time::sleep(URL_POLL) => {}
                () = self.run.control.stopped() => {}
            }
        }
    }
}
