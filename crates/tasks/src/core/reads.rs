//! Task rows, steps, history pages, output files and gauges, for the handlers that checked the caller may see the task (or hold its ticket or signed link).

use browserd_store::{
    DeletedTask, OutputFile, OutputFileRecord, StatusCount, StepRecord, TaskRecord,
};
use browserd_types::{ApiKeyId, TaskId};
use uuid::Uuid;

use super::TaskCore;
use crate::error::TaskError;

impl TaskCore {
    /// The task `id` if it exists and (when `owner` is given) belongs to `owner`.
    pub async fn get_task(
        &self,
        owner: Option<ApiKeyId>,
        id: TaskId,
    ) -> Result<Option<TaskRecord>, TaskError> {
        Ok(self.store.get_task(owner, id).await?)
    }
    /// Deletes `owner`'s task `id` with its steps, events and artifacts. Refused while a
    /// worker holds the task (running, or paused on a worker).
    pub async fn delete_task(&self, owner: ApiKeyId, id: TaskId) -> Result<DeletedTask, TaskError> {
        Ok(self.store.delete_task(owner, id).await?)
    }
    /// All steps of task `task_id`, in order. A screenshot that is not the task's own
    /// artifact is not reported.
    pub async fn list_steps(&self, task_id: TaskId) -> Result<Vec<StepRecord>, TaskError> {
        Ok(self.store.list_steps(task_id).await?)
    }
    /// Up to `limit` persisted AgentHistory items of task `id` whose step is numbered above
    /// `after_step` (from the first when `None`), in step order, each with its step number:
    /// one page of the task's step records.
    pub async fn step_records_page(
        &self,
        id: TaskId,
        after_step: Option<i32>,
        limit: i64,
    ) -> Result<Vec<(i32, serde_json::Value)>, TaskError> {
        Ok(self.store.step_records_page(id, after_step, limit).await?)
    }
    /// The output files of task `id`, by name (the caller checked it may see the task).
    pub async fn list_output_files(&self, id: TaskId) -> Result<Vec<OutputFileRecord>, TaskError> {
        Ok(self.store.list_output_files(id).await?)
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
    /// The download key of output file `file` (one with stored bytes), without reading the
    /// bytes: a signed link is checked with it before anything else is loaded.
    pub async fn output_file_key(&self, file: Uuid) -> Result<Option<Vec<u8>>, TaskError> {
        Ok(self.store.output_file_key(file).await?)
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
    /// Queued, running and paused tasks: how many, and how long the oldest has been in that
    /// status. One query over partial indexes (terminal tasks are not counted: they only grow).
    pub async fn task_gauges(&self) -> Result<Vec<StatusCount>, TaskError> {
        Ok(self.store.task_gauges().await?)
    }
}
