//! [`MemoryStore`]: a [`TaskStore`] in this process's memory, for `browserd mcp` without a
//! server — no database, everything gone when the process ends.
//!
//! It keeps what the Postgres store keeps (task records, steps with their screenshots, the
//! event log) and applies the same rules the SQL does, line for line: the status machine's
//! allowed-from lists and targets (`Transition`), terminal statuses wiping the lease and ending
//! the event log, lease-guarded worker writes, the claim's `start` event, one `step` event per
//! stored step. Appends signal the store's own [`EventHub`] (the Postgres store's hub hears
//! them through `LISTEN`), so an [`EventFeed`](crate::EventFeed) follows a task the same way
//! over either store. Not supported: secrets (there is no secrets key: a secret answer to
//! `ask_human` is refused as by a server without one), `/api/v2` sessions.
//! Per-key quotas are unlimited here: one process serves one client (the stdio MCP client),
//! whose tasks are bounded by the `LocalWorker`'s concurrency alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use browserd_types::{
    ApiKeyId, EventBody, QuestionEvent, TaskEvent, TaskId, TaskStatus, Transition,
};
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::events::EventGuard;
use crate::hub::{EventHub, Signal};
use crate::questions::{answered_event, question_status_event};
use crate::queue::claim_event;
use crate::tasks::transition_event;
use crate::{
    Answer, Answered, ArtifactBody, ArtifactContent, Asked, ClaimedTask, GivenAnswer, KeyUsage,
    NewQuestion, NewTask, Quotas, SessionChoice, StepRecord, StepWrite, StoreError, TaskCursor,
    TaskPage, TaskRecord, TaskReplay, TaskStore, TransitionDetails,
};

/// Tasks kept in memory; cheap to clone (clones share the tasks).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    tasks: Arc<Mutex<Tasks>>,
    hub: EventHub,
}

#[derive(Debug, Default)]
struct Tasks {
    by_id: HashMap<TaskId, MemoryTask>,
}

#[derive(Debug)]
struct MemoryTask {
    record: TaskRecord,
    replay: Option<TaskReplay>,
    events: Vec<TaskEvent>,
    steps: Vec<StepRecord>,
    /// Whether a step recorded an AgentHistory item with a model output (a replayable step).
    replayable: Vec<bool>,
    /// Screenshots by step number: content type and bytes.
    screenshots: HashMap<i32, (String, Vec<u8>)>,
    /// `task_questions`, in the order asked: the question and its answer once given.
    questions: Vec<(NewQuestion, Option<String>)>,
}

/// The lease guard of a write: no owner named, or the task's lease is `owner`'s.
fn lease_matches(record: &TaskRecord, owner: Option<&str>) -> bool {
    owner.is_none_or(|owner| record.lease_owner.as_deref() == Some(owner))
}

impl MemoryTask {
    /// Appends `body` as the next event (the SQL's `append_event_in`, with its guard).
    fn append(&mut self, body: &EventBody, guard: EventGuard<'_>) -> Result<TaskEvent, StoreError> {
        let id = self.record.id;
        let owner = match guard {
            EventGuard::Owner(owner) => Some(owner),
            _ => None,
        };
        let open = guard == EventGuard::Any || !self.record.status.is_terminal();
        if !open || !lease_matches(&self.record, owner) {
            return Err(if !lease_matches(&self.record, owner) {
                StoreError::LeaseLost(id)
            } else {
                StoreError::TaskEnded {
                    id,
                    status: self.record.status,
                }
            });
        }
        self.record.last_event_seq += 1;
        let (kind, payload) = body.to_parts();
        let event = TaskEvent {
            task_id: id,
            seq: self.record.last_event_seq,
            kind: kind.to_owned(),
            payload,
            created_at: OffsetDateTime::now_utc(),
        };
        self.events.push(event.clone());
        Ok(event)
    }

