//! The Chrome pool: processes (or remote endpoints), each hosting isolated contexts.
//!
//! Each Chrome is driven over one [`CdpConnection`]: a launched one's `--remote-debugging-pipe`
//! (it opens no DevTools port; [`crate::launch`]), a remote one's WebSocket. The connection's
//! end is the Chrome's death (a crash, a kill, an exit: the pipe's EOF); the health watch and
//! `Browser.close` go over it too. chromiumoxide only connects to remote endpoints.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use chromiumoxide::Browser;
use chromiumoxide::cdp::browser_protocol::target::SetDiscoverTargetsParams;
use futures::{FutureExt, StreamExt};
use tokio::sync::{Mutex, OwnedSemaphorePermit, RwLock, Semaphore};

use crate::{
    cdp::CdpConnection,
    egress::{DEFAULT_DNS_TIMEOUT, EgressProxy, HostResolver, ProxyOptions, UpstreamProxy},
    error::{BrowserError, Result},
    launch::{ChromeBuild, ChromeIdentity},
    session::{BrowserSession, ContextOptions},
    types::Viewport,
};

/// Registers the help texts of the pool's metrics (and shows the counters at zero).
pub fn describe_metrics() {
    metrics::describe_gauge!(
        "browserd_browser_processes",
        "Chrome processes (or remote browsers) the pool holds"
    );
    metrics::describe_gauge!(
        "browserd_browser_contexts_in_use",
        "Browser contexts leased to tasks"
    );
    metrics::describe_gauge!(
        "browserd_browser_contexts_capacity",
        "Browser contexts the pool can lease at once (processes x contexts per process)"
    );
    metrics::describe_counter!(
        "browserd_chrome_launches_total",
        "Chrome launches (or remote connects) by outcome"
    );
    metrics::describe_counter!(
        "browserd_browser_context_opens_total",
        "Browser contexts given to tasks, by where they came from: a spare opened ahead of the task, or new"
    );
    metrics::describe_gauge!(
        "browserd_browser_spare_contexts",
        "Browser contexts opened ahead of the next tasks and not yet given to one (spares)"
    );
    metrics::describe_counter!(
        "browserd_chrome_crashes_total",
        "Chrome processes whose connection died without the pool closing them"
    );
    metrics::gauge!("browserd_browser_processes").increment(0.0);
    metrics::gauge!("browserd_browser_contexts_in_use").increment(0.0);
    metrics::gauge!("browserd_browser_spare_contexts").increment(0.0);
    metrics::counter!("browserd_chrome_crashes_total").increment(0);
    metrics::counter!("browserd_chrome_launches_total", "outcome" => "ok").increment(0);
    metrics::counter!("browserd_browser_context_opens_total", "from" => "spare").increment(0);
    metrics::counter!("browserd_browser_context_opens_total", "from" => "new").increment(0);
    metrics::counter!("browserd_chrome_launches_total", "outcome" => "error").increment(0);
}

/// How the pool launches or reaches Chrome.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Chrome executable (Debian: `/usr/bin/chromium-headless-shell`, or the full build
    /// `/usr/bin/chromium`; [`ChromeBuild`] tells them apart).
    pub chrome_path: PathBuf,
    /// Chrome processes to run (ignored when `remote_endpoints` is non-empty).
    pub processes: usize,
    /// Concurrent contexts (tasks) per process / endpoint.
    pub contexts_per_process: usize,
    /// Replace a process after it has hosted this many tasks (0 = never).
    pub recycle_after_tasks: usize,
    /// Timeout of every CDP command.
    pub cdp_timeout: Duration,
    /// Timeout of a Chrome launch or remote connect.
    pub launch_timeout: Duration,
    /// Use these `ws://…/devtools/browser/…` endpoints instead of launching Chrome.
    pub remote_endpoints: Vec<String>,
    /// Extra Chrome command-line arguments.
    pub extra_args: Vec<String>,
    /// Viewport of every tab of a session whose task sets none (browser-use's 1920×1080 by
    /// default); Chrome's window is launched at this size too.
    pub viewport: Viewport,
    /// Niceness given to each launched Chrome and its helper processes (renderers fork from
    /// the zygotes and inherit it), so that the service's own work — the api, event delivery,
    /// Postgres — keeps the CPU when browsers saturate it. `None` leaves Chrome as it starts.
    pub nice: Option<i32>,
    /// Send all traffic of every context that has egress settings through the egress proxy
    /// (one listener per context on 127.0.0.1; see [`crate::egress::proxy`]). Off: only the
    /// CDP guard enforces the policy (benchmarks' baseline; a remote Chrome that cannot reach
    /// this host's loopback).
    pub egress_proxy: bool,
    /// DNS servers the egress checks and the proxy query; empty: the system resolver.
    pub egress_dns: Vec<SocketAddr>,
    /// Upstream proxies a task may pick by name ([`ContextOptions::proxy`]).
    pub upstream_proxies: HashMap<String, UpstreamProxy>,
    /// Who launched Chrome processes run as, and whether their sandbox is on.
    pub identity: ChromeIdentity,
    /// How often each launched Chrome is checked: that it answers (else it is killed after
    /// `hang_timeout`, and its tasks go on in a new one) and its renderers' memory.
    pub health_interval: Duration,
    /// How long a launched Chrome may take to answer a health check before it counts as hung
    /// and is killed.
    pub hang_timeout: Duration,
    /// The most resident memory one renderer process may use, in MiB; a renderer above it is
    /// killed (its tabs — one task's — are replaced and the task told). `None` = no cap.
    pub renderer_memory_cap_mb: Option<u64>,
    /// The most contexts each Chrome keeps opened ahead of the next tasks (spares: their guard
    /// and proxy listener attached but refusing everything, their first tab's renderer
    /// started), each bound to the task that leases it; 0 keeps none. A lease then skips the
    /// part of opening that waits on Chrome — the new renderer's start — at the cost of one
    /// idle renderer per spare. Within this bound a Chrome keeps one spare per context it has
    /// free, and at least one ([`PoolInner::spare_target`]): an idle pool is ready for a
    /// burst of tasks, a busy one holds no more renderers than its tasks and the next one.
    pub spare_contexts: usize,
}

