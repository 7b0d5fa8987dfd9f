//! What happens in a session on its own, between actions: `SessionEvents` (dialogs seen,
//! downloads and the ones finished since the last action result, tabs already prepared) and
//! the per-session listener on the raw connection that fills it — tabs the page opens are
//! prepared, JavaScript dialogs are answered and recorded, downloads are tracked and renamed
//! to a sanitized unique name when complete.

use std::{collections::HashSet, path::PathBuf, sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use super::crash::CrashedTab;
use super::tabs::{Sessions, TargetInfoWire, prepare_tab};
use crate::{
    actions::workspace::sanitize_file_name,
    cdp::CdpEvent,
    types::{DownloadInfo, DownloadState, Viewport},
};

/// Things that happened in the session between actions.
#[derive(Default)]
pub(crate) struct SessionEvents {
    pub(super) dialogs: std::sync::Mutex<Vec<String>>,
    pub(super) downloads: std::sync::Mutex<Vec<DownloadInfo>>,
    /// Downloads finished since the last action result.
    pub(super) finished_downloads: std::sync::Mutex<Vec<String>>,
    pub(super) prepared: Mutex<HashSet<String>>,
    /// Tabs whose renderer died since the last capture ([`super::crash`]).
    pub(super) crashed: std::sync::Mutex<Vec<CrashedTab>>,
    /// Addresses whose page crashed in this session (not reopened a second time).
    pub(super) crashed_urls: std::sync::Mutex<HashSet<String>>,
    /// Downloads cancelled for a size cap since the last action result.
    pub(super) refused_downloads: std::sync::Mutex<Vec<String>>,
}

pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SessionEvents {
    pub(crate) fn take_dialogs(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.dialogs))
    }
    pub(crate) fn take_finished_downloads(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.finished_downloads))
    }
    pub(crate) fn take_crashed(&self) -> Vec<CrashedTab> {
        std::mem::take(&mut *lock(&self.crashed))
    }
    pub(crate) fn take_refused_downloads(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.refused_downloads))
    }
}

pub(super) struct ListenerCtx {
    pub(super) sessions: Arc<Sessions>,
    pub(super) events: Arc<SessionEvents>,
    pub(super) context_id: String,
    pub(super) downloads: Arc<std::sync::Mutex<DownloadPlace>>,
    pub(super) timeout: Duration,
    pub(super) viewport: Viewport,
}

/// Where a session's downloads go and how much they may take: set when the context opens for
/// its task, or when a task binds a context opened ahead of it (the pool's spare).
#[derive(Clone, Debug)]
pub(super) struct DownloadPlace {
    pub(super) dir: PathBuf,
    pub(super) caps: DownloadCaps,
}

impl ListenerCtx {
    fn downloads_dir(&self) -> PathBuf {
        lock(&self.downloads).dir.clone()
    }
}

/// The most a session's downloads may take on disk: per file and all together. A download
/// that grows past either is cancelled and its partial file removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DownloadCaps {
    pub per_file_bytes: u64,
    pub per_task_bytes: u64,
}

impl Default for DownloadCaps {
    /// 100 MiB per file, 500 MiB per task.
    fn default() -> Self {
        Self {
            per_file_bytes: 100 << 20,
            per_task_bytes: 500 << 20,
        }
    }
}

#[derive(Deserialize)]
struct TargetCrashedWire {
    #[serde(rename = "targetId")]
    target_id: String,
    #[serde(default)]
    status: String,
}

#[derive(Deserialize)]
struct TargetCreatedWire {
    #[serde(rename = "targetInfo")]
    target_info: TargetInfoWire,
}

