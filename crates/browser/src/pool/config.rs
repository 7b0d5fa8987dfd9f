//! How the pool launches or reaches Chrome: its settings and the command line of a launched
//! Chrome.

use std::{collections::HashMap, net::SocketAddr, path::PathBuf, time::Duration};

use super::DEFAULT_SPARE_CONTEXTS;
use crate::{
    egress::UpstreamProxy,
    launch::{ChromeBuild, ChromeIdentity},
    types::Viewport,
};

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
    /// free, and at least one ([`super::PoolInner::spare_target`]): an idle pool is ready for a
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
pub(super) fn chrome_args(config: &PoolConfig) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::{PoolConfig, chrome_args};

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
}