/// The Chrome a pool launches unless told otherwise: Debian's `chromium-headless-shell`
/// package. Measured against the full build in its new headless mode (`--chrome
/// /usr/bin/chromium`) by `tests/benches/service_load.rs`: no window, so no top-chrome WebUI
/// renderer per browser context, and no crashpad handlers — less than half the memory per
/// task and several times the throughput, with the same captures (docs/src/benchmarks.md).
pub const DEFAULT_CHROME_PATH: &str = "/usr/bin/chromium-headless-shell";
/// Debian's full Chromium build, for `--chrome` (headed-only features, or to compare).
pub const FULL_CHROME_PATH: &str = "/usr/bin/chromium";
/// The resident memory one renderer may use unless told otherwise
/// ([`PoolConfig::renderer_memory_cap_mb`]).
pub const DEFAULT_RENDERER_MEMORY_CAP_MB: u64 = 2048;
/// Niceness of launched Chrome processes unless told otherwise ([`PoolConfig::nice`]).
pub const DEFAULT_CHROME_NICE: i32 = 10;

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            chrome_path: PathBuf::from(DEFAULT_CHROME_PATH),
            processes: 1,
            contexts_per_process: 4,
            recycle_after_tasks: 50,
            cdp_timeout: Duration::from_secs(30),
            launch_timeout: Duration::from_secs(30),
            remote_endpoints: Vec::new(),
            extra_args: Vec::new(),
            viewport: Viewport::BROWSER_USE,
            nice: Some(DEFAULT_CHROME_NICE),
            egress_proxy: true,
            egress_dns: Vec::new(),
            upstream_proxies: HashMap::new(),
            identity: ChromeIdentity::default(),
            health_interval: Duration::from_secs(2),
            hang_timeout: Duration::from_secs(20),
            renderer_memory_cap_mb: Some(DEFAULT_RENDERER_MEMORY_CAP_MB),
            spare_contexts: DEFAULT_SPARE_CONTEXTS,
        }
    }
}

