//! The task service: the one place that creates, validates, admits, controls and reads tasks,
//! behind every front end — the `/v1` handlers, `/api/v2`, the MCP tools over HTTP, and
//! `browserd mcp` on stdio, all over the Postgres store. It checks ownership
//! (another key's task is `task_not_found`) and speaks [`TaskError`]; each front end only maps
//! requests to it and its errors to its own wire shape.

use std::sync::Arc;

use browserd_store::{
    ArtifactContent, EventFeed, EventHub, FeedItem, GivenAnswer, KeyUsage, NewTask, Quotas,
    SessionChoice, Store, StoreError, TaskCursor, TaskRecord, TransitionDetails,
    seconds_until_utc_midnight,
};
use browserd_types::dto::{
    AnswerRequest, CreateTaskRequest, ReplayActionView, ReplayReportView, StepList, StepView,
    TaskList, TaskView, limits, screenshot_path,
};
use browserd_types::{TaskId, TaskStatus, Transition};

use crate::caller::Caller;
use crate::error::TaskError;
use crate::models::ModelCatalog;
use crate::validation::validate_create_task;

/// The task service's store and settings. Cheap to clone.
#[derive(Clone)]
pub struct TaskService {
    store: Store,
    /// The hub `store`'s appends signal.
    hub: EventHub,
    models: Arc<ModelCatalog>,
    proxies: Arc<Vec<String>>,
    max_queued_tasks: Option<i64>,
}

impl TaskService {
    /// The service over `store`, whose appends `hub` signals; tasks may name `models` and
    /// `proxies`; above `max_queued_tasks` queued tasks, creation answers 429.
    pub fn new(
        store: Store,
        hub: EventHub,
        models: ModelCatalog,
        proxies: Vec<String>,
        max_queued_tasks: Option<i64>,
    ) -> Self {
        Self {
            store,
            hub,
            models: Arc::new(models),
            proxies: Arc::new(proxies),
            max_queued_tasks,
        }
    }

    pub fn models(&self) -> &ModelCatalog {
        &self.models
    }

    /// Task `id`'s events after `after_seq`, in order (the caller checks ownership).
    pub fn follow(&self, id: TaskId, after_seq: i64) -> TaskFeed {
        TaskFeed(EventFeed::follow(
            self.store.clone(),
            &self.hub,
            id,
            after_seq,
        ))
    }
}

/// A `/v1/tasks` page cursor as a client sent it back.
pub fn decode_cursor(raw: &str) -> Result<TaskCursor, TaskError> {
    Ok(TaskCursor::decode(raw)?)
}

/// A task's stored events in order, then live ones as they are appended
/// ([`TaskService::follow`]).
pub struct TaskFeed(EventFeed);

impl TaskFeed {
    /// The next item: an event, a resync, the task's deletion or the feed's end.
    pub async fn next(&mut self) -> Result<FeedItem, TaskError> {
        Ok(self.0.next().await?)
    }
}

/// Where a new task goes besides the queue.
pub enum Placement {
    /// Nowhere else (`/v1`, MCP).
    Queue,
    /// An `/api/v2` session — a new one-off one, or the caller's active, idle one — with the
    /// task's v2 options (`flashMode`, `thinking`, …).
    Session {
        choice: SessionChoice,
        v2_options: serde_json::Value,
    },
    /// Linked to a skill in the task's transaction: the generation of a new skill, another
    /// generation of one, or an execution.
    Skill(browserd_store::SkillAttach),
}

/// A task just created: its view, and its session for [`Placement::Session`].
pub struct CreatedTask {
    pub view: TaskView,
    pub session_id: Option<uuid::Uuid>,
}

/// Seconds a client is told to wait after a full `max_queued`.
const QUEUED_RETRY_AFTER_SECS: u64 = 5;

