//! `/api/v2/tasks`: the v2 view of browserd's tasks, one file per concern: `create.rs` (a v2
//! request mapped onto the task service's input), `list.rs` (the listing and its query
//! parameters), `read.rs`, `control.rs` (stop, pause, resume), `history.rs` (logs and the
//! streamed AgentHistory), `files.rs` (screenshots and output files), `views.rs` (the wire
//! shapes of a task).

pub(super) mod control;
pub(super) mod create;
pub(super) mod files;
pub(super) mod history;
pub(super) mod list;
pub(super) mod read;
mod views;

use browserd_tasks::records::V2Task;
use browserd_types::TaskId;

use super::{V2Error, path_uuid};
use crate::AppState;
use crate::extract::Caller;

pub(crate) use list::{paging, query_params};
pub(crate) use views::item_view;

/// The task `raw_id` of the caller's key: 422 for a malformed id, 404 `Task not found`.
async fn owned(state: &AppState, caller: &Caller, raw_id: &str) -> Result<V2Task, V2Error> {
    let id = TaskId(path_uuid("task_id", raw_id)?);
    state
        .core
        .get_v2_task(caller.key_id, id)
        .await?
        .ok_or_else(|| V2Error::not_found("Task"))
}
