//! One Chrome the pool launched or connected to: its record, its launch or connect, its kill
//! and close.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use chromiumoxide::Browser;
use chromiumoxide::cdp::browser_protocol::target::SetDiscoverTargetsParams;
use futures::StreamExt;
use tokio::sync::RwLock;

use super::{
    config::{PoolConfig, chrome_args},
    health::{HealthSettings, watch_health},
    process::{descendant_pids, kill_pid, lower_priority, pid_alive, stop_exit_watcher},
};
use crate::{
    cdp::CdpConnection,
    error::{BrowserError, Result},
    launch::{ChromeBuild, ChromeIdentity},
    session::BrowserSession,
};

static CHROME_IDS: AtomicU64 = AtomicU64::new(1);

/// One running (or connected) Chrome.
pub(crate) struct Chrome {
    pub id: u64,
    /// chromiumoxide's client of a remote Chrome (none for a launched one, which is driven
    /// over its pipe by `conn` alone).
    pub browser: RwLock<Option<Browser>>,
    /// The one CDP connection the crate drives this Chrome over: its pipe when launched, a
    /// WebSocket when remote.
    pub conn: CdpConnection,
    dead: Arc<AtomicBool>,
    /// Until `close` has run (the process gauge counts each Chrome once).
    open: AtomicBool,
    handler: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub pid: Option<u32>,
    user_data_dir: std::sync::Mutex<Option<tempfile::TempDir>>,
    pub active: AtomicUsize,
    pub leased_total: AtomicUsize,
    /// Who the process runs as (a remote Chrome: nobody we know, no files handed over).
    pub identity: ChromeIdentity,
    /// Kills Chrome if this process dies first (see [`kill_when_this_process_exits`]).
    exit_watcher: std::sync::Mutex<Option<std::process::Child>>,
    /// The launched process (none for a remote Chrome).
    child: std::sync::Mutex<Option<tokio::process::Child>>,
    /// When the health watch last killed one of its renderers for its memory, and the cap.
    pub(super) memory_kill: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// Contexts opened ahead of the next tasks ([`BrowserSession::open_spare`]), newest
    /// last; each taken by a lease that fits it, all released when this Chrome is closed.
    pub(super) spares: std::sync::Mutex<Vec<BrowserSession>>,
    /// Spares are being opened (by one task at a time, one after the other).
    pub(super) spare_opening: AtomicBool,
}