/// The refusal of a new task by `quotas` given `usage` at `now`, if any.
fn quota_refusal(
    quotas: &Quotas,
    usage: &KeyUsage,
    now: time::OffsetDateTime,
) -> Option<TaskError> {
    let renews = seconds_until_utc_midnight(now);
    if let Some(max) = quotas.daily_steps
        && usage.steps_today >= max
    {
        return Some(TaskError::QuotaExceeded {
            quota: "daily_steps",
            message: format!(
                "this key's tasks took {} steps today, its quota `daily_steps` ({max} steps per \
                 UTC day); it renews at 00:00 UTC",
                usage.steps_today
            ),
            retry_after_secs: renews,
        });
    }
    if let Some(max) = quotas.daily_cost_usd
        && usage.cost_today_usd >= max
    {
        return Some(TaskError::QuotaExceeded {
            quota: "daily_cost_usd",
            message: format!(
                "this key's tasks spent ${:.4} today, its quota `daily_cost_usd` (${max} per \
                 UTC day); it renews at 00:00 UTC",
                usage.cost_today_usd
            ),
            retry_after_secs: renews,
        });
    }
    if let Some(max) = quotas.max_queued
        && usage.queued >= max
    {
        return Some(TaskError::QuotaExceeded {
            quota: "max_queued",
            message: format!(
                "this key has {} queued tasks, its quota `max_queued` ({max}); retry when some \
                 have started",
                usage.queued
            ),
            retry_after_secs: QUEUED_RETRY_AFTER_SECS,
        });
    }
    None
}

/// Cuts `rows` (read with `limit + 1`) to `limit` and answers the cursor of the next page:
/// the number of the page's last row when a row was left over.
pub fn next_page_after<T>(
    rows: &mut Vec<T>,
    limit: i64,
    number: impl Fn(&T) -> i32,
) -> Option<i32> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() <= limit {
        return None;
    }
    rows.truncate(limit);
    rows.last().map(number)
}

fn step_view(id: TaskId, step: browserd_store::StepRecord) -> StepView {
    StepView {
        number: step.number,
        screenshot_url: step.screenshot.map(|_| screenshot_path(id, step.number)),
        url: step.url,
        title: step.title,
        model_output: step.model_output,
        results: step.results,
        usage: step.usage,
        started_at: step.started_at,
        finished_at: step.finished_at,
    }
}

impl TaskService {
    /// Validates, admits and stores a new task (status `queued`); `trace_context` is the W3C
    /// `traceparent` its spans join.
    pub async fn create(
        &self,
        caller: &Caller,
        request: CreateTaskRequest,
        trace_context: Option<String>,
        placement: Placement,
    ) -> Result<CreatedTask, TaskError> {
        let new_task = self.admitted(caller, request, trace_context).await?;
        let (task, session_id) = match placement {
            Placement::Queue => (self.store.create_task(caller.key_id, new_task).await?, None),
            Placement::Session { choice, v2_options } => {
                let (task, session) = self
                    .store
                    .create_v2_task(caller.key_id, new_task, choice, v2_options)
                    .await?;
                (task, Some(session))
            }
            Placement::Skill(attach) => (
                self.store
                    .create_skill_task(caller.key_id, new_task, &attach)
                    .await?,
                None,
            ),
        };
        tracing::info!(task_id = %task.id, session_id = ?session_id, "task created");
        let position = self.store.queue_position(task.id).await?;
        let mut view = TaskView::from(task);
        view.queue_position = position;
        Ok(CreatedTask { view, session_id })
    }

    /// Everything [`TaskService::create`] does before the insert: the checks of
    /// [`TaskService::checked`], then admission (the key's quotas, the machine's queue cap).
    /// A schedule's firing inserts the result in its own transaction.
    pub(crate) async fn admitted(
        &self,
        caller: &Caller,
        request: CreateTaskRequest,
        trace_context: Option<String>,
    ) -> Result<NewTask, TaskError> {
        let new_task = self.checked(caller, request, trace_context).await?;
        self.admit_for_key(caller).await?;
        if let Some(max) = self.max_queued_tasks {
            let queued = self.store.queued_tasks().await?;
            if queued >= max {
                return Err(TaskError::QueueFull {
                    queued,
                    retry_after_secs: 5,
                });
            }
        }
        Ok(new_task)
    }

