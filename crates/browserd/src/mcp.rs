//! `browserd mcp`: the MCP task tools over stdio (stdout carries the protocol; logs go to
//! stderr). By default tasks run in this process, as with `browserd run` — one Chrome, the
//! models of the config and `BROWSERD_LLM_*` — through the server's own task core
//! (`browserd_tasks::TaskService`, the same validation and status machine) over an in-memory
//! store, worked by a `browserd_worker::LocalWorker`; everything is kept until the client
//! disconnects, and then the tasks still running are stopped. With `--server URL --key-env VAR`
//! the tools call that server's REST API instead.

use std::sync::Arc;

use anyhow::Context;
use browserd_mcp::rmcp::ServiceExt;
use browserd_mcp::{Backend, BrowserdMcp, RemoteBackend, TaskBackend};
use browserd_types::ApiKeyId;
use browserd_worker::LocalWorker;
use clap::Args;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::config;
use crate::runtime::{PoolShape, Runtime};

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

/// Serves the tools on stdin/stdout until the client closes them.
pub async fn serve(
    config_file: Option<&std::path::Path>,
    proxies: &crate::egress::ProxiesArgs,
    args: &McpArgs,
) -> anyhow::Result<()> {
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
        None => {
            let models = config::load_models(config_file)?;
            let catalog = config::model_catalog(&models)?;
            let Runtime { pool, runner } = Runtime::build(
                &args.browser,
                proxies,
                models,
                PoolShape::single(args.max_running_tasks as usize),
            )?;
            let (tasks, store, hub) = crate::wiring::in_memory(catalog, proxies.names()?);
            // The one owner of every task of this process.
            let key = ApiKeyId::new();
            let shutdown = CancellationToken::new();
            let worker = LocalWorker::new(store, hub, runner, args.max_running_tasks as usize);
            let worker = tokio::spawn(worker.run(shutdown.clone()));
            let backend = TaskBackend::in_process(tasks, key, shutdown.clone());
            tracing::info!("serving MCP on stdio, running tasks in this process");
            let result = run_stdio(Arc::new(backend)).await;
            // The client went away: the worker stops what still runs, then Chrome closes.
            shutdown.cancel();
            if let Err(err) = worker.await {
                tracing::warn!(%err, "the in-process worker panicked");
            }
            pool.shutdown().await;
            result
        }
    }
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
