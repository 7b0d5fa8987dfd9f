//! Shared domain types: ids, the task status machine, events and the wire DTOs exchanged by the
//! api and the worker. No I/O lives here; everything is plain data plus pure rules.

pub mod dto;
pub mod event;
pub mod ids;
pub mod options;
pub mod profiles;
pub mod schedules;
pub mod schema_bounds;
pub mod secrets;
pub mod skills;
pub mod status;
pub mod takeover;
pub mod v2;
pub mod v2_skills;
pub mod webhooks;

pub use event::{
    ActionResultEvent, AnsweredEvent, EventBody, LogEvent, ModelOutputEvent, QuestionEvent,
    ResultEvent, StatusEvent, StatusOutcome, StepEvent, StepStartedEvent, TaskEvent, event_kind,
};
pub use ids::{ApiKeyId, ArtifactId, TaskId};
pub use options::TaskOptions;
pub use secrets::{TaskSecret, TaskSecrets};
pub use status::{TaskStatus, Transition};
