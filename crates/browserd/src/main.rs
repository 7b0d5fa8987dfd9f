//! The browserd binary: CLI, configuration and wiring of the roles — `serve` (api + worker in
//! one process), `api`, `worker` — and `browserd run`, one task in-process from the terminal, and
//! `browserd mcp`, the MCP task tools on stdio.

mod config;
mod egress;
mod mcp;
mod private_postgres;
mod quotas;
mod remote;
mod replay;
mod run;
mod runtime;
mod skills_cli;
mod step_lines;
mod telemetry;
mod wiring;
mod worker;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use browserd_api::{ApiConfig, RateLimit};
use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::ExposeSecret;
use tokio_util::sync::CancellationToken;

/// Self-hosted service running LLM browser agents.
#[derive(Debug, Parser)]
#[command(name = "browserd", version, about)]
struct Cli {
    /// Postgres URL; the database is created when missing. Unset: browserd's private cluster
    /// (under --data-dir) when it exists or when nothing answers on 127.0.0.1:5432, else
    /// postgres://postgres@127.0.0.1:5432/browserd.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,

    /// browserd's data directory, which holds the private Postgres cluster (`postgres/`).
    /// Default: `$XDG_DATA_HOME/browserd`, `~/.local/share/browserd`, or `/var/lib/browserd`
    /// as root.
    #[arg(long, env = "BROWSERD_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,

    /// TOML file with the model catalog (`default_model`, `[models.<name>]`).
    #[arg(long, env = "BROWSERD_CONFIG", global = true)]
    config: Option<PathBuf>,

    #[command(flatten)]
    secrets: worker::SecretsArgs,

    #[command(flatten)]
    proxies: egress::ProxiesArgs,

    #[command(flatten)]
    quotas: quotas::QuotaArgs,