/// Flags every launched Chrome gets (see DEVELOPERS.md). QUIC is off (UDP would bypass the
/// egress proxy) and WebRTC may not send UDP outside a proxy: with the per-context egress proxy
/// (http CONNECT, no UDP) its traffic goes through the proxy over TCP or not at all.
/// `--no-sandbox` is not among them: it depends on who Chrome runs as
/// ([`crate::launch::ChromeIdentity`]); nor is the headless flag, which depends on the build
/// ([`ChromeBuild::build_flags`]: `--headless=new` for the full build, `--site-per-process`
/// for the shell, which takes every flag here too).
pub const CHROME_FLAGS: [&str; 8] = [
    "--disable-gpu",
    "--disable-quic",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// chromiumoxide 0.9's default arguments (`DEFAULT_ARGS` in its `browser/config.rs`, from
/// puppeteer) without `--enable-automation`: that flag shows the "controlled by automated
/// software" banner, which browser-use does not have (it took 143 px of a 1280×800 window's
/// viewport). chromiumoxide's defaults are switched off as a whole (`disable_default_args`) and
/// this list passed instead; its headless mode is not used either because it adds
/// `--hide-scrollbars`, and browser-use keeps scrollbars visible (they take layout width, so
/// the page lays out as it does there). Without leading dashes. (The pool launches Chrome
/// itself now — [`crate::launch`] — with these flags, over its DevTools pipe.)
const CHROMIUMOXIDE_ARGS_KEPT: [&str; 24] = [
    "disable-background-networking",
    "enable-features=NetworkService,NetworkServiceInProcess",
    "disable-background-timer-throttling",
    "disable-backgrounding-occluded-windows",
    "disable-breakpad",
    "disable-client-side-phishing-detection",
    "disable-component-extensions-with-background-pages",
    "disable-default-apps",
    "disable-dev-shm-usage",
    // Chrome keeps only the last --disable-features: one list. Besides TranslateUI, the
    // browser's own calls to Google services that would otherwise go through the task's egress
    // proxy and be reported to the model as blocked connections (autofill field types,
    // optimization hints). And the spare renderer process Chrome keeps warm for the browser
    // context of the last navigation: every task has a context of its own, so the next
    // task never uses the spare the last one left — measured with `service_load`, it cost
    // ~12 % of the CPU of a read-only task and a renderer's memory, and the pool's spare
    // contexts start their own tab's renderer ahead of need instead.
    "disable-features=TranslateUI,AutofillServerCommunication,OptimizationHints,OptimizationGuideModelDownloading,MediaRouter,SpareRendererForSitePerProcess",
    "disable-hang-monitor",
    "disable-ipc-flooding-protection",
    "disable-popup-blocking",
    "disable-prompt-on-repost",
    "disable-renderer-backgrounding",
    "disable-sync",
    "force-color-profile=srgb",
    "metrics-recording-only",
    "no-first-run",
    "password-store=basic",
    "use-mock-keychain",
    "enable-blink-features=IdleDetection",
    "lang=en_US",
    // What chromiumoxide's headless mode added, minus `hide-scrollbars`.
    "mute-audio",
];

/// The command line of a launched Chrome (without profile, endpoint and sandbox flags, which
/// [`crate::launch::launch_chrome`] adds).
fn chrome_args(config: &PoolConfig) -> Vec<String> {
    let build = ChromeBuild::of_executable(&config.chrome_path);
    CHROMIUMOXIDE_ARGS_KEPT
        .iter()
        .map(|flag| format!("--{flag}"))
        .chain(build.build_flags().iter().map(|flag| (*flag).to_owned()))
        .chain(CHROME_FLAGS.iter().map(|flag| (*flag).to_owned()))
        .chain(std::iter::once(format!(
            "--window-size={},{}",
            config.viewport.width, config.viewport.height
        )))
        .chain(
            config
                .extra_args
                .iter()
                .map(|flag| {
                    if flag.starts_with('-') {
                        flag.clone()
                    } else {
                        format!("--{flag}")
                    }
                })
                .filter(|flag| {
                    let opens_port = opens_devtools_port(flag);
                    if opens_port {
                        tracing::warn!(
                            %flag,
                            "extra Chrome flag dropped: Chrome is driven over its pipe and opens no DevTools port"
                        );
                    }
                    !opens_port
                }),
        )
        .collect()
}

/// Whether `flag` would make Chrome listen for DevTools on a TCP port (or choose its
/// address), which any local process could then drive, reaching every tenant's contexts.
fn opens_devtools_port(flag: &str) -> bool {
    let name = flag.split('=').next().unwrap_or(flag);
    matches!(
        name,
        "--remote-debugging-port" | "--remote-debugging-address"
    )
}

/// [`PoolConfig::spare_contexts`] by default, so that an idle Chrome is ready for a burst of
/// tasks (one spare per free slot, up to this). It costs nothing at the peak (a full Chrome
/// keeps one) and ~17 MiB PSS per extra spare at idle; with 20 read-only tasks, 4 at once, on a
/// quiet 2-core machine it took the batch from 438 to 464 tasks/min (docs/src/benchmarks.md,
/// "Ready for a burst").
pub const DEFAULT_SPARE_CONTEXTS: usize = 4;

/// The spare contexts a Chrome with `active` of its `per_process` contexts leased is to hold:
/// one per free context, at least one, at most `most` (none when `most` is 0).
fn spare_target(most: usize, per_process: usize, active: usize) -> usize {
    if most == 0 {
        return 0;
    }
    per_process.saturating_sub(active).clamp(1, most)
}

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
    memory_kill: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// Contexts opened ahead of the next tasks ([`BrowserSession::open_spare`]), newest
    /// last; each taken by a lease that fits it, all released when this Chrome is closed.
    spares: std::sync::Mutex<Vec<BrowserSession>>,
    /// Spares are being opened (by one task at a time, one after the other).
    spare_opening: AtomicBool,
}

