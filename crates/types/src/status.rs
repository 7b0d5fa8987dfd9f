//! The task status machine.
//!
//! ```text
//!            pause              pause
//!   queued ─────────▶ paused ◀───────── running ◀──── answer ───── waiting
//!     │  ◀──────────── │ ──────────────▶  │ ▲ │ ─────── ask ──────▶  │
//!     │   resume (never started)  resume   │ │ requeue (lease lost;  │
//!     │ start (worker claim) ─────────────▶ │ │  from waiting too)    │
//!     │                                     ▼ │                       │
//!     └──── stop / fail ───▶ stopped | failed | finished ◀── finish   │
//!                               ▲ ─── stop / fail (no answer in time) ┘
//! ```
//!
//! - `queued → running`: a worker claims the task (`Start`).
//! - `running ⇄ paused`: the user pauses and resumes a running task.
//! - `queued → paused` is allowed too: browser-use's cloud API lets a client pause/resume/stop a
//!   task that was created but not started yet. Resuming a task that never started puts it back
//!   to `queued` (no worker owns it), otherwise to `running`.
//! - `stop` ends a `queued`, `running`, `paused` or `waiting` task as `stopped`; a stopped task cannot be
//!   resumed (cloud semantics).
//! - `finish` (agent done) from `running` (or `paused`, when a pause arrived as the agent
//!   called done); `fail` from any non-terminal status (worker
//!   error, reaped lease with no attempts left, timeout while paused).
//! - `requeue`: a `running` (or `waiting`) task whose worker died goes back to `queued`; a
//!   waiting one resumes from its last step on another worker and gets the answer there.
//! - `ask`: the agent's `ask_human` action; the task is `waiting` for a person's answer
//!   (`POST /v1/tasks/{id}/input`) with its worker and browser context kept. From `running`,
//!   or `paused` when a pause arrived as the agent asked (the question wins; pause again after
//!   answering). `answer` takes it back to `running`. A waiting task may be stopped, and fails
//!   when nobody answers in time; it is not paused (it already waits).
//!
//! Terminal statuses (`finished`, `failed`, `stopped`) have no way out. Each transition is applied
//! by the store as one guarded `UPDATE ... WHERE status = ANY(allowed_from)`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Lifecycle status of a task.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Queued,
    Running,
    Paused,
    /// The agent asked a person (`ask_human`) and waits for the answer.
    Waiting,
    Finished,
    Failed,
    Stopped,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 7] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Paused,
        TaskStatus::Waiting,
        TaskStatus::Finished,
        TaskStatus::Failed,
        TaskStatus::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Paused => "paused",
            TaskStatus::Waiting => "waiting",
            TaskStatus::Finished => "finished",
            TaskStatus::Failed => "failed",
            TaskStatus::Stopped => "stopped",
        }
    }

    /// A terminal status is final: no transition leaves it and its status event is the task's
    /// last event.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Finished | TaskStatus::Failed | TaskStatus::Stopped
        )
    }

    /// The agent is held between actions for a person, its browser context kept while a
    /// worker holds the lease: `paused` (by the user) or `waiting` (for an answer to
    /// `ask_human`). The one predicate of "a person may act on this task's browser now".
    pub fn holds_browser_for_person(self) -> bool {
        matches!(self, TaskStatus::Paused | TaskStatus::Waiting)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the known statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown task status `{0}` (expected one of queued, running, paused, waiting, finished, failed, stopped)"
)]
pub struct UnknownStatus(pub String);

impl FromStr for TaskStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// A named edge of the status machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// A worker claims a queued task.
    Start,
    /// The user pauses a queued or running task.
    Pause,
    /// The user resumes a paused task.
    Resume,
    /// The user stops a task.
    Stop,
    /// The agent completed (successfully or not).
    Finish,
    /// The task cannot continue.
    Fail,
    /// The worker running the task went away; the task waits for another worker.
    Requeue,
    /// The agent asks a person (`ask_human`).
    Ask,
    /// A person answered the agent's question.
    Answer,
}

impl Transition {
    /// Every edge.
    pub const ALL: [Transition; 9] = [
        Transition::Start,
        Transition::Pause,
        Transition::Resume,
        Transition::Stop,
        Transition::Finish,
        Transition::Fail,
        Transition::Requeue,
        Transition::Ask,
        Transition::Answer,
    ];

    /// Statuses this transition may start from.
    pub fn allowed_from(self) -> &'static [TaskStatus] {
        use TaskStatus::*;
        match self {
            Transition::Start => &[Queued],
            Transition::Pause => &[Queued, Running],
            Transition::Resume => &[Paused],
            Transition::Stop => &[Queued, Running, Paused, Waiting],
            Transition::Finish => &[Running, Paused],
            Transition::Fail => &[Queued, Running, Paused, Waiting],
            Transition::Requeue => &[Running, Waiting],
            Transition::Ask => &[Running, Paused],
            Transition::Answer => &[Waiting],
        }
    }

    /// The status reached. Only `Resume` depends on whether the task ever started running.
    pub fn target(self, has_started: bool) -> TaskStatus {
        match self {
            Transition::Start => TaskStatus::Running,
            Transition::Pause => TaskStatus::Paused,
            Transition::Resume if has_started => TaskStatus::Running,
            Transition::Resume => TaskStatus::Queued,
            Transition::Stop => TaskStatus::Stopped,
            Transition::Finish => TaskStatus::Finished,
            Transition::Fail => TaskStatus::Failed,
            Transition::Requeue => TaskStatus::Queued,
            Transition::Ask => TaskStatus::Waiting,
            Transition::Answer => TaskStatus::Running,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transition::Start => "start",
            Transition::Pause => "pause",
            Transition::Resume => "resume",
            Transition::Stop => "stop",
            Transition::Finish => "finish",
            Transition::Fail => "fail",
            Transition::Requeue => "requeue",
            Transition::Ask => "ask",
            Transition::Answer => "answer",
        }
    }

    pub fn is_allowed_from(self, status: TaskStatus) -> bool {
        self.allowed_from().contains(&status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_statuses_have_no_outgoing_transition() {
        let all = Transition::ALL;
        for status in TaskStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for transition in all {
                assert!(
                    !transition.is_allowed_from(status),
                    "{transition:?} from {status}"
                );
            }
        }
    }

    #[test]
    fn resume_goes_back_to_where_the_task_was() {
        assert_eq!(Transition::Resume.target(false), TaskStatus::Queued);
        assert_eq!(Transition::Resume.target(true), TaskStatus::Running);
    }

    #[test]
    fn status_round_trips_through_strings_and_json() {
        for status in TaskStatus::ALL {
            assert_eq!(status.as_str().parse::<TaskStatus>(), Ok(status));
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{status}\""));
        }
        assert!("started".parse::<TaskStatus>().is_err());
    }

    #[test]
    fn stop_is_allowed_from_every_live_status() {
        for status in TaskStatus::ALL.into_iter().filter(|s| !s.is_terminal()) {
            assert!(Transition::Stop.is_allowed_from(status));
            assert!(Transition::Fail.is_allowed_from(status));
        }
        assert!(!Transition::Pause.is_allowed_from(TaskStatus::Waiting));
        assert!(!Transition::Finish.is_allowed_from(TaskStatus::Waiting));
        assert_eq!(Transition::Answer.target(true), TaskStatus::Running);
        assert!(TaskStatus::Waiting.holds_browser_for_person());
        assert!(!TaskStatus::Running.holds_browser_for_person());
        assert!(!Transition::Finish.is_allowed_from(TaskStatus::Queued));
        assert!(!Transition::Resume.is_allowed_from(TaskStatus::Running));
    }
}
