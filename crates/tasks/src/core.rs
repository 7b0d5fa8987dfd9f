//! [`TaskCore`]: the server's task core — the [`TaskService`] over the Postgres store, and the
//! server objects front ends read and write besides tasks: API keys and event tickets,
//! profiles, webhooks, `/api/v2` sessions and tasks, live view and take-over inputs, output
//! files, steps, readiness and gauges. Every call answers [`TaskError`]; the store handle never
//! leaves this crate.

use std::time::Duration;

use browserd_store::{
    ApiKeyRecord, CreatedApiKey, DeletedTask, DeliveryRecord, EventHub, KeySignals, LiveFrame,
    LiveSubscription, LiveViewerId, NewSession, OutputFile, OutputFileRecord, ProfileRecord,
    QuotaOverrides, QuotaUpdate, Quotas, SessionRecord, StatusCount, StepRecord, Store, StoreError,
    Subscription, TaskRecord, V2Task, V2TaskFilter, WebhookRecord, WsTicket,
};
use browserd_types::dto::TicketScope;
use browserd_types::takeover::PersonInput;
use browserd_types::{ApiKeyId, TaskId};
use secrecy::SecretString;
use uuid::Uuid;

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
            std::sync::Arc::new(store.clone()),
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

    /// Registers a viewer of `task_id` for `ttl` (the worker starts the screencast).
    pub async fn add_live_viewer(
        &self,
        task_id: TaskId,
        ttl: Duration,
    ) -> Result<LiveViewerId, TaskError> {
        Ok(self.store.add_live_viewer(task_id, ttl).await?)
    }

    /// Whether key `id` exists and is not revoked.
    pub async fn api_key_active(&self, id: ApiKeyId) -> Result<bool, TaskError> {
        Ok(self.store.api_key_active(id).await?)
    }

    /// The active key matching `presented`, if any.
    pub async fn authenticate_api_key(
        &self,
        presented: &SecretString,
    ) -> Result<Option<ApiKeyRecord>, TaskError> {
        Ok(self.store.authenticate_api_key(presented).await?)
    }

    /// Creates an empty profile owned by `owner`.
    pub async fn create_profile(
        &self,
        owner: ApiKeyId,
        name: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<ProfileRecord, TaskError> {
        Ok(self.store.create_profile(owner, name, user_id).await?)
    }

    /// Issues a single-use ticket of `scope` that opens task `task_id`'s WebSockets as key
    /// `key_id` within `ttl`. Expired tickets are swept on the way.
    pub async fn create_scoped_ws_ticket(
        &self,
        key_id: ApiKeyId,
        task_id: TaskId,
        scope: TicketScope,
        ttl: Duration,
    ) -> Result<WsTicket, TaskError> {
        Ok(self
            .store
            .create_scoped_ws_ticket(key_id, task_id, scope, ttl)
            .await?)
    }

    /// Creates an active session owned by `owner`.
    pub async fn create_session(
        &self,
        owner: ApiKeyId,
        new: NewSession,
    ) -> Result<SessionRecord, TaskError> {
        Ok(self.store.create_session(owner, new).await?)
    }

    /// Registers a webhook of `owner` with a new random signing secret (`whsec_` + 256 bits,
    /// base64url), returned here only.
    pub async fn create_webhook(
        &self,
        owner: ApiKeyId,
        url: &str,
        events: &[String],
    ) -> Result<(WebhookRecord, String), TaskError> {
        Ok(self.store.create_webhook(owner, url, events).await?)
    }

    /// Deletes `owner`'s profile and its state; `false` when it does not exist. A task
    /// running with it stops saving (its next write finds it gone).
    pub async fn delete_profile(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, TaskError> {
        Ok(self.store.delete_profile(owner, id).await?)
    }

    /// Deletes `owner`'s session and its saved browser state (its tasks stay, without a
    /// session). `false` when it does not exist.
    pub async fn delete_session(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, TaskError> {
        Ok(self.store.delete_session(owner, id).await?)
    }

    /// Deletes `owner`'s task `id` with its steps, events and artifacts. Refused while a
    /// worker holds the task (running, or paused on a worker).
    pub async fn delete_task(&self, owner: ApiKeyId, id: TaskId) -> Result<DeletedTask, TaskError> {
        Ok(self.store.delete_task(owner, id).await?)
    }

    /// Deletes `owner`'s webhook `id` with its deliveries; `false` when there is none.
    pub async fn delete_webhook(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, TaskError> {
        Ok(self.store.delete_webhook(owner, id).await?)
    }

    /// `owner`'s profile `id` (another key's is `None`, like a missing one).
    pub async fn get_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<ProfileRecord>, TaskError> {
        Ok(self.store.get_profile(owner, id).await?)
    }

    /// `owner`'s session `id`.
    pub async fn get_session(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SessionRecord>, TaskError> {
        Ok(self.store.get_session(owner, id).await?)
    }

    /// `owner`'s task `id` with its v2 fields.
    pub async fn get_v2_task(
        &self,
        owner: ApiKeyId,
        id: TaskId,
    ) -> Result<Option<V2Task>, TaskError> {
        Ok(self.store.get_v2_task(owner, id).await?)
    }

    /// `owner`'s webhook `id`.
    pub async fn get_webhook(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<WebhookRecord>, TaskError> {
        Ok(self.store.get_webhook(owner, id).await?)
    }

    /// The quotas that apply to key `key` (the configured defaults for an unknown key).
    pub async fn key_quotas(&self, key: ApiKeyId) -> Result<Quotas, TaskError> {
        Ok(self.store.key_quotas(key).await?)
    }

    /// The latest deliveries of webhook `id` (newest first), `limit` at most.
    pub async fn list_deliveries(
        &self,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<DeliveryRecord>, TaskError> {
        Ok(self.store.list_deliveries(id, limit).await?)
    }

    /// The output files of task `id`, by name (the caller checked it may see the task).
    pub async fn list_output_files(&self, id: TaskId) -> Result<Vec<OutputFileRecord>, TaskError> {
        Ok(self.store.list_output_files(id).await?)
    }

    /// A page (1-based `page_number`) of `owner`'s profiles, newest first, with the total
    /// count; `query` keeps those whose name contains it (case-insensitive).
    pub async fn list_profiles(
        &self,
        owner: ApiKeyId,
        query: Option<&str>,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<ProfileRecord>, i64), TaskError> {
        Ok(self
            .store
            .list_profiles(owner, query, page_size, page_number)
            .await?)
    }

    /// A page of `owner`'s sessions, newest first, with the total count.
    pub async fn list_sessions(
        &self,
        owner: ApiKeyId,
        active: Option<bool>,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<SessionRecord>, i64), TaskError> {
        Ok(self
            .store
            .list_sessions(owner, active, page_size, page_number)
            .await?)
    }

    /// All steps of task `task_id`, in order. A screenshot that is not the task's own
    /// artifact is not reported.
    pub async fn list_steps(&self, task_id: TaskId) -> Result<Vec<StepRecord>, TaskError> {
        Ok(self.store.list_steps(task_id).await?)
    }

    /// A page (1-based `page_number`) of `owner`'s tasks, newest first, with the total count.
    pub async fn list_v2_tasks(
        &self,
        owner: ApiKeyId,
        filter: &V2TaskFilter,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<V2Task>, i64), TaskError> {
        Ok(self
            .store
            .list_v2_tasks(owner, filter, page_size, page_number)
            .await?)
    }

    /// `owner`'s webhooks, oldest first.
    pub async fn list_webhooks(&self, owner: ApiKeyId) -> Result<Vec<WebhookRecord>, TaskError> {
        Ok(self.store.list_webhooks(owner).await?)
    }

    /// The newest frame of `task_id`, if one was stored.
    pub async fn live_frame(&self, task_id: TaskId) -> Result<Option<LiveFrame>, TaskError> {
        Ok(self.store.live_frame(task_id).await?)
    }

    /// Output file `file` (without its bytes); `task` restricts it to one task (the caller checked
    /// that the task is the caller's), `None` finds it by id alone (a signed download link,
    /// verified by the caller with the returned key). Skipped files have no bytes: `None`.
    pub async fn output_file(
        &self,
        task: Option<TaskId>,
        file: Uuid,
    ) -> Result<Option<OutputFile>, TaskError> {
        Ok(self.store.output_file(task, file).await?)
    }

    /// `len` bytes of output file `file` from `offset` on (fewer at its end, none past it);
    /// `None` when the file is gone. The bytes are stored uncompressed (migration 0018), so
    /// Postgres reads only the pages of the chunk: a download holds one chunk in memory.
    pub async fn output_file_chunk(
        &self,
        file: Uuid,
        offset: i32,
        len: i32,
    ) -> Result<Option<Vec<u8>>, TaskError> {
        Ok(self.store.output_file_chunk(file, offset, len).await?)
    }

    /// The download key of output file `file` (one with stored bytes), without reading the
    /// bytes: a signed link is checked with it before anything else is loaded.
    pub async fn output_file_key(&self, file: Uuid) -> Result<Option<Vec<u8>>, TaskError> {
        Ok(self.store.output_file_key(file).await?)
    }

    /// Records a person's take-over `input` for task `id` of `key` (taken only while the task
    /// is paused on a worker, which holds its browser; a secret text needs the secrets key).
    /// Answers the event's seq, or why the input was refused in words for the person who sent
    /// it (the task is not paused on a worker, has ended, or is gone).
    pub async fn record_person_input(
        &self,
        key: ApiKeyId,
        id: TaskId,
        input: &PersonInput,
    ) -> Result<Result<i64, String>, TaskError> {
        match self.store.record_person_input(key, id, input).await {
            Ok(event) => Ok(Ok(event.seq)),
            Err(
                err @ (StoreError::TakeOverRefused(_)
                | StoreError::TaskEnded { .. }
                | StoreError::LeaseLost(_)),
            ) => Ok(Err(err.to_string())),
            Err(StoreError::TaskNotFound(_)) => Ok(Err("the task is gone".to_owned())),
            Err(err) => Err(err.into()),
        }
    }

    /// Redeems `presented` for task `task_id`: the key it was issued to and the ticket's scope
    /// when the ticket exists, has not expired, was issued for this task and its key is still
    /// active. A ticket works once: it is deleted whatever the outcome.
    pub async fn redeem_ws_ticket(
        &self,
        presented: &SecretString,
        task_id: TaskId,
    ) -> Result<Option<(ApiKeyId, TicketScope)>, TaskError> {
        Ok(self.store.redeem_ws_ticket(presented, task_id).await?)
    }

    /// Extends a viewer's registration; false when it is gone (expired and purged, or the
    /// task deleted).
    pub async fn refresh_live_viewer(
        &self,
        viewer: LiveViewerId,
        ttl: Duration,
    ) -> Result<bool, TaskError> {
        Ok(self.store.refresh_live_viewer(viewer, ttl).await?)
    }

    /// Removes a viewer (the worker stops the screencast after the last one).
    pub async fn remove_live_viewer(&self, viewer: LiveViewerId) -> Result<(), TaskError> {
        Ok(self.store.remove_live_viewer(viewer).await?)
    }

    /// The profile of `owner`'s `/api/v2` session `id` (`None`: it has none, or it is not
    /// `owner`'s).
    pub async fn session_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<Uuid>, TaskError> {
        Ok(self.store.session_profile(owner, id).await?)
    }

    /// The session's tasks, oldest first.
    pub async fn session_tasks(
        &self,
        owner: ApiKeyId,
        session: Uuid,
    ) -> Result<Vec<V2Task>, TaskError> {
        Ok(self.store.session_tasks(owner, session).await?)
    }

    /// Ids of the session's unfinished tasks (queued, running, paused, waiting).
    pub async fn session_unfinished_tasks(&self, id: Uuid) -> Result<Vec<TaskId>, TaskError> {
        Ok(self.store.session_unfinished_tasks(id).await?)
    }

    /// Up to `limit` persisted AgentHistory items of task `id` whose step is numbered above
    /// `after_step` (from the first when `None`), in step order, each with its step number:
    /// one page of [`Store::step_records`].
    pub async fn step_records_page(
        &self,
        id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<(i32, serde_json::Value)>, TaskError> {
        Ok(self.store.step_records_page(id, after_step, limit).await?)
    }

    /// Marks `owner`'s session stopped (idempotent); `None` when it does not exist. The caller
    /// stops the session's unfinished tasks.
    pub async fn stop_session(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SessionRecord>, TaskError> {
        Ok(self.store.stop_session(owner, id).await?)
    }

    /// Queued, running and paused tasks: how many, and how long the oldest has been in that
    /// status. One query over partial indexes (terminal tasks are not counted: they only grow).
    pub async fn task_gauges(&self) -> Result<Vec<StatusCount>, TaskError> {
        Ok(self.store.task_gauges().await?)
    }

    /// Renames `owner`'s profile (`Some(None)` clears a field, `None` keeps it); `None` when
    /// it does not exist.
    pub async fn update_profile(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        name: Option<Option<&str>>,
        user_id: Option<Option<&str>>,
    ) -> Result<Option<ProfileRecord>, TaskError> {
        Ok(self.store.update_profile(owner, id, name, user_id).await?)
    }

    /// Every key, oldest first (revoked ones included).
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, TaskError> {
        Ok(self.store.list_api_keys().await?)
    }

    /// Revokes the one active key whose id is `selector`, or whose display prefix starts with
    /// `selector` (at least `bd_` and 4 more characters). Fails when nothing or more than one
    /// active key matches.
    pub async fn revoke_api_key_matching(&self, selector: &str) -> Result<ApiKeyRecord, TaskError> {
        Ok(self.store.revoke_api_key_matching(selector).await?)
    }

    /// Changes the quotas of the one active key `selector` designates (as for
    /// [`Store::revoke_api_key_matching`]) and returns the key as it is now. Takes effect at
    /// the key's next task creation, claim or WebSocket.
    pub async fn update_api_key_quotas(
        &self,
        selector: &str,
        update: &QuotaUpdate,
    ) -> Result<ApiKeyRecord, TaskError> {
        Ok(self.store.update_api_key_quotas(selector, update).await?)
    }

    /// Creates a key named `name` and returns it in clear text, once.
    pub async fn create_api_key(&self, name: &str) -> Result<CreatedApiKey, TaskError> {
        Ok(self.store.create_api_key(name).await?)
    }

    /// Creates a key named `name` with its own `quotas` and returns it in clear text, once.
    pub async fn create_api_key_with_quotas(
        &self,
        name: &str,
        quotas: QuotaOverrides,
    ) -> Result<CreatedApiKey, TaskError> {
        Ok(self.store.create_api_key_with_quotas(name, quotas).await?)
    }

    /// The task `id` if it exists and (when `owner` is given) belongs to `owner`.
    pub async fn get_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
    ) -> Result<Option<TaskRecord>, TaskError> {
        Ok(self.store.get_task(owner, id).await?)
    }
}