#[derive(Deserialize)]
struct DialogWire {
    message: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct DownloadBeginWire {
    #[serde(rename = "frameId")]
    frame_id: String,
    guid: String,
    url: String,
    #[serde(rename = "suggestedFilename", default)]
    suggested_filename: String,
}

#[derive(Deserialize)]
struct DownloadProgressWire {
    guid: String,
    #[serde(rename = "totalBytes", default)]
    total_bytes: f64,
    #[serde(rename = "receivedBytes", default)]
    received_bytes: f64,
    state: String,
}

/// Handles the session's events: new tabs get Page events (so their dialogs are seen),
/// dialogs are closed (alert/confirm/beforeunload accepted, prompt dismissed) and recorded,
/// downloads are tracked and renamed to a safe unique name when complete.
pub(super) async fn listen(
    mut rx: tokio::sync::broadcast::Receiver<Arc<CdpEvent>>,
    ctx: ListenerCtx,
) {
    use tokio::sync::broadcast::error::RecvError;
    let ctx = Arc::new(ctx);
    loop {
        let ev = match rx.recv().await {
            Ok(ev) => ev,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(lost = n, "session event listener lagged");
                continue;
            }
            Err(RecvError::Closed) => break,
        };
        match ev.method.as_str() {
            "Target.targetCreated" => on_target_created(&ctx, &ev),
            "Target.targetCrashed" => on_target_crashed(&ctx, &ev).await,
            "Page.javascriptDialogOpening" => on_dialog(&ctx, &ev).await,
            "Browser.downloadWillBegin" => on_download_begin(&ctx, &ev).await,
            "Browser.downloadProgress" => on_download_progress(&ctx, &ev),
            _ => {}
        }
    }
}

/// A new tab of the context: its Page events are enabled (so its dialogs are seen).
fn on_target_created(ctx: &Arc<ListenerCtx>, ev: &CdpEvent) {
    if let Ok(p) = ev.params::<TargetCreatedWire>() {
        let info = p.target_info;
        if info.kind == "page" && info.browser_context_id.as_deref() == Some(&ctx.context_id) {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                if let Err(err) = prepare_tab(
                    &ctx.sessions,
                    &ctx.events,
                    &info.target_id,
                    ctx.viewport,
                    ctx.timeout,
                )
                .await
                {
                    tracing::debug!(error = %err, "could not prepare new tab");
                }
            });
        }
    }
}

/// A tab's renderer died: the crash is recorded (with whether the memory watch killed it) and
/// its session's calls fail.
async fn on_target_crashed(ctx: &Arc<ListenerCtx>, ev: &CdpEvent) {
    if let Ok(p) = ev.params::<TargetCrashedWire>() {
        let session = ctx
            .sessions
            .by_target
            .lock()
            .await
            .get(&p.target_id)
            .cloned();
        let ours = session.is_some() || ctx.events.prepared.lock().await.contains(&p.target_id);
        if ours {
            tracing::debug!(target = %p.target_id, status = %p.status, "a tab's renderer died");
            // Whether the pool's memory watch killed it is decided now, while the
            // kill is recent, not at the next capture (which may come much later).
            let memory_cap_mb = ctx
                .sessions
                .chrome
                .memory_killed_within(super::crash::MEMORY_KILL_WINDOW);
            lock(&ctx.events.crashed).push(CrashedTab {
                target_id: p.target_id,
                status: p.status,
                memory_cap_mb,
            });
            // After the crash is recorded: a call failed here finds it at its
            // retry.
            if let Some(session) = session {
                ctx.sessions.chrome.conn.fail_session(&session);
            }
        }
    }
}

/// A dialog opened in one of the session's tabs: recorded and closed (alert/confirm/
/// beforeunload accepted, prompt dismissed).
async fn on_dialog(ctx: &Arc<ListenerCtx>, ev: &CdpEvent) {
    let Some(session) = ev.session_id.clone() else {
        return;
    };
    if ctx.sessions.target_of(&session).await.is_none() {
        return;
    }
    if let Ok(p) = ev.params::<DialogWire>() {
        let accept = p.kind != "prompt";
        lock(&ctx.events.dialogs).push(format!("[{}] {}", p.kind, p.message));
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _ = ctx
                .sessions
                .chrome
                .conn
                .call_raw(
                    Some(&session),
                    "Page.handleJavaScriptDialog",
                    json!({"accept": accept}),
                    ctx.timeout,
                )
                .await;
        });
    }
}

/// A download began in one of the session's tabs: tracked.
async fn on_download_begin(ctx: &Arc<ListenerCtx>, ev: &CdpEvent) {
    if let Ok(p) = ev.params::<DownloadBeginWire>() {
        let ours = ctx.events.prepared.lock().await.contains(&p.frame_id)
            || ctx
                .sessions
                .by_target
                .lock()
                .await
                .contains_key(&p.frame_id);
        if ours {
            lock(&ctx.events.downloads).push(DownloadInfo {
                guid: p.guid,
                url: p.url,
                suggested_filename: p.suggested_filename,
                path: None,
                state: DownloadState::InProgress,
                received_bytes: 0,
                total_bytes: 0,
            });
        }
    }
}

