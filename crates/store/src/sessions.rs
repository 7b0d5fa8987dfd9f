//! browser-use cloud `/api/v2` sessions: a browser context later tasks reuse. No browser is
//! kept between tasks: the worker saves the context's cookies and open tabs here when a task of
//! the session ends and restores them into the next task's fresh context, on any worker.
//! Also the v2 view of tasks: their session, their v2-only options and the page-number listing.

use std::collections::{BTreeMap, HashMap};

use browserd_types::{ApiKeyId, TaskId, TaskOptions, TaskStatus};
use secrecy::{ExposeSecret, SecretString};
use sqlx::types::Json;
use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::NewTask;
use crate::object_limits::{KeyObject, check_count, lock_key_objects};
use crate::tasks::TaskRow;
use crate::{SealedFor, Store, StoreError, TaskRecord};

/// The one entry of a session's sealed cookies (sealed like task secrets, under the session id).
const COOKIES_ENTRY: &str = "cookies";

/// A session row (without its saved browser state).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRecord {
    pub id: Uuid,
    pub api_key_id: ApiKeyId,
    /// `active` or `stopped`.
    pub active: bool,
    pub keep_alive: bool,
    pub persist_memory: bool,
    pub start_url: Option<String>,
    pub created_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
}

/// What a new session asks for.
#[derive(Clone, Debug)]
pub struct NewSession {
    pub keep_alive: bool,
    pub persist_memory: bool,
    pub start_url: Option<String>,
    /// The profile the session's tasks use (`profileId`), checked to be the owner's.
    pub profile_id: Option<Uuid>,
}

/// The browser state a session carries from one task to the next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionState {
    /// CDP `Network.Cookie` objects.
    pub cookies: serde_json::Value,
    /// URLs of the open tabs, in the browser's order.
    pub tabs: Vec<String>,
    /// Index of the focused tab in `tabs`.
    pub focused_tab: i32,
}

/// The session and v2 options of a task, as the worker needs them.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSession {
    pub session_id: Uuid,
    pub state: SessionState,
    /// The session's start URL, opened by its first task when the task names none.
    pub start_url: Option<String>,
    /// No task of the session has ended yet.
    pub first_task: bool,
    /// The task's v2 options (camelCase, as `V2Task::options`).
    pub options: Option<serde_json::Value>,
}

/// Which session a new v2 task runs in.
#[derive(Clone, Debug)]
pub enum SessionChoice {
    /// A one-off session (keepAlive false) created with the task.
    New,
    /// An existing session of the same key; it must be active and have no unfinished task.
    Existing(Uuid),
}

/// A task with its v2 fields.
#[derive(Clone, Debug)]
pub struct V2Task {
    pub record: TaskRecord,
    /// `None` for a task created on `/v1`.
    pub session_id: Option<Uuid>,
    /// camelCase v2 request options the v1 model has no column for (e.g. `flashMode`).
    pub options: Option<serde_json::Value>,
}

/// Filters of the v2 task listing.
#[derive(Clone, Debug, Default)]
pub struct V2TaskFilter {
    pub session_id: Option<Uuid>,
    /// Any of these statuses (empty: all).
    pub statuses: Vec<TaskStatus>,
    pub after: Option<OffsetDateTime>,
    pub before: Option<OffsetDateTime>,
}

struct SessionRow {
    id: Uuid,
    api_key_id: Uuid,
    status: String,
    keep_alive: bool,
    persist_memory: bool,
    start_url: Option<String>,
    created_at: OffsetDateTime,
    finished_at: Option<OffsetDateTime>,
}

impl From<SessionRow> for SessionRecord {
    fn from(row: SessionRow) -> Self {
        SessionRecord {
            id: row.id,
            api_key_id: ApiKeyId(row.api_key_id),
            active: row.status == "active",
            keep_alive: row.keep_alive,
            persist_memory: row.persist_memory,
            start_url: row.start_url,
            created_at: row.created_at,
            finished_at: row.finished_at,
        }
    }
}