    /// A token `/metrics` requires (`Authorization: Bearer <token>`) on the api and on the
    /// worker's `--metrics-addr`; unset or empty: `/metrics` is open.
    #[arg(
        long,
        env = "BROWSERD_METRICS_TOKEN",
        global = true,
        hide_env_values = true
    )]
    metrics_token: Option<String>,

    /// Log output format (filter with RUST_LOG, default `info`).
    #[arg(long, env = "BROWSERD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The database chosen at startup (`private_postgres::choose`); set before any command
    /// that uses one runs.
    pub(crate) fn database_url(&self) -> &str {
        self.database_url
            .as_deref()
            .unwrap_or(private_postgres::DEFAULT_DATABASE_URL)
    }

    /// `--metrics-token`, when set and not empty.
    pub(crate) fn metrics_token(&self) -> Option<secrecy::SecretString> {
        self.metrics_token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| secrecy::SecretString::from(t.to_owned()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every role of a single node: the api and a worker in one process.
    Serve {
        #[command(flatten)]
        api: ServeArgs,
        #[command(flatten)]
        worker: worker::WorkerArgs,
    },
    /// Run the HTTP/WebSocket api only (no browser).
    Api {
        #[command(flatten)]
        api: ServeArgs,
        /// Accept webhooks that target loopback (127.0.0.0/8, ::1, localhost); the workers'
        /// flag of the same name decides delivery. Every other private, link-local and
        /// metadata address is refused. The variable takes `1`/`0`, `true`/`false`, …
        #[arg(
            long,
            env = "BROWSERD_ALLOW_LOOPBACK",
            action = clap::ArgAction::SetTrue,
            value_parser = clap::builder::BoolishValueParser::new()
        )]
        allow_loopback: bool,
    },
    /// Run a worker only: claim queued tasks and run them.
    Worker {
        #[command(flatten)]
        worker: worker::WorkerArgs,
        /// Maximum Postgres connections of this process (at least concurrency + 2).
        #[arg(long, env = "BROWSERD_DB_MAX_CONNECTIONS", default_value_t = 10)]
        db_max_connections: u32,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Run one task in this process (no server, no database) and print each step.
    Run(run::RunArgs),
    /// Re-run a recorded task's actions without a model (`browserd run --history-out`, or
    /// GET /v1/tasks/{id}/history), finding each element again by its recorded identity.
    Replay(replay::ReplayArgs),
    /// Serve the MCP task tools on stdio (tasks run in this process, or on --server).
    Mcp(mcp::McpArgs),
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Talk to a running server: submit a task, watch one live.
    Tasks {
        #[command(subcommand)]
        command: remote::TasksCommand,
    },
    /// Talk to a running server's skills: make one, run one, list them.
    Skills {
        #[command(subcommand)]
        command: skills_cli::SkillsCommand,
    },
    /// browserd's private Postgres cluster (under --data-dir), used when no DATABASE_URL is set.
    Postgres {
        #[command(subcommand)]
        command: private_postgres::PostgresCommand,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key and print it once on stdout.
    Create {
        /// A label for the key (who or what uses it).
        #[arg(long)]
        name: String,
        /// The key's own quotas (left out: the configured defaults).
        #[command(flatten)]
        quotas: quotas::KeyQuotaArgs,
    },
    /// Change a key's quotas by id or prefix; `default` resets one to the configured default.
    /// Takes effect at the key's next task, claim or WebSocket.
    Update {
        /// The key's id, or its prefix (`bd_` and at least 4 more characters) as shown by
        /// `keys list`; it must match exactly one active key.
        key: String,
        #[command(flatten)]
        quotas: quotas::KeyQuotaArgs,
    },
    /// List the keys (id, prefix, created, revoked, the quotas that apply — `*` where the key
    /// sets its own —, name); never the keys themselves.
    List,
    /// Revoke a key by id or prefix (e.g. `bd_AbC12xYz`). Every api process refuses it within
    /// seconds and closes its WebSockets.
    Revoke {
        /// The key's id, or its prefix (`bd_` and at least 4 more characters) as shown by
        /// `keys list`; it must match exactly one active key.
        key: String,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "BROWSERD_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Maximum request body size in bytes (larger bodies get 413).
    #[arg(long, env = "BROWSERD_BODY_LIMIT_BYTES", default_value_t = browserd_api::DEFAULT_BODY_LIMIT_BYTES)]
    body_limit_bytes: usize,

    /// Requests per second allowed per API key (0 disables rate limiting).
    #[arg(long, env = "BROWSERD_RATE_LIMIT_PER_SECOND", default_value_t = 20)]
    rate_limit_per_second: u32,

    /// Burst size per API key.
    #[arg(long, env = "BROWSERD_RATE_LIMIT_BURST", default_value_t = 40)]
    rate_limit_burst: u32,

    /// Maximum Postgres connections of the api (`serve` gives its worker a pool of its own, of
    /// at least concurrency + 2).
    #[arg(long, env = "BROWSERD_DB_MAX_CONNECTIONS", default_value_t = 10)]
    db_max_connections: u32,

    /// Seconds to wait for in-flight requests on shutdown.
    #[arg(long, env = "BROWSERD_SHUTDOWN_GRACE_S", default_value_t = 10)]
    shutdown_grace_s: u64,

    /// Above this many queued tasks, POST /v1/tasks answers 429 with Retry-After (0: no limit).
    #[arg(long, env = "BROWSERD_MAX_QUEUED_TASKS", default_value_t = 10_000)]
    max_queued_tasks: i64,

    /// Requests per second per client address that are not authenticated by a recently seen
    /// valid key (no key, unknown key, ticket), checked before any database lookup (0 disables).
    #[arg(
        long,
        env = "BROWSERD_UNAUTH_RATE_LIMIT_PER_SECOND",
        default_value_t = 5
    )]
    unauth_rate_limit_per_second: u32,

    /// Burst size per client address for unauthenticated requests.
    #[arg(long, env = "BROWSERD_UNAUTH_RATE_LIMIT_BURST", default_value_t = 30)]
    unauth_rate_limit_burst: u32,

    /// Reverse proxies whose `X-Forwarded-For` is believed (comma-separated addresses or CIDR
    /// ranges, e.g. `10.0.0.0/8,fd00::/8`); empty: the TCP peer is the client.
    #[arg(long, env = "BROWSERD_TRUSTED_PROXIES", default_value = "", value_parser = parse_trusted_proxies)]
    trusted_proxies: TrustedProxies,

    /// Seconds a request may take before it is answered 408 (WebSocket streams are not timed).
    #[arg(long, env = "BROWSERD_REQUEST_TIMEOUT_S", default_value_t = 30)]
    request_timeout_s: u64,

    /// Largest WebSocket message or frame a client may send, in bytes.
    #[arg(long, env = "BROWSERD_WS_MAX_MESSAGE_BYTES", default_value_t = browserd_api::DEFAULT_WS_MAX_MESSAGE_BYTES)]
    ws_max_message_bytes: usize,

    /// The base of the absolute URLs given to clients (v2 `liveUrl`, `downloadUrl`,
    /// `screenshotUrl`), e.g. `https://browserd.example.com`: http or https, no query or
    /// fragment. Unset or empty: `http://<listen address>`. The request's `Host` is never used.
    #[arg(long, env = "BROWSERD_PUBLIC_URL", value_parser = parse_public_url)]
    public_url: Option<PublicUrlArg>,

    /// Serve Prometheus `/metrics` (and `/healthz`) on this address, apart from the api port
    /// (which serves `/metrics` only behind `--metrics-token`). Empty: no metrics listener.
    #[arg(
        long,
        env = "BROWSERD_METRICS_LISTEN",
        default_value = "127.0.0.1:9464",
        value_parser = parse_metrics_listen
    )]
    metrics_listen: MetricsListen,
}

