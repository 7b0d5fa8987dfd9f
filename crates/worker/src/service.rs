//! The worker role: claim queued tasks from Postgres, run each with the [`TaskRunner`] and a
//! [`StoreSink`], hold the lease with a heartbeat, apply stop/pause/resume as they arrive, reap
//! leases of workers that died, and hand tasks back on shutdown.
//!
//! Postgres is the only coordinator: claims use `FOR UPDATE SKIP LOCKED` in creation order; a
//! `task_queue` notification (or the polling fallback) wakes the claim loop; control signals
//! are status changes, seen through the process's [`EventHub`] within milliseconds and through
//! the heartbeat's answer at the latest.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use browserd_agent::{
    AgentControl, AgentHistory, AgentHistoryList, SecretEntry, SensitiveData, UsageSummary,
};
use browserd_browser::LiveViewSettings;
use browserd_store::{
    ClaimedTask, EventHub, SessionState, Signal, Store, StoreError, TaskRecord, TaskReplay,
    TaskSession, TransitionDetails,
};
use browserd_types::{TaskId, TaskSecret, TaskSecrets, TaskStatus, Transition};
use secrecy::ExposeSecret;
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::BrowserState;
use crate::runner::{
    AbortOnDrop, ReplayRequest, RunEnd, RunError, RunOutcome, RunRequest, TaskRunner, TaskSpec,
    failed,
};
use crate::sink::StoreSink;
use browserd_agent::replay::ReplayOptions;

/// Operator settings of a worker process.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// This worker's name in `tasks.lease_owner` (unique per process).
    pub id: String,
    /// Tasks run at once (also bounded by the browser pool's capacity).
    pub concurrency: usize,
    /// Lease duration; the heartbeat renews it every third of it.
    pub lease: Duration,
    /// Claim attempts when no notification arrives (the LISTEN fallback).
    pub poll_interval: Duration,
    /// Claims per task before a lost worker makes it fail.
    pub max_attempts: i32,
    /// On shutdown, how long running steps may take before their tasks are handed back.
    pub shutdown_grace: Duration,
    /// Queued or paused tasks holding secrets longer than this fail and lose their secrets.
    pub secrets_retention: Duration,
    /// A task paused for longer than this is stopped (its browser released); `None`: no
    /// limit. Enforced by every worker's maintenance loop from Postgres time (`paused_at`),
    /// so also when the worker that held the task died.
    pub max_pause: Option<Duration>,
    /// Each task's workspace is `<root>/<task id>`.
    pub workspace_root: PathBuf,
    /// The live view's screencast settings; `None` switches the live view off.
    pub live_view: Option<LiveViewSettings>,
    /// A new task is claimed only while the machine (or cgroup) has this headroom.
    pub admission: crate::admission::AdmissionLimits,
    /// Whether the agent may ask a person (`ask_human`) and how long it waits at most.
    pub ask_human: crate::AskHumanSettings,
}

impl WorkerConfig {
    /// A unique worker id: host name, process id and a random suffix.
    pub fn unique_id() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "worker".to_owned());
        let suffix: u32 = rand_u32();
        format!("{host}:{}:{suffix:08x}", std::process::id())
    }
}

