//! One runtime for every role that runs tasks (`serve`, `worker`, `run`, `replay`, `mcp`): the
//! browser flags with their defaults in one place ([`BrowserArgs`]), and one builder of the
//! browser pool, the model registry and the task runner ([`Runtime::build`]). A new browser
//! setting is a field here and the line of [`Runtime::build`] that passes it on.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use browserd_browser::settle::DEFAULT_SETTLE_CAP;
use browserd_browser::{
    BrowserPool, ChromeIdentity, DEFAULT_CHROME_NICE, DEFAULT_CHROME_PATH,
    DEFAULT_RENDERER_MEMORY_CAP_MB, PoolConfig,
};
use browserd_llm::{ModelRegistry, ModelsConfig};
use browserd_types::dto::{ViewportSize, limits};
use browserd_worker::{RunnerSettings, TaskRunner, browser_viewport};
use clap::Args;

use crate::egress::{EgressArgs, ProxiesArgs};

/// Chrome, egress and task-default flags of every role that runs tasks.
#[derive(Debug, Args)]
pub struct BrowserArgs {
    /// Chrome / Chromium executable: Debian's headless shell by default; the full build
    /// (`/usr/bin/chromium`, run with `--headless=new`) or any Chrome also works. A name with
    /// `headless-shell` (or `headless_shell`) is taken for the shell, anything else for the
    /// full build.
    #[arg(long, env = "BROWSERD_CHROME", default_value = DEFAULT_CHROME_PATH)]
    pub chrome: PathBuf,

    /// Niceness of the Chrome processes (0 leaves them as they start): browsers that saturate
    /// the CPU then leave the api, event delivery and Postgres responsive.
    #[arg(long, env = "BROWSERD_CHROME_NICE", default_value_t = DEFAULT_CHROME_NICE, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub chrome_nice: i32,

    /// The unprivileged user Chrome runs as when this process runs as root (with its sandbox
    /// on); `nobody` when this user does not exist. Chrome as root, without its sandbox, only
    /// when neither exists.
    #[arg(long, env = "BROWSERD_CHROME_USER", default_value = DEFAULT_CHROME_USER)]
    pub chrome_user: String,

    /// Run Chrome without its sandbox (`--no-sandbox`): only where the sandbox cannot work
    /// (a container that allows neither user namespaces nor the setuid helper). Warned at
    /// start. The variable takes `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`.
    #[arg(
        long,
        env = "BROWSERD_CHROME_NO_SANDBOX",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub chrome_no_sandbox: bool,

    /// The most resident memory one renderer process may use, in MiB (0 = no cap): a page
    /// above it is closed — only its task's tabs are in that renderer — and the task told,
    /// before it takes Chrome or the machine down.
    #[arg(long, env = "BROWSERD_RENDERER_MEMORY_CAP_MB", default_value_t = DEFAULT_RENDERER_MEMORY_CAP_MB)]
    pub renderer_memory_cap_mb: u64,

    /// Seconds a Chrome may take to answer the pool's health check before it counts as hung:
    /// it is killed, and its tasks go on from their last step in a new one.
    #[arg(long, env = "BROWSERD_CHROME_HANG_TIMEOUT_S", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub chrome_hang_timeout_s: u64,