    /// The task `request` asks for, checked as creation checks it (validation, replay source,
    /// proxy, profile, secrets key) but not admitted: a schedule's target is checked when the
    /// schedule is saved, admitted at every tick.
    pub(crate) async fn checked(
        &self,
        caller: &Caller,
        mut request: CreateTaskRequest,
        trace_context: Option<String>,
    ) -> Result<NewTask, TaskError> {
        if let Some(source) = request.replay_of {
            self.replay_defaults(caller, source, &mut request).await?;
        }
        let mut new_task = validate_create_task(request, &self.models)?;
        if let Some(name) = &new_task.options.proxy
            && !self.proxies.contains(name)
        {
            let shown: String = name.chars().take(64).collect();
            return Err(TaskError::validation(
                "proxy",
                if self.proxies.is_empty() {
                    format!("unknown proxy `{shown}`: no proxies are configured")
                } else {
                    format!(
                        "unknown proxy `{shown}` (configured: {})",
                        self.proxies.join(", ")
                    )
                },
            ));
        }
        if let Some(profile) = new_task.options.profile_id {
            self.check_profile(caller, profile).await?;
        }
        new_task.trace_context = trace_context;
        if !new_task.secrets.is_empty() && !self.store.has_secrets_key() {
            return Err(StoreError::NoSecretsKey.into());
        }
        Ok(new_task)
    }

    /// A task's `profile_id` must name one of the caller's profiles (another key's reads as
    /// missing).
    async fn check_profile(&self, caller: &Caller, profile: uuid::Uuid) -> Result<(), TaskError> {
        if self
            .store
            .get_profile(caller.key_id, profile)
            .await?
            .is_none()
        {
            return Err(TaskError::validation(
                "profile_id",
                format!("profile_id {profile} names no profile of this API key"),
            ));
        }
        Ok(())
    }

    /// The key's own admission rules: its `max_queued` and its daily budgets of steps and cost
    /// (429 with `Retry-After` and a message that names the quota and its value). The global
    /// `--max-queued-tasks` is checked after, as the machine's protection. The count is read
    /// before the insert, so concurrent creations of one key can pass `max_queued` by the number
    /// in flight at that instant (as for the global cap); `max_running` is exact (the claim).
    async fn admit_for_key(&self, caller: &Caller) -> Result<(), TaskError> {
        let quotas = self.store.key_quotas(caller.key_id).await?;
        if !quotas.limits_creation() {
            return Ok(());
        }
        let usage = self.store.key_usage(caller.key_id).await?;
        match quota_refusal(&quotas, &usage, time::OffsetDateTime::now_utc()) {
            Some(refusal) => {
                if let TaskError::QuotaExceeded { quota, .. } = &refusal {
                    metrics::counter!("browserd_quota_refusals_total", "quota" => *quota)
                        .increment(1);
                }
                Err(refusal)
            }
            None => Ok(()),
        }
    }

    /// Checks the source of a replay (the caller's, ended, with recorded actions) and fills the
    /// request's defaults from it: the task text, the domain lists, the viewport, the settle
    /// timeout and the proxy.
    async fn replay_defaults(
        &self,
        caller: &Caller,
        source_id: TaskId,
        request: &mut CreateTaskRequest,
    ) -> Result<(), TaskError> {
        let source = self.owned_task(caller, source_id).await?;
        if !source.status.is_terminal() {
            return Err(TaskError::Conflict {
                code: "replay_source_not_ended",
                message: format!(
                    "task {source_id} is {}: only a task that has ended (finished, failed or \
                     stopped) can be replayed",
                    source.status
                ),
                current_status: Some(source.status),
            });
        }
        if self.store.replayable_steps(source_id).await? == 0 {
            return Err(TaskError::validation(
                "replay_of",
                format!(
                    "task {source_id} recorded no steps with actions to replay (it ended before \
                     its first action)"
                ),
            ));
        }
        request.task.get_or_insert(source.task);
        request
            .allowed_domains
            .get_or_insert(source.options.allowed_domains);
        request
            .prohibited_domains
            .get_or_insert(source.options.prohibited_domains);
        if request.viewport.is_none() {
            request.viewport = source.options.viewport;
        }
        if request.settle_timeout_ms.is_none() {
            request.settle_timeout_ms = source.options.settle_timeout_ms.map(i64::from);
        }
        if request.proxy.is_none() {
            request.proxy = source.options.proxy;
        }
        Ok(())
    }

