//! The task core of browserd: the one path from every front end (`/v1`, `/api/v2`, MCP over
//! HTTP and stdio, the CLI) to the store. It owns creating tasks (validation, the model
//! catalog, proxies, profiles, replays), admitting them (the keys' quotas and the machine's
//! queue cap), controlling them (stop, pause, resume, answers), reading them (tasks, steps,
//! screenshots, replay reports) and following their events, for the caller's own tasks only
//! (another key's task is not found). [`TaskCore`] adds the server objects front ends touch
//! besides tasks — API keys and tickets, profiles, webhooks, v2 sessions, live view and
//! take-over, output files, readiness, schedules (and the scheduler firing them) — over the
//! Postgres store.
//!
//! No HTTP types and no web framework here: failures are [`TaskError`]s, which each front end maps to
//! its wire errors. The crate re-exports the plain records front ends need, never the store
//! handle; SQL stays in `browserd-store`.

mod caller;
mod core;
mod cron;
mod error;
mod models;
mod service;
mod validation;

pub use caller::Caller;
pub use core::{SCHEDULER_MAX_SLEEP, TaskCore, TaskSettings};
pub use error::TaskError;
pub use models::{ModelCatalog, UnknownDefaultModel};
pub use service::{CreatedTask, Placement, TaskFeed, TaskService, decode_cursor, next_page_after};
pub use validation::{
    SecretFixNames, list_limit, step_page_limit, unbound_secrets_refusal, validate_create_task,
};

/// The plain records and signals of the store that front ends read (never the store handle).
pub mod records {
    pub use browserd_store::{
        ApiKeyRecord, ArtifactContent, CreatedApiKey, DeletedTask, DeliveryRecord, FeedItem,
        KEY_PREFIX, KeySignal, KeySignals, LiveFrame, LiveSignal, LiveSubscription, LiveViewerId,
        NewSession, NewTask, ObjectLimits, OutputFile, OutputFileRecord, ProfileRecord,
        QuotaOverrides, QuotaUpdate, Quotas, SessionChoice, SessionRecord, Signal, StatusCount,
        StepRecord, Subscription, TaskCursor, TaskRecord, V2Task, V2TaskFilter, WebhookRecord,
        WsTicket, hash_api_key,
    };
}
