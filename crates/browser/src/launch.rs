//! Launching a Chrome process: who it runs as, what it is given, and the pipe it is driven
//! over.
//!
//! Chrome renders pages of every tenant of a worker, so it gets nothing of the worker's: a
//! cleared environment (only [`CHROME_ENV_KEPT`] of the worker's, plus a `HOME` and `TMPDIR` of
//! its own inside its profile directory), and — when the worker runs as root — another,
//! unprivileged user ([`ChromeUser`]), whose files are its profile directory and the task
//! workspaces' `downloads/`. Its sandbox is on unless it would run as root or the operator
//! switched it off ([`Sandbox`]).
//!
//! Launched here rather than by chromiumoxide: chromiumoxide passes the worker's whole
//! environment on and has no way to clear it or to change the user; the std `Command` does
//! both without `unsafe`.
//!
//! Chrome's DevTools are reached over `--remote-debugging-pipe`, never a port: a port on
//! 127.0.0.1 could be driven by any local process (another user's, a page's exploit in another
//! sandbox escape, a proxy tricked into it), reaching every tenant's contexts. The pipe is two
//! anonymous pipes whose Chrome ends become its fds 3 (commands in) and 4 (answers and events
//! out) at exec — mapped by `command-fds` (the workspace forbids `unsafe`, and the dup2 must run
//! between fork and exec) — and whose other ends only the worker holds
//! ([`crate::cdp::CdpConnection::over_pipe`]). Every pipe end is close-on-exec until that
//! mapping, so no other child (another Chrome, a helper) inherits one, and the worker's copies
//! of Chrome's ends are closed as soon as it has started: Chrome's exit is then the end of the
//! stream the worker reads, and the connection closes at once.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cdp::CdpConnection;
use crate::error::{BrowserError, Result};

/// The worker's environment variables Chrome is given (when set): the locale's time zone and
/// the executable search path. Everything else — database URLs, API keys, the secrets key —
/// stays with the worker.
pub const CHROME_ENV_KEPT: [&str; 2] = ["TZ", "PATH"];

/// The unprivileged user Chrome runs as when the worker runs as root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChromeUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl ChromeUser {
    /// Looks `name` up in the system's user database (`getent passwd`, so NSS sources count);
    /// `None` when there is no such user.
    pub fn lookup(name: &str) -> Result<Option<Self>> {
        if name.is_empty() || name.contains([':', '\n', '/']) {
            return Err(BrowserError::InvalidArgument(format!(
                "{name:?} is not a user name"
            )));
        }
        let output = std::process::Command::new("getent")
            .args(["passwd", name])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|err| BrowserError::Launch(format!("looking up user {name}: {err}")))?;
        if !output.status.success() {
            return Ok(None);
        }
        let line = String::from_utf8_lossy(&output.stdout);
        Ok(parse_passwd_line(line.trim()).filter(|user| user.name == name))
    }

    /// Whether this is root (uid 0), which gains nothing.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// `name:password:uid:gid:…` → the user.
fn parse_passwd_line(line: &str) -> Option<ChromeUser> {
    let mut fields = line.split(':');
    let name = fields.next()?.to_owned();
    let _password = fields.next()?;
    let uid = fields.next()?.parse().ok()?;
    let gid = fields.next()?.parse().ok()?;
    Some(ChromeUser { name, uid, gid })
}

/// Whether this process runs as root (its `/proc/self` belongs to uid 0).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// Whether Chrome's sandbox is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sandbox {
    /// Chrome's own sandbox (user namespaces, or the setuid helper of Debian's
    /// `chromium-sandbox` package where namespaces are not allowed).
    On,
    /// `--no-sandbox`: a renderer exploit runs with Chrome's user's rights. Only for Chrome
    /// running as root (which Chrome refuses to sandbox) or when an operator asks.
    Off,
}

