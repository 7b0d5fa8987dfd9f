use browserd_types::{TaskId, TaskStatus};

/// Everything the store can fail with. Messages never contain secrets or key material.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("task {0} not found")]
    TaskNotFound(TaskId),
    #[error("cannot {transition} a task that is {current}")]
    IllegalTransition {
        transition: &'static str,
        current: TaskStatus,
    },
    /// The task is being worked on (running, or paused on a worker) and cannot be deleted.
    #[error("task {id} is {status} on a worker; stop it first")]
    TaskActive { id: TaskId, status: TaskStatus },
    /// The task has ended; its final event was written and no event may follow it.
    #[error("task {id} has ended ({status}); no further events are accepted")]
    TaskEnded { id: TaskId, status: TaskStatus },
    #[error("event kind `{0}` is reserved for status transitions")]
    ReservedEventKind(String),
    #[error("step {number} of task {id} already exists")]
    StepExists { id: TaskId, number: i32 },
    /// The task holds secrets but this server has no secrets key to seal them with.
    #[error(
        "this server has no secrets key (BROWSERD_SECRETS_KEY or --secrets-key-file), so it cannot accept task secrets"
    )]
    NoSecretsKey,
    /// The task's sealed secrets cannot be opened.
    #[error("task secrets: {0}")]
    Seal(#[from] crate::sealed::SealError),
    /// The caller no longer holds the task's lease (it expired and was reaped, the task ended,
    /// or another worker took it over); it must abandon the task.
    #[error("the lease on task {0} is no longer held by this worker")]
    LeaseLost(TaskId),
    /// `keys revoke ID|PREFIX` did not designate exactly one active key.
    #[error("{0}")]
    KeySelector(String),
    /// A person's input to the task's browser cannot be taken now (why, for the sender).
    #[error("{0}")]
    TakeOverRefused(String),
    /// No such `/api/v2` session for this key.
    #[error("session {0} not found")]
    SessionNotFound(uuid::Uuid),
    /// The session was stopped; a task cannot run in it.
    #[error("session {0} is stopped")]
    SessionStopped(uuid::Uuid),
    /// The session already has an unfinished task.
    #[error("session {0} already has a running task")]
    SessionBusy(uuid::Uuid),
    /// `POST /v1/tasks/{id}/input` on a task that asks no question now.
    #[error("task {id} is {status} and asks no question")]
    NotWaiting { id: TaskId, status: TaskStatus },
    /// The answer's `choice` is not one the question offered.
    #[error("`{choice}` is not one of the choices offered: {}", .choices.join(", "))]
    ChoiceNotOffered {
        choice: String,
        choices: Vec<String>,
    },
    /// A secret answer, but this server has no secrets key to seal it with.
    #[error(
        "this server has no secrets key (BROWSERD_SECRETS_KEY or --secrets-key-file), so it cannot accept a secret answer"
    )]
    NoSecretsKeyForAnswer,
    /// The key already has as many profiles or active sessions as it may (`ObjectLimits`).
    #[error(
        "this key already has {max} {}, its limit `{}` ({max}); {}",
        .what.noun(), .what.quota(), .what.remedy()
    )]
    KeyObjectLimit { what: crate::KeyObject, max: u32 },
    /// A profile state larger than `ObjectLimits::max_profile_bytes`; nothing was written.
    #[error("the profile's state is {size} bytes, over the limit of {max} bytes; it was not saved")]
    ProfileTooLarge { size: usize, max: usize },
    #[error("invalid cursor")]
    InvalidCursor,
    /// No such skill for this key.
    #[error("skill {0} not found")]
    SkillNotFound(uuid::Uuid),
    /// The skill cannot do that in its status (a second generation while one runs).
    #[error("skill {id} is {status}")]
    SkillBusy { id: uuid::Uuid, status: String },
    /// A row that violates an invariant the schema cannot express (e.g. an unknown status).
    #[error("corrupt row: {0}")]
    Corrupt(String),
}
