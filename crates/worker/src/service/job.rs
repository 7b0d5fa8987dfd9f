//! One claimed task on this worker, in phases: prepare (`prepare`), start (sink, watcher, live
//! view, the run), drive (until it ends, or drain on shutdown), then hand it back or finish it
//! (`finish`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use browserd_agent::AgentControl;
use browserd_agent::AgentHistoryList;
use browserd_agent::replay::ReplayOptions;
use browserd_store::{ClaimedTask, EventHub, Store, TaskReplay};
use browserd_types::{TaskId, Transition};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::WorkerConfig;
use super::finish::Finished;
use super::prepare::{NotRun, Prepared};
use super::watch::{WatchedRun, watch_task};
use crate::runner::{
    AbortOnDrop, LiveViewLink, ReplayRequest, RunEnd, RunError, RunOutcome, RunRequest, TaskRunner,
    TaskSpec, failed,
};
use crate::sink::StoreSink;

/// One claimed task on this worker.
pub(super) struct TaskJob {
    pub(super) store: Store,
    pub(super) hub: EventHub,
    pub(super) runner: Arc<TaskRunner>,
    pub(super) config: Arc<WorkerConfig>,
}

/// The parts of a started run that outlive it: its sink, its control, and the workspace with
/// the secrets its files are redacted with.
struct Started {
    sink: Arc<StoreSink>,
    control: AgentControl,
    draining: Arc<AtomicBool>,
    watcher: AbortOnDrop,
    live_follower: Option<AbortOnDrop>,
    /// Reads the task's take-over inputs; aborted with the run.
    take_over_follower: Option<AbortOnDrop>,
    workspace_dir: std::path::PathBuf,
    output_secrets: browserd_agent::secrets::Secrets,
    /// What the end of a skill's task saves.
    skill: Option<super::skills::SkillJob>,
}

/// What both kinds of run are given.
struct RunParts {
    spec: TaskSpec,
    workspace_dir: PathBuf,
    sink: Arc<StoreSink>,
    control: AgentControl,
    prior: Option<AgentHistoryList>,
    resume_url: Option<String>,
    live_view: Option<LiveViewLink>,
    skill: Option<crate::runner::SkillRun>,
}

type RunFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<RunOutcome, RunError>> + Send + 'a>>;

impl TaskJob {
    /// One claimed task, in phases: prepare (read what it needs), start (sink, watcher, live
    /// view, the run), drive (until it ends, or drain on shutdown), then hand it back or
    /// finish it.
    pub(super) async fn run(self, claimed: ClaimedTask, shutdown: CancellationToken) {
        let id = claimed.record.id;
        let attempt = claimed.record.attempts;
        // Take-over inputs recorded before this claim were for an earlier attempt's browser.
        let claimed_at_seq = claimed.record.last_event_seq;
        let prepared = match self.prepare(claimed).await {
            Ok(prepared) => prepared,
            Err(NotRun::Fail(error)) => {
                self.end(id, Transition::Fail, failed(error)).await;
                return;
            }
            Err(NotRun::HandBack(reason)) => {
                tracing::warn!(reason, "handing the task back");
                let _ = self.store.release_task(id, &self.config.id, reason).await;
                return;
            }
        };
        let session = prepared.session.clone();
        let (started, mut run) = self.start(id, prepared, claimed_at_seq);
        let result = self.drive(&mut run, &started, &shutdown).await;
        drop(started.watcher);
        drop(started.take_over_follower);
        if let Some(mut follower) = started.live_follower {
            // The run dropped its end of the link: the follower clears the frame and ends.
            let _ = tokio::time::timeout(Duration::from_secs(5), &mut follower.0).await;
        }
        let Some(result) = result else {
            // Dropping the run drops the agent and its browser context.
            drop(run);
            self.hand_back(id).await;
            remove_workspace(started.workspace_dir).await;
            return;
        };
        drop(run);
        let finished = Finished {
            sink: started.sink,
            workspace_dir: started.workspace_dir,
            output_secrets: started.output_secrets,
            session,
            attempt,
            skill: started.skill,
        };
        self.finish(id, result, finished).await;
    }

