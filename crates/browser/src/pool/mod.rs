//! The Chrome pool: processes (or remote endpoints), each hosting isolated contexts.
//!
//! Each Chrome is driven over one [`CdpConnection`]: a launched one's `--remote-debugging-pipe`
//! (it opens no DevTools port; [`crate::launch`]), a remote one's WebSocket. The connection's
//! end is the Chrome's death (a crash, a kill, an exit: the pipe's EOF); the health watch and
//! `Browser.close` go over it too. chromiumoxide only connects to remote endpoints.

mod chrome;
mod config;
mod health;
mod lease;
mod process;
mod spares;

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::FutureExt;
use tokio::sync::{Mutex, Semaphore};

pub(crate) use chrome::Chrome;
pub use config::{
    CHROME_FLAGS, DEFAULT_CHROME_NICE, DEFAULT_CHROME_PATH, DEFAULT_RENDERER_MEMORY_CAP_MB,
    FULL_CHROME_PATH, PoolConfig,
};
pub(crate) use lease::Lease;
pub(crate) use process::stop_exit_watcher_of;
pub use process::{descendant_pids, kill_when_this_process_exits, pid_alive};
pub use spares::DEFAULT_SPARE_CONTEXTS;

use crate::{
    egress::{DEFAULT_DNS_TIMEOUT, EgressProxy, HostResolver, ProxyOptions},
    error::{BrowserError, Result},
    session::{BrowserSession, ContextOptions},
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
