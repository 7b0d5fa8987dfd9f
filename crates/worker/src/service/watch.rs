//! The control watcher of a running task: its lease's heartbeat and the status changes it
//! applies.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use browserd_agent::AgentControl;
use browserd_store::{EventHub, Signal, Store};
use browserd_types::{TaskId, TaskStatus};

use super::WorkerConfig;
use crate::sink::StoreSink;

/// What the control watcher acts on.
pub(super) struct WatchedRun {
    pub(super) control: AgentControl,
    pub(super) sink: Arc<StoreSink>,
    /// The worker is shutting down: the agent stays paused.
    pub(super) draining: Arc<AtomicBool>,
    /// How far the take-over follower has read (a resume waits for it).
    pub(super) take_over: Option<crate::takeover::TakeOverProgress>,
}

/// Keeps the lease alive and applies control signals: a status change (seen through the
/// hub at once, or through the heartbeat's answer) pauses, resumes or stops the agent; a lost
/// lease or a deleted task abandons it.
pub(super) async fn watch_task(
    store: Store,
    hub: EventHub,
    id: TaskId,
    config: Arc<WorkerConfig>,
    run: WatchedRun,
) {
    let WatchedRun {
        control,
        sink,
        draining,
        take_over,
    } = run;
    let apply = async |status: TaskStatus, last_event_seq: Option<i64>| {
        // While draining the agent stays paused whatever the status says.
        if draining.load(Ordering::SeqCst) && status == TaskStatus::Running {
            return;
        }
        // A resume: the inputs a person sent while the task was paused go first.
        if status == TaskStatus::Running
            && control.is_paused()
            && let Some(progress) = &take_over
        {
            let seq = match last_event_seq {
                Some(seq) => Some(seq),
                None => store
                    .get_task(None, id)
                    .await
                    .ok()
                    .flatten()
                    .map(|task| task.last_event_seq),
            };
            if let Some(seq) = seq {
                progress.reached(seq, crate::takeover::CATCH_UP_CAP).await;
            }
        }
        apply_status(status, &control);
    };
    let mut subscription = Some(hub.subscribe(id));
    let mut heartbeat = tokio::time::interval((config.lease / 3).max(Duration::from_millis(200)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let signal = async {
            match subscription.as_mut() {
                Some(subscription) => subscription.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            signal = signal => match signal {
                None => subscription = None,
                Some(Signal::Deleted) => {
                    sink.abandon("the task was deleted".to_owned());
                    return;
                }
                Some(signal @ (Signal::Appended { .. } | Signal::Resync)) => {
                    // The task's own progress events (most of them) change nothing here.
                    if !signal.may_change_status() {
                        continue;
                    }
                    match store.get_task(None, id).await {
                        Ok(Some(task)) if task.lease_owner.as_deref() == Some(config.id.as_str()) => {
                            apply(task.status, Some(task.last_event_seq)).await;
                        }
                        Ok(Some(task)) if task.status.is_terminal() => control.stop(),
                        Ok(_) => {
                            sink.abandon("the lease was taken away".to_owned());
                            return;
                        }
                        Err(err) => tracing::debug!(%err, "reading the task's status failed"),
                    }
                }
            },
            _ = heartbeat.tick() => match store.renew_lease(id, &config.id, config.lease).await {
                Ok(Some(status)) => apply(status, None).await,
                Ok(None) => {
                    match store.get_task(None, id).await {
                        Ok(Some(task)) if task.status.is_terminal() => control.stop(),
                        _ => sink.abandon("the lease expired or was taken over".to_owned()),
                    }
                    return;
                }
                Err(err) => tracing::warn!(%err, "renewing the lease failed"),
            },
        }
    }
}

fn apply_status(status: TaskStatus, control: &AgentControl) {
    match status {
        TaskStatus::Running => control.resume(),
        TaskStatus::Paused => control.pause(),
        TaskStatus::Finished | TaskStatus::Failed | TaskStatus::Stopped => control.stop(),
        // The agent waits in `ask_human`; the answer (`running`) resumes it.
        TaskStatus::Queued | TaskStatus::Waiting => {}
    }
}