/// Puts the task `task` into a session inside its creating transaction, so no worker can claim
/// it without its session. Returns the session id.
pub(crate) async fn attach_in(
    tx: &mut Transaction<'_, Postgres>,
    owner: ApiKeyId,
    task: TaskId,
    choice: &SessionChoice,
    options: &serde_json::Value,
) -> Result<Uuid, StoreError> {
    let session_id = match choice {
        SessionChoice::New => {
            let id = Uuid::now_v7();
            // A one-off session uses its task's profile (`sessionSettings.profileId`).
            sqlx::query!(
                "insert into browser_sessions (id, api_key_id, keep_alive, profile_id)
                 select $1, $2, false, (options->>'profile_id')::uuid from tasks where id = $3",
                id,
                owner.0,
                task.0,
            )
            .execute(&mut **tx)
            .await?;
            id
        }
        SessionChoice::Existing(id) => {
            let row = sqlx::query!(
                "select status from browser_sessions where id = $1 and api_key_id = $2 for update",
                id,
                owner.0,
            )
            .fetch_optional(&mut **tx)
            .await?
            .ok_or(StoreError::SessionNotFound(*id))?;
            if row.status != "active" {
                return Err(StoreError::SessionStopped(*id));
            }
            let busy = sqlx::query_scalar!(
                "select exists(select 1 from tasks where session_id = $1
                     and status in ('queued', 'running', 'paused', 'waiting')) as \"busy!\"",
                id,
            )
            .fetch_one(&mut **tx)
            .await?;
            if busy {
                return Err(StoreError::SessionBusy(*id));
            }
            *id
        }
    };
    sqlx::query!(
        "update tasks set session_id = $2, v2_options = $3 where id = $1",
        task.0,
        session_id,
        options,
    )
    .execute(&mut **tx)
    .await?;
    // The `created` webhook events were queued by the insert, before the task had a session.
    sqlx::query!(
        "update webhook_deliveries
         set body = jsonb_set(body, '{payload,session_id}', to_jsonb($2::uuid))
         where task_id = $1 and status = 'pending'",
        task.0,
        session_id,
    )
    .execute(&mut **tx)
    .await?;
    Ok(session_id)
}

impl Store {
    /// Creates a task (as [`Store::create_task`]) in a session: a new one-off session, or
    /// `owner`'s active and idle session. `options` are the v2 options kept with the task.
    ///
    /// Errors: [`StoreError::SessionNotFound`], [`StoreError::SessionStopped`],
    /// [`StoreError::SessionBusy`].
    pub async fn create_v2_task(
        &self,
        owner: ApiKeyId,
        new: NewTask,
        session: SessionChoice,
        options: serde_json::Value,
    ) -> Result<(TaskRecord, Uuid), StoreError> {
        let (record, session_id) = self
            .create_task_with(owner, new, Some((&session, &options)), None)
            .await?;
        let session_id =
            session_id.ok_or_else(|| StoreError::Corrupt("task without its session".into()))?;
        Ok((record, session_id))
    }

