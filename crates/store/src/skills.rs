//! Skills (migration 0021): a key's skills, their versions (the scripts executions replay, as
//! `jsonb`; this crate does not read them), and the link of a task to the skill it generates or
//! executes (`tasks.skill_id`, `skill_role`, `skill_version`, `skill_parameters`). A generation
//! task and its skill are written in one transaction, as are a task's end and the version it
//! saves; a generation that ends without a version is marked on the skill by a deferred trigger.
//! Every read and change of a key's skill filters by its owner.

use browserd_types::{ApiKeyId, TaskId};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::tasks::{TaskCursor, TaskRecord, TaskRow};
use crate::{Store, StoreError};

/// The cloud's generation statuses a skill goes through.
pub const SKILL_STATUSES: [&str; 6] = [
    "recording",
    "generating",
    "failed",
    "finished",
    "cancelled",
    "timed_out",
];

/// What a task does for its skill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkillRole {
    /// Records the skill: an agent run of its prompt, or a replay of an ended task.
    Generate,
    /// Runs a version with parameters.
    Execute,
}

impl SkillRole {
    pub fn as_str(self) -> &'static str {
        match self {
            SkillRole::Generate => "generate",
            SkillRole::Execute => "execute",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "generate" => Ok(SkillRole::Generate),
            "execute" => Ok(SkillRole::Execute),
            other => Err(StoreError::Corrupt(format!("skill role `{other}`"))),
        }
    }
}

/// A skill to insert with its generation task.
#[derive(Clone, Debug)]
pub struct NewSkill {
    pub id: Uuid,
    pub title: String,
    pub description: String,
    pub goal: String,
    pub agent_prompt: String,
    pub output_schema: Option<Value>,
    /// The declared parameters (`Vec<SkillParameter>` as JSON).
    pub parameters: Value,
}

/// How a new task is linked to a skill (written in the task's transaction).
#[derive(Clone, Debug)]
pub enum SkillAttach {
    /// A new skill, recorded by this task; `parameters` are the values the run uses.
    Create {
        skill: Box<NewSkill>,
        parameters: Value,
    },
    /// Another generation of the key's skill `skill_id` (refine); refused with
    /// [`StoreError::SkillBusy`] while one runs.
    Regenerate { skill_id: Uuid, parameters: Value },
    /// An execution of version `version` with `parameters` (`{name: value}`).
    Execute {
        skill_id: Uuid,
        version: i32,
        parameters: Value,
    },
}

/// A skill row.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillRecord {
    pub id: Uuid,
    pub api_key_id: ApiKeyId,
    pub title: String,
    pub description: String,
    pub goal: String,
    pub agent_prompt: String,
    pub output_schema: Option<Value>,
    pub status: String,
    pub error: Option<String>,
    pub parameters: Value,
    pub current_version: Option<i32>,
    pub is_enabled: bool,
    pub generation_task_id: Option<TaskId>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub current_version_started_at: Option<OffsetDateTime>,
    pub current_version_finished_at: Option<OffsetDateTime>,
}

/// One version of a skill.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillVersionRecord {
    pub skill_id: Uuid,
    pub version: i32,
    /// The `SkillScript`.
    pub script: Value,
    /// `generated`, `from_task`, `healed`, `refined` (or `rollback`).
    pub origin: String,
    pub source_task_id: Option<TaskId>,
    /// The `Vec<HealedStep>` of a healed version.
    pub healed: Value,
    pub created_at: OffsetDateTime,
}

/// A task's link to its skill, as the worker reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSkill {
    pub role: SkillRole,
    /// `None` once the skill was deleted.
    pub skill: Option<SkillRecord>,
    /// The version an execution runs.
    pub version: Option<i32>,
    /// The values of the run (`{name: value}`).
    pub parameters: Value,
}