/// A tracked download progressed: cancelled when it breaks a cap, renamed to a safe unique name
/// when complete.
fn on_download_progress(ctx: &Arc<ListenerCtx>, ev: &CdpEvent) {
    if let Ok(p) = ev.params::<DownloadProgressWire>() {
        let finished = {
            let mut downloads = lock(&ctx.events.downloads);
            let Some(pos) = downloads.iter().position(|d| d.guid == p.guid) else {
                return;
            };
            let d = &mut downloads[pos];
            d.received_bytes = p.received_bytes.max(0.0) as u64;
            d.total_bytes = p.total_bytes.max(0.0) as u64;
            let size = d.received_bytes.max(d.total_bytes);
            let running = d.state == DownloadState::InProgress;
            // Checked while it grows and once more when it completes (a fast
            // download may complete before any progress event).
            let over = (running && p.state != "canceled")
                .then(|| over_download_cap(&downloads, size, lock(&ctx.downloads).caps))
                .flatten();
            let d = &mut downloads[pos];
            if let Some(why) = over {
                d.state = DownloadState::Canceled;
                lock(&ctx.events.refused_downloads).push(format!("{} ({why})", d.url));
                let ctx = ctx.clone();
                let guid = d.guid.clone();
                tokio::spawn(async move { cancel_download(&ctx, &guid).await });
                return;
            }
            match p.state.as_str() {
                "completed" if running => Some(d.clone()),
                "canceled" => {
                    d.state = DownloadState::Canceled;
                    None
                }
                _ => None,
            }
        };
        if let Some(done) = finished {
            let path = finish_download(&ctx.downloads_dir(), &done);
            // Listed for the next action result before it shows as completed.
            if let Some(path) = &path {
                lock(&ctx.events.finished_downloads).push(path.to_string_lossy().into_owned());
            }
            let mut downloads = lock(&ctx.events.downloads);
            if let Some(d) = downloads.iter_mut().find(|d| d.guid == done.guid) {
                d.state = DownloadState::Completed;
                d.path = path;
            }
        }
    }
}

/// Why a download of `size` bytes so far breaks a cap, counting the session's other
/// downloads (finished and in progress).
fn over_download_cap(downloads: &[DownloadInfo], size: u64, caps: DownloadCaps) -> Option<String> {
    if size > caps.per_file_bytes {
        return Some(format!(
            "larger than the {} MiB allowed per file",
            caps.per_file_bytes >> 20
        ));
    }
    let total: u64 = downloads
        .iter()
        .filter(|d| d.state != DownloadState::Canceled)
        .map(|d| d.received_bytes.max(d.total_bytes))
        .sum();
    (total > caps.per_task_bytes).then(|| {
        format!(
            "the task's downloads would exceed the {} MiB allowed per task",
            caps.per_task_bytes >> 20
        )
    })
}

/// Cancels a download past a cap and removes what it wrote.
async fn cancel_download(ctx: &ListenerCtx, guid: &str) {
    let cancelled = ctx
        .sessions
        .chrome
        .conn
        .call_raw(
            None,
            "Browser.cancelDownload",
            json!({"guid": guid, "browserContextId": ctx.context_id}),
            ctx.timeout,
        )
        .await;
    if let Err(err) = cancelled {
        tracing::debug!(%err, "could not cancel a download past its cap (it completed)");
    }
    let _ = std::fs::remove_file(ctx.downloads_dir().join(guid));
}

/// Moves `downloads/<guid>` to a sanitized unique name; returns the final path.
fn finish_download(dir: &std::path::Path, d: &DownloadInfo) -> Option<PathBuf> {
    let from = dir.join(&d.guid);
    if !from.is_file() {
        return None;
    }
    let name = sanitize_file_name(&d.suggested_filename, "download");
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_owned(), format!(".{e}")),
        _ => (name.clone(), String::new()),
    };
    let mut to = dir.join(&name);
    let mut n = 1;
    while to.exists() {
        to = dir.join(format!("{stem} ({n}){ext}"));
        n += 1;
    }
    match std::fs::rename(&from, &to) {
        Ok(()) => Some(to),
        Err(_) => Some(from),
    }
}
