//! [`LocalWorker`]: the worker's cycle in this process over any [`TaskStore`] — claim a queued
//! task, run it with the [`TaskRunner`] and a [`StoreSink`], apply pause / resume / stop as its
//! status events arrive, end it with the status machine's terminal transition. `browserd mcp`
//! runs it over a [`browserd_store::MemoryStore`] (no database). What the service's
//! [`Worker`](crate::Worker) adds for many processes — leases that expire, heartbeats, the
//! reaper, hand-back on shutdown, sessions, replays, output files, the live view — is not
//! needed by one process that owns its store, and is left out.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browserd_agent::{AgentControl, UsageSummary};
use browserd_store::{
    ClaimedTask, EventFeed, EventHub, FeedItem, StoreError, TaskStore, TransitionDetails,
};
use browserd_types::{EventBody, TaskId, Transition};
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::runner::{AbortOnDrop, RunRequest, TaskRunner, failed};
use crate::service::{apply_status, task_spec};
use crate::sink::StoreSink;

/// The lease owner of the tasks this process claims.
const OWNER: &str = "in-process";
/// The claim's lease. Nothing reaps an in-process store, so it only has to be set.
const LEASE: Duration = Duration::from_secs(3600);
/// How long the runs stopped at shutdown may take to end.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// Runs a store's queued tasks in this process, `concurrency` at a time.
pub struct LocalWorker {
    store: Arc<dyn TaskStore>,
    hub: EventHub,
    runner: Arc<TaskRunner>,
    concurrency: usize,
    ask_human: crate::AskHumanSettings,
}

impl LocalWorker {
    /// `hub` is the hub `store`'s appends signal (its queue wake-ups and task events).
    pub fn new(
        store: Arc<dyn TaskStore>,
        hub: EventHub,
        runner: Arc<TaskRunner>,
        concurrency: usize,
    ) -> Self {
        Self {
            store,
            hub,
            runner,
            concurrency: concurrency.max(1),
            ask_human: crate::AskHumanSettings::default(),
        }
    }

    /// Whether the agent may ask the client (`ask_human`, answered with the MCP
    /// `answer_task` tool) and how long it waits at most (default: on, 30 minutes).
    #[must_use]
    pub fn with_ask_human(mut self, settings: crate::AskHumanSettings) -> Self {
        self.ask_human = settings;
        self
    }

    /// Claims and runs queued tasks until `shutdown`; then stops every task still running
    /// (a `stop` transition, which its run follows) and waits for the runs to end.
    pub async fn run(self, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let tracker = TaskTracker::new();
        let running: Arc<Mutex<HashSet<TaskId>>> = Arc::default();
        loop {
            let permit = tokio::select! {
                () = shutdown.cancelled() => break,
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            let claimed = match self.store.claim_task(OWNER, LEASE).await {
                Ok(claimed) => claimed,
                Err(err) => {
                    tracing::warn!(%err, "claiming a task failed");
                    None
                }
            };
            let Some(claimed) = claimed else {
                drop(permit);
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = self.hub.queue_wakeup() => continue,
                }
            };
            let id = claimed.record.id;
            running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id);
            let run = run_task(
                self.store.clone(),
                self.hub.clone(),
                self.runner.clone(),
                claimed,
                self.ask_human,
            );
            let running = running.clone();
            tracker.spawn(
                async move {
                    run.await;
                    running
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&id);
                    drop(permit);
                }
                .instrument(tracing::info_span!("task", mode = "in-process", task_id = %id)),
            );
        }
        let still_running: Vec<TaskId> = running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect();
        for id in still_running {
            let stopped = self
                .store
                .transition_task(None, id, Transition::Stop, TransitionDetails::default())
                .await;
            match stopped {
                Ok(_) => tracing::info!(task_id = %id, "task stopped: the client went away"),
                Err(StoreError::IllegalTransition { .. }) => {}
                Err(err) => tracing::warn!(task_id = %id, %err, "stopping the task failed"),
            }
        }
        tracker.close();
        if tokio::time::timeout(STOP_GRACE, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("tasks still running after the stop; leaving them");
        }
    }
}

/// One claimed task, from its spec to its terminal transition.
async fn run_task(
    store: Arc<dyn TaskStore>,
    hub: EventHub,
    runner: Arc<TaskRunner>,
    claimed: ClaimedTask,
    ask_human: crate::AskHumanSettings,
) {
    let ClaimedTask {
        record, secrets, ..
    } = claimed;
    let id = record.id;
    let spec = task_spec(&record, &secrets, OffsetDateTime::now_utc());
    drop(secrets);
    // A model that is configured but cannot be built (its key missing) fails the task.
    if let Err(err) = runner.model(spec.options.model.as_deref()) {
        end(&*store, id, Transition::Fail, failed(err.to_string())).await;
        return;
    }
    let control = AgentControl::new();
    let sink = Arc::new(StoreSink::new(
        store.clone(),
        id,
        OWNER.to_owned(),
        control.clone(),
        UsageSummary::default(),
    ));
    // Control arrives as status events after the claim's.
    let feed = EventFeed::follow(store.clone(), &hub, id, record.last_event_seq);
    let follower = AbortOnDrop(tokio::spawn(
        follow_status(feed, control.clone(), sink.clone()).in_current_span(),
    ));
    let human = crate::StoreHuman::new(store.clone(), hub.clone(), id, OWNER.to_owned())
        .settings(&ask_human, &spec.options);
    let result = runner
        .run(RunRequest {
            human,
            spec,
            workspace_dir: None,
            sink: sink.clone(),
            control,
            prior: None,
            resume_url: None,
            live_view: None,
            take_over: None,
            // The api refuses `profile_id` on a store without profiles.
            profile: None,
        })
        .await;
    drop(follower);
    if let Some(reason) = sink.abandoned() {
        // Stopped from outside (the stop ended the lease): the status says how it ended.
        tracing::debug!(%reason, "task ended elsewhere");
        return;
    }
    let (transition, details) = match &result {
        Ok(outcome) => outcome.end_transition(),
        Err(err) => (Transition::Fail, failed(err.to_string())),
    };
    end(&*store, id, transition, details).await;
}

/// Applies the task's status events to its agent: paused, running again, ended.
async fn follow_status(mut feed: EventFeed, control: AgentControl, sink: Arc<StoreSink>) {
    loop {
        match feed.next().await {
            Ok(FeedItem::Event(event)) => {
                if let Some(EventBody::Status(status)) = event.body() {
                    apply_status(status.status, &control);
                }
            }
            Ok(FeedItem::Resync) => {}
            Ok(FeedItem::Deleted) => {
                sink.abandon("the task was deleted".to_owned());
                return;
            }
            Ok(FeedItem::Closed) => return,
            Err(err) => {
                tracing::warn!(%err, "following the task's status failed");
                return;
            }
        }
    }
}

/// The run's terminal transition (refused quietly when the task already ended).
async fn end(
    store: &dyn TaskStore,
    id: TaskId,
    transition: Transition,
    details: TransitionDetails,
) {
    match store
        .transition_claimed_task(OWNER, id, transition, details)
        .await
    {
        Ok(task) => tracing::info!(status = %task.status, "task ended"),
        Err(StoreError::IllegalTransition { current, .. }) => {
            tracing::info!(%current, "task already ended");
        }
        Err(StoreError::LeaseLost(_)) => tracing::info!("task already ended"),
        Err(err) => tracing::warn!(%err, "could not record the end of the task"),
    }
}
