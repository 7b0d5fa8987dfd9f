//! The health watch of each launched Chrome: that it answers, and its renderers' memory.

use std::time::Duration;

use super::{
    chrome::Chrome,
    config::PoolConfig,
    process::{descendant_pids, kill_pid},
};

/// What the health watch of each launched Chrome checks, and how often.
#[derive(Clone, Copy, Debug)]
pub(super) struct HealthSettings {
    interval: Duration,
    hang_timeout: Duration,
    renderer_memory_cap_mb: Option<u64>,
}

impl HealthSettings {
    pub(super) fn of(config: &PoolConfig) -> Self {
        Self {
            interval: config.health_interval,
            hang_timeout: config.hang_timeout,
            renderer_memory_cap_mb: config.renderer_memory_cap_mb,
        }
    }
}

/// Watches one launched Chrome until it is gone: every `interval`, a `Browser.getVersion`
/// that must be answered within `hang_timeout` (else Chrome is killed: a hung browser fails
/// its tasks' calls only after their own timeouts, a dead one at once, and its tasks are
/// resumed in a new one), and each renderer's resident memory against the cap (a renderer
/// above it is killed before it takes the machine, and Chrome, down).
pub(super) async fn watch_health(chrome: std::sync::Weak<Chrome>, settings: HealthSettings) {
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