impl Chrome {
    pub fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && !self.conn.is_closed()
    }

    pub(super) async fn launch(config: &PoolConfig) -> Result<Arc<Chrome>> {
        let dir = crate::launch::chrome_dir()?;
        let launched = crate::launch::launch_chrome(
            &config.chrome_path,
            &chrome_args(config),
            &config.identity,
            dir.path(),
            config.launch_timeout,
            config.cdp_timeout,
        )
        .await?;
        let crate::launch::LaunchedChrome {
            child,
            pid,
            conn,
            exit_watcher: watcher,
        } = launched;
        if let Some(nice) = config.nice {
            lower_priority(pid, nice).await;
        }
        let chrome = Self::finish(None, conn, Some(dir), Some(pid), config).await;
        *chrome.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        *chrome
            .exit_watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = watcher;
        Ok(chrome)
    }

    pub(super) async fn connect(endpoint: &str, config: &PoolConfig) -> Result<Arc<Chrome>> {
        let (browser, mut handler) =
            tokio::time::timeout(config.launch_timeout, Browser::connect(endpoint))
                .await
                .map_err(|_| BrowserError::Connect {
                    endpoint: endpoint.to_owned(),
                    reason: "no answer in time".into(),
                })?
                .map_err(|e| BrowserError::Connect {
                    endpoint: endpoint.to_owned(),
                    reason: e.to_string(),
                })?;
        // chromiumoxide's handler must be driven for its `Browser` to answer.
        let handler_task = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if let Err(err) = event {
                    tracing::warn!(error = %err, "remote chrome's chromiumoxide connection failed");
                    break;
                }
            }
        });
        // chromiumoxide's handler attaches to every tab it discovers and enables Runtime,
        // Network, Performance, Log and an isolated world there, which Chrome then pays for on
        // every navigation. The crate drives tabs over its own connection, so discovery is
        // turned off on chromiumoxide's (best effort: a failure only costs speed).
        let stop_discovery = browser.execute(SetDiscoverTargetsParams::new(false));
        match tokio::time::timeout(config.cdp_timeout, stop_discovery).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "could not stop chromiumoxide's target discovery")
            }
            Err(_) => tracing::warn!("stopping chromiumoxide's target discovery timed out"),
        }
        let ws_url = browser.websocket_address().clone();
        let conn = match CdpConnection::connect(&ws_url, config.cdp_timeout).await {
            Ok(conn) => conn,
            Err(err) => {
                handler_task.abort();
                return Err(err);
            }
        };
        Ok(Self::finish(Some((browser, handler_task)), conn, None, None, config).await)
    }

    /// The pool's record of a Chrome it launched (`pid`, its profile `dir`) or reached
    /// (`remote`: chromiumoxide's client and its handler task), driven over `conn`.
    async fn finish(
        remote: Option<(Browser, tokio::task::JoinHandle<()>)>,
        conn: CdpConnection,
        dir: Option<tempfile::TempDir>,
        pid: Option<u32>,
        config: &PoolConfig,
    ) -> Arc<Chrome> {
        let is_remote = remote.is_some();
        let (browser, remote_handler) = match remote {
            Some((browser, handler)) => (Some(browser), Some(handler)),
            None => (None, None),
        };
        let dead = Arc::new(AtomicBool::new(false));
        let watch_dead = dead.clone();
        let closed = conn.closed();
        let task = tokio::spawn(async move {
            match remote_handler.map(AbortOnDrop) {
                // The remote Chrome is gone when either of its connections is.
                Some(mut handler) => tokio::select! {
                    () = closed => {}
                    _ = &mut handler.0 => {}
                },
                None => closed.await,
            }
            // Not marked dead by `close`: Chrome crashed or its connection dropped.
            if !watch_dead.swap(true, Ordering::SeqCst) {
                tracing::warn!("chrome's CDP connection closed; marking browser dead");
                metrics::counter!("browserd_chrome_crashes_total").increment(1);
            }
        });
        if !is_remote {
            log_build(&conn, config).await;
        }
        metrics::gauge!("browserd_browser_processes").increment(1.0);
        let chrome = Arc::new(Chrome {
            id: CHROME_IDS.fetch_add(1, Ordering::Relaxed),
            browser: RwLock::new(browser),
            conn,
            dead,
            open: AtomicBool::new(true),
            handler: std::sync::Mutex::new(Some(task)),
            pid,
            user_data_dir: std::sync::Mutex::new(dir),
            active: AtomicUsize::new(0),
            leased_total: AtomicUsize::new(0),
            identity: if is_remote {
                ChromeIdentity {
                    user: None,
                    sandbox: crate::launch::Sandbox::On,
                }
            } else {
                config.identity.clone()
            },
            exit_watcher: std::sync::Mutex::new(None),
            child: std::sync::Mutex::new(None),
            memory_kill: std::sync::Mutex::new(None),
            spares: std::sync::Mutex::new(Vec::new()),
            spare_opening: AtomicBool::new(false),
        });
        if !is_remote {
            tokio::spawn(watch_health(
                Arc::downgrade(&chrome),
                HealthSettings::of(config),
            ));
        }
        chrome
    }

    /// The memory cap (MiB) if the health watch killed one of this Chrome's renderers for it
    /// within `window`.
    pub fn memory_killed_within(&self, window: Duration) -> Option<u64> {
        let killed = *self.memory_kill.lock().unwrap_or_else(|e| e.into_inner());
        killed
            .filter(|(at, _)| at.elapsed() <= window)
            .map(|(_, cap)| cap)
    }

    /// Kills the process (a hung Chrome): its connection closes, and every session on it
    /// sees the browser as gone.
    pub(super) fn kill(&self) {
        let killed = self
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(|child| child.start_kill().is_ok());
        if killed != Some(true)
            && let Some(pid) = self.pid
        {
            kill_pid(pid);
        }
    }

    /// Closes Chrome, waits for the process and every descendant, removes the profile dir.
    pub async fn close(&self) {
        self.dead.store(true, Ordering::SeqCst);
        // After `dead`: a spare that finishes opening now sees it and is released by its
        // opener, so none is left holding this Chrome. Dropped, not released: its context
        // goes with the browser.
        let spares = std::mem::take(&mut *self.spares());
        metrics::gauge!("browserd_browser_spare_contexts").decrement(spares.len() as f64);
        drop(spares);
        let descendants = self.pid.map(descendant_pids).unwrap_or_default();
        let mut guard = self.browser.write().await;
        if self.open.swap(false, Ordering::SeqCst) {
            metrics::gauge!("browserd_browser_processes").decrement(1.0);
        }
        // A remote Chrome is only disconnected from: its chromiumoxide client goes.
        guard.take();
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            // Asked to close first (it flushes its profile and ends its helpers), killed if it
            // does not within 10 s. It may exit before it answers: its pipe's end is enough.
            let asked = self
                .conn
                .call_raw(
                    None,
                    "Browser.close",
                    serde_json::json!({}),
                    Duration::from_secs(5),
                )
                .await;
            let closing = matches!(asked, Ok(_) | Err(BrowserError::ConnectionClosed));
            let exited = closing
                && tokio::time::timeout(Duration::from_secs(10), child.wait())
                    .await
                    .is_ok();
            if !exited {
                let _ = child.kill().await;
            }
        }
        drop(guard);
        if let Ok(mut handler) = self.handler.lock()
            && let Some(task) = handler.take()
        {
            task.abort();
        }
        // Chrome's helpers exit once the browser process is gone; wait for them.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let alive: Vec<u32> = descendants
                .iter()
                .copied()
                .filter(|p| pid_alive(*p))
                .collect();
            if alive.is_empty() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                tracing::warn!(?alive, "chrome helper processes still running after close");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Ok(mut dir) = self.user_data_dir.lock() {
            dir.take();
        }
        let watcher = self
            .exit_watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(watcher) = watcher {
            stop_exit_watcher(watcher);
        }
    }
}

/// Aborts its task when dropped (with the task that holds it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Logs which build a launched Chrome is (its `Browser.getVersion` product), and warns when
/// that is not the build its executable's name promised (the headless flag was chosen by it).
async fn log_build(conn: &CdpConnection, config: &PoolConfig) {
    let expected = ChromeBuild::of_executable(&config.chrome_path);
    let version = conn
        .call_raw(
            None,
            "Browser.getVersion",
            serde_json::json!({}),
            config.cdp_timeout,
        )
        .await;
    #[derive(serde::Deserialize)]
    struct Version {
        #[serde(default)]
        product: String,
    }
    let product = match version.and_then(|answer| answer.decode::<Version>()) {
        Ok(version) => version.product,
        Err(err) => {
            tracing::debug!(%err, "Browser.getVersion failed after launch");
            return;
        }
    };
    match ChromeBuild::of_product(&product) {
        Some(build) if build != expected => tracing::warn!(
            chrome = %config.chrome_path.display(),
            %product,
            "Chrome is the {} build although its name says {}",
            build.name(),
            expected.name()
        ),
        _ => tracing::debug!(
            chrome = %config.chrome_path.display(),
            %product,
            build = expected.name(),
            "Chrome launched"
        ),
    }
}