    /// The most browser contexts each Chrome keeps opened ahead of the next tasks (their
    /// egress guard and proxy listener refusing everything until a task is bound, their first
    /// tab's renderer started), so that a task starting does not wait for Chrome to start a
    /// renderer; each costs an idle renderer. Within it, a Chrome keeps one per task slot it
    /// has free, and at least one. A count (0–16); `true`/`on`/`yes` mean the default (4),
    /// `false`/`off`/`no` 0.
    #[arg(
        long,
        env = "BROWSERD_SPARE_CONTEXTS",
        default_value_t = browserd_browser::DEFAULT_SPARE_CONTEXTS,
        value_parser = parse_spare_contexts
    )]
    pub spare_contexts: usize,

    /// Extra Chrome command-line flags (space-separated).
    #[arg(long, env = "BROWSERD_CHROME_ARGS", default_value = "")]
    pub chrome_args: String,

    /// Browser viewport of tasks that set none, `WIDTHxHEIGHT` in CSS pixels (browser-use's
    /// default); Chrome's window is this size too.
    #[arg(long, env = "BROWSERD_VIEWPORT", default_value_t = ViewportSize::BROWSER_USE)]
    pub viewport: ViewportSize,

    /// Cap of the wait after each action for the page to settle, in ms, for tasks that set
    /// no `settle_timeout_ms` (0 = do not wait).
    #[arg(
        long,
        env = "BROWSERD_SETTLE_TIMEOUT_MS",
        default_value_t = DEFAULT_SETTLE_CAP.as_millis() as i64,
        value_parser = clap::value_parser!(i64).range(limits::SETTLE_TIMEOUT_MS_RANGE)
    )]
    pub settle_timeout_ms: i64,

    /// Let tasks browse loopback (127.0.0.0/8, ::1, localhost) and webhooks target it: local
    /// sites and tests. Every other private, link-local and metadata address stays blocked.
    /// The variable takes `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`.
    #[arg(
        long,
        env = "BROWSERD_ALLOW_LOOPBACK",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub allow_loopback: bool,

    /// The most one downloaded file may take, in MiB (a larger download is cancelled and
    /// its partial file removed).
    #[arg(long, env = "BROWSERD_DOWNLOAD_MAX_FILE_MB", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub download_max_file_mb: u64,

    /// The most all of one task's downloads may take together, in MiB.
    #[arg(long, env = "BROWSERD_DOWNLOAD_MAX_TASK_MB", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub download_max_task_mb: u64,

    #[command(flatten)]
    pub egress: EgressArgs,
}

/// The user Chrome runs as under a root worker unless told otherwise (`--chrome-user`).
pub const DEFAULT_CHROME_USER: &str = "browserd-chrome";

impl BrowserArgs {
    /// Who Chrome runs as, and whether sandboxed ([`ChromeIdentity::choose`]); the operator's
    /// warnings are logged.
    pub fn chrome_identity(&self) -> anyhow::Result<ChromeIdentity> {
        let (identity, warnings) = ChromeIdentity::choose(
            &[self.chrome_user.as_str(), "nobody"],
            self.chrome_no_sandbox,
        )
        .context("--chrome-user")?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        match &identity.user {
            Some(user) => {
                tracing::info!(user = %user.name, sandbox = ?identity.sandbox, "Chrome runs as another user")
            }
            None => {
                tracing::info!(sandbox = ?identity.sandbox, "Chrome runs as this process's user")
            }
        }
        Ok(identity)
    }

    /// The per-file and per-task download caps.
    pub fn download_caps(&self) -> browserd_browser::DownloadCaps {
        browserd_browser::DownloadCaps {
            per_file_bytes: self.download_max_file_mb.saturating_mul(1 << 20),
            per_task_bytes: self.download_max_task_mb.saturating_mul(1 << 20),
        }
    }

    /// The settle cap of tasks that set none.
    pub fn settle_timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.settle_timeout_ms).unwrap_or(0))
    }
}

/// How many tasks a role runs at once, in how many Chrome processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShape {
    pub processes: usize,
    pub contexts_per_process: usize,
    /// Replace a Chrome after it has hosted this many tasks (0 = never).
    pub recycle_after_tasks: usize,
}

impl PoolShape {
    /// One Chrome, never recycled, hosting `contexts` tasks at once: the terminal roles.
    pub fn single(contexts: usize) -> Self {
        Self {
            processes: 1,
            contexts_per_process: contexts.max(1),
            recycle_after_tasks: 0,
        }
    }

    /// `concurrency` tasks spread over `processes` Chromes, recycled as the pool's default:
    /// the worker role.
    pub fn service(concurrency: usize, processes: usize) -> Self {
        let processes = processes.max(1);
        Self {
            processes,
            contexts_per_process: concurrency.max(1).div_ceil(processes),
            recycle_after_tasks: PoolConfig::default().recycle_after_tasks,
        }
    }

    /// Tasks the pool can host at once.
    pub fn capacity(&self) -> usize {
        self.processes * self.contexts_per_process
    }
}

/// A role's browser pool and the task runner over it.
pub struct Runtime {
    pub pool: Arc<BrowserPool>,
    pub runner: Arc<TaskRunner>,
}

