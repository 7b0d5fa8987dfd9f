//! [`TaskCore`]: the server's task core — the [`TaskService`] over the Postgres store, and the
//! server objects front ends read and write besides tasks: API keys and event tickets,
//! profiles, webhooks, `/api/v2` sessions and tasks, live view and take-over inputs, output
//! files, steps, readiness and gauges, and schedules with the scheduler that fires them. Every call answers [`TaskError`]; the store handle never
//! leaves this crate.

use browserd_store::{EventHub, KeySignals, LiveSubscription, Store, Subscription};
use browserd_types::TaskId;

mod keys;
mod live;
mod profiles;
mod reads;
mod scheduler;
mod schedules;
mod sessions;
mod skills;
mod webhooks;

pub use scheduler::MAX_SLEEP as SCHEDULER_MAX_SLEEP;

use crate::error::TaskError;
use crate::models::ModelCatalog;
use crate::service::TaskService;

/// What the core enforces on new tasks besides validation and the keys' quotas.
#[derive(Clone, Debug, Default)]
pub struct TaskSettings {
    /// Models a task may name.
    pub models: ModelCatalog,
    /// Upstream proxies a task may name (`proxy`); empty: tasks may name none.
    pub proxies: Vec<String>,
    /// Above this many queued tasks (all keys together), creation answers
    /// [`TaskError::QueueFull`] (`None`: no limit).
    pub max_queued_tasks: Option<i64>,
}

/// The server's task core over one Postgres store and the hub its appends signal. Cheap to
/// clone.
#[derive(Clone)]
pub struct TaskCore {
    store: Store,
    hub: EventHub,
    tasks: TaskService,
}

impl TaskCore {
    /// The core over `store`, whose appends `hub` signals, with default [`TaskSettings`].
    /// The binary builds it once at startup (the one place that hands out a store).
    pub fn new(store: Store, hub: EventHub) -> Self {
        Self::with_settings(store, hub, TaskSettings::default())
    }

    /// The core over `store` and `hub` with `settings`.
    pub fn with_settings(store: Store, hub: EventHub, settings: TaskSettings) -> Self {
        let tasks = TaskService::new(
            store.clone(),
            hub.clone(),
            settings.models,
            settings.proxies,
            settings.max_queued_tasks,
        );
        Self { store, hub, tasks }
    }

    /// This core with `settings` instead of its own.
    pub fn configured(self, settings: TaskSettings) -> Self {
        Self::with_settings(self.store, self.hub, settings)
    }

    /// The task service: create, control, read tasks (every front end's task operations).
    pub fn tasks(&self) -> &TaskService {
        &self.tasks
    }

    /// Signals of task `task_id`'s appends (subscribe before reading, so nothing committed in
    /// between is missed).
    pub fn subscribe(&self, task_id: TaskId) -> Subscription {
        self.hub.subscribe(task_id)
    }

    /// Signals of task `task_id`'s live view.
    pub fn subscribe_live(&self, task_id: TaskId) -> LiveSubscription {
        self.hub.subscribe_live(task_id)
    }

    /// Key revocations (of every key: receivers filter).
    pub fn key_signals(&self) -> KeySignals {
        self.hub.key_signals()
    }

    /// Whether the database answers (readiness).
    pub async fn ping(&self) -> Result<(), TaskError> {
        Ok(self.store.ping().await?)
    }

    /// Whether this server keeps a secrets key (task secrets, secret answers, sealed profiles).
    pub fn has_secrets_key(&self) -> bool {
        self.store.has_secrets_key()
    }
}
