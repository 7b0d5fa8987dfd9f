//! Replay tasks (`POST /v1/tasks` with `replay_of`): which task a replay re-runs and with
//! which options, and what the api checks about the source before accepting one.

use browserd_types::TaskId;
use browserd_types::dto::ReplaySettings;
use sqlx::{Postgres, Transaction};

use crate::{Store, StoreError};

/// The replay part of a new task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewReplay {
    /// The task whose recorded actions are replayed.
    pub source: TaskId,
    pub options: ReplaySettings,
}

/// What a stored replay task re-runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskReplay {
    pub source: TaskId,
    pub options: ReplaySettings,
}

/// Marks the task `id` being inserted in `tx` as a replay.
pub(crate) async fn attach_in(
    tx: &mut Transaction<'_, Postgres>,
    id: TaskId,
    replay: &NewReplay,
) -> Result<(), StoreError> {
    let options = serde_json::to_value(replay.options)
        .map_err(|err| StoreError::Corrupt(format!("replay options: {err}")))?;
    sqlx::query!(
        "update tasks set replay_of = $2, replay_options = $3 where id = $1",
        id.0,
        replay.source.0,
        options,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Store {
    /// The replay settings of task `id`; `None` when it is not a replay (or does not exist).
    pub async fn task_replay(&self, id: TaskId) -> Result<Option<TaskReplay>, StoreError> {
        let row = sqlx::query!(
            "select replay_of, replay_options from tasks where id = $1",
            id.0
        )
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let (Some(source), Some(options)) = (row.replay_of, row.replay_options) else {
            return Ok(None);
        };
        let options = serde_json::from_value(options)
            .map_err(|err| StoreError::Corrupt(format!("replay options: {err}")))?;
        Ok(Some(TaskReplay {
            source: TaskId(source),
            options,
        }))
    }

    /// Steps of task `id` that recorded actions (a model output), i.e. what a replay of it
    /// would re-run.
    pub async fn replayable_steps(&self, id: TaskId) -> Result<i64, StoreError> {
        let n = sqlx::query_scalar!(
            "select count(*) as \"n!\" from task_steps
             where task_id = $1 and record is not null and model_output is not null",
            id.0
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(n)
    }
}