    /// What replay task `id` did with each recorded action so far, from its steps' results.
    pub async fn replay_report(
        &self,
        caller: &Caller,
        id: TaskId,
    ) -> Result<ReplayReportView, TaskError> {
        let task = self.owned_task(caller, id).await?;
        let replay = self
            .store
            .task_replay(id)
            .await?
            .ok_or_else(|| TaskError::NotFound {
                code: "not_a_replay",
                message: format!("task {id} is not a replay (it was not created with replay_of)"),
            })?;
        let steps = self.store.list_steps(id).await?;
        let mut actions = Vec::new();
        for step in &steps {
            let Some(results) = step.results.as_array() else {
                continue;
            };
            for result in results {
                let Some(entry) = result.pointer("/metadata/replay") else {
                    continue;
                };
                let mut action: ReplayActionView =
                    serde_json::from_value(entry.clone()).map_err(|err| {
                        TaskError::Internal(format!("replay entry of step {}: {err}", step.number))
                    })?;
                action.replay_step = step.number;
                actions.push(action);
            }
        }
        let ended = task.status.is_terminal();
        Ok(ReplayReportView {
            replay_of: replay.source,
            options: replay.options,
            status: task.status,
            success: ended
                .then(|| task.status == TaskStatus::Finished && task.is_success == Some(true)),
            error: task.error,
            final_result: task.output,
            actions,
        })
    }

    /// The task if it exists and belongs to the caller; 404 otherwise (another key's task is
    /// indistinguishable from a missing one).
    pub async fn owned_task(&self, caller: &Caller, id: TaskId) -> Result<TaskRecord, TaskError> {
        self.store
            .get_task(Some(caller.key_id), id)
            .await?
            .ok_or_else(TaskError::task_not_found)
    }

    /// One task, with its queue position while queued.
    pub async fn get(&self, caller: &Caller, id: TaskId) -> Result<TaskView, TaskError> {
        let task = self.owned_task(caller, id).await?;
        let queued = task.status == TaskStatus::Queued;
        let open = !task.status.is_terminal();
        let mut view = TaskView::from(task);
        if queued {
            view.queue_position = self.store.queue_position(id).await?;
        }
        if open {
            view.question = self.store.open_question(id).await?;
        }
        Ok(view)
    }

    /// Answers the question the task asks (`ask_human`): free text or one of its choices,
    /// optionally secret. 409 when it asks none, 422 for a choice not offered or a bad answer.
    pub async fn answer(
        &self,
        caller: &Caller,
        id: TaskId,
        request: AnswerRequest,
    ) -> Result<TaskView, TaskError> {
        let (text, is_choice) = match (request.answer, request.choice) {
            (Some(answer), None) => (answer, false),
            (None, Some(choice)) => (choice, true),
            (Some(_), Some(_)) => {
                return Err(TaskError::validation(
                    "choice",
                    "give either `answer` (free text) or `choice` (one of the question's choices), not both",
                ));
            }
            (None, None) => {
                return Err(TaskError::validation(
                    "answer",
                    "`answer` (free text) or `choice` (one of the question's choices) is required",
                ));
            }
        };
        let field = if is_choice { "choice" } else { "answer" };
        let chars = text.chars().count();
        if text.trim().is_empty() {
            return Err(TaskError::validation(
                field,
                format!("{field} must not be empty"),
            ));
        }
        if chars > limits::ANSWER_MAX_CHARS {
            return Err(TaskError::validation(
                field,
                format!(
                    "{field} must be at most {} characters, got {chars}",
                    limits::ANSWER_MAX_CHARS
                ),
            ));
        }
        if text.contains('\0') {
            return Err(TaskError::validation(
                field,
                format!("{field} must not contain NUL characters"),
            ));
        }
        let given = GivenAnswer {
            text: secrecy::SecretString::from(text),
            is_choice,
            secret: request.secret.unwrap_or(false),
        };
        let answered = self
            .store
            .answer_question(Some(caller.key_id), id, &given)
            .await?;
        tracing::info!(task_id = %id, question_id = %answered.question_id, secret = answered.secret,
            status = %answered.task.status, "question answered");
        let mut view = TaskView::from(answered.task);
        view.question = self.store.open_question(id).await?;
        Ok(view)
    }