impl Runtime {
    /// The pool (`browser` flags, `proxies`, `shape`), the registry of `models` and the
    /// runner with the operator's task defaults. Starts no Chrome yet.
    pub fn build(
        browser: &BrowserArgs,
        proxies: &ProxiesArgs,
        models: ModelsConfig,
        shape: PoolShape,
    ) -> anyhow::Result<Self> {
        let viewport = browser_viewport(browser.viewport)
            .with_context(|| format!("--viewport {} is out of range", browser.viewport))?;
        let config = browser.egress.apply(
            proxies,
            PoolConfig {
                chrome_path: browser.chrome.clone(),
                processes: shape.processes,
                contexts_per_process: shape.contexts_per_process,
                recycle_after_tasks: shape.recycle_after_tasks,
                extra_args: browser
                    .chrome_args
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
                nice: (browser.chrome_nice > 0).then_some(browser.chrome_nice),
                viewport,
                identity: browser.chrome_identity()?,
                renderer_memory_cap_mb: (browser.renderer_memory_cap_mb > 0)
                    .then_some(browser.renderer_memory_cap_mb),
                hang_timeout: Duration::from_secs(browser.chrome_hang_timeout_s),
                spare_contexts: browser.spare_contexts,
                ..PoolConfig::default()
            },
        )?;
        let pool = Arc::new(BrowserPool::new(config).context("configuring the browser pool")?);
        let registry = ModelRegistry::new(models).context("building the model registry")?;
        let runner = Arc::new(TaskRunner::new(
            pool.clone(),
            Arc::new(registry),
            RunnerSettings {
                allow_loopback: browser.allow_loopback,
                settle_timeout: Some(browser.settle_timeout()),
                download_caps: browser.download_caps(),
            },
        ));
        Ok(Self { pool, runner })
    }
}

/// `--spare-contexts`: a count, or a yes/no word (yes = the default), as the flag once was a switch.
fn parse_spare_contexts(value: &str) -> Result<usize, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" => Ok(browserd_browser::DEFAULT_SPARE_CONTEXTS),
        "false" | "off" | "no" => Ok(0),
        number => match number.parse::<usize>() {
            Ok(n) if n <= 16 => Ok(n),
            _ => Err(format!(
                "expected a count of spare contexts per Chrome from 0 to 16 (or true/false), got {value:?}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        browser: BrowserArgs,
    }

    #[test]
    fn defaults_are_browser_uses_and_the_pools() {
        let flags = Flags::try_parse_from(["browserd"]).unwrap();
        let browser = flags.browser;
        assert_eq!(browser.chrome, PathBuf::from(DEFAULT_CHROME_PATH));
        assert_eq!(browser.chrome_nice, DEFAULT_CHROME_NICE);
        assert_eq!(browser.viewport, ViewportSize::BROWSER_USE);
        assert_eq!(browser.settle_timeout(), DEFAULT_SETTLE_CAP);
        assert!(!browser.allow_loopback);
        let flags = Flags::try_parse_from(["browserd", "--viewport", "1280x720"]).unwrap();
        assert_eq!(flags.browser.viewport.to_string(), "1280x720");
        assert!(Flags::try_parse_from(["browserd", "--viewport", "10x10"]).is_err());
        assert!(Flags::try_parse_from(["browserd", "--settle-timeout-ms", "30001"]).is_err());
    }

    #[test]
    fn spare_contexts_take_a_count_or_a_switch_word() {
        let spares = |value: &str| {
            Flags::try_parse_from(["browserd", "--spare-contexts", value])
                .map(|flags| flags.browser.spare_contexts)
        };
        assert_eq!(
            Flags::try_parse_from(["browserd"])
                .unwrap()
                .browser
                .spare_contexts,
            browserd_browser::DEFAULT_SPARE_CONTEXTS
        );
        assert_eq!(spares("3").unwrap(), 3);
        assert_eq!(spares("0").unwrap(), 0);
        assert_eq!(spares("true").unwrap(), 4);
        assert_eq!(spares("off").unwrap(), 0);
        let err = spares("17").unwrap_err().to_string();
        assert!(err.contains("from 0 to 16"), "{err}");
        assert!(spares("many").is_err());
    }

    #[test]
    fn pool_shapes_hold_their_tasks() {
        assert_eq!(PoolShape::single(0).capacity(), 1);
        let service = PoolShape::service(5, 2);
        assert_eq!(service.contexts_per_process, 3);
        assert_eq!(service.capacity(), 6);
        assert_eq!(service.recycle_after_tasks, 50);
    }
}