/// Who a launched Chrome runs as and with which sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChromeIdentity {
    /// The user to switch to (the worker runs as root); `None` = the worker's own user.
    pub user: Option<ChromeUser>,
    pub sandbox: Sandbox,
}

impl Default for ChromeIdentity {
    /// The worker's user, sandboxed unless that is root.
    fn default() -> Self {
        Self {
            user: None,
            sandbox: if running_as_root() {
                Sandbox::Off
            } else {
                Sandbox::On
            },
        }
    }
}

impl ChromeIdentity {
    /// The identity for a worker: as root, Chrome runs as the first of `candidates` that
    /// exists (sandboxed), else as root without its sandbox; as another user, as that user,
    /// sandboxed. `no_sandbox` switches the sandbox off in every case. The returned warnings
    /// are for the operator, at start.
    pub fn choose(candidates: &[&str], no_sandbox: bool) -> Result<(Self, Vec<String>)> {
        let mut warnings = Vec::new();
        let mut user = None;
        if running_as_root() {
            for name in candidates {
                if let Some(found) = ChromeUser::lookup(name)?
                    && !found.is_root()
                {
                    user = Some(found);
                    break;
                }
            }
            if user.is_none() {
                warnings.push(format!(
                    "the worker runs as root and none of the users {candidates:?} exists: \
                     Chrome runs as root without its sandbox (create one of them, or run the \
                     worker as an unprivileged user)"
                ));
            }
        }
        let sandbox = if no_sandbox || (running_as_root() && user.is_none()) {
            Sandbox::Off
        } else {
            Sandbox::On
        };
        if no_sandbox {
            warnings.push(
                "Chrome's sandbox is switched off (--chrome-no-sandbox): a renderer exploit on \
                 any page runs with the rights of Chrome's user"
                    .to_owned(),
            );
        }
        Ok((Self { user, sandbox }, warnings))
    }

    /// Makes `dir` (created by the worker) writable by Chrome's user: Chrome saves downloads
    /// there. Its parent must let that user through; [`ChromeIdentity::allow_through`].
    pub fn hand_over(&self, dir: &Path) -> std::io::Result<()> {
        if let Some(user) = &self.user {
            std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))?;
        }
        Ok(())
    }

    /// Lets Chrome's user pass through `dir` (search permission for others, not listing), so
    /// it reaches what the worker handed over inside it.
    pub fn allow_through(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if self.user.is_some() {
            let meta = std::fs::metadata(dir)?;
            let mode = meta.permissions().mode();
            if mode & 0o001 == 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001))?;
            }
        }
        Ok(())
    }
}

/// Which build of Chrome an executable is: it decides the headless flag.
///
/// The headless shell (Debian's `chromium-headless-shell`, Playwright's and Puppeteer's
/// `chrome-headless-shell`) is headless only: no windows, so no per-context top-chrome WebUI
/// renderer, and no crashpad handlers; it takes no `--headless` flag, but needs
/// `--site-per-process` for the site isolation the full build has by default (a cross-origin
/// frame in a renderer — and a CDP target — of its own), and the full build's generic font
/// families, which it lacks (set per tab: [`FULL_BUILD_FONT_FAMILIES`]), to lay pages out the
/// same. The full build runs headless with `--headless=new`, where every browser context gets
/// a window with its own WebUI renderer. Told apart by the executable's name, following symlinks (Debian's
/// `/usr/bin/chromium-headless-shell` is a wrapper script of that name): when unsure it is
/// taken for the full build, whose `--headless=new` the shell ignores. Once connected,
/// `Browser.getVersion` says which build answered ([`ChromeBuild::of_product`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChromeBuild {
    /// `chromium-headless-shell` / `chrome-headless-shell` (the old headless mode).
    HeadlessShell,
    /// `chromium` / `chrome` in its new headless mode.
    Full,
}

