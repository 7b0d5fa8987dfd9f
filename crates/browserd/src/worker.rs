//! The worker role's configuration and wiring: browser pool, model registry, task runner and
//! the claim loop, started alone (`browserd worker`) or beside the api (`browserd serve`); and
//! the secrets key shared by both roles (the api seals, the worker opens).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::wiring::{EventHub, SecretsKeyring, Store};
use anyhow::Context;
use browserd_browser::{BrowserPool, LiveViewSettings, Viewport};
use browserd_worker::{Worker, WorkerConfig};
use clap::Args;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::runtime::{BrowserArgs, PoolShape, Runtime};
use crate::{Cli, config};

/// Where task secrets are sealed and opened.
#[derive(Debug, Args)]
pub struct SecretsArgs {
    /// File holding the 32-byte secrets key in base64 (alternative to BROWSERD_SECRETS_KEY).
    #[arg(long, env = "BROWSERD_SECRETS_KEY_FILE", global = true)]
    secrets_key_file: Option<PathBuf>,

    /// The 32-byte secrets key in base64 (`openssl rand -base64 32`). Without a key, tasks
    /// with secrets are refused.
    #[arg(
        long,
        env = "BROWSERD_SECRETS_KEY",
        global = true,
        hide_env_values = true
    )]
    secrets_key: Option<String>,

    /// Previous secrets keys (comma-separated base64), still accepted for opening secrets
    /// sealed before a key rotation.
    #[arg(
        long,
        env = "BROWSERD_SECRETS_OLD_KEYS",
        global = true,
        hide_env_values = true
    )]
    secrets_old_keys: Option<String>,
}

impl SecretsArgs {
    /// The configured keyring, if any. The key never appears in an error.
    /// An empty `BROWSERD_SECRETS_KEY` counts as unset: `docker compose` passes `${VAR:-}` as an
    /// empty value when `.env` leaves the key out.
    pub fn keyring(&self) -> anyhow::Result<Option<SecretsKeyring>> {
        let key = self
            .secrets_key
            .as_ref()
            .filter(|key| !key.trim().is_empty());
        let current = match (key, &self.secrets_key_file) {
            (Some(_), Some(_)) => {
                anyhow::bail!("give either BROWSERD_SECRETS_KEY or --secrets-key-file, not both")
            }
            (Some(key), None) => key.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .with_context(|| format!("reading --secrets-key-file {}", path.display()))?,
            (None, None) => return Ok(None),
        };
        let old: Vec<&str> = self
            .secrets_old_keys
            .as_deref()
            .map(|keys| keys.split(',').collect())
            .unwrap_or_default();
        let keyring = SecretsKeyring::from_base64(&current, &old).context("secrets key")?;
        tracing::info!(key_id = %keyring.current_key_id(), "task secrets are encrypted at rest");
        Ok(Some(keyring))
    }
}