/// `--metrics-listen`: an address, or nothing (empty).
#[derive(Clone, Copy, Debug)]
struct MetricsListen(Option<SocketAddr>);

fn parse_metrics_listen(raw: &str) -> Result<MetricsListen, String> {
    if raw.trim().is_empty() {
        return Ok(MetricsListen(None));
    }
    raw.trim()
        .parse()
        .map(|addr| MetricsListen(Some(addr)))
        .map_err(|err| format!("--metrics-listen {raw:?}: {err}"))
}

/// `--public-url`: a validated base, or nothing (an empty variable from compose).
#[derive(Clone, Debug)]
struct PublicUrlArg(Option<browserd_api::PublicUrl>);

fn parse_public_url(raw: &str) -> Result<PublicUrlArg, String> {
    if raw.trim().is_empty() {
        return Ok(PublicUrlArg(None));
    }
    browserd_api::PublicUrl::parse(raw)
        .map(|url| PublicUrlArg(Some(url)))
        .map_err(|err| format!("--public-url {raw:?}: {err}"))
}

#[derive(Clone, Debug)]
struct TrustedProxies(Vec<browserd_api::IpRange>);

fn parse_trusted_proxies(raw: &str) -> Result<TrustedProxies, String> {
    browserd_api::parse_trusted_proxies(raw)
        .map(TrustedProxies)
        .map_err(|err| err.to_string())
}

