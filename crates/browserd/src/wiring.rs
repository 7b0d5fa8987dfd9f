//! The binary's one wiring of the store: it opens the Postgres store (connect, migrate, the
//! secrets keyring, the quota defaults), starts its event hub, and hands the store to the task
//! core ([`TaskCore`]) for every front end — the api, the `keys` commands — and to the worker
//! role, which is not a front end (`browserd-worker` works tasks through the store's
//! lease-guarded calls; `browserd mcp` starts it in its process too). No other module of the
//! binary names `browserd_store` (`crates/tasks/tests/one_path.rs` checks it).

use anyhow::Context;
use browserd_store::StoreOptions;
use browserd_tasks::TaskCore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) use browserd_store::{EventHub, SecretsKeyring, Store};

async fn connect(database_url: &str, options: &StoreOptions) -> anyhow::Result<Store> {
    // The URL may hold a password: never print it.
    Store::connect(database_url, options)
        .await
        .context("connecting to the database (DATABASE_URL)")
}

/// The store of a serving role: connected, migrated, with the secrets key when configured.
pub(crate) async fn open_store(cli: &crate::Cli, max_connections: u32) -> anyhow::Result<Store> {
    let mut store = connect(
        cli.database_url(),
        &StoreOptions {
            max_connections,
            ..StoreOptions::default()
        },
    )
    .await?;
    store.migrate().await.context("applying migrations")?;
    if let Some(keyring) = cli.secrets.keyring()? {
        store = store.with_secrets_keyring(keyring);
        let sealed = store
            .seal_webhook_secrets()
            .await
            .context("sealing webhook signing secrets")?;
        if sealed > 0 {
            tracing::info!(sealed, "sealed webhook signing secrets stored in clear");
        }
    }
    Ok(store
        .with_default_quotas(cli.quotas.defaults()?)
        .with_fair_share(cli.quotas.fair_share())
        .with_object_limits(cli.quotas.object_limits()))
}

/// Connects and applies the migrations (`browserd migrate`).
pub(crate) async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let store = connect(database_url, &StoreOptions::default()).await?;
    store.migrate().await.context("applying migrations")?;
    Ok(())
}

/// The task core of a one-shot command (`keys …`): connected, migrated, no event hub
/// listening (it follows no task).
pub(crate) async fn admin_core(database_url: &str) -> anyhow::Result<TaskCore> {
    let store = connect(database_url, &StoreOptions::default()).await?;
    store.migrate().await.context("applying migrations")?;
    Ok(TaskCore::new(store, EventHub::default()))
}

/// What a serving process runs on: the task core over its store, the hub (the worker of
/// `serve` shares it) and the hub's listener task.
pub(crate) struct Serving {
    pub core: TaskCore,
    pub hub: EventHub,
    pub hub_task: JoinHandle<()>,
}

/// The api's store (a pool of `max_connections`), its hub listening until `shutdown`, and the
/// core over both.
pub(crate) async fn serving(
    cli: &crate::Cli,
    max_connections: u32,
    shutdown: CancellationToken,
) -> anyhow::Result<Serving> {
    let store = open_store(cli, max_connections).await?;
    let (hub, hub_task) = EventHub::start(&store, shutdown)
        .await
        .context("listening for task events")?;
    Ok(Serving {
        core: TaskCore::new(store, hub.clone()),
        hub,
        hub_task,
    })
}

/// The task core of the worker role alone (its metrics' task gauges).
pub(crate) fn worker_core(store: &Store, hub: &EventHub) -> TaskCore {
    TaskCore::new(store.clone(), hub.clone())
}
