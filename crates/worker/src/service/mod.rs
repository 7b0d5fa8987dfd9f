//! The worker role: claim queued tasks from Postgres, run each with the [`TaskRunner`] and a
//! [`StoreSink`], hold the lease with a heartbeat, apply stop/pause/resume as they arrive, reap
//! leases of workers that died, and hand tasks back on shutdown.
//!
//! Postgres is the only coordinator: claims use `FOR UPDATE SKIP LOCKED` in creation order; a
//! `task_queue` notification (or the polling fallback) wakes the claim loop; control signals
//! are status changes, seen through the process's [`EventHub`] within milliseconds and through
//! the heartbeat's answer at the latest.
mod finish;
mod job;
mod prepare;
mod skills;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use browserd_agent::{SecretEntry, SensitiveData};
use browserd_browser::LiveViewSettings;
use browserd_store::{EventHub, Store, TaskRecord, TaskSession};
use browserd_types::{TaskSecret, TaskSecrets};
use secrecy::ExposeSecret;
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::BrowserState;
use crate::runner::{TaskRunner, TaskSpec};
use job::TaskJob;

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
    /// The settings of a worker started inside another command (`browserd mcp` on stdio):
    /// `concurrency` tasks at once, the service's defaults otherwise (30 s lease, 3 attempts,
    /// ask_human on, no live view, no admission check), a short grace at shutdown (its tasks were stopped first),
    /// workspaces under the system temp dir.
    pub fn in_process(concurrency: usize) -> Self {
        Self {
            id: Self::unique_id(),
            concurrency: concurrency.max(1),
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_secs(2),
            max_attempts: 3,
            shutdown_grace: Duration::from_secs(10),
            secrets_retention: Duration::from_secs(86_400),
            max_pause: Some(Duration::from_secs(1800)),
            workspace_root: std::env::temp_dir().join("browserd-tasks"),
            live_view: None,
            // One user's machine: no memory or CPU check holds its tasks back.
            admission: crate::admission::AdmissionLimits {
                min_available_memory: 0,
                max_cpu_pressure: None,
            },
            ask_human: crate::AskHumanSettings::default(),
        }
    }

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use browserd_browser::Viewport;
    use browserd_types::{ApiKeyId, TaskId, TaskOptions, TaskStatus};
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