/// A version to save at a task's end, in the transaction of its terminal transition.
#[derive(Clone, Debug)]
pub struct NewSkillVersion {
    pub skill_id: Uuid,
    pub script: Value,
    pub origin: &'static str,
    pub source_task_id: Option<TaskId>,
    pub healed: Value,
    /// The script's parameters, now the skill's.
    pub parameters: Value,
    /// Saved by the skill's generation task: it finishes the generation (status `finished`),
    /// only while `generation_task_id` is still this task.
    pub generation: bool,
}

/// A page of skills, newest first.
#[derive(Clone, Debug)]
pub struct SkillPage {
    pub items: Vec<SkillRecord>,
    pub next_cursor: Option<TaskCursor>,
}

/// A change of a skill's editable fields (`None`: unchanged).
#[derive(Clone, Debug, Default)]
pub struct SkillUpdate {
    pub title: Option<String>,
    pub description: Option<String>,
    pub is_enabled: Option<bool>,
}

struct SkillRow {
    id: Uuid,
    api_key_id: Uuid,
    title: String,
    description: String,
    goal: String,
    agent_prompt: String,
    output_schema: Option<Value>,
    status: String,
    error: Option<String>,
    parameters: Value,
    current_version: Option<i32>,
    is_enabled: bool,
    generation_task_id: Option<Uuid>,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    current_version_started_at: Option<OffsetDateTime>,
    current_version_finished_at: Option<OffsetDateTime>,
}

impl From<SkillRow> for SkillRecord {
    fn from(row: SkillRow) -> Self {
        SkillRecord {
            id: row.id,
            api_key_id: ApiKeyId(row.api_key_id),
            title: row.title,
            description: row.description,
            goal: row.goal,
            agent_prompt: row.agent_prompt,
            output_schema: row.output_schema,
            status: row.status,
            error: row.error,
            parameters: row.parameters,
            current_version: row.current_version,
            is_enabled: row.is_enabled,
            generation_task_id: row.generation_task_id.map(TaskId),
            created_at: row.created_at,
            updated_at: row.updated_at,
            current_version_started_at: row.current_version_started_at,
            current_version_finished_at: row.current_version_finished_at,
        }
    }
}

struct VersionRow {
    skill_id: Uuid,
    version: i32,
    script: Value,
    origin: String,
    source_task_id: Option<Uuid>,
    healed: Value,
    created_at: OffsetDateTime,
}

impl From<VersionRow> for SkillVersionRecord {
    fn from(row: VersionRow) -> Self {
        SkillVersionRecord {
            skill_id: row.skill_id,
            version: row.version,
            script: row.script,
            origin: row.origin,
            source_task_id: row.source_task_id.map(TaskId),
            healed: row.healed,
            created_at: row.created_at,
        }
    }
}