fn rand_u32() -> u32 {
    let id = uuid::Uuid::new_v4();
    let bytes = id.as_bytes();
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Makes a task's span (not entered yet) a child of the W3C `traceparent` stored with the task
/// (the request that created it). The binary implements it with OpenTelemetry.
pub type TraceParent = Arc<dyn Fn(&tracing::Span, &str) + Send + Sync>;

/// A worker process's claim loop and its running tasks.
pub struct Worker {
    store: Store,
    hub: EventHub,
    runner: Arc<TaskRunner>,
    config: Arc<WorkerConfig>,
    trace_parent: Option<TraceParent>,
}

impl Worker {
    pub fn new(store: Store, hub: EventHub, runner: Arc<TaskRunner>, config: WorkerConfig) -> Self {
        Self {
            store,
            hub,
            runner,
            config: Arc::new(config),
            trace_parent: None,
        }
    }

    /// Joins each task's spans to the trace of the request that created it.
    #[must_use]
    pub fn with_trace_parent(mut self, trace_parent: TraceParent) -> Self {
        self.trace_parent = Some(trace_parent);
        self
    }

    /// Claims and runs tasks until `shutdown` is cancelled; then stops claiming, lets running
    /// steps finish (bounded by the grace period), hands their tasks back and returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let config = self.config.clone();
        tracing::info!(worker = %config.id, concurrency = config.concurrency, "worker started");
        // The slots the fair share of a key is counted from: registered before the first claim.
        if let Err(err) = self
            .store
            .register_worker_slots(&config.id, config.concurrency, slots_ttl(&config))
            .await
        {
            tracing::warn!(%err, "registering the worker's slots failed");
        }
        let tracker = TaskTracker::new();
        tracker.spawn(maintain(
            self.store.clone(),
            config.clone(),
            shutdown.clone(),
        ));
        let capacity = config.concurrency.max(1);
        let slots = Arc::new(Semaphore::new(capacity));
        let gauges = crate::admission::Gauges::default();
        let mut blocked: Option<&'static str> = None;
        loop {
            let permit = tokio::select! {
                () = shutdown.cancelled() => break,
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            // Tasks running now: the permits held besides this one.
            let running = capacity - slots.available_permits() - 1;
            let refusal = config.admission.refusal(&gauges.headroom(), running);
            let reason = refusal.map(|refusal| refusal.reason());
            if reason != blocked {
                for label in ["memory", "cpu"] {
                    let on = if reason == Some(label) { 1.0 } else { 0.0 };
                    metrics::gauge!("browserd_worker_admission_blocked", "reason" => label).set(on);
                }
                match &refusal {
                    Some(refusal) => tracing::warn!(%refusal, running, "not claiming tasks"),
                    None => tracing::info!("claiming tasks again"),
                }
                blocked = reason;
            }
            if refusal.is_some() {
                drop(permit);
                // No event says memory was freed: look again shortly (or when a task ends).
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(crate::admission::RECHECK) => {}
                }
                continue;
            }
            match self.store.claim_task(&config.id, config.lease).await {
                Ok(Some(claimed)) => {
                    let id = claimed.record.id;
                    let attempt = claimed.record.attempts;
                    tracing::info!(task_id = %id, attempt, "claimed task");
                    let job = TaskJob {
                        store: self.store.clone(),
                        hub: self.hub.clone(),
                        runner: self.runner.clone(),
                        config: config.clone(),
                    };
                    let shutdown = shutdown.clone();
                    let span = crate::telemetry::task_span(
                        id,
                        attempt,
                        claimed.record.options.model.as_deref(),
                    );
                    let store = self.store.clone();
                    let trace_parent = self.trace_parent.clone();
                    metrics::counter!("browserd_tasks_claimed_total").increment(1);
                    tracker.spawn(async move {
                        if let Some(set_parent) = trace_parent {
                            match store.trace_context(id).await {
                                Ok(Some(context)) => set_parent(&span, &context),
                                Ok(None) => {}
                                Err(err) => {
                                    tracing::debug!(task_id = %id, %err, "reading the trace context failed")
                                }
                            }
                        }
                        let running = crate::telemetry::RunningTask::start();
                        job.run(claimed, shutdown).instrument(span).await;
                        drop(running);
                        drop(permit);
                    });
                }
                Ok(None) => {
                    drop(permit);
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = self.hub.queue_wakeup() => {}
                        () = tokio::time::sleep(config.poll_interval) => {}
                    }
                }
                Err(err) => {
                    drop(permit);
                    tracing::warn!(%err, "claiming a task failed");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(config.poll_interval) => {}
                    }
                }
            }
        }
        if let Err(err) = self.store.remove_worker_slots(&config.id).await {
            tracing::debug!(%err, "removing the worker's slots failed (they expire)");
        }
        tracker.close();
        let cap = config.shutdown_grace + Duration::from_secs(10);
        if tokio::time::timeout(cap, tracker.wait()).await.is_err() {
            tracing::warn!("tasks still running after the shutdown grace period");
        }
        tracing::info!(worker = %config.id, "worker stopped");
    }
}