    /// Creates an active session owned by `owner`.
    ///
    /// Errors: [`StoreError::KeyObjectLimit`] when `owner` has its limit of active sessions
    /// ([`crate::ObjectLimits`]; a v2 task's one-off session is not counted); concurrent
    /// creations by one key are counted one at a time.
    pub async fn create_session(
        &self,
        owner: ApiKeyId,
        new: NewSession,
    ) -> Result<SessionRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let max = self.object_limits.max_sessions_per_key;
        if max > 0 {
            lock_key_objects(&mut tx, owner, KeyObject::Sessions).await?;
            // A session that does not keep alive and already has its task (a one-off session,
            // or one used once) stops with that task: not counted.
            let count = sqlx::query_scalar!(
                "select count(*) as \"n!\" from browser_sessions s
                 where s.api_key_id = $1 and s.status = 'active'
                   and (s.keep_alive or not exists(select 1 from tasks t where t.session_id = s.id))",
                owner.0,
            )
            .fetch_one(&mut *tx)
            .await?;
            check_count(KeyObject::Sessions, count, max)?;
        }
        let row = sqlx::query_as!(
            SessionRow,
            "insert into browser_sessions
                 (id, api_key_id, keep_alive, persist_memory, start_url, profile_id)
             values ($1, $2, $3, $4, $5, $6)
             returning id, api_key_id, status, keep_alive, persist_memory, start_url,
                 created_at, finished_at",
            Uuid::now_v7(),
            owner.0,
            new.keep_alive,
            new.persist_memory,
            new.start_url,
            new.profile_id,
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    /// `owner`'s session `id`.
    pub async fn get_session(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query_as!(
            SessionRow,
            "select id, api_key_id, status, keep_alive, persist_memory, start_url,
                 created_at, finished_at
             from browser_sessions where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// A page of `owner`'s sessions, newest first, with the total count.
    pub async fn list_sessions(
        &self,
        owner: ApiKeyId,
        active: Option<bool>,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<SessionRecord>, i64), StoreError> {
        let status = active.map(|a| if a { "active" } else { "stopped" });
        let rows = sqlx::query_as!(
            SessionRow,
            "select id, api_key_id, status, keep_alive, persist_memory, start_url,
                 created_at, finished_at
             from browser_sessions
             where api_key_id = $1 and ($2::text is null or status = $2)
             order by created_at desc, id desc
             limit $3 offset $4",
            owner.0,
            status,
            page_size,
            (page_number - 1).saturating_mul(page_size),
        )
        .fetch_all(&self.pool)
        .await?;
        let total = sqlx::query_scalar!(
            "select count(*) as \"n!\" from browser_sessions
             where api_key_id = $1 and ($2::text is null or status = $2)",
            owner.0,
            status,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((rows.into_iter().map(Into::into).collect(), total))
    }

    /// Marks `owner`'s session stopped (idempotent); `None` when it does not exist. The caller
    /// stops the session's unfinished tasks.
    pub async fn stop_session(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query_as!(
            SessionRow,
            "update browser_sessions set
                 status = 'stopped',
                 finished_at = coalesce(finished_at, now()),
                 updated_at = now()
             where id = $1 and api_key_id = $2
             returning id, api_key_id, status, keep_alive, persist_memory, start_url,
                 created_at, finished_at",
            id,
            owner.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    /// Deletes `owner`'s session and its saved browser state (its tasks stay, without a
    /// session). `false` when it does not exist.
    pub async fn delete_session(&self, owner: ApiKeyId, id: Uuid) -> Result<bool, StoreError> {
        let deleted = sqlx::query!(
            "delete from browser_sessions where id = $1 and api_key_id = $2",
            id,
            owner.0,
        )
        .execute(&self.pool)
        .await?;
        Ok(deleted.rows_affected() > 0)
    }

    /// Ids of the session's unfinished tasks (queued, running, paused, waiting).
    pub async fn session_unfinished_tasks(&self, id: Uuid) -> Result<Vec<TaskId>, StoreError> {
        let ids = sqlx::query_scalar!(
            "select id from tasks where session_id = $1
                 and status in ('queued', 'running', 'paused', 'waiting')",
            id,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(ids.into_iter().map(TaskId).collect())
    }

    /// The session of task `id` with its saved state, for the worker; `None` for a task
    /// without one.
    pub async fn task_session(&self, id: TaskId) -> Result<Option<TaskSession>, StoreError> {
        let row = sqlx::query!(
            "select s.id, s.api_key_id, s.cookies, s.cookies_sealed, s.tabs, s.focused_tab, s.start_url,
                 t.v2_options,
                 not exists(select 1 from tasks o where o.session_id = s.id and o.id <> t.id
                     and o.status in ('finished', 'failed', 'stopped')) as \"first_task!\"
             from tasks t join browser_sessions s on s.id = t.session_id
             where t.id = $1",
            id.0,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| TaskSession {
            session_id: row.id,
            state: SessionState {
                cookies: match &row.cookies_sealed {
                    Some(sealed) => self.open_cookies(row.id, ApiKeyId(row.api_key_id), sealed),
                    None => row.cookies,
                },
                tabs: row.tabs,
                focused_tab: row.focused_tab,
            },
            start_url: row.start_url,
            first_task: row.first_task,
            options: row.v2_options,
        }))
    }

    /// Saves the browser state a task of session `id` ended with. A one-off session
    /// (keepAlive false) stops with its task.
    pub async fn save_session_state(
        &self,
        id: Uuid,
        state: &SessionState,
    ) -> Result<(), StoreError> {
        // With a secrets key the cookies are sealed (they are credentials), for the session
        // and its key.
        let owner =
            sqlx::query_scalar!("select api_key_id from browser_sessions where id = $1", id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(owner) = owner else {
            return Ok(());
        };
        let (cookies, sealed) = match &self.keyring {
            Some(keyring) => {
                let plain = BTreeMap::from([(
                    COOKIES_ENTRY.to_owned(),
                    SecretString::from(state.cookies.to_string()),
                )]);
                (
                    serde_json::json!([]),
                    Some(keyring.seal(SealedFor::new(id, ApiKeyId(owner)), &plain)),
                )
            }
            None => (state.cookies.clone(), None),
        };
        sqlx::query!(
            "update browser_sessions set
                 cookies = $2, cookies_sealed = $5, tabs = $3, focused_tab = $4, updated_at = now(),
                 status = case when keep_alive then status else 'stopped' end,
                 finished_at = case when keep_alive then finished_at
                                    else coalesce(finished_at, now()) end
             where id = $1",
            id,
            cookies,
            &state.tabs,
            state.focused_tab,
            sealed,
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The sealed cookies of session `id`; none (logged) when they cannot be opened (no key,
    /// a key that was dropped, damaged data): the task then starts without them.
    fn open_cookies(&self, id: Uuid, owner: ApiKeyId, sealed: &[u8]) -> serde_json::Value {
        let Some(keyring) = &self.keyring else {
            tracing::warn!(session_id = %id, "the session's cookies are sealed but no secrets key is configured");
            return serde_json::json!([]);
        };
        match keyring.open(SealedFor::new(id, owner), sealed) {
            Ok(plain) => plain
                .get(COOKIES_ENTRY)
                .and_then(|text| serde_json::from_str(text.expose_secret()).ok())
                .unwrap_or_else(|| serde_json::json!([])),
            Err(err) => {
                tracing::warn!(session_id = %id, %err, "could not open the session's cookies");
                serde_json::json!([])
            }
        }
    }

    /// Stops a one-off session (keepAlive false) whose task ended without saving a state.
    pub async fn end_one_off_session(&self, task: TaskId) -> Result<(), StoreError> {
        sqlx::query!(
            "update browser_sessions set status = 'stopped',
                 finished_at = coalesce(finished_at, now()), updated_at = now()
             where id = (select session_id from tasks where id = $1) and not keep_alive",
            task.0,
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// `owner`'s task `id` with its v2 fields.
    pub async fn get_v2_task(
        &self,
        owner: ApiKeyId,
        id: TaskId,
    ) -> Result<Option<V2Task>, StoreError> {
        let Some(record) = self.get_task(Some(owner), id).await? else {
            return Ok(None);
        };
        let mut extra = self.v2_fields(&[id.0]).await?;
        let (session_id, options) = extra.remove(&id.0).unwrap_or_default();
        Ok(Some(V2Task {
            record,
            session_id,
            options,
        }))
    }

    /// A page (1-based `page_number`) of `owner`'s tasks, newest first, with the total count.
    pub async fn list_v2_tasks(
        &self,
        owner: ApiKeyId,
        filter: &V2TaskFilter,
        page_size: i64,
        page_number: i64,
    ) -> Result<(Vec<V2Task>, i64), StoreError> {
        let statuses: Vec<String> = filter
            .statuses
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        let rows = sqlx::query_as!(
            TaskRow,
            "select id, api_key_id, status, task, options as \"options: Json<TaskOptions>\",
                 output, is_success, error, lease_owner, lease_expires_at, attempts,
                 last_event_seq, created_at, updated_at, started_at, finished_at, usage, last_url
             from tasks
             where api_key_id = $1
               and ($2::uuid is null or session_id = $2)
               and (cardinality($3::text[]) = 0 or status = any($3))
               and ($4::timestamptz is null or created_at >= $4)
               and ($5::timestamptz is null or created_at <= $5)
             order by created_at desc, id desc
             limit $6 offset $7",
            owner.0,
            filter.session_id,
            &statuses,
            filter.after,
            filter.before,
            page_size,
            (page_number - 1).saturating_mul(page_size),
        )
        .fetch_all(&self.pool)
        .await?;
        let total = sqlx::query_scalar!(
            "select count(*) as \"n!\" from tasks
             where api_key_id = $1
               and ($2::uuid is null or session_id = $2)
               and (cardinality($3::text[]) = 0 or status = any($3))
               and ($4::timestamptz is null or created_at >= $4)
               and ($5::timestamptz is null or created_at <= $5)",
            owner.0,
            filter.session_id,
            &statuses,
            filter.after,
            filter.before,
        )
        .fetch_one(&self.pool)
        .await?;
        let records = rows
            .into_iter()
            .map(TaskRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<Uuid> = records.iter().map(|r| r.id.0).collect();
        let mut extra = self.v2_fields(&ids).await?;
        let items = records
            .into_iter()
            .map(|record| {
                let (session_id, options) = extra.remove(&record.id.0).unwrap_or_default();
                V2Task {
                    record,
                    session_id,
                    options,
                }
            })
            .collect();
        Ok((items, total))
    }

    /// The session's tasks, oldest first.
    pub async fn session_tasks(
        &self,
        owner: ApiKeyId,
        session: Uuid,
    ) -> Result<Vec<V2Task>, StoreError> {
        let filter = V2TaskFilter {
            session_id: Some(session),
            ..V2TaskFilter::default()
        };
        let (mut tasks, _) = self.list_v2_tasks(owner, &filter, 1000, 1).await?;
        tasks.reverse();
        Ok(tasks)
    }

    async fn v2_fields(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, (Option<Uuid>, Option<serde_json::Value>)>, StoreError> {
        let rows = sqlx::query!(
            "select id, session_id, v2_options from tasks where id = any($1)",
            ids,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.id, (row.session_id, row.v2_options)))
            .collect())
    }
}