/// Settings of the worker role.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The most tasks this worker runs at once (the memory and CPU headroom checks may hold
    /// it to fewer). 5 by default: with 4, read-only tasks left a 2-core machine a third idle
    /// while they waited on the model (docs/src/benchmarks.md, "Ready for a burst").
    #[arg(long, env = "BROWSERD_CONCURRENCY", default_value_t = 5)]
    concurrency: usize,

    /// Lease duration in seconds; the heartbeat renews it every third of it. A task whose
    /// worker stops renewing is resumed by another worker once it expires.
    #[arg(long, env = "BROWSERD_LEASE_S", default_value_t = 30)]
    lease_s: u64,

    /// Claim attempts per task before a task whose workers keep dying fails.
    #[arg(long, env = "BROWSERD_MAX_ATTEMPTS", default_value_t = 3)]
    max_attempts: i32,

    /// Milliseconds between claim attempts when no queue notification arrives.
    #[arg(long, env = "BROWSERD_POLL_INTERVAL_MS", default_value_t = 2000)]
    poll_interval_ms: u64,

    /// On SIGTERM, seconds the running steps may take before their tasks are handed back.
    #[arg(long, env = "BROWSERD_TASK_GRACE_S", default_value_t = 30)]
    task_grace_s: u64,

    /// Queued or paused tasks holding secrets for longer than this fail and lose them.
    #[arg(long, env = "BROWSERD_SECRETS_RETENTION_S", default_value_t = 86_400)]
    secrets_retention_s: u64,

    /// A task paused for longer than this many seconds is stopped, with an error that says
    /// so, and its browser released (0: no limit). Checked by every worker every half lease
    /// from the time the task paused in Postgres, so also after the worker holding it died.
    #[arg(long, env = "BROWSERD_MAX_PAUSE_S", default_value_t = 1800)]
    max_pause_s: u64,

    /// Claim a new task only while this many MiB of memory are available: the cgroup's limit
    /// less its working set where a cgroup limits the worker, else the host's MemAvailable
    /// (0: no check). `--concurrency` stays the ceiling; metric
    /// `browserd_worker_admission_blocked{reason="memory"}` says when it holds claims back.
    #[arg(long, env = "BROWSERD_MIN_AVAILABLE_MEMORY_MB", default_value_t = 256)]
    min_available_memory_mb: u64,

    /// Claim a new task only while CPU pressure (PSI `some avg10` of the cgroup or host, in
    /// percent) is at most this, unless the worker runs nothing (0: no check, the default: a
    /// shared 2-core machine sits above 60 % while it is merely busy).
    #[arg(long, env = "BROWSERD_MAX_CPU_PRESSURE", default_value_t = 0.0, value_parser = parse_cpu_pressure)]
    max_cpu_pressure: f64,
    /// Do not offer the agent the `ask_human` action (no task then waits for a person).
    #[arg(long, env = "BROWSERD_NO_ASK_HUMAN")]
    no_ask_human: bool,

    /// Longest wait, in seconds, for a person's answer to `ask_human` before the task fails
    /// (a task's `ask_human_timeout_s` may shorten it). The browser context stays up meanwhile.
    #[arg(long, env = "BROWSERD_ASK_HUMAN_TIMEOUT_S", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    ask_human_timeout_s: u64,

    /// Chrome processes of this worker (each hosts several tasks' contexts).
    #[arg(long, env = "BROWSERD_CHROME_PROCESSES", default_value_t = 1)]
    chrome_processes: usize,

    /// Longest wait between two attempts of a webhook delivery (the backoff doubles from 1 s up
    /// to this); deliveries are given up 24 h after their event.
    #[arg(long, env = "BROWSERD_WEBHOOK_MAX_BACKOFF_S", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    webhook_max_backoff_s: u64,

    /// Longest one webhook delivery attempt may take (connect included), in seconds.
    #[arg(long, env = "BROWSERD_WEBHOOK_REQUEST_TIMEOUT_S", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=120))]
    webhook_request_timeout_s: u64,

    /// Live view (the dashboard): at most this many screencast frames per second of a watched
    /// task (0 switches the live view off). An unwatched task never screencasts.
    #[arg(long, env = "BROWSERD_LIVE_VIEW_FPS", default_value_t = LiveViewSettings::default().max_fps, value_parser = parse_live_view_fps)]
    live_view_fps: f64,

    /// JPEG quality (1–100) of the live view's frames.
    #[arg(long, env = "BROWSERD_LIVE_VIEW_QUALITY", default_value_t = LiveViewSettings::default().quality, value_parser = clap::value_parser!(u8).range(1..=100))]
    live_view_quality: u8,

    /// Live view frames are scaled down to fit `WIDTHxHEIGHT`.
    #[arg(long, env = "BROWSERD_LIVE_VIEW_SIZE", default_value = "1280x800", value_parser = browserd_worker::parse_viewport)]
    live_view_size: Viewport,

    /// Directory holding each running task's workspace (default: the system temp dir).
    #[arg(long, env = "BROWSERD_WORKSPACE_ROOT")]
    workspace_root: Option<PathBuf>,

    /// Serve Prometheus `/metrics` (and `/healthz`) on this address: for the worker role,
    /// which has no HTTP server otherwise (`serve` also has them on the api's address).
    /// Empty: off.
    #[arg(long, env = "BROWSERD_METRICS_ADDR", value_parser = parse_metrics_addr)]
    metrics_addr: Option<MetricsAddr>,

    #[command(flatten)]
    browser: BrowserArgs,
}

fn parse_cpu_pressure(value: &str) -> Result<f64, String> {
    let pressure: f64 = value
        .parse()
        .map_err(|_| format!("`{value}` is not a number"))?;
    if (0.0..=100.0).contains(&pressure) {
        Ok(pressure)
    } else {
        Err("must be a percentage from 0 (no check) to 100".to_owned())
    }
}

fn parse_live_view_fps(value: &str) -> Result<f64, String> {
    let fps: f64 = value
        .trim()
        .parse()
        .map_err(|err| format!("{err} (expected frames per second, e.g. 2 or 0.5)"))?;
    if !(0.0..=30.0).contains(&fps) {
        return Err(format!("{fps} is outside 0–30 frames per second"));
    }
    Ok(fps)
}

/// `--metrics-addr`: an address, or nothing (an empty variable from compose).
#[derive(Clone, Copy, Debug)]
pub struct MetricsAddr(Option<SocketAddr>);

