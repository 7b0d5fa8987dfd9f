//! A task's output files (migration 0011): the files its agent left in the workspace when the
//! task ended, stored with their bytes (or, over the caps, only their name, size and why they
//! were skipped). Each file has a random key for the short-lived signed download links of
//! `/api/v2`; the key never leaves the api.

use browserd_types::TaskId;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// Largest output file stored (bytes); a larger one is recorded as skipped.
pub const OUTPUT_FILE_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Bytes stored per task; files beyond it (in name order) are recorded as skipped.
pub const OUTPUT_FILES_MAX_TASK_BYTES: u64 = 50 * 1024 * 1024;
/// Files recorded per task (stored or skipped); the rest are left out (and logged).
pub const OUTPUT_FILES_MAX_COUNT: usize = 100;

/// A file to record: its bytes, or why they are not stored.
#[derive(Clone)]
pub struct NewOutputFile {
    pub file_name: String,
    pub content_type: String,
    /// Size in bytes of a skipped file (a stored file's size is its content's length).
    pub size: u64,
    pub content: Result<Vec<u8>, String>,
}

impl std::fmt::Debug for NewOutputFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewOutputFile")
            .field("file_name", &self.file_name)
            .field("size", &self.size)
            .field("skipped", &self.content.as_ref().err())
            .finish_non_exhaustive()
    }
}

/// A recorded output file, without its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputFileRecord {
    pub id: Uuid,
    pub task_id: TaskId,
    pub file_name: String,
    pub content_type: String,
    pub size: i64,
    /// Why the bytes were not stored (`None`: stored).
    pub skipped: Option<String>,
    pub created_at: OffsetDateTime,
}

/// A stored output file (one with bytes) and its download-link key; the bytes are read in
/// chunks ([`Store::output_file_chunk`]).
#[derive(Clone)]
pub struct OutputFile {
    pub record: OutputFileRecord,
    /// HMAC key of the file's signed download links.
    pub download_key: Vec<u8>,
}

impl std::fmt::Debug for OutputFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFile")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

fn random_key() -> Result<Vec<u8>, StoreError> {
    let mut key = vec![0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|err| StoreError::Corrupt(format!("no randomness available: {err}")))?;
    Ok(key)
}

impl Store {
    /// Records the output files of task `id` (replacing any recorded before), as the worker
    /// `worker` that ran it: only while it holds the lease, or once the task was stopped from
    /// outside (a stop ends the lease; the worker whose agent stopped records what its
    /// workspace holds). [`StoreError::LeaseLost`] otherwise.
    pub async fn save_output_files(
        &self,
        id: TaskId,
        worker: &str,
        files: &[NewOutputFile],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query!(
            "select status, lease_owner from tasks where id = $1 for update",
            id.0
        )
        .fetch_optional(&mut *tx)
        .await?;
        let allowed = row.is_some_and(|row| match row.lease_owner {
            Some(owner) => owner == worker,
            None => row.status == "stopped",
        });
        if !allowed {
            return Err(StoreError::LeaseLost(id));
        }
        sqlx::query!("delete from task_output_files where task_id = $1", id.0)
            .execute(&mut *tx)
            .await?;
        for file in files {
            // A stored file's size is its bytes' length, whatever `size` says.
            let (bytes, skipped, size) = match &file.content {
                Ok(bytes) => (Some(bytes.as_slice()), None, bytes.len() as u64),
                Err(reason) => (None, Some(reason.as_str()), file.size),
            };
            sqlx::query!(
                "insert into task_output_files
                     (id, task_id, file_name, content_type, size, bytes, skipped_reason, download_key)
                 values ($1, $2, $3, $4, $5, $6, $7, $8)",
                Uuid::now_v7(),
                id.0,
                file.file_name,
                file.content_type,
                i64::try_from(size).unwrap_or(i64::MAX),
                bytes,
                skipped,
                random_key()?,
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The output files of task `id`, by name (the caller checked it may see the task).
    pub async fn list_output_files(&self, id: TaskId) -> Result<Vec<OutputFileRecord>, StoreError> {
        let rows = sqlx::query!(
            "select id, task_id, file_name, content_type, size, skipped_reason, created_at
             from task_output_files where task_id = $1 order by file_name",
            id.0
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| OutputFileRecord {
                id: row.id,
                task_id: TaskId(row.task_id),
                file_name: row.file_name,
                content_type: row.content_type,
                size: row.size,
                skipped: row.skipped_reason,
                created_at: row.created_at,
            })
            .collect())
    }

    /// The download key of output file `file` (one with stored bytes), without reading the
    /// bytes: a signed link is checked with it before anything else is loaded.
    pub async fn output_file_key(&self, file: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar!(
            "select download_key from task_output_files where id = $1 and bytes is not null",
            file,
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Output file `file` (without its bytes); `task` restricts it to one task (the caller checked
    /// that the task is the caller's), `None` finds it by id alone (a signed download link,
    /// verified by the caller with the returned key). Skipped files have no bytes: `None`.
    pub async fn output_file(
        &self,
        task: Option<TaskId>,
        file: Uuid,
    ) -> Result<Option<OutputFile>, StoreError> {
        let row = sqlx::query!(
            "select id, task_id, file_name, content_type, size, skipped_reason, created_at,
                    download_key
             from task_output_files
             where id = $1 and ($2::uuid is null or task_id = $2) and bytes is not null",
            file,
            task.map(|t| t.0),
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| OutputFile {
            record: OutputFileRecord {
                id: row.id,
                task_id: TaskId(row.task_id),
                file_name: row.file_name,
                content_type: row.content_type,
                size: row.size,
                skipped: row.skipped_reason,
                created_at: row.created_at,
            },
            download_key: row.download_key,
        }))
    }

    /// `len` bytes of output file `file` from `offset` on (fewer at its end, none past it);
    /// `None` when the file is gone. The bytes are stored uncompressed (migration 0018), so
    /// Postgres reads only the pages of the chunk: a download holds one chunk in memory.
    pub async fn output_file_chunk(
        &self,
        file: Uuid,
        offset: i32,
        len: i32,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let chunk = sqlx::query_scalar!(
            "select substring(bytes from $2 + 1 for $3) from task_output_files
             where id = $1 and bytes is not null",
            file,
            offset,
            len,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(chunk.map(Option::unwrap_or_default))
    }
}