impl ChromeBuild {
    /// The build `executable` is, by its name (and the name of what it links to).
    pub fn of_executable(executable: &Path) -> Self {
        let shell_named = |path: &Path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| {
                    let name = name.to_ascii_lowercase();
                    name.contains("headless-shell") || name.contains("headless_shell")
                })
        };
        let resolved = std::fs::canonicalize(executable).ok();
        if shell_named(executable) || resolved.as_deref().is_some_and(shell_named) {
            Self::HeadlessShell
        } else {
            Self::Full
        }
    }

    /// The build that answered, from `Browser.getVersion`'s `product`: the shell calls itself
    /// `HeadlessChrome/…`, the full build `Chrome/…` even in its new headless mode.
    pub fn of_product(product: &str) -> Option<Self> {
        if product.starts_with("HeadlessChrome/") {
            Some(Self::HeadlessShell)
        } else if product.starts_with("Chrome/") {
            Some(Self::Full)
        } else {
            None
        }
    }

    /// The flags that make this build run headless, and the shell as isolated as the full
    /// build.
    pub fn build_flags(self) -> &'static [&'static str] {
        match self {
            Self::HeadlessShell => &["--site-per-process"],
            Self::Full => &["--headless=new"],
        }
    }

    /// A short name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::HeadlessShell => "headless shell",
            Self::Full => "full (--headless=new)",
        }
    }
}

