//! Chrome's operating-system processes: the exit watcher that kills Chrome when this process
//! dies, descendants and liveness from /proc, kill and renice.

use std::{collections::HashSet, time::Duration};

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

/// SIGKILL to `pid` (the shell's `kill`: the workspace forbids `unsafe`, and `sh` is in every
/// base system, as for the exit watcher).
pub(super) fn kill_pid(pid: u32) {
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

pub(super) fn stop_exit_watcher(mut watcher: std::process::Child) {
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
pub(super) async fn lower_priority(pid: u32, nice: i32) {
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
