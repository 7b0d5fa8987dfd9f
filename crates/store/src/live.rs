//! The live view's coordination (migration 0012): who watches a task (`live_viewers`, kept by
//! the api processes that serve the viewers) and the newest screencast frame of a task
//! (`live_frames`, written by its worker). Both tables are unlogged; changes are announced on
//! channel [`LIVE_CHANNEL`] and relayed by the [`EventHub`](crate::EventHub) as
//! [`LiveSignal`](crate::LiveSignal)s.

use std::time::Duration;

use browserd_types::TaskId;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// Channel of the live view notifications: `<task>:viewers` when a task's viewers change,
/// `<task>:frame:<seq>` when a new frame is stored.
pub const LIVE_CHANNEL: &str = "live";

/// One viewer's registration (the api keeps it fresh while the viewer is connected).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveViewerId(pub Uuid);

/// A task's newest screencast frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveFrame {
    /// Increases with every frame of the task (per worker attempt; compare for "newer").
    pub seq: i64,
    pub jpeg: Vec<u8>,
    pub width: i32,
    pub height: i32,
    pub captured_at: OffsetDateTime,
}

/// The viewers of a task that have not expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveViewers {
    pub count: i64,
    /// When the first of them expires unless refreshed (`None` when there are none).
    pub next_expiry: Option<OffsetDateTime>,
}

fn interval(ttl: Duration) -> sqlx::postgres::types::PgInterval {
    sqlx::postgres::types::PgInterval {
        months: 0,
        days: 0,
        microseconds: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
    }
}

impl Store {
    /// Registers a viewer of `task_id` for `ttl` (the worker starts the screencast).
    pub async fn add_live_viewer(
        &self,
        task_id: TaskId,
        ttl: Duration,
    ) -> Result<LiveViewerId, StoreError> {
        let id = Uuid::now_v7();
        sqlx::query!(
            "insert into live_viewers (id, task_id, expires_at) values ($1, $2, now() + $3)",
            id,
            task_id.0,
            interval(ttl)
        )
        .execute(&self.pool)
        .await?;
        Ok(LiveViewerId(id))
    }

    /// Extends a viewer's registration; false when it is gone (expired and purged, or the
    /// task deleted).
    pub async fn refresh_live_viewer(
        &self,
        viewer: LiveViewerId,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let updated = sqlx::query!(
            "update live_viewers set expires_at = now() + $2 where id = $1",
            viewer.0,
            interval(ttl)
        )
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    /// Removes a viewer (the worker stops the screencast after the last one).
    pub async fn remove_live_viewer(&self, viewer: LiveViewerId) -> Result<(), StoreError> {
        sqlx::query!("delete from live_viewers where id = $1", viewer.0)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The unexpired viewers of `task_id`; expired rows are purged on the way.
    pub async fn live_viewers(&self, task_id: TaskId) -> Result<LiveViewers, StoreError> {
        sqlx::query!(
            "delete from live_viewers where task_id = $1 and expires_at <= now()",
            task_id.0
        )
        .execute(&self.pool)
        .await?;
        let row = sqlx::query!(
            r#"select count(*) as "count!", min(expires_at) as next_expiry
               from live_viewers where task_id = $1 and expires_at > now()"#,
            task_id.0
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(LiveViewers {
            count: row.count,
            next_expiry: row.next_expiry,
        })
    }

    /// Stores `jpeg` as the newest frame of `task_id` and announces it (in one statement's
    /// transaction, so the notification is delivered once the frame is readable).
    pub async fn put_live_frame(
        &self,
        task_id: TaskId,
        seq: i64,
        jpeg: &[u8],
        width: i32,
        height: i32,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query!(
            "insert into live_frames (task_id, seq, jpeg, width, height)
             values ($1, $2, $3, $4, $5)
             on conflict (task_id) do update
                set seq = excluded.seq, jpeg = excluded.jpeg, width = excluded.width,
                    height = excluded.height, captured_at = now()",
            task_id.0,
            seq,
            jpeg,
            width,
            height
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "select pg_notify($1, $2)",
            LIVE_CHANNEL,
            format!("{task_id}:frame:{seq}")
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The newest frame of `task_id`, if one was stored.
    pub async fn live_frame(&self, task_id: TaskId) -> Result<Option<LiveFrame>, StoreError> {
        let row = sqlx::query!(
            "select seq, jpeg, width, height, captured_at from live_frames where task_id = $1",
            task_id.0
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| LiveFrame {
            seq: row.seq,
            jpeg: row.jpeg,
            width: row.width,
            height: row.height,
            captured_at: row.captured_at,
        }))
    }

    /// Forgets the task's frame (its run ended).
    pub async fn clear_live_frame(&self, task_id: TaskId) -> Result<(), StoreError> {
        sqlx::query!("delete from live_frames where task_id = $1", task_id.0)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