/// What a launch actually starts: `executable` itself, or the program a wrapper script runs
/// without `exec`. Debian's `/usr/bin/chromium-headless-shell` is such a script
/// (`/usr/lib/chromium/chromium-headless-shell "$@"`): started as it is, Chrome would be the
/// child of a shell, and killing the launched process (a hung or crashed Chrome, a killed
/// worker's exit watcher) would leave Chrome running. A script whose only command is an
/// absolute path followed by `"$@"` is replaced by that path; anything else is run as given.
pub fn wrapped_executable(executable: &Path) -> std::path::PathBuf {
    let wrapped = || -> Option<std::path::PathBuf> {
        let meta = std::fs::metadata(executable).ok()?;
        if meta.len() > 4096 {
            return None;
        }
        let script = std::fs::read_to_string(executable).ok()?;
        let mut lines = script.lines();
        if !lines.next()?.starts_with("#!") {
            return None;
        }
        let mut commands = lines
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        let command = commands.next()?;
        if commands.next().is_some() {
            return None;
        }
        let program = command.strip_suffix(r#" "$@""#)?.trim();
        let program = Path::new(program);
        (program.is_absolute()
            && !program.as_os_str().to_string_lossy().contains(' ')
            && program.is_file())
        .then(|| program.to_path_buf())
    };
    wrapped().unwrap_or_else(|| executable.to_path_buf())
}

/// The generic font families of the full Chromium build on Linux (its default preferences,
/// `locale_settings_linux`), given to every tab with `Page.setFontFamilies`. The headless
/// shell has no preferences: without them its `monospace` and `serif` resolve to other fonts,
/// and pages lay out differently (on the rustdoc golden page a line moved by 7 px, out of the
/// indexed area). The same on both builds, so both lay out as browser-use's Chrome does.
pub const FULL_BUILD_FONT_FAMILIES: [(&str, &str); 6] = [
    ("standard", "Times New Roman"),
    ("serif", "Times New Roman"),
    ("sansSerif", "Arial"),
    ("fixed", "Monospace"),
    ("cursive", "Comic Sans MS"),
    ("fantasy", "Impact"),
];

/// A launched Chrome process and the CDP connection over its pipe.
pub(crate) struct LaunchedChrome {
    pub child: Child,
    pub pid: u32,
    pub conn: CdpConnection,
    /// Kills Chrome if this process dies ([`crate::pool::kill_when_this_process_exits`]),
    /// started right after the spawn so that no launch goes unwatched.
    pub exit_watcher: Option<std::process::Child>,
}

/// The fd Chrome reads CDP commands from with `--remote-debugging-pipe`.
const CHROME_PIPE_IN_FD: i32 = 3;
/// The fd Chrome writes CDP answers and events to with `--remote-debugging-pipe`.
const CHROME_PIPE_OUT_FD: i32 = 4;

/// Chrome's stderr lines kept to explain a failed launch.
const STDERR_TAIL: usize = 20;

/// Starts `executable` with `args` (full flags, `--` included) as `identity`, with the profile
/// in `dir/profile` and a cleared environment, driven over `--remote-debugging-pipe`, and waits
/// (at most `timeout`) until it answers `Browser.getVersion` there. `dir` must exist and belong
/// to the worker; it is handed to Chrome's user. Calls on the returned connection time out
/// after `cdp_timeout` unless told otherwise.
pub(crate) async fn launch_chrome(
    executable: &Path,
    args: &[String],
    identity: &ChromeIdentity,
    dir: &Path,
    timeout: Duration,
    cdp_timeout: Duration,
) -> Result<LaunchedChrome> {
    let (profile, home, tmp) = chrome_dirs(identity, dir)?;
    let executable = &wrapped_executable(executable);
    // Both pipes are made close-on-exec (std's `pipe`): only the mapping below, in Chrome's
    // child between fork and exec, gives its ends to Chrome, as fds 3 and 4.
    let (chrome_reads, worker_writes) = std::io::pipe()?;
    let (worker_reads, chrome_writes) = std::io::pipe()?;
    let mut command = Command::new(executable);
    command
        .args(args)
        .arg(format!("--user-data-dir={}", profile.display()))
        // No `--remote-debugging-port`: nothing listens; CDP goes over fds 3 and 4.
        .arg("--remote-debugging-pipe")
        // No first tab: every task opens its own in its own context, and the default
        // context's `about:blank` held a renderer and a viewport-sized compositor surface
        // (~20 MiB PSS together) for nothing. Neither build exits without a tab.
        .arg("--no-startup-window")
        .env_clear()
        .envs(chrome_env(&home, &tmp))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
        .fd_mappings(vec![
            FdMapping {
                parent_fd: chrome_reads.into(),
                child_fd: CHROME_PIPE_IN_FD,
            },
            FdMapping {
                parent_fd: chrome_writes.into(),
                child_fd: CHROME_PIPE_OUT_FD,
            },
        ])
        .map_err(|err| BrowserError::Launch(format!("chrome's pipe: {err}")))?;
    if identity.sandbox == Sandbox::Off {
        command.arg("--no-sandbox");
    }
    if let Some(user) = &identity.user {
        command.uid(user.uid).gid(user.gid);
    }
    let spawned = command.spawn();
    // The command holds the worker's copies of Chrome's pipe ends: closed now, so that
    // Chrome's exit ends the stream the connection reads.
    drop(command);
    let mut child = spawned.map_err(|err| {
        BrowserError::Launch(format!("could not start {}: {err}", executable.display()))
    })?;
    let pid = child
        .id()
        .ok_or_else(|| BrowserError::Launch("chrome exited at once".into()))?;
    // Before the wait for DevTools: a worker killed during that wait must not leave Chrome.
    let mut exit_watcher = crate::pool::kill_when_this_process_exits(pid, &dir.to_string_lossy());
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| BrowserError::Launch("chrome's stderr is not piped".into()))?;
    // Chrome keeps logging (D-Bus, GPU, …); the pipe is drained so it never blocks, its lines
    // are debug logs, and the last ones explain a launch that fails.
    let tail = follow_stderr(stderr, pid);
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(worker_reads.into()).and_then(
        |from_chrome| {
            tokio::net::unix::pipe::Sender::from_owned_fd(worker_writes.into())
                .map(|to_chrome| (from_chrome, to_chrome))
        },
    );
    let (from_chrome, to_chrome) = match pipe {
        Ok(pipe) => pipe,
        Err(err) => {
            let _ = child.kill().await;
            crate::pool::stop_exit_watcher_of(exit_watcher.take());
            return Err(BrowserError::Launch(format!("chrome's pipe: {err}")));
        }
    };
    let conn = CdpConnection::over_pipe(from_chrome, to_chrome, cdp_timeout);
    // Chrome reads its pipe once it is up; the first answer says it is.
    let ready = conn
        .call_raw(None, "Browser.getVersion", serde_json::json!({}), timeout)
        .await;
    if let Err(err) = ready {
        let _ = child.kill().await;
        crate::pool::stop_exit_watcher_of(exit_watcher.take());
        return Err(launch_failure(&err, &tail, identity, timeout).await);
    }
    Ok(LaunchedChrome {
        child,
        pid,
        conn,
        exit_watcher,
    })
}