impl Chrome {
    pub fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && !self.conn.is_closed()
    }

    async fn launch(config: &PoolConfig) -> Result<Arc<Chrome>> {
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

    async fn connect(endpoint: &str, config: &PoolConfig) -> Result<Arc<Chrome>> {
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

    fn spares(&self) -> std::sync::MutexGuard<'_, Vec<BrowserSession>> {
        self.spares.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest spare (a tab that has sat idle navigates a little slower: the oldest
    /// waits for the next lease).
    fn take_spare(&self) -> Option<BrowserSession> {
        let spare = self.spares().pop();
        if spare.is_some() {
            metrics::gauge!("browserd_browser_spare_contexts").decrement(1.0);
        }
        spare
    }

    /// Keeps `spare` among this Chrome's spares, unless the Chrome is closing or gone, or
    /// holds `most` already: then it is handed back to be released.
    fn keep_spare(&self, spare: BrowserSession, most: usize) -> Option<BrowserSession> {
        let mut spares = self.spares();
        if !self.is_alive() || spares.len() >= most {
            return Some(spare);
        }
        spares.push(spare);
        metrics::gauge!("browserd_browser_spare_contexts").increment(1.0);
        None
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
    fn kill(&self) {
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

/// Makes sure the Chrome `pid` does not outlive this process, however it ends (a crash, a
/// SIGKILL, a panicking test): a small watcher process (`tail --pid`, which polls once a second
/// without spawning anything) waits for this process to go and then kills Chrome — only if
/// `pid`'s command line still contains `marker` (its unique profile directory), so a reused pid
/// is never hit. Chrome's helpers exit with it. The watcher leads its own process group: kill
/// the group when Chrome is closed normally. Best effort: without `sh`/`tail` nothing is watched.
pub fn kill_when_this_process_exits(pid: u32, marker: &str) -> Option<std::process::Child> {
    let marker = marker.replace('\'', "");
    let watcher = format!(
        "tail --pid={} -f /dev/null 2>/dev/null; grep -qaF -- '{marker}' /proc/{pid}/cmdline 2>/dev/null && kill -9 {pid}",
        std::process::id()
    );
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sh")
        .args(["-c", &watcher])
        // Nothing of the worker's environment (keys, database URL) in a process that outlives it.
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        // Its own process group, so stopping it stops its `tail` too (and a terminal's Ctrl-C,
        // sent to the foreground group, does not reach it).
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .inspect_err(|err| tracing::warn!(error = %err, "could not start the Chrome exit watcher"))
        .ok()
}

/// What the health watch of each launched Chrome checks, and how often.
#[derive(Clone, Copy, Debug)]
struct HealthSettings {
    interval: Duration,
    hang_timeout: Duration,
    renderer_memory_cap_mb: Option<u64>,
}

impl HealthSettings {
    fn of(config: &PoolConfig) -> Self {
        Self {
            interval: config.health_interval,
            hang_timeout: config.hang_timeout,
            renderer_memory_cap_mb: config.renderer_memory_cap_mb,
        }
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

/// Watches one launched Chrome until it is gone: every `interval`, a `Browser.getVersion`
/// that must be answered within `hang_timeout` (else Chrome is killed: a hung browser fails
/// its tasks' calls only after their own timeouts, a dead one at once, and its tasks are
/// resumed in a new one), and each renderer's resident memory against the cap (a renderer
/// above it is killed before it takes the machine, and Chrome, down).
async fn watch_health(chrome: std::sync::Weak<Chrome>, settings: HealthSettings) {
    loop {
        tokio::time::sleep(settings.interval).await;
        let Some(chrome) = chrome.upgrade() else {
            return;
        };
        if !chrome.is_alive() {
            return;
        }
        let answered = chrome
            .conn
            .call_raw(
                None,
                "Browser.getVersion",
                serde_json::json!({}),
                settings.hang_timeout,
            )
            .await;
        if let Err(err) = answered {
            if !chrome.is_alive() {
                return;
            }
            tracing::warn!(pid = ?chrome.pid, %err, "Chrome stopped answering; killing it");
            metrics::counter!("browserd_chrome_hangs_total").increment(1);
            chrome.kill();
            return;
        }
        if let (Some(cap_mb), Some(pid)) = (settings.renderer_memory_cap_mb, chrome.pid) {
            let cap_kib = cap_mb.saturating_mul(1024);
            let renderers = tokio::task::spawn_blocking(move || renderer_memory_kib(pid))
                .await
                .unwrap_or_default();
            for (renderer, rss_kib) in renderers {
                if rss_kib > cap_kib {
                    tracing::warn!(
                        renderer,
                        rss_mib = rss_kib / 1024,
                        cap_mb,
                        "a renderer is over its memory cap; killing it"
                    );
                    *chrome.memory_kill.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((std::time::Instant::now(), cap_mb));
                    metrics::counter!("browserd_renderer_memory_kills_total").increment(1);
                    kill_pid(renderer);
                }
            }
        }
    }
}

/// The renderer processes under Chrome `pid` with their resident memory (KiB), from /proc.
fn renderer_memory_kib(pid: u32) -> Vec<(u32, u64)> {
    descendant_pids(pid)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|cmdline| contains(&cmdline, b"--type=renderer"))
        })
        .filter_map(|p| {
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let rss = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some((p, rss))
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// SIGKILL to `pid` (the shell's `kill`: the workspace forbids `unsafe`, and `sh` is in every
/// base system, as for the exit watcher).
fn kill_pid(pid: u32) {
    let _ = std::process::Command::new("sh")
        .args(["-c", &format!("kill -9 {pid}")])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Stops a watcher from [`kill_when_this_process_exits`]: its whole process group (the `sh`
/// and its `tail`; dash's `kill` takes `-PGID`, not `--`), then reaps it.
/// [`stop_exit_watcher`] of a watcher that may not have started.
pub(crate) fn stop_exit_watcher_of(watcher: Option<std::process::Child>) {
    if let Some(watcher) = watcher {
        stop_exit_watcher(watcher);
    }
}

fn stop_exit_watcher(mut watcher: std::process::Child) {
    let group = watcher.id();
    let _ = std::process::Command::new("sh")
        .args(["-c", &format!("kill -9 -{group}")])
        .stderr(std::process::Stdio::null())
        .status();
    let _ = watcher.wait();
}

/// Sets the niceness of `pid` and all its descendants with renice(1) (best effort: a failure
/// only costs the service its priority over the browsers). Hand-written rather than
/// `setpriority(2)`: the workspace forbids `unsafe`, and renice is in every Debian base system.
async fn lower_priority(pid: u32, nice: i32) {
    let mut pids = descendant_pids(pid);
    pids.push(pid);
    let renice = tokio::process::Command::new("renice")
        .arg("-n")
        .arg(nice.to_string())
        .arg("-p")
        .args(pids.iter().map(u32::to_string))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(Duration::from_secs(5), renice).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => tracing::debug!(%status, "renice of chrome failed"),
        Ok(Err(err)) => tracing::debug!(%err, "renice is not available"),
        Err(_) => tracing::debug!("renice of chrome timed out"),
    }
}

/// All descendants of `pid` (from /proc; empty where /proc is unavailable).
pub fn descendant_pids(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
                // pid (comm) state ppid …; comm may contain spaces, so split after ')'.
                if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                    let mut fields = rest.split_whitespace();
                    let _state = fields.next();
                    if let Some(ppid) = fields.next().and_then(|s| s.parse::<u32>().ok()) {
                        parent_of.push((p, ppid));
                    }
                }
            }
        }
    }
    let mut found: HashSet<u32> = HashSet::new();
    let mut frontier = vec![pid];
    while let Some(cur) = frontier.pop() {
        for &(child, parent) in &parent_of {
            if parent == cur && found.insert(child) {
                frontier.push(child);
            }
        }
    }
    found.into_iter().collect()
}

/// True while `/proc/<pid>` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

struct PoolState {
    /// Per slot: the Chrome leases go to, and its successor being started.
    slots: Vec<Slot>,
    /// Chromes being replaced that still host leases.
    retiring: Vec<Arc<Chrome>>,
}

/// One Chrome process (or remote endpoint) of the pool.
#[derive(Default)]
struct Slot {
    /// The Chrome new leases go to; `None` before the first launch and after a used-up or dead
    /// one was closed.
    current: Option<Arc<Chrome>>,
    /// The next Chrome for this slot, started ahead of need (a warm spare) or on demand, outside
    /// the pool's lock. Every lease that needs it awaits the same launch; the first to see it
    /// done makes it `current`.
    next: Option<Launch>,
}

/// A Chrome launch (or remote connect) in progress or done, shared by whoever waits for it.
/// It runs in its own task: a lease that stops waiting does not cancel it.
type Launch = futures::future::Shared<
    futures::future::BoxFuture<'static, std::result::Result<Arc<Chrome>, Arc<BrowserError>>>,
>;

/// The error of a shared launch, for one of its waiters.
fn launch_error(err: &BrowserError) -> BrowserError {
    match err {
        BrowserError::Connect { endpoint, reason } => BrowserError::Connect {
            endpoint: endpoint.clone(),
            reason: reason.clone(),
        },
        BrowserError::Launch(reason) => BrowserError::Launch(reason.clone()),
        other => BrowserError::Launch(other.to_string()),
    }
}

/// How many launches one lease waits for before it gives up (a Chrome that dies as soon as it
/// is up, again and again, must not keep a lease looping).
const LAUNCHES_PER_LEASE: usize = 3;

/// What every session of a pool shares for its egress: one resolver (so the CDP guard and the
/// proxy see the same answers and cache) and the proxy.
#[derive(Debug)]
pub(crate) struct EgressNet {
    pub resolver: Arc<HostResolver>,
    pub proxy: Option<EgressProxy>,
}

pub(crate) struct PoolInner {
    pub config: PoolConfig,
    pub net: Arc<EgressNet>,
    state: Mutex<PoolState>,
    permits: Arc<Semaphore>,
    shut_down: AtomicBool,
    /// Woken whenever a Chrome keeps a new spare context.
    spare_kept: tokio::sync::Notify,
}

impl PoolInner {
    /// A Chrome new leases may go to: alive, with a free context, not used up.
    fn accepting(&self, chrome: &Chrome) -> bool {
        chrome.is_alive()
            && chrome.active.load(Ordering::SeqCst) < self.config.contexts_per_process
            && !self.used_up(chrome)
    }

    /// How many spare contexts `chrome` is to hold now: one per context it has free (the
    /// tasks that could start on it at once), at least one (the next task's, while it is
    /// full), at most `spare_contexts`.
    fn spare_target(&self, chrome: &Chrome) -> usize {
        spare_target(
            self.config.spare_contexts,
            self.config.contexts_per_process,
            chrome.active.load(Ordering::SeqCst),
        )
    }

    /// It has hosted its `recycle_after_tasks` leases.
    fn used_up(&self, chrome: &Chrome) -> bool {
        self.config.recycle_after_tasks > 0
            && chrome.leased_total.load(Ordering::SeqCst) >= self.config.recycle_after_tasks
    }

    /// Launches (or connects) the next Chrome of `slot` in a task of its own.
    fn start_launch(self: &Arc<Self>, slot: usize) -> Launch {
        let inner = self.clone();
        let launch: Launch = async move {
            let config = &inner.config;
            let launched = if config.remote_endpoints.is_empty() {
                Chrome::launch(config).await
            } else {
                Chrome::connect(&config.remote_endpoints[slot], config).await
            };
            let outcome = if launched.is_ok() { "ok" } else { "error" };
            metrics::counter!("browserd_chrome_launches_total", "outcome" => outcome).increment(1);
            if let Ok(chrome) = &launched {
                inner.refill_spare(chrome);
            }
            launched.map_err(Arc::new)
        }
        .boxed()
        .shared();
        tokio::spawn(launch.clone());
        launch
    }

    /// Opens `chrome`'s spare contexts in the background, one after the other, until it
    /// holds as many as it is to ([`Self::spare_target`]; unless they are being opened
    /// already), while it is alive and not used up.
    fn refill_spare(self: &Arc<Self>, chrome: &Arc<Chrome>) {
        let most = self.config.spare_contexts;
        let wanted = move |inner: &Self, chrome: &Arc<Chrome>| {
            !inner.shut_down.load(Ordering::SeqCst)
                && chrome.is_alive()
                && !inner.used_up(chrome)
                && chrome.spares().len() < inner.spare_target(chrome)
        };
        if most == 0 || !wanted(self, chrome) || chrome.spare_opening.swap(true, Ordering::SeqCst) {
            return;
        }
        let inner = self.clone();
        let chrome = chrome.clone();
        tokio::spawn(async move {
            loop {
                let opened_all = inner.open_spares_while(&chrome, most, &wanted).await;
                chrome.spare_opening.store(false, Ordering::SeqCst);
                // A lease may have taken one after the last check, while the flag still said
                // that spares were being opened. (After a failure, the next lease tries again.)
                if !opened_all
                    || !wanted(&inner, &chrome)
                    || chrome.spare_opening.swap(true, Ordering::SeqCst)
                {
                    break;
                }
            }
        });
    }

    /// Opens spares for `chrome` one after the other while `wanted`; false if one could not
    /// be opened.
    async fn open_spares_while(
        &self,
        chrome: &Arc<Chrome>,
        most: usize,
        wanted: &impl Fn(&Self, &Arc<Chrome>) -> bool,
    ) -> bool {
        while wanted(self, chrome) {
            let opened = BrowserSession::open_spare(
                chrome.clone(),
                self.config.cdp_timeout,
                self.config.viewport,
                self.net.clone(),
            )
            .await;
            let spare = match opened {
                Ok(spare) => spare,
                Err(err) => {
                    tracing::debug!(%err, "could not open a spare browser context");
                    return false;
                }
            };
            let unkept = if self.shut_down.load(Ordering::SeqCst) {
                Some(spare)
            } else {
                chrome.keep_spare(spare, most)
            };
            match unkept {
                Some(spare) => spare.release().await,
                None => self.spare_kept.notify_waiters(),
            }
        }
        true
    }

    /// A session for a lease on `chrome`: its spare bound to the task when there is one and
    /// the task fits it, else a context opened now; then the spare is refilled.
    async fn open_session(
        self: &Arc<Self>,
        chrome: &Arc<Chrome>,
        options: ContextOptions,
    ) -> Result<BrowserSession> {
        let config = &self.config;
        let spare = BrowserSession::spare_fits(&options, config.viewport)
            .then(|| chrome.take_spare())
            .flatten();
        let from_spare = match spare {
            Some(mut spare) => match spare.bind(&options, &self.net).await {
                Ok(()) => Some(spare),
                Err(err) => {
                    tracing::debug!(%err, "the spare browser context could not be bound");
                    spare.release().await;
                    None
                }
            },
            None => None,
        };
        // The next spare is opened after this session's first capture (`Lease::refill_spare_once`),
        // not now: opened now, it competed with the task's first navigation for Chrome's
        // main thread and the CPU, and made that navigation slower by about what the spare
        // saved (docs/src/benchmarks.md, "Spare contexts").
        match from_spare {
            Some(session) => {
                metrics::counter!("browserd_browser_context_opens_total", "from" => "spare")
                    .increment(1);
                Ok(session)
            }
            None => {
                metrics::counter!("browserd_browser_context_opens_total", "from" => "new")
                    .increment(1);
                BrowserSession::open(
                    chrome.clone(),
                    config.cdp_timeout,
                    options,
                    config.viewport,
                    self.net.clone(),
                )
                .await
            }
        }
    }

    /// Starts Chromes ahead of need, so that no lease waits for a launch it could have been
    /// spared: the successor of a Chrome with fewer than a Chrome's worth of leases left before
    /// it is recycled, and — when the live Chromes have at most one free context left — the
    /// first Chrome of an empty slot. Launched ones only (a remote connect is quick).
    fn prepare_spares(self: &Arc<Self>, state: &mut PoolState) {
        if !self.config.remote_endpoints.is_empty() || self.shut_down.load(Ordering::SeqCst) {
            return;
        }
        let per_process = self.config.contexts_per_process;
        let recycle = self.config.recycle_after_tasks;
        for index in 0..state.slots.len() {
            let slot = &state.slots[index];
            if slot.next.is_some() {
                continue;
            }
            if let Some(chrome) = &slot.current
                && recycle > 0
                && chrome.leased_total.load(Ordering::SeqCst) + per_process >= recycle
            {
                state.slots[index].next = Some(self.start_launch(index));
            }
        }
        let room: usize = state
            .slots
            .iter()
            .filter_map(|s| s.current.as_ref())
            .filter(|c| c.is_alive() && !self.used_up(c))
            .map(|c| per_process.saturating_sub(c.active.load(Ordering::SeqCst)))
            .sum();
        let starting = state.slots.iter().any(|s| s.next.is_some());
        if room <= 1
            && !starting
            && let Some(index) = state
                .slots
                .iter()
                .position(|s| s.current.is_none() && s.next.is_none())
        {
            state.slots[index].next = Some(self.start_launch(index));
        }
    }
}

/// A pool of Chrome processes; [`BrowserPool::lease`] hands out isolated sessions.
#[derive(Clone)]
pub struct BrowserPool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for BrowserPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserPool")
            .field("slots", &self.slot_count())
            .finish()
    }
}

impl BrowserPool {
    /// Creates the pool; Chrome starts lazily on the first lease of each slot.
    pub fn new(config: PoolConfig) -> Result<Self> {
        if config.contexts_per_process == 0 {
            return Err(BrowserError::InvalidArgument(
                "contexts_per_process must be at least 1".into(),
            ));
        }
        let slots = if config.remote_endpoints.is_empty() {
            config.processes
        } else {
            config.remote_endpoints.len()
        };
        if slots == 0 {
            return Err(BrowserError::InvalidArgument(
                "the pool needs at least one process or remote endpoint".into(),
            ));
        }
        let resolver = if config.egress_dns.is_empty() {
            HostResolver::system(DEFAULT_DNS_TIMEOUT)
        } else {
            HostResolver::with_servers(&config.egress_dns, DEFAULT_DNS_TIMEOUT)
                .map_err(|e| BrowserError::InvalidArgument(e.to_string()))?
        };
        let net = Arc::new(EgressNet {
            resolver: Arc::new(resolver),
            proxy: config.egress_proxy.then(|| {
                EgressProxy::new(ProxyOptions::default(), config.upstream_proxies.clone())
            }),
        });
        metrics::gauge!("browserd_browser_contexts_capacity")
            .set((slots * config.contexts_per_process) as f64);
        Ok(Self {
            inner: Arc::new(PoolInner {
                net,
                permits: Arc::new(Semaphore::new(slots * config.contexts_per_process)),
                state: Mutex::new(PoolState {
                    slots: (0..slots).map(|_| Slot::default()).collect(),
                    retiring: Vec::new(),
                }),
                config,
                shut_down: AtomicBool::new(false),
                spare_kept: tokio::sync::Notify::new(),
            }),
        })
    }

    fn slot_count(&self) -> usize {
        if self.inner.config.remote_endpoints.is_empty() {
            self.inner.config.processes
        } else {
            self.inner.config.remote_endpoints.len()
        }
    }

    /// The pool's configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// Waits for a free context slot and returns a fresh, isolated session without an
    /// egress guard and with a temporary workspace (see [`BrowserPool::lease_with`]).
    pub async fn lease(&self) -> Result<BrowserSession> {
        self.lease_with(ContextOptions::default()).await
    }

    /// Waits for a free context slot and returns a fresh, isolated session for a task: its
    /// egress guard is installed on the context before the first tab opens.
    pub async fn lease_with(&self, options: ContextOptions) -> Result<BrowserSession> {
        if self.inner.shut_down.load(Ordering::SeqCst) {
            return Err(BrowserError::PoolShutDown);
        }
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| BrowserError::PoolShutDown)?;
        let chrome = self.pick_chrome().await?;
        metrics::gauge!("browserd_browser_contexts_in_use").increment(1.0);
        let opened = self.inner.open_session(&chrome, options).await;
        match opened {
            Ok(session) => Ok(session.with_lease(Lease::new(self.inner.clone(), chrome, permit))),
            Err(err) => {
                // The Chrome could not even open a context: count it as a finished lease.
                Lease::new(self.inner.clone(), chrome, permit)
                    .finish()
                    .await;
                Err(err)
            }
        }
    }

    /// Waits until the pool's live Chromes hold `count` spare contexts between them (they are
    /// opened after each launch and each lease while [`PoolConfig::spare_contexts`] is not 0),
    /// at most `within`; true if they do. For tests and diagnostics: leases never wait for a
    /// spare.
    pub async fn wait_for_spares(&self, count: usize, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let kept = self.inner.spare_kept.notified();
            tokio::pin!(kept);
            kept.as_mut().enable();
            if self.spares_kept().await >= count {
                return true;
            }
            if tokio::time::timeout_at(deadline, kept).await.is_err() {
                return false;
            }
        }
    }

    /// [`Self::wait_for_spares`] for one.
    pub async fn wait_for_spare(&self, within: Duration) -> bool {
        self.wait_for_spares(1, within).await
    }

    /// The spare contexts the pool's live Chromes hold now.
    pub async fn spares_kept(&self) -> usize {
        let state = self.inner.state.lock().await;
        state
            .slots
            .iter()
            .filter_map(|s| s.current.as_ref())
            .chain(
                state
                    .slots
                    .iter()
                    .filter_map(|s| s.next.as_ref()?.peek()?.as_ref().ok()),
            )
            .filter(|c| c.is_alive())
            .map(|c| c.spares().len())
            .sum()
    }

    /// Starts the first Chrome now, in the background, so that the first task does not wait for
    /// its launch (a worker calls it at start). Does nothing if one is running or starting.
    pub async fn warm_up(&self) {
        let mut state = self.inner.state.lock().await;
        if self.inner.shut_down.load(Ordering::SeqCst) {
            return;
        }
        if let Some(slot) = state.slots.first_mut()
            && slot.current.is_none()
            && slot.next.is_none()
        {
            slot.next = Some(self.inner.start_launch(0));
        }
    }

    async fn pick_chrome(&self) -> Result<Arc<Chrome>> {
        let mut awaited = 0;
        loop {
            let (slot, launch) = {
                let mut state = self.inner.state.lock().await;
                if self.inner.shut_down.load(Ordering::SeqCst) {
                    return Err(BrowserError::PoolShutDown);
                }
                // 1. A live Chrome with room.
                if let Some(chrome) = state
                    .slots
                    .iter()
                    .filter_map(|s| s.current.as_ref())
                    .find(|c| self.inner.accepting(c))
                    .cloned()
                {
                    chrome.active.fetch_add(1, Ordering::SeqCst);
                    chrome.leased_total.fetch_add(1, Ordering::SeqCst);
                    self.inner.prepare_spares(&mut state);
                    return Ok(chrome);
                }
                if awaited == LAUNCHES_PER_LEASE {
                    return Err(BrowserError::Launch(format!(
                        "no Chrome with room after {awaited} launches"
                    )));
                }
                // 2. A slot whose next Chrome is starting (or started), else one that is
                // empty, dead or used up: start its next Chrome.
                let slot = state
                    .slots
                    .iter()
                    .position(|s| s.next.is_some())
                    .or_else(|| {
                        state.slots.iter().position(|s| {
                            s.current
                                .as_ref()
                                .is_none_or(|c| !c.is_alive() || self.inner.used_up(c))
                        })
                    })
                    .ok_or_else(|| BrowserError::Launch("no pool slot available".into()))?;
                let launch = state.slots[slot]
                    .next
                    .get_or_insert_with(|| self.inner.start_launch(slot))
                    .clone();
                (slot, launch)
            };
            // Outside the lock: leases on other Chromes go on meanwhile.
            let launched = launch.clone().await;
            awaited += 1;
            let mut state = self.inner.state.lock().await;
            let ours = state.slots[slot]
                .next
                .as_ref()
                .is_some_and(|next| next.ptr_eq(&launch));
            match launched {
                Ok(chrome) => {
                    if ours {
                        state.slots[slot].next = None;
                        let old = state.slots[slot].current.replace(chrome);
                        if let Some(old) = old {
                            if old.active.load(Ordering::SeqCst) == 0 {
                                tokio::spawn(async move { old.close().await });
                            } else {
                                state.retiring.push(old);
                            }
                        }
                    }
                    // Back to 1: this Chrome (or another) has room, unless other waiters
                    // filled it first.
                }
                Err(err) => {
                    if ours {
                        state.slots[slot].next = None;
                    }
                    return Err(launch_error(&err));
                }
            }
        }
    }

    /// Closes every Chrome and waits for all of their processes; leases fail afterwards.
    pub async fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::SeqCst);
        self.inner.permits.close();
        let (mut chromes, launches): (Vec<Arc<Chrome>>, Vec<Launch>) = {
            let mut state = self.inner.state.lock().await;
            let mut all: Vec<Arc<Chrome>> = state
                .slots
                .iter_mut()
                .filter_map(|s| s.current.take())
                .collect();
            all.append(&mut state.retiring);
            let launches = state
                .slots
                .iter_mut()
                .filter_map(|s| s.next.take())
                .collect();
            (all, launches)
        };
        // Spares still starting end within their launch timeout; close what they started.
        for launched in futures::future::join_all(launches).await {
            chromes.extend(launched.ok());
        }
        futures::future::join_all(chromes.iter().map(|c| c.close())).await;
    }

    /// PIDs of the launched Chrome main processes (for tests and diagnostics): the slots'
    /// current ones first, then those being retired, then started spares.
    pub async fn chrome_pids(&self) -> Vec<u32> {
        let state = self.inner.state.lock().await;
        let spares: Vec<Arc<Chrome>> = state
            .slots
            .iter()
            .filter_map(|s| s.next.as_ref()?.peek()?.as_ref().ok().cloned())
            .collect();
        state
            .slots
            .iter()
            .filter_map(|s| s.current.as_ref())
            .chain(state.retiring.iter())
            .chain(spares.iter())
            .filter_map(|c| c.pid)
            .collect()
    }
}