fn parse_metrics_addr(value: &str) -> Result<MetricsAddr, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(MetricsAddr(None));
    }
    value
        .parse()
        .map(|addr| MetricsAddr(Some(addr)))
        .map_err(|err| format!("{err} (expected host:port, e.g. 0.0.0.0:9090)"))
}

impl WorkerArgs {
    /// `--allow-loopback`: tasks may browse loopback and webhooks may target it.
    pub fn allow_loopback(&self) -> bool {
        self.browser.allow_loopback
    }

    /// Postgres connections of the worker's pool: what the operator set, and at least one per
    /// running task plus two (heartbeats, claims, the reaper).
    pub fn db_connections(&self, configured: u32) -> u32 {
        let needed = u32::try_from(self.concurrency)
            .unwrap_or(u32::MAX)
            .saturating_add(2);
        configured.max(needed)
    }
}

/// A running worker and what it owns.
pub struct RunningWorker {
    handle: JoinHandle<()>,
    pool: Arc<BrowserPool>,
    metrics: Option<JoinHandle<()>>,
}

impl RunningWorker {
    /// Waits for the worker to hand its tasks back, then stops every Chrome.
    pub async fn stopped(self) {
        let _ = self.handle.await;
        self.pool.shutdown().await;
        if let Some(metrics) = self.metrics {
            let _ = tokio::time::timeout(Duration::from_secs(2), metrics).await;
        }
    }
}

/// Starts the worker role on `store`; it stops when `shutdown` is cancelled.
pub async fn start(
    cli: &Cli,
    args: &WorkerArgs,
    store: Store,
    hub: EventHub,
    shutdown: CancellationToken,
    tracing: bool,
) -> anyhow::Result<RunningWorker> {
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(args.lease_s >= 1, "--lease-s must be at least 1");
    anyhow::ensure!(args.max_attempts >= 1, "--max-attempts must be at least 1");
    anyhow::ensure!(
        args.chrome_processes >= 1,
        "--chrome-processes must be at least 1"
    );
    let models = config::load_models(cli.config.as_deref())?;
    let shape = PoolShape::service(args.concurrency, args.chrome_processes);
    let Runtime { pool, runner } = Runtime::build(&args.browser, &cli.proxies, models, shape)?;
    // The first task should not wait for Chrome to start.
    pool.warm_up().await;
    let workspace_root = args
        .workspace_root
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("browserd-tasks"));
    std::fs::create_dir_all(&workspace_root)
        .with_context(|| format!("creating {}", workspace_root.display()))?;
    let config = WorkerConfig {
        id: WorkerConfig::unique_id(),
        // The pool holds `processes × contexts_per_process` contexts: never more tasks.
        concurrency: args.concurrency.min(shape.capacity()),
        lease: Duration::from_secs(args.lease_s),
        poll_interval: Duration::from_millis(args.poll_interval_ms.max(10)),
        max_attempts: args.max_attempts,
        shutdown_grace: Duration::from_secs(args.task_grace_s),
        secrets_retention: Duration::from_secs(args.secrets_retention_s.max(1)),
        max_pause: (args.max_pause_s > 0).then(|| Duration::from_secs(args.max_pause_s)),
        ask_human: browserd_worker::AskHumanSettings {
            enabled: !args.no_ask_human,
            max_wait: Duration::from_secs(args.ask_human_timeout_s),
        },
        workspace_root,
        live_view: (args.live_view_fps > 0.0).then_some(LiveViewSettings {
            max_width: args.live_view_size.width,
            max_height: args.live_view_size.height,
            quality: args.live_view_quality,
            max_fps: args.live_view_fps,
        }),
        admission: browserd_worker::admission::AdmissionLimits {
            min_available_memory: args.min_available_memory_mb.saturating_mul(1024 * 1024),
            max_cpu_pressure: (args.max_cpu_pressure > 0.0).then_some(args.max_cpu_pressure),
        },
    };
    let metrics = match args.metrics_addr.and_then(|a| a.0) {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --metrics-addr {addr}"))?;
            tracing::info!(address = %listener.local_addr()?, "serving metrics");
            let app = browserd_api::metrics_router(
                crate::wiring::worker_core(&store, &hub),
                cli.metrics_token(),
            );
            let stop = shutdown.clone();
            Some(tokio::spawn(async move {
                let served = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
                if let Err(err) = served {
                    tracing::warn!(%err, "the metrics listener failed");
                }
            }))
        }
        None => None,
    };
    // Webhook deliveries: beside the tasks, never on their path.
    tokio::spawn(browserd_worker::run_webhook_dispatcher(
        store.clone(),
        browserd_worker::WebhookSettings {
            allow_loopback: args.browser.allow_loopback,
            max_backoff: Duration::from_secs(args.webhook_max_backoff_s),
            request_timeout: Duration::from_secs(args.webhook_request_timeout_s),
            ..browserd_worker::WebhookSettings::default()
        },
        shutdown.clone(),
    ));
    let mut worker = Worker::new(store, hub, runner, config);
    if tracing {
        worker = worker.with_trace_parent(crate::telemetry::OtelTraceContext::worker_hook());
    }
    let handle = tokio::spawn(worker.run(shutdown));
    Ok(RunningWorker {
        handle,
        pool,
        metrics,
    })
}

