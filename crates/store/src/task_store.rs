//! [`TaskStore`]: what the task service and a task's runner need of a store — create, read,
//! list, transition, steps, screenshots, the event log, and a worker's claim and lease-guarded
//! writes. [`Store`] (Postgres) implements it for the service; [`MemoryStore`] for
//! `browserd mcp` in-process, which runs without a database. Both apply the same status
//! machine (`browserd_types::Transition`) with the same outcomes; `tests/store.rs` runs one
//! table of transition sequences through both.
//!
//! [`MemoryStore`]: crate::MemoryStore

use std::time::Duration;

use async_trait::async_trait;
use browserd_types::{
    ApiKeyId, EventBody, QuestionEvent, TaskEvent, TaskId, TaskStatus, Transition,
};
use uuid::Uuid;

use crate::{
    Answer, Answered, ArtifactBody, Asked, ClaimedTask, GivenAnswer, KeyUsage, NewQuestion,
    NewTask, Quotas, SessionChoice, StepRecord, StepWrite, Store, StoreError, TaskCursor, TaskPage,
    TaskRecord, TaskReplay, TransitionDetails,
};

/// A store of tasks, their steps and their event logs. Every method means what the
/// [`Store`] method of the same name does.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// A secrets key is configured (tasks with secrets are refused without one).
    fn has_secrets_key(&self) -> bool;

    /// Inserts a `queued` task with its first `status` event.
    async fn create_task(&self, owner: ApiKeyId, new: NewTask) -> Result<TaskRecord, StoreError>;

    /// Inserts a task into an `/api/v2` session.
    async fn create_v2_task(
        &self,
        owner: ApiKeyId,
        new: NewTask,
        session: SessionChoice,
        options: serde_json::Value,
    ) -> Result<(TaskRecord, Uuid), StoreError>;

    async fn get_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
    ) -> Result<Option<TaskRecord>, StoreError>;

    async fn list_tasks(
        &self,
        owner: ApiKeyId,
        status: Option<TaskStatus>,
        limit: i64,
        after: Option<TaskCursor>,
    ) -> Result<TaskPage, StoreError>;

    /// One status machine edge and its `status` event.
    async fn transition_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError>;

    async fn queued_tasks(&self) -> Result<i64, StoreError>;

    async fn queue_position(&self, id: TaskId) -> Result<Option<i64>, StoreError>;

    async fn task_replay(&self, id: TaskId) -> Result<Option<TaskReplay>, StoreError>;

    async fn replayable_steps(&self, id: TaskId) -> Result<i64, StoreError>;

    async fn list_steps(&self, id: TaskId) -> Result<Vec<StepRecord>, StoreError>;

    /// Up to `limit` steps numbered above `after_step` (from the first when `None`), in order.
    async fn list_steps_page(
        &self,
        id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<StepRecord>, StoreError>;

    async fn step_screenshot(
        &self,
        id: TaskId,
        number: i32,
    ) -> Result<Option<ArtifactBody>, StoreError>;

    /// Events with `seq > after_seq`, in order, at most `limit` (what an
    /// [`EventFeed`](crate::EventFeed) reads after each signal of the store's hub).
    async fn events_after(
        &self,
        id: TaskId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError>;

    /// A worker claims the next queued task.
    async fn claim_task(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedTask>, StoreError>;

    /// A transition made by the holder of the task's lease.
    async fn transition_claimed_task(
        &self,
        lease_owner: &str,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError>;

    async fn append_worker_event(
        &self,
        id: TaskId,
        owner: &str,
        body: &EventBody,
    ) -> Result<TaskEvent, StoreError>;

    async fn start_step(
        &self,
        id: TaskId,
        owner: &str,
        number: i32,
        url: &str,
    ) -> Result<TaskEvent, StoreError>;

    async fn write_step(
        &self,
        id: TaskId,
        owner: &str,
        step: StepWrite,
    ) -> Result<TaskEvent, StoreError>;

    /// The worker asks a person (`ask_human`).
    async fn ask_question(
        &self,
        id: TaskId,
        owner: &str,
        question: &NewQuestion,
    ) -> Result<Asked, StoreError>;

    /// A person answers the task's open question.
    async fn answer_question(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        answer: &GivenAnswer,
    ) -> Result<Answered, StoreError>;

    async fn question_answer(
        &self,
        id: TaskId,
        question_id: &str,
    ) -> Result<Option<Answer>, StoreError>;

    async fn open_question(&self, id: TaskId) -> Result<Option<QuestionEvent>, StoreError>;

    async fn secret_answers(&self, id: TaskId) -> Result<Vec<Answer>, StoreError>;

    /// The quotas that apply to key `key` (its own, else the configured defaults).
    async fn key_quotas(&self, key: ApiKeyId) -> Result<Quotas, StoreError>;

    /// What key `key` has queued and held, and spent today (UTC).
    async fn key_usage(&self, key: ApiKeyId) -> Result<KeyUsage, StoreError>;

    /// Browser profiles are kept (`/v1/profiles`, a task's `profile_id`): only the Postgres
    /// store has them; a task naming a profile is refused by a store without.
    fn has_profiles(&self) -> bool {
        false
    }

    /// `owner` has profile `id` (another key's is `false`, like a missing one).
    async fn profile_exists(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, StoreError> {
        let _ = (owner, id);
        Ok(false)
    }
}

#[async_trait]
impl TaskStore for Store {
    fn has_profiles(&self) -> bool {
        true
    }

    async fn profile_exists(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, StoreError> {
        Ok(self.get_profile(owner, id).await?.is_some())
    }

    fn has_secrets_key(&self) -> bool {
        Store::has_secrets_key(self)
    }

    async fn create_task(&self, owner: ApiKeyId, new: NewTask) -> Result<TaskRecord, StoreError> {
        Store::create_task(self, owner, new).await
    }

    async fn create_v2_task(
        &self,
        owner: ApiKeyId,
        new: NewTask,
        session: SessionChoice,
        options: serde_json::Value,
    ) -> Result<(TaskRecord, Uuid), StoreError> {
        Store::create_v2_task(self, owner, new, session, options).await
    }

    async fn get_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
    ) -> Result<Option<TaskRecord>, StoreError> {
        Store::get_task(self, owner, id).await
    }

    async fn list_tasks(
        &self,
        owner: ApiKeyId,
        status: Option<TaskStatus>,
        limit: i64,
        after: Option<TaskCursor>,
    ) -> Result<TaskPage, StoreError> {
        Store::list_tasks(self, owner, status, limit, after).await
    }

    async fn transition_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        Store::transition_task(self, owner, id, transition, details).await
    }

    async fn queued_tasks(&self) -> Result<i64, StoreError> {
        Store::queued_tasks(self).await
    }

    async fn queue_position(&self, id: TaskId) -> Result<Option<i64>, StoreError> {
        Store::queue_position(self, id).await
    }

    async fn task_replay(&self, id: TaskId) -> Result<Option<TaskReplay>, StoreError> {
        Store::task_replay(self, id).await
    }

    async fn replayable_steps(&self, id: TaskId) -> Result<i64, StoreError> {
        Store::replayable_steps(self, id).await
    }

    async fn list_steps(&self, id: TaskId) -> Result<Vec<StepRecord>, StoreError> {
        Store::list_steps(self, id).await
    }

    async fn list_steps_page(
        &self,
        id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<StepRecord>, StoreError> {
        Store::list_steps_page(self, id, after_step, limit).await
    }

    async fn step_screenshot(
        &self,
        id: TaskId,
        number: i32,
    ) -> Result<Option<ArtifactBody>, StoreError> {
        Store::step_screenshot(self, id, number).await
    }

    async fn events_after(
        &self,
        id: TaskId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        Store::events_after(self, id, after_seq, limit).await
    }

    async fn claim_task(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedTask>, StoreError> {
        Store::claim_task(self, owner, lease).await
    }

    async fn transition_claimed_task(
        &self,
        lease_owner: &str,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        Store::transition_claimed_task(self, lease_owner, id, transition, details).await
    }

    async fn append_worker_event(
        &self,
        id: TaskId,
        owner: &str,
        body: &EventBody,
    ) -> Result<TaskEvent, StoreError> {
        Store::append_worker_event(self, id, owner, body).await
    }

    async fn start_step(
        &self,
        id: TaskId,
        owner: &str,
        number: i32,
        url: &str,
    ) -> Result<TaskEvent, StoreError> {
        Store::start_step(self, id, owner, number, url).await
    }

    async fn write_step(
        &self,
        id: TaskId,
        owner: &str,
        step: StepWrite,
    ) -> Result<TaskEvent, StoreError> {
        Store::write_step(self, id, owner, step).await
    }

    async fn ask_question(
        &self,
        id: TaskId,
        owner: &str,
        question: &NewQuestion,
    ) -> Result<Asked, StoreError> {
        Store::ask_question(self, id, owner, question).await
    }

    async fn answer_question(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        answer: &GivenAnswer,
    ) -> Result<Answered, StoreError> {
        Store::answer_question(self, owner, id, answer).await
    }

    async fn question_answer(
        &self,
        id: TaskId,
        question_id: &str,
    ) -> Result<Option<Answer>, StoreError> {
        Store::question_answer(self, id, question_id).await
    }

    async fn open_question(&self, id: TaskId) -> Result<Option<QuestionEvent>, StoreError> {
        Store::open_question(self, id).await
    }

    async fn secret_answers(&self, id: TaskId) -> Result<Vec<Answer>, StoreError> {
        Store::secret_answers(self, id).await
    }

    async fn key_quotas(&self, key: ApiKeyId) -> Result<Quotas, StoreError> {
        Store::key_quotas(self, key).await
    }

    async fn key_usage(&self, key: ApiKeyId) -> Result<KeyUsage, StoreError> {
        Store::key_usage(self, key).await
    }
}