/// The profile, home and temporary directories of a Chrome under `dir` (`profile`, `home`,
/// `tmp`), created and handed over to Chrome's user with `dir` itself.
fn chrome_dirs(identity: &ChromeIdentity, dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let profile = dir.join("profile");
    let home = dir.join("home");
    let tmp = dir.join("tmp");
    for sub in [&profile, &home, &tmp] {
        std::fs::create_dir_all(sub)?;
        identity.hand_over(sub)?;
    }
    identity.hand_over(dir)?;
    Ok((profile, home, tmp))
}

/// The last lines Chrome wrote to stderr ([`STDERR_TAIL`] at most).
type StderrTail = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// Drains Chrome's stderr so that it never blocks: its lines are debug logs, and the last ones
/// are kept to explain a launch that fails.
fn follow_stderr(stderr: tokio::process::ChildStderr, pid: u32) -> StderrTail {
    let tail = std::sync::Arc::new(std::sync::Mutex::new(
        std::collections::VecDeque::<String>::new(),
    ));
    let stderr_tail = tail.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(target: "browserd_browser::chrome", pid, "{line}");
            let mut tail = stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });
    tail
}

/// Why a launched Chrome (killed now) did not answer on its pipe: in time, or at all (then
/// from its last words on stderr).
async fn launch_failure(
    err: &BrowserError,
    tail: &StderrTail,
    identity: &ChromeIdentity,
    timeout: Duration,
) -> BrowserError {
    match err {
        BrowserError::Timeout { .. } => BrowserError::Launch(format!(
            "chrome did not answer on its DevTools pipe within {} s",
            timeout.as_secs()
        )),
        _ => {
            // Its last words arrive a moment after its end of the pipe closed.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let seen: Vec<String> = tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned()
                .collect();
            BrowserError::Launch(exit_reason(&seen, identity))
        }
    }
}

/// Chrome's whole environment: [`CHROME_ENV_KEPT`] from the worker, its own `HOME` and
/// `TMPDIR`, the C locale (the page language is `--lang`).
fn chrome_env(home: &Path, tmp: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = CHROME_ENV_KEPT
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| ((*name).to_owned(), v)))
        .collect();
    if !env.iter().any(|(name, _)| name == "PATH") {
        env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    env.push(("HOME".into(), home.display().to_string()));
    env.push(("TMPDIR".into(), tmp.display().to_string()));
    env.push(("LANG".into(), "C".into()));
    env
}

/// Why Chrome ended before it listened, from its last stderr lines.
fn exit_reason(stderr: &[String], identity: &ChromeIdentity) -> String {
    let tail = stderr.join(" | ");
    let sandbox_failed = stderr
        .iter()
        .any(|l| l.contains("sandbox") || l.contains("Sandbox"));
    if sandbox_failed && identity.sandbox == Sandbox::On {
        format!(
            "chrome could not start its sandbox ({tail}); allow unprivileged user namespaces \
             (the seccomp profile in deploy/), install Debian's chromium-sandbox, or pass \
             --chrome-no-sandbox"
        )
    } else {
        format!("chrome exited before it was ready: {tail}")
    }
}

