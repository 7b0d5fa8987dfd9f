//! [`TaskError`]: why the task core refused or failed an operation, in words every front end
//! passes on (the api maps each variant to its HTTP status and code, the MCP tools to a tool
//! error with the same code and message).

use browserd_store::StoreError;
use browserd_types::TaskStatus;

/// A refused or failed task operation. The messages are the clients'; internal details stay
/// in [`TaskError::Internal`], logged by the front end and never sent to a client.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// No such thing for this key (another key's is the same): `code` names what
    /// (`task_not_found`, `session_not_found`, `not_a_replay`, …).
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// A value breaks a rule; `field` names it when known.
    #[error("{message}")]
    Validation {
        field: Option<String>,
        message: String,
    },
    /// Not possible in the current state (`illegal_transition`, `task_active`, …).
    #[error("{message}")]
    Conflict {
        code: &'static str,
        message: String,
        current_status: Option<TaskStatus>,
    },
    /// Admission control: the machine's queue is full.
    #[error("the task queue is full ({queued} tasks waiting); retry in {retry_after_secs} s")]
    QueueFull { queued: i64, retry_after_secs: u64 },
    /// The key has used one of its quotas (`max_queued`, `daily_steps`, `daily_cost_usd`);
    /// the message names the quota and its value.
    #[error("{message}")]
    QuotaExceeded {
        quota: &'static str,
        message: String,
        retry_after_secs: u64,
    },
    /// A failure of the server, not of the request. Its display carries the detail — for logs
    /// and the operator's command line; front ends send clients only `internal error`.
    #[error("internal error: {0}")]
    Internal(String),
}

impl TaskError {
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        TaskError::Validation {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// `task_not_found`: no such task for this key.
    pub fn task_not_found() -> Self {
        TaskError::NotFound {
            code: "task_not_found",
            message: "task not found".to_owned(),
        }
    }

    /// `skill_not_found`: no such skill for this key.
    pub fn skill_not_found() -> Self {
        TaskError::NotFound {
            code: "skill_not_found",
            message: "skill not found".to_owned(),
        }
    }

    /// Whether this is [`TaskError::task_not_found`].
    pub fn is_task_not_found(&self) -> bool {
        matches!(
            self,
            TaskError::NotFound {
                code: "task_not_found",
                ..
            }
        )
    }

    /// The stable machine-readable code (`task_not_found`, `validation_failed`, …), the
    /// REST API's.
    pub fn code(&self) -> &'static str {
        match self {
            TaskError::NotFound { code, .. } | TaskError::Conflict { code, .. } => code,
            TaskError::Validation { .. } => "validation_failed",
            TaskError::QueueFull { .. } => "queue_full",
            TaskError::QuotaExceeded { .. } => "quota_exceeded",
            TaskError::Internal(_) => "internal_error",
        }
    }
}

impl From<StoreError> for TaskError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::TaskNotFound(_) => TaskError::task_not_found(),
            StoreError::IllegalTransition {
                transition,
                current,
            } => TaskError::Conflict {
                code: "illegal_transition",
                message: format!("cannot {transition} a task that is {current}"),
                current_status: Some(current),
            },
            StoreError::TaskActive { status, .. } => TaskError::Conflict {
                code: "task_active",
                message: format!("task is {status} on a worker; stop it before deleting it"),
                current_status: Some(status),
            },
            StoreError::TaskEnded { status, .. } => TaskError::Conflict {
                code: "task_ended",
                message: format!("task has ended ({status})"),
                current_status: Some(status),
            },
            // Sessions (`/api/v2`): the cloud's own words, which the v2 mapping passes on.
            StoreError::SessionNotFound(_) => TaskError::NotFound {
                code: "session_not_found",
                message: "Session not found".to_owned(),
            },
            StoreError::SessionStopped(_) => TaskError::Conflict {
                code: "session_stopped",
                message: "Browser session is stopped. Please start a new session and try again."
                    .to_owned(),
                current_status: None,
            },
            StoreError::SessionBusy(_) => TaskError::Conflict {
                code: "session_busy",
                message: "Agent session already has a running task. Please wait for it to \
                          finish or stop it manually."
                    .to_owned(),
                current_status: None,
            },
            StoreError::InvalidCursor => TaskError::validation("cursor", "cursor is not valid"),
            StoreError::SkillNotFound(_) => TaskError::skill_not_found(),
            StoreError::SkillBusy { status, .. } => TaskError::Conflict {
                code: "skill_busy",
                message: format!(
                    "the skill is {status}: wait for its generation to end (or cancel it)"
                ),
                current_status: None,
            },
            StoreError::NotWaiting { status, .. } => TaskError::Conflict {
                code: "not_waiting",
                message: format!(
                    "task is {status} and asks no question; answer only a waiting task"
                ),
                current_status: Some(status),
            },
            err @ StoreError::ChoiceNotOffered { .. } => {
                TaskError::validation("choice", err.to_string())
            }
            err @ StoreError::NoSecretsKeyForAnswer => {
                TaskError::validation("secret", err.to_string())
            }
            err @ StoreError::NoSecretsKey => TaskError::validation("secrets", err.to_string()),
            // `keys revoke|update ID|PREFIX`: no key, or more than one, matches.
            StoreError::KeySelector(message) => TaskError::validation("key", message),
            // A count, not a rate: a slot frees when the key deletes (or stops) one; a minute
            // is a polite retry.
            err @ StoreError::KeyObjectLimit { what, .. } => TaskError::QuotaExceeded {
                quota: what.quota(),
                message: err.to_string(),
                retry_after_secs: 60,
            },
            other => TaskError::Internal(other.to_string()),
        }
    }
}
