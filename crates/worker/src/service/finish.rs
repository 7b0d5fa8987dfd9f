//! What a run's end means for its task, and the writes of its end.

use std::sync::Arc;

use browserd_store::{SessionState, StoreError, TaskSession, TransitionDetails};
use browserd_types::{TaskId, TaskStatus, Transition};

use super::TaskJob;
use super::job::remove_workspace;
use crate::BrowserState;
use crate::runner::{RunEnd, RunError, RunOutcome, failed};
use crate::sink::StoreSink;

/// What [`TaskJob::finish`] needs of a run that ended.
pub(super) struct Finished {
    pub(super) sink: Arc<StoreSink>,
    pub(super) workspace_dir: std::path::PathBuf,
    pub(super) output_secrets: browserd_agent::secrets::Secrets,
    pub(super) session: Option<TaskSession>,
    pub(super) attempt: i32,
    pub(super) skill: Option<super::skills::SkillJob>,
}

impl TaskJob {
    /// What a run's end means for its task: given up (abandoned), another attempt (no
    /// browser), or its final status with its output files and session state stored first.
    pub(super) async fn finish(
        &self,
        id: TaskId,
        result: Result<RunOutcome, RunError>,
        run: Finished,
    ) {
        let Finished {
            sink,
            workspace_dir,
            output_secrets,
            session,
            attempt,
            skill,
        } = run;
        if let Some(reason) = sink.abandoned() {
            tracing::info!(%reason, "task given up by this worker");
            // Stopped from outside (the stop ended the lease, so the agent's next write was
            // refused): its files are what the workspace holds now.
            if let Ok(Some(task)) = self.store.get_task(None, id).await
                && task.status == TaskStatus::Stopped
                && task.lease_owner.is_none()
            {
                self.save_output_files(id, &workspace_dir, output_secrets)
                    .await;
            }
            // Whoever runs the task next starts from its stored state; the files here may hold
            // filled-in secret values.
            remove_workspace(workspace_dir).await;
            return;
        }
        match result {
            Err(RunError::Browser(err)) if attempt < self.config.max_attempts => {
                // Chrome could not give a context (launch failed, crashed): another attempt,
                // here or on another worker, may succeed.
                tracing::warn!(%err, "no browser for the task; handing it back");
                let _ = self
                    .store
                    .release_task(id, &self.config.id, "no browser available")
                    .await;
                remove_workspace(workspace_dir).await;
                return;
            }
            Err(err) => {
                self.save_output_files(id, &workspace_dir, output_secrets)
                    .await;
                self.end(id, Transition::Fail, failed(err.to_string()))
                    .await;
            }
            Ok(RunOutcome {
                end: RunEnd::BrowserLost(reason),
                ..
            }) if attempt < self.config.max_attempts => {
                // Its Chrome died under it: the task goes on from its last persisted step in a
                // new browser (here or on another worker) at once, as after a lost worker.
                tracing::warn!(%reason, attempt, "the task's browser died; requeueing it");
                crate::telemetry::browser_lost(true);
                let released = self
                    .store
                    .release_task(
                        id,
                        &self.config.id,
                        &format!("the browser crashed: {reason}"),
                    )
                    .await;
                if let Err(err) = released {
                    tracing::warn!(%err, "requeueing failed; the task's lease will expire");
                }
                remove_workspace(workspace_dir).await;
                return;
            }
            Ok(RunOutcome {
                end: RunEnd::BrowserLost(reason),
                ..
            }) => {
                crate::telemetry::browser_lost(false);
                self.save_output_files(id, &workspace_dir, output_secrets)
                    .await;
                let error = format!(
                    "the browser crashed in each of the task's {attempt} attempts (the last: \
                     {reason})"
                );
                self.end(id, Transition::Fail, failed(error)).await;
            }
            Ok(outcome) => {
                crate::telemetry::run_finished(&outcome.history);
                // Before the end, so a client that sees the task ended finds its files.
                self.save_output_files(id, &workspace_dir, output_secrets)
                    .await;
                if let Some(session) = &session
                    && let Some(state) = &outcome.browser_state
                {
                    self.save_session_state(session, state).await;
                }
                match &skill {
                    Some(job) => self.end_skill(id, outcome, job).await,
                    None => self.end_with(id, outcome).await,
                }
            }
        }
        if session.is_some()
            && let Err(err) = self.store.end_one_off_session(id).await
        {
            tracing::warn!(%err, "could not stop the task's one-off session");
        }
        remove_workspace(workspace_dir).await;
    }

    /// The session's cookies and tabs, saved before the task ends, so a task created in the
    /// session as soon as this one reads as ended finds them.
    async fn save_session_state(&self, session: &TaskSession, state: &BrowserState) {
        let state = SessionState {
            cookies: serde_json::Value::Array(state.cookies.clone()),
            tabs: state.tabs.clone(),
            focused_tab: i32::try_from(state.focused).unwrap_or(0),
        };
        if let Err(err) = self
            .store
            .save_session_state(session.session_id, &state)
            .await
        {
            tracing::warn!(%err, "could not save the session's browser state");
        }
    }

    /// The terminal transition of a run that ended.
    pub(super) async fn end_with(&self, id: TaskId, outcome: RunOutcome) {
        let (transition, details) = outcome.end_transition();
        if transition == Transition::Stop {
            // Stopped from outside: the status already says how it ended.
            match self.store.get_task(None, id).await {
                Ok(Some(task)) if !task.status.is_terminal() => {}
                _ => return,
            }
        }
        self.end(id, transition, details).await;
    }

    /// Stores what the agent left in the workspace as the task's output files
    /// (`crate::output_files`); failures are logged, never the task's.
    async fn save_output_files(
        &self,
        id: TaskId,
        workspace_dir: &std::path::Path,
        secrets: browserd_agent::secrets::Secrets,
    ) {
        let dir = workspace_dir.to_path_buf();
        let files = match tokio::task::spawn_blocking(move || {
            crate::output_files::collect_output_files(&dir, &secrets)
        })
        .await
        {
            Ok(files) => files,
            Err(err) => {
                tracing::warn!(%err, "could not read the task's output files");
                return;
            }
        };
        if files.is_empty() {
            return;
        }
        let skipped = files.iter().filter(|f| f.content.is_err()).count();
        match self
            .store
            .save_output_files(id, &self.config.id, &files)
            .await
        {
            Ok(()) => tracing::info!(files = files.len(), skipped, "output files stored"),
            Err(err) => tracing::warn!(%err, "could not store the task's output files"),
        }
    }

    /// Moves the task to its final status (only while this worker holds the lease).
    pub(super) async fn end(&self, id: TaskId, transition: Transition, details: TransitionDetails) {
        match self
            .store
            .transition_claimed_task(&self.config.id, id, transition, details)
            .await
        {
            Ok(task) => {
                crate::telemetry::task_ended(task.status);
                tracing::info!(status = %task.status, "task ended");
            }
            Err(StoreError::IllegalTransition { current, .. }) => {
                tracing::info!(%current, "task already ended");
            }
            Err(err) => tracing::warn!(%err, "could not record the end of the task"),
        }
    }
}