/// A session's claim on a pool slot; returned by [`Lease::finish`].
pub(crate) struct Lease {
    pool: Arc<PoolInner>,
    chrome: Arc<Chrome>,
    permit: Option<OwnedSemaphorePermit>,
    /// This lease has not yet had its Chrome open the next spare context.
    spare_refill_due: AtomicBool,
}

impl Lease {
    fn new(pool: Arc<PoolInner>, chrome: Arc<Chrome>, permit: OwnedSemaphorePermit) -> Self {
        Self {
            pool,
            chrome,
            permit: Some(permit),
            spare_refill_due: AtomicBool::new(true),
        }
    }

    /// Has this lease's Chrome open its next spare context, once per lease, after the
    /// session's first capture (its task's first page is loaded and read, and a model call
    /// usually follows); the lease's end refills too.
    pub fn refill_spare_once(&self) {
        if self.spare_refill_due.swap(false, Ordering::SeqCst) {
            self.pool.refill_spare(&self.chrome);
        }
    }

    /// Gives the slot back; closes the Chrome if it is retired or used up and now idle.
    pub async fn finish(mut self) {
        metrics::gauge!("browserd_browser_contexts_in_use").decrement(1.0);
        let remaining = self.chrome.active.fetch_sub(1, Ordering::SeqCst) - 1;
        let config = &self.pool.config;
        let used_up = config.recycle_after_tasks > 0
            && self.chrome.leased_total.load(Ordering::SeqCst) >= config.recycle_after_tasks;
        if remaining == 0 && (used_up || !self.chrome.is_alive()) {
            let mut state = self.pool.state.lock().await;
            let mut close = false;
            if let Some(pos) = state.retiring.iter().position(|c| c.id == self.chrome.id) {
                state.retiring.remove(pos);
                close = true;
            } else if let Some(slot) = state
                .slots
                .iter_mut()
                .find(|s| s.current.as_ref().is_some_and(|c| c.id == self.chrome.id))
            {
                slot.current = None;
                close = true;
            }
            drop(state);
            if close {
                self.chrome.close().await;
            }
        }
        self.permit.take();
        // Also after this lease's own refill: with a context free again, the Chrome may be
        // due more spares.
        self.pool.refill_spare(&self.chrome);
    }
}

