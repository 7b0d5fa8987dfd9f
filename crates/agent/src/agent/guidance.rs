//! What the agent tells the model beyond the page: the plan (set by `plan_update`, advanced by
//! `current_plan_item`, rendered as a checklist) and the nudges added after the state message —
//! budget (≥ 75 % of the steps), replan (after `planning_replan_on_stall` failures), planning (no
//! plan after `planning_exploration_limit` steps), the loop detector's, and the done-only ones
//! (last step, or after `max_failures`).

use super::Agent;
use crate::views::AgentOutput;

/// Status of one plan item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlanStatus {
    Pending,
    Current,
    Done,
}

impl Agent {
    pub(super) fn render_plan(&self) -> Option<String> {
        if self.plan.is_empty() {
            return None;
        }
        let lines: Vec<String> = self
            .plan
            .iter()
            .enumerate()
            .map(|(i, (text, status))| {
                let mark = match status {
                    PlanStatus::Done => "[x]",
                    PlanStatus::Current => "[>]",
                    PlanStatus::Pending => "[ ]",
                };
                format!("{mark} {i}: {text}")
            })
            .collect();
        Some(lines.join("\n"))
    }

    pub(super) fn update_plan(&mut self, output: &AgentOutput) {
        if let Some(items) = &output.plan_update {
            self.plan = items
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let status = if i == 0 {
                        PlanStatus::Current
                    } else {
                        PlanStatus::Pending
                    };
                    (t.clone(), status)
                })
                .collect();
        }
        if let Some(current) = output.current_plan_item
            && !self.plan.is_empty()
        {
            let last = self.plan.len() - 1;
            let current = usize::try_from(current.max(0)).unwrap_or(0).min(last);
            for (i, item) in self.plan.iter_mut().enumerate() {
                item.1 = match i.cmp(&current) {
                    std::cmp::Ordering::Less => PlanStatus::Done,
                    std::cmp::Ordering::Equal => PlanStatus::Current,
                    std::cmp::Ordering::Greater => PlanStatus::Pending,
                };
            }
        }
    }

    pub(super) fn nudges(
        &self,
        step: u32,
        done_only_last: bool,
        done_only_failures: bool,
    ) -> Vec<String> {
        let c = &self.config;
        let mut nudges = Vec::new();
        if !done_only_last && u64::from(step) * 4 >= u64::from(c.max_steps) * 3 {
            let pct = u64::from(step) * 100 / u64::from(c.max_steps);
            nudges.push(format!(
                "Budget warning: this is step {step} of {} ({pct}% of your steps). Start consolidating: \
secure the most important results and prepare to call done with what you have.",
                c.max_steps
            ));
        }
        let planning = c.enable_planning && !c.flash_mode;
        if planning
            && c.planning_replan_on_stall > 0
            && self.consecutive_failures >= c.planning_replan_on_stall
        {
            nudges.push(format!(
                "Replan suggested: your last {} steps failed. Step back, think about why, and send a new \
plan with plan_update that takes a different route.",
                self.consecutive_failures
            ));
        }
        if planning
            && c.planning_exploration_limit > 0
            && self.plan.is_empty()
            && step > c.planning_exploration_limit
        {
            nudges.push(format!(
                "Planning nudge: you have taken {} steps without a plan. If the task has several parts, \
write a short plan with plan_update.",
                step - 1
            ));
        }
        if c.loop_detection_enabled
            && let Some(n) = self.loop_detector.nudge()
        {
            nudges.push(n);
        }
        if done_only_last {
            nudges.push(
                "This is your last step. Call done now — and only done — with everything you have found. \
Set success to false if the task is not fully complete."
                    .to_owned(),
            );
        } else if done_only_failures {
            nudges.push(format!(
                "You have failed {} times in a row. Call done now — and only done — with what you have, \
explain what went wrong, and set success to false unless the task is really complete.",
                self.consecutive_failures
            ));
        }
        nudges
    }
}