fn budget(per_second: u32, burst: u32) -> Option<RateLimit> {
    NonZeroU32::new(per_second).map(|per_second| {
        RateLimit::per_second(per_second, NonZeroU32::new(burst).unwrap_or(per_second))
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    // Before any HTTP client (the OTLP exporter's among them) or TLS connection is built.
    browserd_llm::install_tls_provider();
    // Lives as long as the process; 'static, so a role on a runtime of its own (serve's
    // worker) can borrow its flags.
    let mut cli = Cli::parse();
    let telemetry = telemetry::init(cli.log_format, cli.command.role())?;
    if let Command::Postgres { command } = &cli.command {
        let code = private_postgres::command(command, cli.data_dir.as_deref());
        telemetry.shutdown().await;
        return code;
    }
    // Held until the end of main: the last process using a private cluster it started stops it.
    let mut _postgres = None;
    if cli.command.uses_database() {
        let (url, cluster) =
            private_postgres::choose(cli.database_url.as_deref(), cli.data_dir.as_deref())?;
        cli.database_url = Some(url);
        _postgres = cluster;
    }
    let cli: &'static Cli = Box::leak(Box::new(cli));
    if matches!(
        cli.command,
        Command::Serve { .. } | Command::Api { .. } | Command::Worker { .. }
    ) {
        telemetry::init_metrics();
    }
    let tracing_enabled = telemetry.tracing_enabled();
    let result = match &cli.command {
        Command::Run(args) => run::run(cli.config.as_deref(), &cli.proxies, args).await,
        Command::Tasks { command } => remote::run(command).await,
        Command::Skills { command } => skills_cli::run(command).await,
        Command::Replay(args) => replay::run(args, &cli.proxies).await,
        Command::Mcp(args) => mcp::serve(cli, args).await.map(|()| ExitCode::SUCCESS),
        other => other_command(cli, other, tracing_enabled)
            .await
            .map(|()| ExitCode::SUCCESS),
    };
    telemetry.shutdown().await;
    if matches!(cli.command, Command::Mcp(_)) {
        // The stdio transport's pending stdin read holds a runtime thread that only the
        // process's exit ends (dropping the runtime would wait for it forever).
        let code = match &result {
            Ok(_) => 0,
            Err(err) => {
                eprintln!("Error: {err:?}");
                1
            }
        };
        std::process::exit(code);
    }
    result
}

impl Command {
    /// The role name (`browserd.role` of the exported spans).
    fn role(&self) -> &'static str {
        match self {
            Command::Serve { .. } => "serve",
            Command::Api { .. } => "api",
            Command::Worker { .. } => "worker",
            Command::Migrate => "migrate",
            Command::Run(_) => "run",
            Command::Mcp(_) => "mcp",
            Command::Keys { .. } => "keys",
            Command::Tasks { .. } => "tasks",
            Command::Skills { .. } => "skills",
            Command::Replay(_) => "replay",
            Command::Postgres { .. } => "postgres",
        }
    }

    /// Whether the command works on the database (the others need no Postgres).
    fn uses_database(&self) -> bool {
        matches!(
            self,
            Command::Serve { .. }
                | Command::Api { .. }
                | Command::Worker { .. }
                | Command::Migrate
                | Command::Keys { .. }
        ) || matches!(self, Command::Mcp(args) if args.server.is_none())
    }
}

async fn other_command(
    cli: &'static Cli,
    command: &'static Command,
    tracing: bool,
) -> anyhow::Result<()> {
    match command {
        Command::Run(_)
        | Command::Tasks { .. }
        | Command::Skills { .. }
        | Command::Replay(_)
        | Command::Mcp(_)
        | Command::Postgres { .. } => Ok(()),
        Command::Serve { api, worker } => {
            let allow_loopback = worker.allow_loopback();
            serve(cli, api, Some(worker), allow_loopback, tracing).await
        }
        Command::Api {
            api,
            allow_loopback,
        } => serve(cli, api, None, *allow_loopback, tracing).await,
        Command::Worker {
            worker,
            db_max_connections,
        } => worker::run_worker_only(cli, worker, *db_max_connections, tracing).await,
        Command::Migrate => {
            wiring::migrate(cli.database_url()).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Keys {
            command: KeysCommand::List,
        } => {
            let core = wiring::admin_core(cli.database_url()).await?;
            let keys = core.list_api_keys().await?;
            let defaults = cli.quotas.defaults()?;
            println!(
                "{:<36}  {:<11}  {:<20}  {:<20}  {} NAME",
                "ID",
                "PREFIX",
                "CREATED",
                "REVOKED",
                quotas::QUOTA_HEADER
            );
            for key in keys {
                println!(
                    "{:<36}  {:<11}  {:<20}  {:<20}  {} {}",
                    key.id,
                    key.prefix,
                    timestamp(key.created_at),
                    key.revoked_at.map_or_else(|| "-".to_owned(), timestamp),
                    quotas::quota_columns(&key, &defaults, cli.quotas.fair_share()),
                    key.name
                );
            }
            println!("* set on the key; the others are the configured defaults");
            Ok(())
        }
        Command::Keys {
            command: KeysCommand::Revoke { key },
        } => {
            let core = wiring::admin_core(cli.database_url()).await?;
            let revoked = core.revoke_api_key_matching(key).await?;
            println!(
                "revoked key {} ({}, `{}`)",
                revoked.id, revoked.prefix, revoked.name
            );
            Ok(())
        }
        Command::Keys {
            command: KeysCommand::Update { key, quotas: own },
        } => {
            let update = own.update();
            anyhow::ensure!(
                !update.is_empty(),
                "give at least one quota to change (--max-running, --max-queued, \
                 --max-websockets, --daily-steps, --daily-cost-usd)"
            );
            let core = wiring::admin_core(cli.database_url()).await?;
            let updated = core.update_api_key_quotas(key, &update).await?;
            println!(
                "updated key {} ({}, `{}`): {}",
                updated.id,
                updated.prefix,
                updated.name,
                quotas::quota_columns(&updated, &cli.quotas.defaults()?, cli.quotas.fair_share())
                    .trim_end()
            );
            Ok(())
        }
        Command::Keys {
            command: KeysCommand::Create { name, quotas: own },
        } => {
            let name = name.trim();
            anyhow::ensure!(
                (1..=200).contains(&name.chars().count()),
                "--name must be 1–200 characters"
            );
            let core = wiring::admin_core(cli.database_url()).await?;
            let created = core
                .create_api_key_with_quotas(name, own.overrides())
                .await?;
            eprintln!(
                "Created API key `{}` (id {}, prefix {}). It is shown once; store it now:",
                created.record.name, created.record.id, created.record.prefix
            );
            println!("{}", created.key.expose_secret());
            Ok(())
        }
    }
}

fn timestamp(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// What the api admits tasks with (over `/v1`, `/api/v2`, MCP, and its scheduler's ticks).
fn task_settings(cli: &Cli, args: &ServeArgs) -> anyhow::Result<browserd_tasks::TaskSettings> {
    Ok(browserd_tasks::TaskSettings {
        models: config::model_catalog(&config::load_models(cli.config.as_deref())?)?,
        proxies: cli.proxies.names()?,
        max_queued_tasks: (args.max_queued_tasks > 0).then_some(args.max_queued_tasks),
    })
}

async fn serve(
    cli: &'static Cli,
    args: &ServeArgs,
    worker_args: Option<&'static worker::WorkerArgs>,
    allow_loopback: bool,
    tracing: bool,
) -> anyhow::Result<()> {
    let settings = task_settings(cli, args)?;
    let rate_limit = budget(args.rate_limit_per_second, args.rate_limit_burst);
    anyhow::ensure!(
        args.request_timeout_s >= 1,
        "--request-timeout-s must be at least 1"
    );
    anyhow::ensure!(
        args.ws_max_message_bytes >= 1024,
        "--ws-max-message-bytes must be at least 1024"
    );
    let shutdown = CancellationToken::new();
    let wiring::Serving {
        core,
        hub,
        hub_task,
    } = wiring::serving(cli, args.db_max_connections, shutdown.clone()).await?;
    // The worker stops on its own token, cancelled with the server's: it hands its tasks back
    // while the api finishes its requests. It runs on threads of its own, with a database pool
    // of its own: running tasks' captures must not hold up the api's requests and event
    // deliveries, nor their writes queue behind api reads (and WebSocket replays behind step
    // writes).
    let worker = match worker_args {
        Some(worker_args) => Some(
            worker::WorkerOnItsOwnRuntime::start(
                cli,
                worker_args,
                worker_args.db_connections(args.db_max_connections),
                hub.clone(),
                shutdown.clone(),
                tracing,
            )
            .await?,
        ),
        None => None,
    };
    // The metrics listener first: its address is logged before the api's `listening` line.
    if let Some(addr) = args.metrics_listen.0 {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --metrics-listen {addr}"))?;
        tracing::info!(address = %listener.local_addr()?, "serving metrics");
        let app = browserd_api::metrics_router(core.clone(), cli.metrics_token());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
            if let Err(err) = served {
                tracing::warn!(%err, "the metrics listener failed");
            }
        });
    }
    // Every api process fires due schedules, admitting their tasks as `/v1` admits tasks.
    let scheduler = core.clone().configured(settings.clone());
    tokio::spawn(scheduler.run_scheduler(shutdown.clone()));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "listening");
    let public_url = args
        .public_url
        .as_ref()
        .and_then(|url| url.0.clone())
        .unwrap_or_else(|| browserd_api::PublicUrl::from_listen_address(address));
    tracing::info!(%public_url, "public base URL");
    let app = browserd_api::router(
        core,
        ApiConfig {
            body_limit_bytes: args.body_limit_bytes,
            rate_limit,
            models: settings.models,
            proxies: settings.proxies,
            max_queued_tasks: settings.max_queued_tasks,
            trace_context: tracing.then(|| {
                Arc::new(telemetry::OtelTraceContext) as Arc<dyn browserd_api::TraceContext>
            }),
            unauthenticated_rate_limit: budget(
                args.unauth_rate_limit_per_second,
                args.unauth_rate_limit_burst,
            ),
            trusted_proxies: args.trusted_proxies.0.clone(),
            request_timeout: Duration::from_secs(args.request_timeout_s),
            ws_max_message_bytes: args.ws_max_message_bytes,
            webhook_allow_loopback: allow_loopback,
            key_cache_ttl: browserd_api::KEY_CACHE_TTL,
            metrics_token: cli.metrics_token(),
            public_url: Some(public_url),
        },
        shutdown.clone(),
    );

    tokio::spawn(cancel_on_signal(shutdown.clone()));
    // Connection info gives the api each client's address (the per-address rate limit).
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let grace = Duration::from_secs(args.shutdown_grace_s);
    tokio::select! {
        result = server => result.context("serving http")?,
        () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!("shutdown grace period elapsed; exiting with requests in flight");
        }
    }
    if let Some(worker) = worker {
        worker.stopped().await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), hub_task).await;
    tracing::info!("stopped");
    Ok(())
}

pub(crate) async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(err) => {
                    tracing::error!(%err, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
    shutdown.cancel();
}
