//! The task status machine.
//!
//! ```text
//!            pause              pause
//!   queued ─────────▶ paused ◀───────── running
//!     │  ◀──────────── │ ──────────────▶  │ ▲
//!     │   resume (never started)  resume   │ │ requeue (lease lost)
//!     │ start (worker claim) ─────────────▶ │ │
//!     │                                     ▼ │
//!     └──── stop / fail ───▶ stopped | failed | finished ◀── finish
//! ```
//!
//! - `queued → running`: a worker claims the task (`Start`).
//! - `running ⇄ paused`: the user pauses and resumes a running task.
//! - `queued → paused` is allowed too: browser-use's cloud API lets a client pause/resume/stop a
//!   task that was created but not started yet. Resuming a task that never started puts it back
//!   to `queued` (no worker owns it), otherwise to `running`.
//! - `stop` ends a `queued`, `running` or `paused` task as `stopped`; a stopped task cannot be
//!   resumed (cloud semantics).
//! - `finish` (agent done) from `running` (or `paused`, when a pause arrived as the agent
//!   called done); `fail` from any non-terminal status (worker
//!   error, reaped lease with no attempts left, timeout while paused).
//! - `requeue`: a `running` task whose worker died goes back to `queued`.
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
    Finished,
    Failed,
    Stopped,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Paused,
        TaskStatus::Finished,
        TaskStatus::Failed,
        TaskStatus::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Paused => "paused",
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
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the known statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown task status `{0}` (expected one of queued, running, paused, finished, failed, stopped)"
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
}

impl Transition {
    /// Statuses this transition may start from.
    pub fn allowed_from(self) -> &'static [TaskStatus] {
        use TaskStatus::*;
        match self {
            Transition::Start => &[Queued],
            Transition::Pause => &[Queued, Running],
            Transition::Resume => &[Paused],
            Transition::Stop => &[Queued, Running, Paused],
            Transition::Finish => &[Running, Paused],
            Transition::Fail => &[Queued, Running, Paused],
            Transition::Requeue => &[Running],
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
        let all = [
            Transition::Start,
            Transition::Pause,
            Transition::Resume,
            Transition::Stop,
            Transition::Finish,
            Transition::Fail,
            Transition::Requeue,
        ];
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
        for status in [TaskStatus::Queued, TaskStatus::Running, TaskStatus::Paused] {
            assert!(Transition::Stop.is_allowed_from(status));
        }
        assert!(!Transition::Finish.is_allowed_from(TaskStatus::Queued));
        assert!(!Transition::Resume.is_allowed_from(TaskStatus::Running));
    }
}
