//! The CDP connection shared by the guards of one Chrome, and which guard owns which context
//! and session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::targets::dispatch;
use super::{EgressGuardError, EgressGuardOptions, Shared, auto_attach_params};
use crate::cdp::CdpConnection;
use crate::egress::link::CdpLink;

/// The CDP connection shared by the guards of one Chrome (see the module docs), and which
/// guard owns which context and session.
pub(super) struct Hub {
    /// Which Chrome: its websocket URL, or its shared connection's number.
    key: String,
    pub(super) link: CdpLink,
    link_task: JoinHandle<()>,
    dispatch_task: JoinHandle<()>,
    pub(super) routes: Arc<Routes>,
    /// Set once the browser-level auto-attach is on.
    auto_attach: tokio::sync::OnceCell<()>,
}

#[derive(Default)]
pub(super) struct Routes {
    inner: Mutex<RouteTable>,
}

#[derive(Default)]
pub(super) struct RouteTable {
    /// The guard of a private hub's whole browser.
    pub(super) whole: Option<Arc<Shared>>,
    /// Guards by browser context id.
    pub(super) contexts: HashMap<String, Arc<Shared>>,
    /// The guard owning each attached session of the scopes (kept until the session detaches,
    /// so a guard dropped before its context closes still judges its targets' requests).
    pub(super) sessions: HashMap<String, Arc<Shared>>,
}

impl Routes {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, RouteTable> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a hub reaches its Chrome.
#[derive(Clone, Copy)]
pub(super) enum Endpoint<'a> {
    /// A websocket of the hub's own to this browser URL.
    Url(&'a str),
    /// A browser session of the hub's own on the Chrome's connection (the pool's).
    Connection(&'a CdpConnection),
}

impl Endpoint<'_> {
    /// The key of the Chrome's hub in [`HUBS`].
    pub(super) fn key(self) -> String {
        match self {
            Self::Url(url) => url.to_owned(),
            Self::Connection(conn) => format!("connection #{}", conn.id()),
        }
    }
}

/// Hubs by Chrome ([`Endpoint::key`]): one per Chrome while any of its guards lives.
static HUBS: std::sync::LazyLock<tokio::sync::Mutex<HashMap<String, std::sync::Weak<Hub>>>> =
    std::sync::LazyLock::new(Default::default);

impl Hub {
    pub(super) async fn connect(
        endpoint: Endpoint<'_>,
        options: &EgressGuardOptions,
    ) -> Result<Self, EgressGuardError> {
        let (link, events, link_task) = match endpoint {
            Endpoint::Url(ws_url) => CdpLink::connect(ws_url, options.command_timeout).await?,
            Endpoint::Connection(conn) => {
                CdpLink::on_connection(conn, options.command_timeout).await?
            }
        };
        let routes = Arc::new(Routes::default());
        let dispatch_task = tokio::spawn(dispatch(
            events,
            link.clone(),
            routes.clone(),
            options.command_timeout,
        ));
        Ok(Self {
            key: endpoint.key(),
            link,
            link_task,
            dispatch_task,
            routes,
            auto_attach: tokio::sync::OnceCell::new(),
        })
    }

    /// The live hub of the Chrome at `endpoint`, connected now if there is none.
    pub(super) async fn shared(
        endpoint: Endpoint<'_>,
        options: &EgressGuardOptions,
    ) -> Result<Arc<Self>, EgressGuardError> {
        let key = endpoint.key();
        let mut hubs = HUBS.lock().await;
        hubs.retain(|_, hub| hub.strong_count() > 0);
        if let Some(hub) = hubs.get(&key).and_then(std::sync::Weak::upgrade)
            && hub.is_alive()
        {
            return Ok(hub);
        }
        let hub = Arc::new(Self::connect(endpoint, options).await?);
        hubs.insert(key, Arc::downgrade(&hub));
        Ok(hub)
    }

    pub(super) fn is_alive(&self) -> bool {
        self.link.is_alive() && !self.dispatch_task.is_finished()
    }

    /// Turns the browser-level auto-attach on, once; true when this call did (its existing
    /// targets were then attached to the hub and routed to the guards registered so far).
    pub(super) async fn start_auto_attach(
        &self,
        timeout: Duration,
    ) -> Result<bool, EgressGuardError> {
        let mut started = false;
        self.auto_attach
            .get_or_try_init(|| async {
                self.link
                    .call("Target.setAutoAttach", None, auto_attach_params(), timeout)
                    .await
                    .map(|_| {
                        started = true;
                    })
            })
            .await?;
        Ok(started)
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.dispatch_task.abort();
        self.link_task.abort();
        self.link.detach();
        tracing::debug!(chrome = %self.key, "egress: the guards' CDP client is closed");
    }
}
