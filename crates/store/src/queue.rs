//! The work queue and the worker's writes: claiming queued tasks (`FOR UPDATE SKIP LOCKED`, in
//! creation order), leases with heartbeats, handing tasks back, reaping expired leases, and the
//! per-step transaction (step row + screenshot artifact + `step` event) guarded by the lease.
//!
//! Every write a worker makes while running a task names the lease owner; once the lease is
//! gone (reaped, task ended, taken over) the write fails with [`StoreError::LeaseLost`] and
//! the worker abandons the task. The unique key on `(task_id, number)` is the second fence: a
//! step number is written once.

use std::time::Duration;

use browserd_types::{
    ArtifactId, EventBody, StatusEvent, StatusOutcome, StepEvent, StepStartedEvent, TaskEvent,
    TaskId, TaskSecrets, TaskStatus, Transition,
};
use time::OffsetDateTime;

use crate::events::{EventGuard, append_body_in};
use crate::tasks::{TaskRecord, parse_status};
use crate::{Store, StoreError};

/// The LISTEN/NOTIFY channel on which a task id is sent whenever a task becomes `queued`
/// (sent by a trigger, delivered on commit).
pub const QUEUE_CHANNEL: &str = "task_queue";

/// A task a worker has just claimed, with its secrets opened in memory.
pub struct ClaimedTask {
    pub record: TaskRecord,
    pub secrets: TaskSecrets,
    /// The secrets could not be opened (no key, another key, damaged): the task must fail.
    pub secrets_error: Option<String>,
}

impl std::fmt::Debug for ClaimedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedTask")
            .field("id", &self.record.id)
            .field("attempts", &self.record.attempts)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// What the reaper did with one expired lease.
#[derive(Clone, Debug, PartialEq)]
pub struct ReapedTask {
    pub id: TaskId,
    /// `queued` (to be resumed by any worker), `paused` (lease dropped, still paused) or
    /// `failed` (no attempts left).
    pub status: TaskStatus,
    pub attempts: i32,
}

/// One finished step, written in one transaction with its screenshot and its `step` event.
#[derive(Clone, Debug)]
pub struct StepWrite {
    pub number: i32,
    pub url: Option<String>,
    pub title: Option<String>,
    pub model_output: Option<serde_json::Value>,
    pub results: serde_json::Value,
    /// The step's token usage and cost.
    pub usage: Option<serde_json::Value>,
    /// The whole AgentHistory item.
    pub record: serde_json::Value,
    /// `(id, content type, bytes)` of the step's screenshot.
    pub screenshot: Option<(ArtifactId, String, Vec<u8>)>,
    pub started_at: OffsetDateTime,
    pub finished_at: OffsetDateTime,
    /// The run's usage summary after this step.
    pub task_usage: serde_json::Value,
    /// Payload of the `step` event.
    pub event: StepEvent,
}

/// The `status` event of a claim: `running`, transition `start`, the claim's number. Both
/// stores write it.
pub(crate) fn claim_event(attempt: i32) -> StatusEvent {
    StatusEvent {
        attempt: Some(attempt),
        ..StatusEvent::new(TaskStatus::Running, Transition::Start.name())
    }
}

/// Claims one statement may lose to another claimer of the same key before the worker is told
/// that nothing is claimable (each loss means some other claim succeeded).
const CLAIM_RACES: usize = 8;

/// What one claim statement did.
enum ClaimAttempt {
    Claimed(Box<ClaimedTask>),
    /// No queued task is claimable.
    Empty,
    /// The chosen task's key reached its `max_running` through a concurrent claim.
    LostRace,
}