/// How often the maintenance loop runs: every half lease.
fn maintenance_period(config: &WorkerConfig) -> Duration {
    (config.lease / 2).max(Duration::from_millis(500))
}

/// How long a worker's registered slots count without a refresh: a lease (two maintenance
/// rounds), like its tasks.
fn slots_ttl(config: &WorkerConfig) -> Duration {
    config.lease.max(2 * maintenance_period(config))
}

/// Reaps expired leases, expires stale secrets, stops overlong pauses and refreshes this
/// worker's slots, on every worker (SKIP LOCKED makes that safe), every half lease.
async fn maintain(store: Store, config: Arc<WorkerConfig>, shutdown: CancellationToken) {
    let period = maintenance_period(&config);
    loop {
        if let Err(err) = store
            .register_worker_slots(&config.id, config.concurrency, slots_ttl(&config))
            .await
        {
            tracing::warn!(%err, "refreshing the worker's slots failed");
        }
        if let Some(max_pause) = config.max_pause {
            match store.stop_overlong_pauses(max_pause).await {
                Ok(ids) => {
                    for id in ids {
                        tracing::warn!(task_id = %id, max_pause_s = max_pause.as_secs(),
                            "task stopped: paused longer than the maximum pause time");
                    }
                }
                Err(err) => tracing::warn!(%err, "stopping overlong pauses failed"),
            }
        }
        match store.reap_expired_leases(config.max_attempts).await {
            Ok(reaped) => {
                for task in reaped {
                    tracing::warn!(task_id = %task.id, status = %task.status, attempts = task.attempts,
                        "reaped an expired lease");
                }
            }
            Err(err) => tracing::warn!(%err, "reaping expired leases failed"),
        }
        match store.expire_stale_secrets(config.secrets_retention).await {
            Ok(ids) => {
                for id in ids {
                    tracing::warn!(task_id = %id, "task failed: secrets retention elapsed");
                }
            }
            Err(err) => tracing::warn!(%err, "expiring stale secrets failed"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

/// The runner's view of a task row: its options as stored, its secrets, and what is left of
/// its wall-clock budget (counted from the first start, paused time included). Secrets the api
/// stored unbound (sealed before secrets could be bound to domains) are bound to the task's
/// `allowed_domains` here, as the api binds them now.
pub fn task_spec(record: &TaskRecord, secrets: &TaskSecrets, now: OffsetDateTime) -> TaskSpec {
    let mut spec = TaskSpec::with_options(record.task.clone(), record.options.clone());
    spec.timeout = record.options.timeout_s.map(|secs| {
        let started = record.started_at.unwrap_or(now);
        let left = started + time::Duration::seconds(i64::from(secs)) - now;
        Duration::try_from(left).unwrap_or(Duration::ZERO)
    });
    spec.secrets = sensitive_data(
        secrets
            .clone()
            .bind_unbound_to(&record.options.allowed_domains),
    );
    spec
}

/// The agent's form of a task's secrets.
pub fn sensitive_data(secrets: TaskSecrets) -> SensitiveData {
    SensitiveData(
        secrets
            .0
            .into_iter()
            .map(|(key, entry)| {
                let entry = match entry {
                    TaskSecret::Value(value) => {
                        SecretEntry::Value(value.expose_secret().to_owned())
                    }
                    TaskSecret::Bound(map) => SecretEntry::Scoped(
                        map.into_iter()
                            .map(|(name, value)| (name, value.expose_secret().to_owned()))
                            .collect(),
                    ),
                };
                (key, entry)
            })
            .collect(),
    )
}

/// What an `/api/v2` session and its task's v2 options add to the spec: the saved cookies
/// and tabs, the session's start URL for its first task, flash mode, thinking, vision `auto`
/// and the system prompt extension.
fn apply_session(spec: &mut TaskSpec, session: &TaskSession) {
    let state = &session.state;
    spec.browser_state = Some(BrowserState {
        cookies: state.cookies.as_array().cloned().unwrap_or_default(),
        tabs: state.tabs.clone(),
        focused: usize::try_from(state.focused_tab).unwrap_or(0),
    });
    spec.save_browser_state = true;
    if spec.options.start_url.is_none() && session.first_task {
        spec.options.start_url = session.start_url.clone();
    }
    let Some(options) = &session.options else {
        return;
    };
    let flag = |key: &str| options.get(key).and_then(serde_json::Value::as_bool);
    spec.flash_mode = flag("flashMode").unwrap_or(false);
    spec.use_thinking = flag("thinking");
    spec.vision_auto = flag("visionAuto") == Some(true);
    spec.extend_system_message = options
        .get("systemPromptExtension")
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
}

/// One claimed task on this worker.
struct TaskJob {
    store: Store,
    hub: EventHub,
    runner: Arc<TaskRunner>,
    config: Arc<WorkerConfig>,
}

/// Why a claimed task does not run here: it fails at once (its secrets cannot be opened, its
/// model is unknown, its budget is spent, its replay source is gone), or it goes back to the
/// queue (what it needs could not be read now; another attempt may succeed).
enum NotRun {
    Fail(String),
    HandBack(&'static str),
}

/// What a claimed task runs with, all read before anything starts.
struct Prepared {
    spec: TaskSpec,
    /// A replay task's settings and the recorded history it replays.
    replay: Option<(TaskReplay, AgentHistoryList)>,
    /// The `/api/v2` session the task runs in.
    session: Option<TaskSession>,
    /// The history an earlier attempt persisted (a resumed run).
    prior: Option<AgentHistoryList>,
    /// Where the earlier attempt was.
    resume_url: Option<String>,
    /// The task's browser profile, read now (its latest saved state).
    profile: Option<crate::ProfileLink>,
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
}

/// What [`TaskJob::finish`] needs of a run that ended.
struct Finished {
    sink: Arc<StoreSink>,
    workspace_dir: std::path::PathBuf,
    output_secrets: browserd_agent::secrets::Secrets,
    session: Option<TaskSession>,
    attempt: i32,
}

type RunFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<RunOutcome, RunError>> + Send + 'a>>;

impl TaskJob {
    /// One claimed task, in phases: prepare (read what it needs), start (sink, watcher, live
    /// view, the run), drive (until it ends, or drain on shutdown), then hand it back or
    /// finish it.
    async fn run(self, claimed: ClaimedTask, shutdown: CancellationToken) {
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
        };
        self.finish(id, result, finished).await;
    }

    /// Reads everything the task needs before it starts, or says why it does not run.
    async fn prepare(&self, claimed: ClaimedTask) -> Result<Prepared, NotRun> {
        let ClaimedTask {
            record,
            secrets,
            secrets_error,
        } = claimed;
        let id = record.id;
        if let Some(error) = secrets_error {
            return Err(NotRun::Fail(error));
        }
        let replay = self.store.task_replay(id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's replay settings");
            NotRun::HandBack("replay settings unreadable")
        })?;
        // A replay makes no model call: it needs no model.
        if replay.is_none() {
            let model = self
                .runner
                .model(record.options.model.as_deref())
                .map_err(|err| NotRun::Fail(err.to_string()))?;
            tracing::Span::current().record("model", model.name());
        }
        let replay = match replay {
            Some(replay) => match self.replay_source(replay.source).await {
                Ok(Ok(source)) => Some((replay, source)),
                Ok(Err(error)) => return Err(NotRun::Fail(error)),
                Err(err) => {
                    tracing::warn!(%err, "could not read the replayed task's history");
                    return Err(NotRun::HandBack("replay source unreadable"));
                }
            },
            None => None,
        };
        let mut spec = task_spec(&record, &secrets, OffsetDateTime::now_utc());
        drop(secrets);
        let session = self.store.task_session(id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's session");
            NotRun::HandBack("session unreadable")
        })?;
        if let Some(session) = &session {
            apply_session(&mut spec, session);
        }
        // Secret answers an earlier attempt was given: their placeholders fill again.
        let answers = self.store.secret_answers(id).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's secret answers");
            NotRun::HandBack("secret answers unreadable")
        })?;
        for answer in answers {
            spec.secrets.0.insert(
                browserd_agent::human::answer_secret_name(&answer.question_id),
                SecretEntry::Value(answer.text.expose_secret().to_owned()),
            );
        }
        if spec.timeout.is_some_and(|t| t.is_zero()) {
            return Err(NotRun::Fail(format!(
                "timeout_s: the task ran out of its wall-clock budget ({} s) before it could resume",
                record.options.timeout_s.unwrap_or_default()
            )));
        }
        let prior = self.prior_history(&record).await.map_err(|err| {
            tracing::warn!(%err, "could not read the task's history");
            NotRun::HandBack("history unreadable")
        })?;
        // Where the lost attempt was: the URL of its latest step start, else where its last
        // stored step began (a run lost right after its initial navigation).
        let resume_url = prior.as_ref().and_then(|prior| {
            record.last_url.clone().or_else(|| {
                prior
                    .history
                    .last()
                    .map(|h| h.state.url.clone())
                    .filter(|u| !u.is_empty())
            })
        });
        if let Some(prior) = &prior {
            tracing::info!(steps = prior.history.len(), url = ?resume_url, "resuming the task");
        }
        let profile = match spec.options.profile_id {
            // A replay runs without one (it repeats recorded actions).
            Some(profile_id) if replay.is_none() => {
                match crate::profile::load_store_profile(&self.store, record.api_key_id, profile_id)
                    .await
                {
                    Ok(Some(link)) => Some(link),
                    Ok(None) => {
                        return Err(NotRun::Fail(format!(
                            "profile_id: the task's profile {profile_id} was deleted"
                        )));
                    }
                    Err(err @ (StoreError::Seal(_) | StoreError::NoSecretsKey)) => {
                        return Err(NotRun::Fail(format!(
                            "profile_id: the task's profile cannot be opened: {err}"
                        )));
                    }
                    Err(err) => {
                        tracing::warn!(%err, "could not read the task's profile");
                        return Err(NotRun::HandBack("profile unreadable"));
                    }
                }
            }
            _ => None,
        };
        Ok(Prepared {
            spec,
            replay,
            session,
            prior,
            resume_url,
            profile,
        })
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
        } = prepared;
        let control = AgentControl::new();
        let draining = Arc::new(AtomicBool::new(false));
        let sink = Arc::new(
            StoreSink::new(
                Arc::new(self.store.clone()),
                id,
                self.config.id.clone(),
                control.clone(),
                prior.as_ref().map(|p| p.usage.clone()).unwrap_or_default(),
            )
            .with_retry_budget(self.config.lease),
        );
        // Take-over rides on the live view: a person drives what they watch. Replays have none.
        let (take_over, take_over_progress, take_over_follower) =
            match (&self.config.live_view, &replay) {
                (Some(_), None) => {
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
            };
        let watcher = AbortOnDrop(tokio::spawn(
            watch_task(
                self.store.clone(),
                self.hub.clone(),
                id,
                self.config.clone(),
                WatchedRun {
                    control: control.clone(),
                    sink: sink.clone(),
                    draining: draining.clone(),
                    take_over: take_over_progress,
                },
            )
            .in_current_span(),
        ));
        let workspace_dir = self.config.workspace_root.join(id.to_string());
        // Output files are redacted with the task's secrets when the task ends.
        let output_secrets = browserd_agent::secrets::Secrets::new(&spec.secrets);
        let (live_view, live_follower) = match self.config.live_view {
            Some(settings) => {
                let (link, follow) =
                    crate::live::link(self.store.clone(), self.hub.clone(), id, settings);
                (
                    Some(link),
                    Some(AbortOnDrop(tokio::spawn(follow.in_current_span()))),
                )
            }
            None => (None, None),
        };
        let run: RunFuture<'_> = match replay {
            Some((replay, source)) => {
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
                    workspace_dir: Some(workspace_dir.clone()),
                    sink: sink.clone(),
                    control: control.clone(),
                    skip_steps,
                    first_step,
                    resume_url,
                    live_view,
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
            None => Box::pin(
                self.runner.run(RunRequest {
                    human: crate::StoreHuman::new(
                        Arc::new(self.store.clone()),
                        self.hub.clone(),
                        id,
                        self.config.id.clone(),
                    )
                    .settings(&self.config.ask_human, &spec.options),
                    spec,
                    workspace_dir: Some(workspace_dir.clone()),
                    sink: sink.clone(),
                    control: control.clone(),
                    prior,
                    resume_url,
                    live_view,
                    take_over,
                    profile,
                }),
            ),
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
        };
        (started, run)
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

    /// What a run's end means for its task: given up (abandoned), another attempt (no
    /// browser), or its final status with its output files and session state stored first.
    async fn finish(&self, id: TaskId, result: Result<RunOutcome, RunError>, run: Finished) {
        let Finished {
            sink,
            workspace_dir,
            output_secrets,
            session,
            attempt,
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
                self.end_with(id, outcome).await;
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
    async fn end_with(&self, id: TaskId, outcome: RunOutcome) {
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

    /// The persisted steps of an earlier attempt, when there are any.
    async fn prior_history(
        &self,
        record: &TaskRecord,
    ) -> Result<Option<AgentHistoryList>, StoreError> {
        if record.attempts <= 1 {
            return Ok(None);
        }
        let records = self.store.step_records(record.id).await?;
        if records.is_empty() {
            return Ok(None);
        }
        let history = records
            .into_iter()
            .map(serde_json::from_value::<AgentHistory>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| StoreError::Corrupt(format!("step record: {err}")))?;
        let usage = record
            .usage
            .clone()
            .and_then(|u| serde_json::from_value::<UsageSummary>(u).ok())
            .unwrap_or_default();
        Ok(Some(AgentHistoryList { history, usage }))
    }

    /// The recorded history a replay re-runs (the source's persisted steps), or why there is
    /// none to replay.
    async fn replay_source(
        &self,
        source: TaskId,
    ) -> Result<Result<AgentHistoryList, String>, StoreError> {
        let Some(task) = self.store.get_task(None, source).await? else {
            return Ok(Err(format!(
                "replay_of: task {source} was deleted before the replay ran"
            )));
        };
        let records = self.store.step_records(source).await?;
        let history = records
            .into_iter()
            .map(serde_json::from_value::<AgentHistory>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| StoreError::Corrupt(format!("step record: {err}")))?;
        if !history.iter().any(|h| h.model_output.is_some()) {
            return Ok(Err(format!(
                "replay_of: task {source} recorded no steps with actions to replay"
            )));
        }
        let usage = task
            .usage
            .and_then(|u| serde_json::from_value::<UsageSummary>(u).ok())
            .unwrap_or_default();
        Ok(Ok(AgentHistoryList { history, usage }))
    }

    /// Moves the task to its final status (only while this worker holds the lease).
    async fn end(&self, id: TaskId, transition: Transition, details: TransitionDetails) {
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

/// Removes a task's workspace once this worker is done with the task — ended, handed back or
/// given up: its files may hold secret values the agent filled in, and a run that resumes the
/// task starts from what is stored, not from this disk.
async fn remove_workspace(dir: PathBuf) {
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

/// What the control watcher acts on.
struct WatchedRun {
    control: AgentControl,
    sink: Arc<StoreSink>,
    /// The worker is shutting down: the agent stays paused.
    draining: Arc<AtomicBool>,
    /// How far the take-over follower has read (a resume waits for it).
    take_over: Option<crate::takeover::TakeOverProgress>,
}

/// Keeps the lease alive and applies control signals: a status change (seen through the
/// hub at once, or through the heartbeat's answer) pauses, resumes or stops the agent; a lost
/// lease or a deleted task abandons it.
async fn watch_task(
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

pub(crate) fn apply_status(status: TaskStatus, control: &AgentControl) {
    match status {
        TaskStatus::Running => control.resume(),
        TaskStatus::Paused => control.pause(),
        TaskStatus::Finished | TaskStatus::Failed | TaskStatus::Stopped => control.stop(),
        // The agent waits in `ask_human`; the answer (`running`) resumes it.
        TaskStatus::Queued | TaskStatus::Waiting => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use browserd_browser::Viewport;
    use browserd_types::{ApiKeyId, TaskId, TaskOptions};
    use secrecy::SecretString;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_task_row_reaches_the_runner_with_its_budget_left() {
        let now = OffsetDateTime::now_utc();
        let options = TaskOptions::every_option_set();
        let record = TaskRecord {
            id: TaskId::new(),
            api_key_id: ApiKeyId(uuid::Uuid::now_v7()),
            status: TaskStatus::Running,
            task: "buy a monitor".into(),
            options: options.clone(),
            output: None,
            is_success: None,
            error: None,
            lease_owner: Some("w".into()),
            lease_expires_at: None,
            attempts: 2,
            last_event_seq: 9,
            created_at: now,
            updated_at: now,
            started_at: Some(now - time::Duration::seconds(100)),
            finished_at: None,
            usage: None,
            last_url: None,
        };
        // Sealed unbound (before secrets could be bound): bound to the task's allowed_domains.
        let secrets = TaskSecrets::unbound([("pw".to_owned(), SecretString::from("hunter2"))]);
        let spec = task_spec(&record, &secrets, now);
        assert_eq!(spec.task, "buy a monitor");
        assert_eq!(spec.options, options);
        // The wall-clock budget counts from the first start.
        assert_eq!(spec.timeout, Some(Duration::from_secs(500)));
        assert_eq!(spec.secrets.0.get("pw"), None);
        assert_eq!(
            spec.secrets.0.get("*.example.com"),
            Some(&SecretEntry::Scoped(BTreeMap::from([(
                "pw".to_owned(),
                "hunter2".to_owned()
            )])))
        );
        // The runner's conversions of the stored options.
        assert_eq!(spec.vision(), browserd_agent::VisionMode::Never);
        assert_eq!(spec.viewport(), Some(Viewport::new(1280, 720)));
        assert_eq!(
            spec.options.settle_timeout(),
            Some(Duration::from_millis(750))
        );
        let egress = spec.egress(true);
        assert_eq!(egress.allowed_domains, ["*.example.com"]);
        assert_eq!(egress.prohibited_domains, ["ads.example.com"]);
        assert!(egress.allow_loopback);
        let workspace = crate::TaskWorkspace::open(None).unwrap();
        let config = spec.agent_config(&workspace);
        assert_eq!(
            config.start_url.as_deref(),
            Some("https://shop.example.com/")
        );
        assert_eq!(config.max_steps, 42);
        assert_eq!(config.max_actions_per_step, 7);
        assert_eq!(config.max_failures, 2);
        assert_eq!(config.output_schema, Some(json!({"type": "object"})));
        // Past its budget: nothing left.
        let late = task_spec(&record, &secrets, now + time::Duration::seconds(600));
        assert_eq!(late.timeout, Some(Duration::ZERO));
    }
}