/// The profile directory's parent a pool creates per Chrome (removed when it closes).
pub(crate) fn chrome_dir() -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix("browserd-chrome-")
        .tempdir()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passwd_line_gives_the_user() {
        assert_eq!(
            parse_passwd_line("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"),
            Some(ChromeUser {
                name: "nobody".into(),
                uid: 65534,
                gid: 65534
            })
        );
        assert_eq!(parse_passwd_line("broken:x:abc:1"), None);
        assert_eq!(parse_passwd_line(""), None);
    }

    #[test]
    fn odd_user_names_are_refused_before_any_lookup() {
        for name in ["", "a:b", "a\nb", "../x"] {
            assert!(ChromeUser::lookup(name).is_err(), "{name:?}");
        }
        assert_eq!(ChromeUser::lookup("no-such-user-browserd").unwrap(), None);
    }

    #[test]
    fn the_build_is_told_by_the_executable_name() {
        for shell in [
            "/usr/bin/chromium-headless-shell",
            "/usr/lib/chromium/chromium-headless-shell",
            "/opt/chrome-headless-shell-linux64/chrome-headless-shell",
            "/opt/chrome/headless_shell",
        ] {
            assert_eq!(
                ChromeBuild::of_executable(Path::new(shell)),
                ChromeBuild::HeadlessShell,
                "{shell}"
            );
        }
        for full in ["/usr/bin/chromium", "/opt/google/chrome/chrome", "chromium"] {
            assert_eq!(
                ChromeBuild::of_executable(Path::new(full)),
                ChromeBuild::Full,
                "{full}"
            );
        }
        // A symlink is followed to what it names.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("chrome-headless-shell");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("browser");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            ChromeBuild::of_executable(&link),
            ChromeBuild::HeadlessShell
        );
        assert_eq!(
            ChromeBuild::HeadlessShell.build_flags(),
            ["--site-per-process"]
        );
        assert_eq!(ChromeBuild::Full.build_flags(), ["--headless=new"]);
    }

    #[test]
    fn a_wrapper_that_does_not_exec_is_looked_through() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("chrome-bin");
        std::fs::write(&program, "").unwrap();
        let script = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let debian = script(
            "chromium-headless-shell",
            format!("#!/bin/sh -e\n{} \"$@\"\n", program.display()),
        );
        assert_eq!(wrapped_executable(&debian), program);
        let exec = script(
            "exec",
            format!("#!/bin/sh\nexec {} \"$@\"\n", program.display()),
        );
        assert_eq!(wrapped_executable(&exec), exec, "exec needs nothing");
        let more = script(
            "more",
            format!("#!/bin/sh\nexport X=1\n{} \"$@\"\n", program.display()),
        );
        assert_eq!(wrapped_executable(&more), more);
        assert_eq!(wrapped_executable(&program), program);
        assert_eq!(
            wrapped_executable(Path::new("/no/such/chrome")),
            Path::new("/no/such/chrome")
        );
    }

    #[test]
    fn the_build_that_answered_is_told_by_its_product() {
        assert_eq!(
            ChromeBuild::of_product("HeadlessChrome/156.0.8078.114"),
            Some(ChromeBuild::HeadlessShell)
        );
        assert_eq!(
            ChromeBuild::of_product("Chrome/156.0.8078.114"),
            Some(ChromeBuild::Full)
        );
        assert_eq!(ChromeBuild::of_product("Firefox/1"), None);
    }

    #[test]
    fn chrome_gets_only_its_own_environment() {
        let env = chrome_env(Path::new("/c/home"), Path::new("/c/tmp"));
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        for name in &names {
            assert!(
                ["TZ", "PATH", "HOME", "TMPDIR", "LANG"].contains(name),
                "{name}"
            );
        }
        assert!(env.contains(&("HOME".into(), "/c/home".into())));
        assert!(env.contains(&("TMPDIR".into(), "/c/tmp".into())));
    }
}