    /// The sink, the control watcher and the live view of the task, and its run (the agent,
    /// or a replay of a recorded history), not polled yet.
    fn start(
        &self,
        id: TaskId,
        prepared: Prepared,
        claimed_at_seq: i64,
    ) -> (Started, RunFuture<'_>) {
        let Prepared {
            spec,
            replay,
            session: _,
            prior,
            resume_url,
            profile,
            skill,
        } = prepared;
        let (skill_run, skill) = match skill {
            Some(prepared) => (Some(prepared.run), Some(prepared.job)),
            None => (None, None),
        };
        let control = AgentControl::new();
        let draining = Arc::new(AtomicBool::new(false));
        let sink = self.sink(id, &control, prior.as_ref());
        // Take-over rides on the live view: a person drives what they watch. Replays have none.
        let (take_over, take_over_progress, take_over_follower) =
            self.take_over(id, replay.is_some(), &control, &sink, claimed_at_seq);
        let watcher = self.watch(
            id,
            WatchedRun {
                control: control.clone(),
                sink: sink.clone(),
                draining: draining.clone(),
                take_over: take_over_progress,
            },
        );
        let workspace_dir = self.config.workspace_root.join(id.to_string());
        // Output files are redacted with the task's secrets when the task ends.
        let output_secrets = browserd_agent::secrets::Secrets::new(&spec.secrets);
        let (live_view, live_follower) = self.live_view(id);
        let parts = RunParts {
            spec,
            workspace_dir: workspace_dir.clone(),
            sink: sink.clone(),
            control: control.clone(),
            prior,
            resume_url,
            live_view,
            skill: skill_run,
        };
        let run: RunFuture<'_> = match replay {
            Some((replay, source)) => self.replay_run(&replay, source, parts),
            None => self.agent_run(id, parts, take_over, profile),
        };
        let started = Started {
            sink,
            control,
            draining,
            watcher,
            live_follower,
            take_over_follower,
            workspace_dir,
            output_secrets,
            skill,
        };
        (started, run)
    }

    /// The task's event sink, its usage counted on from an earlier attempt's.
    fn sink(
        &self,
        id: TaskId,
        control: &AgentControl,
        prior: Option<&AgentHistoryList>,
    ) -> Arc<StoreSink> {
        Arc::new(
            StoreSink::new(
                self.store.clone(),
                id,
                self.config.id.clone(),
                control.clone(),
                prior.map(|p| p.usage.clone()).unwrap_or_default(),
            )
            .with_retry_budget(self.config.lease),
        )
    }

    /// The take-over link of the task, how far its follower has read and the follower, when
    /// the live view is on and the task is not a replay.
    fn take_over(
        &self,
        id: TaskId,
        is_replay: bool,
        control: &AgentControl,
        sink: &Arc<StoreSink>,
        claimed_at_seq: i64,
    ) -> (
        Option<crate::takeover::TakeOverLink>,
        Option<crate::takeover::TakeOverProgress>,
        Option<AbortOnDrop>,
    ) {
        match (&self.config.live_view, is_replay) {
            (Some(_), false) => {
                let (link, progress, follow) = crate::takeover::link(
                    self.store.clone(),
                    self.hub.clone(),
                    id,
                    self.config.id.clone(),
                    control.clone(),
                    sink.clone(),
                    claimed_at_seq,
                );
                (
                    Some(link),
                    Some(progress),
                    Some(AbortOnDrop(tokio::spawn(follow.in_current_span()))),
                )
            }
            _ => (None, None, None),
        }
    }

    /// The control watcher of the task ([`watch_task`]), running.
    fn watch(&self, id: TaskId, run: WatchedRun) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(
            watch_task(
                self.store.clone(),
                self.hub.clone(),
                id,
                self.config.clone(),
                run,
            )
            .in_current_span(),
        ))
    }

    /// The live view's link and its follower, when the live view is on.
    fn live_view(&self, id: TaskId) -> (Option<LiveViewLink>, Option<AbortOnDrop>) {
        match self.config.live_view {
            Some(settings) => {
                let (link, follow) =
                    crate::live::link(self.store.clone(), self.hub.clone(), id, settings);
                (
                    Some(link),
                    Some(AbortOnDrop(tokio::spawn(follow.in_current_span()))),
                )
            }
            None => (None, None),
        }
    }

    /// A replay of `source`'s recorded history, going on after the steps an earlier attempt
    /// persisted.
    fn replay_run(
        &self,
        replay: &TaskReplay,
        source: AgentHistoryList,
        parts: RunParts,
    ) -> RunFuture<'_> {
        let RunParts {
            spec,
            workspace_dir,
            sink,
            control,
            prior,
            resume_url,
            live_view,
            skill,
        } = parts;
        let earlier_failure = prior.as_ref().and_then(earlier_replay_failure);
        let skip_steps = prior.as_ref().map_or(0, |p| p.history.len());
        let first_step = prior
            .as_ref()
            .and_then(|p| p.history.last())
            .map(|h| h.metadata.step_number + 1)
            .or_else(|| {
                source
                    .history
                    .iter()
                    .find(|h| h.model_output.is_some())
                    .map(|h| h.metadata.step_number)
            })
            .unwrap_or(0);
        tracing::info!(source = %replay.source, steps = source.history.len(), skip_steps,
            "replaying the task");
        let request = ReplayRequest {
            spec,
            source,
            options: ReplayOptions {
                skip_failures: replay.options.skip_failures,
                max_retries: replay.options.max_retries,
                retry_delay: Duration::from_millis(replay.options.retry_delay_ms),
            },
            workspace_dir: Some(workspace_dir),
            sink,
            control,
            skip_steps,
            first_step,
            resume_url,
            live_view,
            skill,
        };
        let runner = self.runner.clone();
        Box::pin(async move {
            let mut outcome = runner.run_replay(request).await?.run;
            // A failure an earlier attempt persisted (with skip_failures) still counts.
            if let (Some(error), RunEnd::Done { .. }) = (earlier_failure, &outcome.end) {
                outcome.end = RunEnd::NotDone(error);
            }
            Ok(outcome)
        })
    }

    /// The agent's run of the task.
    fn agent_run(
        &self,
        id: TaskId,
        parts: RunParts,
        take_over: Option<crate::takeover::TakeOverLink>,
        profile: Option<crate::ProfileLink>,
    ) -> RunFuture<'_> {
        let RunParts {
            spec,
            workspace_dir,
            sink,
            control,
            prior,
            resume_url,
            live_view,
            skill,
        } = parts;
        Box::pin(
            self.runner.run(RunRequest {
                human: crate::StoreHuman::new(
                    self.store.clone(),
                    self.hub.clone(),
                    id,
                    self.config.id.clone(),
                )
                .settings(&self.config.ask_human, &spec.options),
                spec,
                workspace_dir: Some(workspace_dir),
                sink,
                control,
                prior,
                resume_url,
                live_view,
                take_over,
                profile,
                skill,
            }),
        )
    }

    /// Runs the task to its end; on shutdown, lets the running step finish (bounded by the
    /// grace period) and answers `None`: the task is to be handed back.
    async fn drive(
        &self,
        run: &mut RunFuture<'_>,
        started: &Started,
        shutdown: &CancellationToken,
    ) -> Option<Result<RunOutcome, RunError>> {
        let result = tokio::select! {
            result = &mut *run => Some(result),
            () = shutdown.cancelled() => None,
        };
        if result.is_some() {
            return result;
        }
        started.draining.store(true, Ordering::SeqCst);
        started.control.pause();
        tokio::select! {
            result = &mut *run => Some(result),
            () = started.sink.wait_for_pause_point() => None,
            () = tokio::time::sleep(self.config.shutdown_grace) => None,
        }
    }

    /// Gives the task back to the queue (this worker is shutting down).
    async fn hand_back(&self, id: TaskId) {
        match self
            .store
            .release_task(id, &self.config.id, "worker shut down")
            .await
        {
            Ok(Some(status)) => tracing::info!(%status, "handed the task back"),
            Ok(None) => tracing::info!("the task was no longer ours to hand back"),
            Err(err) => {
                tracing::warn!(%err, "handing the task back failed; its lease will expire")
            }
        }
    }
}

/// Removes a task's workspace once this worker is done with the task — ended, handed back or
/// given up: its files may hold secret values the agent filled in, and a run that resumes the
/// task starts from what is stored, not from this disk.
pub(super) async fn remove_workspace(dir: PathBuf) {
    let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    })
    .await;
    if let Ok(Err(err)) = removed {
        tracing::warn!(%err, "could not remove the task's workspace");
    }
}

/// The first action an earlier attempt of a replay persisted as failed (it went on with
/// `skip_failures`), as the task's error.
fn earlier_replay_failure(prior: &AgentHistoryList) -> Option<String> {
    prior.history.iter().find_map(|item| {
        item.result.iter().find_map(|result| {
            let entry = result.metadata.as_ref()?.get("replay")?;
            (entry.get("outcome")?.as_str()? == "failed").then(|| {
                format!(
                    "replaying step {} `{}`: {}",
                    entry
                        .get("step")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0),
                    entry
                        .get("action")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("?"),
                    entry
                        .get("detail")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("failed"),
                )
            })
        })
    })
}