    /// A page of the caller's tasks, newest first; `limit` is checked here (1–100, default 20).
    pub async fn list(
        &self,
        caller: &Caller,
        status: Option<TaskStatus>,
        limit: Option<i64>,
        cursor: Option<TaskCursor>,
    ) -> Result<TaskList, TaskError> {
        let limit = crate::validation::list_limit(limit)?;
        let page = self
            .store
            .list_tasks(caller.key_id, status, limit, cursor)
            .await?;
        Ok(TaskList {
            items: page.items.into_iter().map(TaskView::from).collect(),
            next_cursor: page.next_cursor.map(|c| c.encode()),
        })
    }

    /// Stop, pause or resume (409 when illegal in the task's status).
    pub async fn control(
        &self,
        caller: &Caller,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, TaskError> {
        let task = self
            .store
            .transition_task(
                Some(caller.key_id),
                id,
                transition,
                TransitionDetails::default(),
            )
            .await?;
        tracing::info!(task_id = %id, transition = transition.name(), status = %task.status, "task transition");
        Ok(task.into())
    }

    /// A page of the task's steps, in order: up to `limit` (1–500, default 100, checked here)
    /// numbered above `after_step`, and the `after_step` of the next page when there is one.
    pub async fn steps(
        &self,
        caller: &Caller,
        id: TaskId,
        after_step: Option<i32>,
        limit: Option<i64>,
    ) -> Result<StepList, TaskError> {
        let limit = crate::validation::step_page_limit(limit)?;
        self.owned_task(caller, id).await?;
        let mut steps = self
            .store
            .list_steps_page(id, after_step, limit + 1)
            .await?;
        let next_after_step = next_page_after(&mut steps, limit, |step| step.number);
        Ok(StepList {
            items: steps.into_iter().map(|step| step_view(id, step)).collect(),
            next_after_step,
        })
    }

    /// Every step of the task, in order, read page by page (the MCP tools count and summarise
    /// them).
    pub async fn all_steps(&self, caller: &Caller, id: TaskId) -> Result<Vec<StepView>, TaskError> {
        let mut all = Vec::new();
        let mut after_step = None;
        loop {
            let page = self
                .steps(caller, id, after_step, Some(limits::STEP_PAGE_MAX))
                .await?;
            all.extend(page.items);
            match page.next_after_step {
                Some(next) => after_step = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// The screenshot of step `number`: its content type and bytes.
    pub async fn screenshot(
        &self,
        caller: &Caller,
        id: TaskId,
        number: i32,
    ) -> Result<(String, Vec<u8>), TaskError> {
        self.owned_task(caller, id).await?;
        let screenshot = self
            .store
            .step_screenshot(id, number)
            .await?
            .ok_or_else(|| TaskError::NotFound {
                code: "screenshot_not_found",
                message: format!("step {number} has no screenshot"),
            })?;
        let bytes = match screenshot.content {
            ArtifactContent::Inline(bytes) => bytes,
            ArtifactContent::Path(path) => tokio::fs::read(&path).await.map_err(|err| {
                TaskError::Internal(format!("reading screenshot file {path}: {err}"))
            })?,
        };
        Ok((screenshot.content_type, bytes))
    }
}
