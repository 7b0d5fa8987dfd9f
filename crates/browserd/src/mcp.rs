//! `browserd mcp`: the MCP task tools over stdio (stdout carries the protocol; logs go to
//! stderr). By default tasks run in this process — one Chrome, the models of the config and
//! `BROWSERD_LLM_*` — on the one task path: the task core (`browserd_tasks`) over the
//! configured database (`DATABASE_URL`), acting for the local key `mcp-local`, and the worker
//! role's claim loop started here (`crate::worker::start_in_process`). Its tasks are rows of
//! that database like the server's; when the client disconnects, those it started that have
//! not ended are stopped. With `--server URL --key-env VAR` the tools call that server's REST
//! API instead.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use browserd_mcp::rmcp::ServiceExt;
use browserd_mcp::{Backend, BrowserdMcp, RemoteBackend, TaskBackend};
use browserd_tasks::TaskSettings;
use clap::Args;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::runtime::{PoolShape, Runtime};
use crate::{Cli, config, wiring};

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Proxy the tools to this browserd server's REST API (e.g. `http://127.0.0.1:8080`)
    /// instead of running tasks in this process.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,

    /// With --server: the environment variable holding the API key (never the key itself).
    #[arg(
        long,
        value_name = "VAR",
        default_value = "BROWSERD_API_KEY",
        requires = "server"
    )]
    pub key_env: String,

    /// Tasks that may run at once (in-process mode): browser contexts of the one Chrome.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub max_running_tasks: u32,

    /// The browser of the in-process mode.
    #[command(flatten)]
    pub browser: crate::runtime::BrowserArgs,
}

/// The API key that owns the tasks of `browserd mcp` in-process.
const LOCAL_KEY: &str = "mcp-local";

/// Serves the tools on stdin/stdout until the client closes them.
pub async fn serve(cli: &Cli, args: &McpArgs) -> anyhow::Result<()> {
    match &args.server {
        Some(server) => {
            let key = std::env::var(&args.key_env).map_err(|_| {
                anyhow::anyhow!(
                    "--server needs an API key in the environment variable {} (--key-env)",
                    args.key_env
                )
            })?;
            anyhow::ensure!(
                !key.trim().is_empty(),
                "the environment variable {} is empty",
                args.key_env
            );
            let backend = RemoteBackend::new(server, SecretString::from(key.trim().to_owned()))
                .context("building the HTTP client")?;
            tracing::info!(%server, "serving MCP on stdio, proxying to the server");
            run_stdio(Arc::new(backend)).await
        }
        None => serve_in_process(cli, args).await,
    }
}

/// The tools on this process's task core over the configured database, acting for the local
/// key `mcp-local`, with the worker role's claim loop started here to run the tasks.
async fn serve_in_process(cli: &Cli, args: &McpArgs) -> anyhow::Result<()> {
    let concurrency = args.max_running_tasks as usize;
    let models = config::load_models(cli.config.as_deref())?;
    let catalog = config::model_catalog(&models)?;
    // The hub and the watches end last, after the worker has let its tasks go.
    let shutdown = CancellationToken::new();
    let wiring::Serving {
        core,
        hub,
        hub_task,
    } = wiring::serving(cli, 4, shutdown.clone()).await?;
    let core = core.configured(TaskSettings {
        models: catalog,
        proxies: cli.proxies.names()?,
        max_queued_tasks: None,
    });
    let key = core
        .local_api_key(LOCAL_KEY)
        .await
        .context("finding the local API key")?;
    let Runtime { pool, runner } = Runtime::build(
        &args.browser,
        &cli.proxies,
        models,
        PoolShape::single(concurrency),
    )?;
    let stop_worker = CancellationToken::new();
    let worker =
        crate::worker::start_in_process(cli, runner, concurrency, hub.clone(), stop_worker.clone())
            .await?;
    let backend = Arc::new(TaskBackend::in_process(core.clone(), key, shutdown.clone()));
    tracing::info!("serving MCP on stdio, running tasks in this process");
    let result = run_stdio(backend.clone()).await;
    // The client went away: its tasks that have not ended are stopped (their runs see it
    // through the hub), then the worker lets them go, then Chrome closes.
    let stopped = backend.stop_started_tasks().await;
    tracing::info!(stopped, "stopped the tasks the client left");
    stop_worker.cancel();
    if let Err(err) = worker.await {
        tracing::warn!(%err, "the in-process worker panicked");
    }
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), hub_task).await;
    pool.shutdown().await;
    result
}

async fn run_stdio(backend: Arc<dyn Backend>) -> anyhow::Result<()> {
    // SIGINT/SIGTERM end the session like a disconnect, so Chrome is closed on the way out.
    let signal = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::cancel_on_signal(signal.clone()));
    let session = async {
        let service = BrowserdMcp::new(backend)
            .serve(browserd_mcp::rmcp::transport::stdio())
            .await
            .context("starting the MCP session on stdio")?;
        let reason = service.waiting().await.context("serving MCP on stdio")?;
        tracing::info!(?reason, "MCP client disconnected");
        anyhow::Ok(())
    };
    tokio::select! {
        result = session => result,
        () = signal.cancelled() => Ok(()),
    }
}