/// The error of a task stopped for having been paused longer than `max_pause`.
pub fn pause_limit_error(max_pause: Duration) -> String {
    format!(
        "stopped: the task stayed paused longer than the maximum pause time ({} s, the \
         workers' --max-pause-s); its browser was released",
        max_pause.as_secs()
    )
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Store {
    /// Claims a queued task for `owner` with a lease of `lease`: status `running`,
    /// `attempts + 1`, and a `status` event, in one transaction. `None` when the queue is empty
    /// (or every queued task is being claimed by someone else right now, or belongs to a key
    /// that has its `max_running` already).
    ///
    /// Fair across API keys: each key's queued tasks, oldest first, are ranked after the tasks
    /// a worker holds for it (a key with 2 running has its oldest queued task at place 3, the
    /// next at 4…) and the lowest place wins (ties: the older task). Keys take turns, and one
    /// key's flood waits behind every other key's next task instead of in front of it. Still
    /// one `FOR UPDATE SKIP LOCKED` statement over each key's 16 oldest queued tasks:
    /// concurrent claimers skip each other's candidates.
    ///
    /// Per-key `max_running` (the key's own, else the store's default): a key whose held tasks
    /// (`api_key_held_tasks`, kept by a trigger) reach it gets no claim, and its tasks stay
    /// queued. The snapshot's count only preselects; the decision is made on the key's counter
    /// row locked `for update` (no `skip locked`: claims of one key wait for each other there,
    /// for the few milliseconds of a claim), which Postgres reads at its newest committed
    /// version and re-checks after the wait. So two claimers of one key serialize and the
    /// second sees the first one's task: a key never exceeds its quota, whatever the number of
    /// claimers. Why a counter row and not `pg_try_advisory_xact_lock` per key: a lock taken
    /// inside the statement does not refresh the statement's snapshot, so a count read with it
    /// can miss a claim committed just before; the row lock re-reads the row itself. A claim
    /// refused by that re-check (another claimer of the key got there first) is retried, so a
    /// lost race does not send the worker to sleep while other keys have work.
    pub async fn claim_task(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedTask>, StoreError> {
        for _ in 0..CLAIM_RACES {
            match self.claim_once(owner, lease).await? {
                ClaimAttempt::Claimed(claimed) => return Ok(Some(*claimed)),
                ClaimAttempt::Empty => return Ok(None),
                ClaimAttempt::LostRace => continue,
            }
        }
        Ok(None)
    }

    async fn claim_once(&self, owner: &str, lease: Duration) -> Result<ClaimAttempt, StoreError> {
        let default_max_running = self
            .default_quotas
            .max_running
            .map_or(0, |n| i32::try_from(n.max(0)).unwrap_or(i32::MAX));
        let fair_share = self.fair_share;
        let mut tx = self.pool.begin().await?;
        let attempt = sqlx::query!(
            r#"with defaults as (
                 -- The max_running of a key without its own: the configured one, else
                 -- (fair share) half the live workers' slots, at least 1, else none (0).
                 select case when $3 > 0 then $3
                             when $4 then greatest(1, ceil(coalesce(sum(s.slots), 0) / 2.0))::int
                             else 0 end as max_running
                 from worker_slots s where s.expires_at > now()
             ), candidates as (
                 select c.id, c.created_at, k.api_key_id,
                        row_number() over (partition by k.api_key_id
                                           order by c.created_at, c.id) as rank
                 from (select distinct api_key_id from tasks where status = 'queued') k
                 cross join lateral (
                     select q.id, q.created_at from tasks q
                     where q.api_key_id = k.api_key_id and q.status = 'queued'
                     order by q.created_at, q.id
                     limit 16) c
             ), next as (
                 select t.id, c.api_key_id,
                        nullif(coalesce(k.max_running, d.max_running), 0) as max_running
                 from tasks t
                 join candidates c on c.id = t.id
                 join api_keys k on k.id = c.api_key_id
                 join api_key_held_tasks h on h.api_key_id = c.api_key_id
                 cross join defaults d
                 where t.status = 'queued'
                   and (coalesce(k.max_running, d.max_running) = 0
                        or h.held < coalesce(k.max_running, d.max_running))
                 order by h.held + c.rank, c.created_at, c.id
                 limit 1
                 for update of t skip locked
             ), admitted as (
                 select n.id from next n
                 join api_key_held_tasks h on h.api_key_id = n.api_key_id
                 where n.max_running is null or h.held < n.max_running
                 for update of h
             ), claimed as (
                 update tasks t set
                     status = 'running',
                     started_at = coalesce(t.started_at, now()),
                     lease_owner = $1,
                     lease_expires_at = now() + make_interval(secs => $2),
                     heartbeat_at = now(),
                     attempts = t.attempts + 1,
                     updated_at = now()
                 from admitted where t.id = admitted.id
                 returning t.id, t.attempts, t.secrets_sealed
             )
             select (select count(*) from next) as "candidates!",
                    claimed.id as "id?", claimed.attempts as "attempts?",
                    claimed.secrets_sealed
             from (select 1) as one left join claimed on true"#,
            owner,
            secs(lease),
            default_max_running,
            fair_share,
        )
        .fetch_one(&mut *tx)
        .await?;
        let (Some(id), Some(attempts)) = (attempt.id, attempt.attempts) else {
            return Ok(if attempt.candidates > 0 {
                ClaimAttempt::LostRace
            } else {
                ClaimAttempt::Empty
            });
        };
        let id = TaskId(id);
        let started = EventBody::Status(claim_event(attempts));
        append_body_in(&mut tx, id, &started, EventGuard::Any).await?;
        tx.commit().await?;
        let record = self
            .get_task(None, id)
            .await?
            .ok_or(StoreError::TaskNotFound(id))?;
        let (secrets, secrets_error) = match (&attempt.secrets_sealed, &self.keyring) {
            (None, _) => (TaskSecrets::default(), None),
            (Some(_), None) => (
                TaskSecrets::default(),
                Some(StoreError::NoSecretsKey.to_string()),
            ),
            (Some(sealed), Some(keyring)) => match keyring
                .open_task_secrets(crate::SealedFor::task(id, record.api_key_id), sealed)
            {
                Ok(secrets) => (secrets, None),
                Err(err) => (TaskSecrets::default(), Some(format!("task secrets: {err}"))),
            },
        };
        Ok(ClaimAttempt::Claimed(Box::new(ClaimedTask {
            record,
            secrets,
            secrets_error,
        })))
    }

    /// Renews `owner`'s lease on task `id` and returns the task's status, or `None` when the
    /// lease is no longer `owner`'s (the worker must abandon the task).
    pub async fn renew_lease(
        &self,
        id: TaskId,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<TaskStatus>, StoreError> {
        let status = sqlx::query_scalar!(
            "update tasks set lease_expires_at = now() + make_interval(secs => $3),
                 heartbeat_at = now()
             where id = $1 and lease_owner = $2
             returning status",
            id.0,
            owner,
            secs(lease),
        )
        .fetch_optional(&self.pool)
        .await?;
        status.map(|s| parse_status(&s)).transpose()
    }

    /// Gives `owner`'s lease on task `id` back so that another worker resumes it at once: a
    /// running task goes back to `queued` (status event `requeue` with `reason`), a paused one
    /// stays paused without an owner. Returns the status after, or `None` if `owner` did not
    /// hold the lease.
    pub async fn release_task(
        &self,
        id: TaskId,
        owner: &str,
        reason: &str,
    ) -> Result<Option<TaskStatus>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let status = sqlx::query_scalar!(
            "update tasks set
                 status = case when status in ('running', 'waiting') then 'queued' else status end,
                 lease_owner = null, lease_expires_at = null, updated_at = now()
             where id = $1 and lease_owner = $2
             returning status",
            id.0,
            owner,
        )
        .fetch_optional(&mut *tx)
        .await?;
        let Some(status) = status else {
            return Ok(None);
        };
        let status = parse_status(&status)?;
        if status == TaskStatus::Queued {
            let requeued = StatusEvent {
                reason: Some(reason.to_owned()),
                ..StatusEvent::new(status, "requeue")
            };
            append_body_in(&mut tx, id, &EventBody::Status(requeued), EventGuard::Any).await?;
        }
        tx.commit().await?;
        Ok(Some(status))
    }

    /// Finds tasks whose lease expired (their worker died or hung) and, up to `max_attempts`
    /// claims, puts running ones back in the queue and drops the owner of paused ones; a task
    /// that has used all its attempts fails with a reason that says so. At most 100 per call.
    pub async fn reap_expired_leases(
        &self,
        max_attempts: i32,
    ) -> Result<Vec<ReapedTask>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let expired = sqlx::query!(
            "select id, status, attempts from tasks
             where lease_owner is not null and lease_expires_at < now()
               and status in ('running', 'paused', 'waiting')
             order by lease_expires_at limit 100
             for update skip locked",
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut reaped = Vec::with_capacity(expired.len());
        for row in expired {
            let id = TaskId(row.id);
            let current = parse_status(&row.status)?;
            let (status, payload) = if row.attempts >= max_attempts {
                let error = format!(
                    "the worker running this task was lost (its lease expired) and the task has \
                     used all {max_attempts} attempts"
                );
                sqlx::query!(
                    "update tasks set status = 'failed', error = $2, secrets_sealed = null,
                         lease_owner = null, lease_expires_at = null, finished_at = now(),
                         updated_at = now()
                     where id = $1",
                    id.0,
                    error,
                )
                .execute(&mut *tx)
                .await?;
                (
                    TaskStatus::Failed,
                    Some(StatusEvent::ended(
                        TaskStatus::Failed,
                        "fail",
                        StatusOutcome {
                            error: Some(error),
                            ..StatusOutcome::default()
                        },
                    )),
                )
            } else if matches!(current, TaskStatus::Running | TaskStatus::Waiting) {
                // A waiting task resumes elsewhere and asks again: its question and any
                // answer stay in `task_questions`.
                sqlx::query!(
                    "update tasks set status = 'queued', lease_owner = null,
                         lease_expires_at = null, updated_at = now()
                     where id = $1",
                    id.0,
                )
                .execute(&mut *tx)
                .await?;
                (
                    TaskStatus::Queued,
                    Some(StatusEvent {
                        reason: Some("lease expired".to_owned()),
                        ..StatusEvent::new(TaskStatus::Queued, "requeue")
                    }),
                )
            } else {
                sqlx::query!(
                    "update tasks set lease_owner = null, lease_expires_at = null where id = $1",
                    id.0,
                )
                .execute(&mut *tx)
                .await?;
                (current, None)
            };
            if let Some(event) = payload {
                append_body_in(&mut tx, id, &EventBody::Status(event), EventGuard::Any).await?;
            }
            reaped.push(ReapedTask {
                id,
                status,
                attempts: row.attempts,
            });
        }
        tx.commit().await?;
        Ok(reaped)
    }

    /// Stops tasks that have been paused for longer than `max_pause` (from `paused_at`, set in
    /// Postgres when the task paused), with the error [`pause_limit_error`] and a `stop`
    /// status event: their browsers are released (the worker holding one sees the status and
    /// ends the run), also when the worker that held the task died. At most 100 per call.
    pub async fn stop_overlong_pauses(
        &self,
        max_pause: Duration,
    ) -> Result<Vec<TaskId>, StoreError> {
        let error = pause_limit_error(max_pause);
        let mut tx = self.pool.begin().await?;
        let ids = sqlx::query_scalar!(
            "update tasks set status = 'stopped', error = $2, secrets_sealed = null,
                 lease_owner = null, lease_expires_at = null, finished_at = now(),
                 updated_at = now()
             where id in (
                 select id from tasks
                 where status = 'paused' and paused_at < now() - make_interval(secs => $1)
                 order by paused_at
                 limit 100 for update skip locked)
             returning id",
            secs(max_pause),
            error,
        )
        .fetch_all(&mut *tx)
        .await?;
        for id in &ids {
            let stopped = StatusEvent {
                reason: Some(error.clone()),
                ..StatusEvent::ended(
                    TaskStatus::Stopped,
                    "stop",
                    StatusOutcome {
                        error: Some(error.clone()),
                        ..StatusOutcome::default()
                    },
                )
            };
            append_body_in(
                &mut tx,
                TaskId(*id),
                &EventBody::Status(stopped),
                EventGuard::Any,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(ids.into_iter().map(TaskId).collect())
    }

    /// Fails queued or paused tasks that still hold secrets and have not changed for longer
    /// than `retention`: their secrets are wiped with the terminal status.
    pub async fn expire_stale_secrets(
        &self,
        retention: Duration,
    ) -> Result<Vec<TaskId>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let error = format!(
            "the task waited longer than the secrets retention ({} s) while queued or paused; \
             its secrets were wiped",
            retention.as_secs()
        );
        let ids = sqlx::query_scalar!(
            "update tasks set status = 'failed', error = $2, secrets_sealed = null,
                 lease_owner = null, lease_expires_at = null, finished_at = now(),
                 updated_at = now()
             where id in (
                 select id from tasks
                 where secrets_sealed is not null and status in ('queued', 'paused')
                   and updated_at < now() - make_interval(secs => $1)
                 limit 100 for update skip locked)
             returning id",
            secs(retention),
            error,
        )
        .fetch_all(&mut *tx)
        .await?;
        for id in &ids {
            let failed = StatusEvent::ended(
                TaskStatus::Failed,
                "fail",
                StatusOutcome {
                    error: Some(error.to_owned()),
                    ..StatusOutcome::default()
                },
            );
            append_body_in(
                &mut tx,
                TaskId(*id),
                &EventBody::Status(failed),
                EventGuard::Any,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(ids.into_iter().map(TaskId).collect())
    }

    /// Appends a progress event of task `id` while `owner` holds its lease. Status events are
    /// reserved for the transitions.
    pub async fn append_worker_event(
        &self,
        id: TaskId,
        owner: &str,
        body: &EventBody,
    ) -> Result<TaskEvent, StoreError> {
        if let EventBody::Status(_) = body {
            return Err(StoreError::ReservedEventKind(body.kind().to_owned()));
        }
        let mut tx = self.pool.begin().await?;
        let event = append_body_in(&mut tx, id, body, EventGuard::Owner(owner)).await?;
        tx.commit().await?;
        Ok(event)
    }

    /// A step began: remembers its URL as the task's `last_url` and appends the
    /// `step_started` event.
    pub async fn start_step(
        &self,
        id: TaskId,
        owner: &str,
        number: i32,
        url: &str,
    ) -> Result<TaskEvent, StoreError> {
        let mut tx = self.pool.begin().await?;
        let started = EventBody::StepStarted(StepStartedEvent {
            number,
            url: url.to_owned(),
        });
        if !url.is_empty() {
            sqlx::query!("update tasks set last_url = $2 where id = $1", id.0, url)
                .execute(&mut *tx)
                .await?;
        }
        // Last, so that the event's time is its commit's (a lost lease rolls back the URL).
        let event = append_body_in(&mut tx, id, &started, EventGuard::Owner(owner)).await?;
        tx.commit().await?;
        Ok(event)
    }

    /// Persists a finished step in one transaction: the screenshot artifact, the step row, the
    /// task's usage and the `step` event (which checks `owner`'s lease: without it, all is
    /// rolled back). Nothing is announced before it is stored: the event is delivered on
    /// commit.
    pub async fn write_step(
        &self,
        id: TaskId,
        owner: &str,
        step: StepWrite,
    ) -> Result<TaskEvent, StoreError> {
        let mut tx = self.pool.begin().await?;
        let screenshot_id = match step.screenshot {
            Some((artifact, content_type, bytes)) => {
                let size = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
                sqlx::query!(
                    "insert into artifacts (id, task_id, kind, name, content_type, content,
                         size_bytes)
                     values ($1, $2, 'screenshot', $3, $4, $5, $6)",
                    artifact.0,
                    id.0,
                    format!("step-{}", step.number),
                    content_type,
                    bytes,
                    size,
                )
                .execute(&mut *tx)
                .await?;
                Some(artifact.0)
            }
            None => None,
        };
        let inserted = sqlx::query!(
            "insert into task_steps (task_id, number, url, title, model_output, results, usage,
                 record, screenshot_artifact_id, started_at, finished_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             on conflict (task_id, number) do nothing",
            id.0,
            step.number,
            step.url,
            step.title,
            step.model_output,
            step.results,
            step.usage,
            step.record,
            screenshot_id,
            step.started_at,
            step.finished_at,
        )
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::StepExists {
                id,
                number: step.number,
            });
        }
        sqlx::query!(
            "update tasks set usage = $2, updated_at = now() where id = $1",
            id.0,
            step.task_usage,
        )
        .execute(&mut *tx)
        .await?;
        // Last, so that the event's time is its commit's (a lost lease rolls back the rest).
        let event = append_body_in(
            &mut tx,
            id,
            &EventBody::Step(step.event),
            EventGuard::Owner(owner),
        )
        .await?;
        tx.commit().await?;
        Ok(event)
    }

    /// The persisted AgentHistory items of task `id`, in step order (steps written without a
    /// record are skipped).
    pub async fn step_records(&self, id: TaskId) -> Result<Vec<serde_json::Value>, StoreError> {
        let rows = sqlx::query_scalar!(
            "select record from task_steps where task_id = $1 and record is not null
             order by number",
            id.0,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().flatten().collect())
    }

    /// Number of queued tasks (admission control).
    pub async fn queued_tasks(&self) -> Result<i64, StoreError> {
        let n = sqlx::query_scalar!("select count(*) as \"n!\" from tasks where status = 'queued'")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }

    /// 1-based position of queued task `id` in claim order; `None` when it is not queued.
    pub async fn queue_position(&self, id: TaskId) -> Result<Option<i64>, StoreError> {
        let position = sqlx::query_scalar!(
            "select count(*) as \"n!\" from tasks q, tasks t
             where t.id = $1 and t.status = 'queued' and q.status = 'queued'
               and (q.created_at, q.id) <= (t.created_at, t.id)",
            id.0,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((position > 0).then_some(position))
    }
}