/// Links task `id` (inserted in `tx`, owned by `owner`) to its skill.
pub(crate) async fn attach_in(
    tx: &mut Transaction<'_, Postgres>,
    owner: ApiKeyId,
    id: TaskId,
    attach: &SkillAttach,
) -> Result<(), StoreError> {
    let (skill_id, role, version, parameters) = match attach {
        SkillAttach::Create { skill, parameters } => {
            sqlx::query!(
                "insert into skills (id, api_key_id, title, description, goal, agent_prompt,
                     output_schema, parameters, generation_task_id, current_version_started_at)
                 values ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())",
                skill.id,
                owner.0,
                skill.title,
                skill.description,
                skill.goal,
                skill.agent_prompt,
                skill.output_schema,
                skill.parameters,
                id.0,
            )
            .execute(&mut **tx)
            .await?;
            (skill.id, SkillRole::Generate, None, parameters)
        }
        SkillAttach::Regenerate {
            skill_id,
            parameters,
        } => {
            let current = sqlx::query_scalar!(
                "select status from skills where id = $1 and api_key_id = $2 for no key update",
                skill_id,
                owner.0
            )
            .fetch_optional(&mut **tx)
            .await?
            .ok_or(StoreError::SkillNotFound(*skill_id))?;
            if current == "generating" {
                return Err(StoreError::SkillBusy {
                    id: *skill_id,
                    status: current,
                });
            }
            sqlx::query!(
                "update skills set status = 'generating', error = null, generation_task_id = $2,
                     current_version_started_at = now(), updated_at = now()
                 where id = $1",
                skill_id,
                id.0,
            )
            .execute(&mut **tx)
            .await?;
            (*skill_id, SkillRole::Generate, None, parameters)
        }
        SkillAttach::Execute {
            skill_id,
            version,
            parameters,
        } => (*skill_id, SkillRole::Execute, Some(*version), parameters),
    };
    sqlx::query!(
        "update tasks set skill_id = $2, skill_role = $3, skill_version = $4,
             skill_parameters = $5
         where id = $1",
        id.0,
        skill_id,
        role.as_str(),
        version,
        parameters,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Saves `new` as the next version of its skill and makes it current, in `tx` (the task's
/// terminal transition). A generation's version is saved only while the skill still waits for
/// that task (`task`); otherwise nothing is written.
pub(crate) async fn save_version_in(
    tx: &mut Transaction<'_, Postgres>,
    task: TaskId,
    new: &NewSkillVersion,
) -> Result<Option<i32>, StoreError> {
    let locked = sqlx::query!(
        "select generation_task_id from skills where id = $1 for no key update",
        new.skill_id
    )
    .fetch_optional(&mut **tx)
    .await?;
    let Some(locked) = locked else {
        return Ok(None);
    };
    if new.generation && locked.generation_task_id != Some(task.0) {
        return Ok(None);
    }
    let version = sqlx::query_scalar!(
        "insert into skill_versions (skill_id, version, script, origin, source_task_id, healed)
         select $1, coalesce(max(version), 0) + 1, $2, $3, $4, $5
         from skill_versions where skill_id = $1
         returning version",
        new.skill_id,
        new.script,
        new.origin,
        new.source_task_id.map(|t| t.0),
        new.healed,
    )
    .fetch_one(&mut **tx)
    .await?;
    sqlx::query!(
        "update skills set current_version = $2, parameters = $3, updated_at = now(),
             status = case when $4 then 'finished' else status end,
             error = case when $4 then null else error end,
             current_version_finished_at = case when $4 then now()
                 else current_version_finished_at end
         where id = $1",
        new.skill_id,
        version,
        new.parameters,
        new.generation,
    )
    .execute(&mut **tx)
    .await?;
    Ok(Some(version))
}

impl Store {
    /// `owner`'s skill `id`.
    pub async fn get_skill(&self, owner: ApiKeyId, id: Uuid) -> Result<SkillRecord, StoreError> {
        sqlx::query_as!(
            SkillRow,
            "select id, api_key_id, title, description, goal, agent_prompt, output_schema,
                 status, error, parameters, current_version, is_enabled, generation_task_id,
                 created_at, updated_at, current_version_started_at, current_version_finished_at
             from skills where id = $1 and api_key_id = $2",
            id,
            owner.0
        )
        .fetch_optional(&self.pool)
        .await?
        .map(SkillRecord::from)
        .ok_or(StoreError::SkillNotFound(id))
    }

    /// A page of `owner`'s skills, newest first, after `cursor`; `query` matches title, goal
    /// or description (case-insensitive substring).
    pub async fn list_skills(
        &self,
        owner: ApiKeyId,
        query: Option<&str>,
        limit: i64,
        cursor: Option<TaskCursor>,
    ) -> Result<SkillPage, StoreError> {
        let pattern = query.map(|q| {
            let escaped = q
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let rows = sqlx::query_as!(
            SkillRow,
            "select id, api_key_id, title, description, goal, agent_prompt, output_schema,
                 status, error, parameters, current_version, is_enabled, generation_task_id,
                 created_at, updated_at, current_version_started_at, current_version_finished_at
             from skills
             where api_key_id = $1
               and ($2::text is null or title ilike $2 or goal ilike $2 or description ilike $2)
               and ($3::timestamptz is null or (created_at, id) < ($3, $4::uuid))
             order by created_at desc, id desc
             limit $5",
            owner.0,
            pattern,
            cursor.map(|c| c.created_at),
            cursor.map(|c| c.id.0),
            limit + 1,
        )
        .fetch_all(&self.pool)
        .await?;
        let mut items: Vec<SkillRecord> = rows.into_iter().map(SkillRecord::from).collect();
        let has_more = items.len() as i64 > limit;
        items.truncate(limit.max(0) as usize);
        let next_cursor = has_more
            .then(|| items.last())
            .flatten()
            .map(|s| TaskCursor {
                created_at: s.created_at,
                id: TaskId(s.id),
            });
        Ok(SkillPage { items, next_cursor })
    }

    /// Changes `owner`'s skill `id`'s title, description or enabled flag.
    pub async fn update_skill(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        update: &SkillUpdate,
    ) -> Result<SkillRecord, StoreError> {
        let changed = sqlx::query!(
            "update skills set title = coalesce($3, title),
                 description = coalesce($4, description),
                 is_enabled = coalesce($5, is_enabled), updated_at = now()
             where id = $1 and api_key_id = $2",
            id,
            owner.0,
            update.title,
            update.description,
            update.is_enabled,
        )
        .execute(&self.pool)
        .await?;
        if changed.rows_affected() == 0 {
            return Err(StoreError::SkillNotFound(id));
        }
        self.get_skill(owner, id).await
    }

    /// Deletes `owner`'s skill `id` and its versions (its tasks stay, unlinked); answers the
    /// deleted row. Locks go task rows first, then the skill, as a task's end takes them (its
    /// transition, then the skill it saves a version into): the other order deadlocks.
    pub async fn delete_skill(&self, owner: ApiKeyId, id: Uuid) -> Result<SkillRecord, StoreError> {
        let skill = self.get_skill(owner, id).await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query!(
            "select id from tasks where skill_id = $1 order by id for update",
            id
        )
        .fetch_all(&mut *tx)
        .await?;
        let deleted = sqlx::query!(
            "delete from skills where id = $1 and api_key_id = $2",
            id,
            owner.0
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if deleted.rows_affected() == 0 {
            return Err(StoreError::SkillNotFound(id));
        }
        Ok(skill)
    }

    /// Sets `owner`'s skill `id`'s status (a generation cancelled before its task could be
    /// stopped), only while it is `from`.
    pub async fn set_skill_status(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        from: &str,
        to: &str,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let changed = sqlx::query!(
            "update skills set status = $4, error = coalesce($5, error), updated_at = now()
             where id = $1 and api_key_id = $2 and status = $3",
            id,
            owner.0,
            from,
            to,
            error,
        )
        .execute(&self.pool)
        .await?;
        Ok(changed.rows_affected() == 1)
    }

    /// The versions of `owner`'s skill `id`, oldest first.
    pub async fn skill_versions(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Vec<SkillVersionRecord>, StoreError> {
        self.get_skill(owner, id).await?;
        let rows = sqlx::query_as!(
            VersionRow,
            "select skill_id, version, script, origin, source_task_id, healed, created_at
             from skill_versions where skill_id = $1 order by version",
            id
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(SkillVersionRecord::from).collect())
    }

    /// Version `version` of skill `id` (the worker's read; no owner).
    pub async fn skill_version(
        &self,
        id: Uuid,
        version: i32,
    ) -> Result<Option<SkillVersionRecord>, StoreError> {
        let row = sqlx::query_as!(
            VersionRow,
            "select skill_id, version, script, origin, source_task_id, healed, created_at
             from skill_versions where skill_id = $1 and version = $2",
            id,
            version
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(SkillVersionRecord::from))
    }

    /// Makes the version before the current one current again; `Ok(None)` when there is
    /// none.
    pub async fn rollback_skill(
        &self,
        owner: ApiKeyId,
        id: Uuid,
    ) -> Result<Option<SkillRecord>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let current = sqlx::query!(
            "select current_version from skills where id = $1 and api_key_id = $2
             for no key update",
            id,
            owner.0
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::SkillNotFound(id))?;
        let Some(current) = current.current_version else {
            return Ok(None);
        };
        let previous = sqlx::query_scalar!(
            "select max(version) from skill_versions where skill_id = $1 and version < $2",
            id,
            current
        )
        .fetch_one(&mut *tx)
        .await?;
        let Some(previous) = previous else {
            return Ok(None);
        };
        sqlx::query!(
            "update skills set current_version = $2, updated_at = now(),
                 parameters = coalesce(
                     (select script -> 'parameters' from skill_versions
                      where skill_id = $1 and version = $2), parameters)
             where id = $1",
            id,
            previous
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.get_skill(owner, id).await.map(Some)
    }

    /// A page of the executions of `owner`'s skill `id`, newest first.
    pub async fn skill_runs(
        &self,
        owner: ApiKeyId,
        id: Uuid,
        limit: i64,
        cursor: Option<TaskCursor>,
    ) -> Result<(Vec<TaskRecord>, Option<TaskCursor>), StoreError> {
        self.get_skill(owner, id).await?;
        let rows = sqlx::query_as!(
            TaskRow,
            "select id, api_key_id, status, task, options as \"options: Json<browserd_types::TaskOptions>\",
                 output, is_success, error, lease_owner, lease_expires_at, attempts,
                 last_event_seq, created_at, updated_at, started_at, finished_at, usage, last_url
             from tasks
             where skill_id = $1 and api_key_id = $2 and skill_role = 'execute'
               and ($3::timestamptz is null or (created_at, id) < ($3, $4::uuid))
             order by created_at desc, id desc
             limit $5",
            id,
            owner.0,
            cursor.map(|c| c.created_at),
            cursor.map(|c| c.id.0),
            limit + 1,
        )
        .fetch_all(&self.pool)
        .await?;
        let mut items = rows
            .into_iter()
            .map(TaskRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let has_more = items.len() as i64 > limit;
        items.truncate(limit.max(0) as usize);
        let next = has_more
            .then(|| items.last())
            .flatten()
            .map(|t| TaskCursor {
                created_at: t.created_at,
                id: t.id,
            });
        Ok((items, next))
    }

    /// The skill link of task `id` (`None`: not a skill's task).
    pub async fn task_skill(&self, id: TaskId) -> Result<Option<TaskSkill>, StoreError> {
        let row = sqlx::query!(
            "select skill_id, skill_role, skill_version, skill_parameters, api_key_id
             from tasks where id = $1",
            id.0
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let Some(role) = row.skill_role else {
            return Ok(None);
        };
        let skill = match row.skill_id {
            Some(skill_id) => match self.get_skill(ApiKeyId(row.api_key_id), skill_id).await {
                Ok(skill) => Some(skill),
                Err(StoreError::SkillNotFound(_)) => None,
                Err(err) => return Err(err),
            },
            None => None,
        };
        Ok(Some(TaskSkill {
            role: SkillRole::parse(&role)?,
            skill,
            version: row.skill_version,
            parameters: row.skill_parameters.unwrap_or(Value::Null),
        }))
    }

    /// The skill task `id` belongs to and its role, for `owner` (`None`: not a skill's task).
    pub async fn skill_of_task(
        &self,
        owner: ApiKeyId,
        id: TaskId,
    ) -> Result<Option<(Uuid, SkillRole)>, StoreError> {
        let row = sqlx::query!(
            "select skill_id, skill_role from tasks where id = $1 and api_key_id = $2",
            id.0,
            owner.0
        )
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => match (row.skill_id, row.skill_role) {
                (Some(skill), Some(role)) => Ok(Some((skill, SkillRole::parse(&role)?))),
                _ => Ok(None),
            },
            None => Ok(None),
        }
    }
}