/// `serve`'s worker: [`start`] on a multi-threaded tokio runtime of its own (as many threads
/// as cores), so that the api's threads are free whenever a request or an event delivery
/// wakes them, however busy the tasks keep the worker's (the operating system shares the
/// cores among both). Measured by `tests/benches/service_load.rs` (docs/src/benchmarks.md).
pub struct WorkerOnItsOwnRuntime {
    runtime: tokio::runtime::Runtime,
    worker: RunningWorker,
}

impl WorkerOnItsOwnRuntime {
    /// Builds the runtime and starts the worker on it, with a database pool of
    /// `db_connections` opened there.
    pub async fn start(
        cli: &'static Cli,
        args: &'static WorkerArgs,
        db_connections: u32,
        hub: EventHub,
        shutdown: CancellationToken,
        tracing: bool,
    ) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("browserd-worker")
            .enable_all()
            .build()
            .context("building the worker's runtime")?;
        let started = runtime.spawn(async move {
            let store = crate::wiring::open_store(cli, db_connections).await?;
            start(cli, args, store, hub, shutdown, tracing).await
        });
        let worker = match started.await {
            Ok(started) => started?,
            Err(err) => anyhow::bail!("the worker's start-up failed: {err}"),
        };
        Ok(Self { runtime, worker })
    }

    /// Waits for the worker to stop (its tasks handed back, its browsers closed), then lets
    /// the runtime go.
    pub async fn stopped(self) {
        let Self { runtime, worker } = self;
        let _ = runtime.spawn(worker.stopped()).await;
        // Not dropped here: dropping a runtime blocks, which an async context may not.
        runtime.shutdown_background();
    }
}

/// `browserd mcp`'s worker: the worker role's claim loop in this process, on a store of its
/// own (`concurrency` tasks and two more connections) of the configured database, running
/// tasks with `runner`; it stops when `shutdown` is cancelled.
pub async fn start_in_process(
    cli: &Cli,
    runner: Arc<browserd_worker::TaskRunner>,
    concurrency: usize,
    hub: EventHub,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<()>> {
    let connections = u32::try_from(concurrency)
        .unwrap_or(u32::MAX)
        .saturating_add(2);
    let store = crate::wiring::open_store(cli, connections).await?;
    let config = WorkerConfig::in_process(concurrency);
    std::fs::create_dir_all(&config.workspace_root)
        .with_context(|| format!("creating {}", config.workspace_root.display()))?;
    let worker = Worker::new(store, hub, runner, config);
    Ok(tokio::spawn(worker.run(shutdown)))
}

/// `browserd worker`: the worker role alone.
pub async fn run_worker_only(
    cli: &Cli,
    args: &WorkerArgs,
    db_max_connections: u32,
    tracing: bool,
) -> anyhow::Result<()> {
    let store = crate::wiring::open_store(cli, args.db_connections(db_max_connections)).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::cancel_on_signal(shutdown.clone()));
    let (hub, hub_task) = EventHub::start(&store, shutdown.clone())
        .await
        .context("listening for task events")?;
    let worker = start(cli, args, store, hub, shutdown, tracing).await?;
    worker.stopped().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), hub_task).await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(key: Option<&str>, old: Option<&str>) -> SecretsArgs {
        SecretsArgs {
            secrets_key_file: None,
            secrets_key: key.map(str::to_owned),
            secrets_old_keys: old.map(str::to_owned),
        }
    }

    #[test]
    fn an_empty_secrets_key_counts_as_unset() {
        assert!(args(Some(""), Some("")).keyring().unwrap().is_none());
        assert!(args(Some("  "), None).keyring().unwrap().is_none());
        assert!(args(None, None).keyring().unwrap().is_none());
        let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        assert!(args(Some(key), Some("")).keyring().unwrap().is_some());
        assert!(args(Some("not a key"), None).keyring().is_err());
    }
}