    /// A worker's write is allowed (the check `append` makes, without appending).
    fn check_worker(&self, owner: &str) -> Result<(), StoreError> {
        if !lease_matches(&self.record, Some(owner)) {
            return Err(StoreError::LeaseLost(self.record.id));
        }
        if self.record.status.is_terminal() {
            return Err(StoreError::TaskEnded {
                id: self.record.id,
                status: self.record.status,
            });
        }
        Ok(())
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// The hub this store signals: subscribe to it to follow a task (`EventFeed`), wait on
    /// its queue wake-up to claim.
    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    fn lock(&self) -> MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `write` on task `id` (owned by `owner` when given), then signals the events it
    /// appended and wakes the claim loop if the task is queued now.
    fn write<T>(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        write: impl FnOnce(&mut MemoryTask) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (result, before, after, queued) = {
            let mut tasks = self.lock();
            let task = tasks
                .by_id
                .get_mut(&id)
                .filter(|t| owner.is_none_or(|o| t.record.api_key_id == o))
                .ok_or(StoreError::TaskNotFound(id))?;
            let before = task.record.last_event_seq;
            let result = write(task);
            (
                result,
                before,
                task.record.last_event_seq,
                task.record.status == TaskStatus::Queued,
            )
        };
        self.signal(id, before, after, queued);
        result
    }

    fn signal(&self, id: TaskId, before: i64, after: i64, queued: bool) {
        for seq in before + 1..=after {
            self.hub.publish(id, Signal::Appended { seq, event: None });
        }
        if queued && after > before {
            self.hub.wake_queue();
        }
    }

    /// The SQL `transition`: one guarded change and its `status` event.
    fn transition(
        &self,
        owner: Option<ApiKeyId>,
        lease_owner: Option<&str>,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        self.write(owner, id, |task| {
            let record = &mut task.record;
            if !transition.is_allowed_from(record.status) || !lease_matches(record, lease_owner) {
                return Err(if !lease_matches(record, lease_owner) {
                    StoreError::LeaseLost(id)
                } else {
                    StoreError::IllegalTransition {
                        transition: transition.name(),
                        current: record.status,
                    }
                });
            }
            let target_if_new = transition.target(false);
            let terminal = target_if_new.is_terminal();
            let clear_lease = terminal || transition == Transition::Requeue;
            let now = OffsetDateTime::now_utc();
            // As the UPDATE: every right-hand side reads the row as it was.
            let fresh = record.started_at.is_none()
                || (transition == Transition::Resume && record.lease_owner.is_none());
            record.status = if fresh {
                target_if_new
            } else {
                transition.target(true)
            };
            if record.started_at.is_none() && target_if_new == TaskStatus::Running {
                record.started_at = Some(now);
            }
            if terminal {
                record.finished_at = Some(now);
            }
            if clear_lease {
                record.lease_owner = None;
                record.lease_expires_at = None;
            }
            record.output = details.output.or(record.output.take());
            record.is_success = details.is_success.or(record.is_success);
            record.error = details.error.or(record.error.take());
            record.updated_at = now;
            let status = transition_event(record, transition);
            task.append(&EventBody::Status(status), EventGuard::Any)?;
            Ok(task.record.clone())
        })
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    fn has_secrets_key(&self) -> bool {
        false
    }

    async fn create_task(&self, owner: ApiKeyId, new: NewTask) -> Result<TaskRecord, StoreError> {
        if !new.secrets.is_empty() {
            return Err(StoreError::NoSecretsKey);
        }
        let id = TaskId::new();
        let now = OffsetDateTime::now_utc();
        let mut task = MemoryTask {
            record: TaskRecord {
                id,
                api_key_id: owner,
                status: TaskStatus::Queued,
                task: new.task,
                options: new.options,
                output: None,
                is_success: None,
                error: None,
                lease_owner: None,
                lease_expires_at: None,
                attempts: 0,
                last_event_seq: 0,
                created_at: now,
                updated_at: now,
                started_at: None,
                finished_at: None,
                usage: None,
                last_url: None,
            },
            replay: new.replay.map(|replay| TaskReplay {
                source: replay.source,
                options: replay.options,
            }),
            events: Vec::new(),
            steps: Vec::new(),
            replayable: Vec::new(),
            screenshots: HashMap::new(),
            questions: Vec::new(),
        };
        let created = EventBody::Status(browserd_types::StatusEvent::created());
        task.append(&created, EventGuard::Any)?;
        let record = task.record.clone();
        self.lock().by_id.insert(id, task);
        self.signal(id, 0, record.last_event_seq, true);
        Ok(record)
    }

    async fn create_v2_task(
        &self,
        _owner: ApiKeyId,
        _new: NewTask,
        _session: SessionChoice,
        _options: serde_json::Value,
    ) -> Result<(TaskRecord, Uuid), StoreError> {
        Err(StoreError::Corrupt(
            "/api/v2 sessions need the Postgres store".to_owned(),
        ))
    }

    async fn get_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
    ) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self
            .lock()
            .by_id
            .get(&id)
            .filter(|t| owner.is_none_or(|o| t.record.api_key_id == o))
            .map(|t| t.record.clone()))
    }

    async fn list_tasks(
        &self,
        owner: ApiKeyId,
        status: Option<TaskStatus>,
        limit: i64,
        after: Option<TaskCursor>,
    ) -> Result<TaskPage, StoreError> {
        let key = |r: &TaskRecord| (r.created_at, r.id.0);
        let mut items: Vec<TaskRecord> = self
            .lock()
            .by_id
            .values()
            .map(|t| &t.record)
            .filter(|r| r.api_key_id == owner)
            .filter(|r| status.is_none_or(|s| r.status == s))
            .filter(|r| after.is_none_or(|c| key(r) < (c.created_at, c.id.0)))
            .cloned()
            .collect();
        items.sort_by_key(|r| std::cmp::Reverse(key(r)));
        let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        let has_more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = if has_more {
            items.last().map(|t| TaskCursor {
                created_at: t.created_at,
                id: t.id,
            })
        } else {
            None
        };
        Ok(TaskPage { items, next_cursor })
    }

    async fn transition_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        self.transition(owner, None, id, transition, details)
    }

    async fn queued_tasks(&self) -> Result<i64, StoreError> {
        let queued = self
            .lock()
            .by_id
            .values()
            .filter(|t| t.record.status == TaskStatus::Queued)
            .count();
        Ok(i64::try_from(queued).unwrap_or(i64::MAX))
    }

    async fn queue_position(&self, id: TaskId) -> Result<Option<i64>, StoreError> {
        let tasks = self.lock();
        let Some(task) = tasks
            .by_id
            .get(&id)
            .filter(|t| t.record.status == TaskStatus::Queued)
        else {
            return Ok(None);
        };
        let place = (task.record.created_at, id.0);
        let ahead = tasks
            .by_id
            .values()
            .filter(|t| t.record.status == TaskStatus::Queued)
            .filter(|t| (t.record.created_at, t.record.id.0) <= place)
            .count();
        Ok(Some(i64::try_from(ahead).unwrap_or(i64::MAX)))
    }

    async fn task_replay(&self, id: TaskId) -> Result<Option<TaskReplay>, StoreError> {
        Ok(self.lock().by_id.get(&id).and_then(|t| t.replay))
    }

    async fn replayable_steps(&self, id: TaskId) -> Result<i64, StoreError> {
        let count = self
            .lock()
            .by_id
            .get(&id)
            .map_or(0, |t| t.replayable.iter().filter(|r| **r).count());
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    async fn list_steps(&self, id: TaskId) -> Result<Vec<StepRecord>, StoreError> {
        Ok(self
            .lock()
            .by_id
            .get(&id)
            .map(|t| t.steps.clone())
            .unwrap_or_default())
    }

    async fn list_steps_page(
        &self,
        id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let after = after_step.unwrap_or(i32::MIN);
        Ok(self.lock().by_id.get(&id).map_or_else(Vec::new, |t| {
            t.steps
                .iter()
                .filter(|step| step.number > after)
                .take(usize::try_from(limit).unwrap_or(0))
                .cloned()
                .collect()
        }))
    }

    async fn step_screenshot(
        &self,
        id: TaskId,
        number: i32,
    ) -> Result<Option<ArtifactBody>, StoreError> {
        Ok(self.lock().by_id.get(&id).and_then(|t| {
            t.screenshots
                .get(&number)
                .map(|(content_type, bytes)| ArtifactBody {
                    content_type: content_type.clone(),
                    content: ArtifactContent::Inline(bytes.clone()),
                })
        }))
    }

    async fn events_after(
        &self,
        id: TaskId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        Ok(self.lock().by_id.get(&id).map_or_else(Vec::new, |t| {
            t.events
                .iter()
                .filter(|e| e.seq > after_seq)
                .take(limit)
                .cloned()
                .collect()
        }))
    }

    /// Claims the oldest queued task (one key's tasks: no turns to take between keys).
    async fn claim_task(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedTask>, StoreError> {
        let next = self
            .lock()
            .by_id
            .values()
            .filter(|t| t.record.status == TaskStatus::Queued)
            .min_by_key(|t| (t.record.created_at, t.record.id.0))
            .map(|t| t.record.id);
        let Some(id) = next else {
            return Ok(None);
        };
        let claimed = self.write(None, id, |task| {
            let record = &mut task.record;
            if record.status != TaskStatus::Queued {
                // Taken by a concurrent claim: the next call finds the next one.
                return Ok(None);
            }
            let now = OffsetDateTime::now_utc();
            record.status = TaskStatus::Running;
            record.started_at = record.started_at.or(Some(now));
            record.lease_owner = Some(owner.to_owned());
            record.lease_expires_at = Some(now + lease);
            record.attempts += 1;
            record.updated_at = now;
            let started = EventBody::Status(claim_event(record.attempts));
            task.append(&started, EventGuard::Any)?;
            Ok(Some(task.record.clone()))
        })?;
        Ok(claimed.map(|record| ClaimedTask {
            record,
            secrets: Default::default(),
            secrets_error: None,
        }))
    }

    async fn transition_claimed_task(
        &self,
        lease_owner: &str,
        id: TaskId,
        transition: Transition,
        details: TransitionDetails,
    ) -> Result<TaskRecord, StoreError> {
        self.transition(None, Some(lease_owner), id, transition, details)
    }

    async fn append_worker_event(
        &self,
        id: TaskId,
        owner: &str,
        body: &EventBody,
    ) -> Result<TaskEvent, StoreError> {
        if let EventBody::Status(_) = body {
            return Err(StoreError::ReservedEventKind(body.kind().to_owned()));
        }
        self.write(None, id, |task| task.append(body, EventGuard::Owner(owner)))
    }

    async fn start_step(
        &self,
        id: TaskId,
        owner: &str,
        number: i32,
        url: &str,
    ) -> Result<TaskEvent, StoreError> {
        self.write(None, id, |task| {
            let started = EventBody::StepStarted(browserd_types::StepStartedEvent {
                number,
                url: url.to_owned(),
            });
            let event = task.append(&started, EventGuard::Owner(owner))?;
            if !url.is_empty() {
                task.record.last_url = Some(url.to_owned());
            }
            Ok(event)
        })
    }

    /// As the SQL's transaction: nothing is kept when the lease, the task's end or an
    /// existing step number refuses it.
    async fn write_step(
        &self,
        id: TaskId,
        owner: &str,
        step: StepWrite,
    ) -> Result<TaskEvent, StoreError> {
        self.write(None, id, |task| {
            task.check_worker(owner)?;
            if task.steps.iter().any(|s| s.number == step.number) {
                return Err(StoreError::StepExists {
                    id,
                    number: step.number,
                });
            }
            let event = task.append(&EventBody::Step(step.event), EventGuard::Owner(owner))?;
            let screenshot = step.screenshot.map(|(artifact, content_type, bytes)| {
                task.screenshots.insert(step.number, (content_type, bytes));
                artifact
            });
            task.replayable
                .push(step.model_output.is_some() && !step.record.is_null());
            task.steps.push(StepRecord {
                task_id: id,
                number: step.number,
                url: step.url,
                title: step.title,
                model_output: step.model_output,
                results: step.results,
                usage: step.usage,
                screenshot,
                started_at: step.started_at,
                finished_at: step.finished_at,
            });
            task.steps.sort_by_key(|s| s.number);
            task.record.usage = Some(step.task_usage);
            task.record.updated_at = OffsetDateTime::now_utc();
            Ok(event)
        })
    }

    /// The SQL's `ask_question`: the question stored (again, while unanswered), its answer
    /// when given, else `waiting` with the `ask` status event and the `question` event.
    async fn ask_question(
        &self,
        id: TaskId,
        owner: &str,
        question: &NewQuestion,
    ) -> Result<Asked, StoreError> {
        self.write(None, id, |task| {
            task.check_worker(owner)?;
            let stored = task
                .questions
                .iter_mut()
                .find(|(q, _)| q.question_id == question.question_id);
            match stored {
                Some((_, Some(answer))) => {
                    return Ok(Asked::Answered(Answer {
                        question_id: question.question_id.clone(),
                        text: SecretString::from(answer.clone()),
                        secret: false,
                    }));
                }
                Some((q, None)) => *q = question.clone(),
                None => task.questions.push((question.clone(), None)),
            }
            let status = task.record.status;
            if Transition::Ask.is_allowed_from(status) {
                task.record.status = TaskStatus::Waiting;
                task.record.updated_at = OffsetDateTime::now_utc();
                task.append(&question_status_event(Transition::Ask), EventGuard::Any)?;
            } else if status != TaskStatus::Waiting {
                return Err(StoreError::IllegalTransition {
                    transition: Transition::Ask.name(),
                    current: status,
                });
            }
            task.append(
                &EventBody::Question(question.event()),
                EventGuard::Owner(owner),
            )?;
            Ok(Asked::Waiting)
        })
    }

    /// The SQL's `answer_question` (no secrets key here: a secret answer is refused).
    async fn answer_question(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
        answer: &GivenAnswer,
    ) -> Result<Answered, StoreError> {
        self.write(owner, id, |task| {
            let status = task.record.status;
            let open = if status.is_terminal() {
                None
            } else {
                task.questions.iter().rposition(|(_, a)| a.is_none())
            };
            let Some(at) = open else {
                return Err(StoreError::NotWaiting { id, status });
            };
            let question = task.questions[at].0.clone();
            let text = answer.text.expose_secret();
            if answer.is_choice && !question.choices.iter().any(|c| c.as_str() == text) {
                return Err(StoreError::ChoiceNotOffered {
                    choice: text.chars().take(200).collect(),
                    choices: question.choices,
                });
            }
            if answer.secret || question.secret {
                return Err(StoreError::NoSecretsKeyForAnswer);
            }
            task.questions[at].1 = Some(text.to_owned());
            task.append(
                &answered_event(&question.question_id, answer, false),
                EventGuard::Any,
            )?;
            if status == TaskStatus::Waiting {
                task.record.status = TaskStatus::Running;
                task.record.updated_at = OffsetDateTime::now_utc();
                task.append(&question_status_event(Transition::Answer), EventGuard::Any)?;
            }
            Ok(Answered {
                task: task.record.clone(),
                question_id: question.question_id,
                secret: false,
            })
        })
    }

    async fn question_answer(
        &self,
        id: TaskId,
        question_id: &str,
    ) -> Result<Option<Answer>, StoreError> {
        Ok(self.lock().by_id.get(&id).and_then(|task| {
            task.questions.iter().find_map(|(q, a)| {
                let text = a.as_ref().filter(|_| q.question_id == question_id)?;
                Some(Answer {
                    question_id: q.question_id.clone(),
                    text: SecretString::from(text.clone()),
                    secret: false,
                })
            })
        }))
    }

    async fn open_question(&self, id: TaskId) -> Result<Option<QuestionEvent>, StoreError> {
        Ok(self.lock().by_id.get(&id).and_then(|task| {
            task.questions
                .iter()
                .rev()
                .find(|(_, a)| a.is_none())
                .map(|(q, _)| q.event())
        }))
    }

    /// None: no secret answer is accepted here.
    async fn secret_answers(&self, _id: TaskId) -> Result<Vec<Answer>, StoreError> {
        Ok(Vec::new())
    }

    /// Unlimited: the in-memory store serves one local client (see the module's note).
    async fn key_quotas(&self, _key: ApiKeyId) -> Result<Quotas, StoreError> {
        Ok(Quotas::default())
    }

    async fn key_usage(&self, key: ApiKeyId) -> Result<KeyUsage, StoreError> {
        let tasks = self.lock();
        let today = OffsetDateTime::now_utc().date();
        let mut usage = KeyUsage::default();
        for task in tasks.by_id.values().filter(|t| t.record.api_key_id == key) {
            let status = task.record.status;
            if status == TaskStatus::Queued {
                usage.queued += 1;
            }
            if task.record.lease_owner.is_some()
                && matches!(
                    status,
                    TaskStatus::Running | TaskStatus::Paused | TaskStatus::Waiting
                )
            {
                usage.held += 1;
            }
            for step in task.steps.iter().filter(|s| s.finished_at.date() == today) {
                usage.steps_today += i64::from(step.number >= 1);
                usage.cost_today_usd += step
                    .usage
                    .as_ref()
                    .and_then(|u| u["cost_usd"].as_f64())
                    .unwrap_or(0.0);
            }
        }
        Ok(usage)
    }
}