#[cfg(test)]
mod tests {
    use super::{PoolConfig, chrome_args, spare_target};

    #[test]
    fn extra_flags_cannot_open_a_devtools_port() {
        let config = PoolConfig {
            extra_args: vec![
                "--remote-debugging-port=9222".into(),
                "remote-debugging-address=0.0.0.0".into(),
                "--remote-debugging-port".into(),
                "--lang=de".into(),
            ],
            ..PoolConfig::default()
        };
        let args = chrome_args(&config);
        assert!(
            !args.iter().any(|a| a.starts_with("--remote-debugging")),
            "{args:?}"
        );
        assert!(args.contains(&"--lang=de".to_owned()));
    }

    #[test]
    fn a_chrome_keeps_a_spare_per_free_context_at_least_one_at_most_the_setting() {
        // An idle Chrome of 4 contexts: one per task of a burst, up to the setting.
        assert_eq!(spare_target(4, 4, 0), 4);
        assert_eq!(spare_target(2, 4, 0), 2);
        // Busier: fewer.
        assert_eq!(spare_target(4, 4, 1), 3);
        assert_eq!(spare_target(4, 4, 3), 1);
        // Full: still the next task's.
        assert_eq!(spare_target(4, 4, 4), 1);
        assert_eq!(spare_target(4, 10, 0), 4);
        assert_eq!(spare_target(1, 10, 0), 1);
        // None wanted.
        assert_eq!(spare_target(0, 4, 0), 0);
    }
}
