//! Spare contexts: each Chrome keeps contexts opened ahead of the next tasks (their first
//! tab's renderer started), and the pool starts Chromes ahead of need.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use super::{BrowserPool, Chrome, PoolInner, PoolState};
use crate::session::BrowserSession;

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

impl Chrome {
    pub(super) fn spares(&self) -> std::sync::MutexGuard<'_, Vec<BrowserSession>> {
        self.spares.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest spare (a tab that has sat idle navigates a little slower: the oldest
    /// waits for the next lease).
    pub(super) fn take_spare(&self) -> Option<BrowserSession> {
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
}

impl PoolInner {
    /// How many spare contexts `chrome` is to hold now: one per context it has free (the
    /// tasks that could start on it at once), at least one (the next task's, while it is
    /// full), at most `spare_contexts`.
    pub(super) fn spare_target(&self, chrome: &Chrome) -> usize {
        spare_target(
            self.config.spare_contexts,
            self.config.contexts_per_process,
            chrome.active.load(Ordering::SeqCst),
        )
    }

    /// Opens `chrome`'s spare contexts in the background, one after the other, until it
    /// holds as many as it is to ([`Self::spare_target`]; unless they are being opened
    /// already), while it is alive and not used up.
    pub(super) fn refill_spare(self: &Arc<Self>, chrome: &Arc<Chrome>) {
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

    /// Starts Chromes ahead of need, so that no lease waits for a launch it could have been
    /// spared: the successor of a Chrome with fewer than a Chrome's worth of leases left before
    /// it is recycled, and — when the live Chromes have at most one free context left — the
    /// first Chrome of an empty slot. Launched ones only (a remote connect is quick).
    pub(super) fn prepare_spares(self: &Arc<Self>, state: &mut PoolState) {
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

impl BrowserPool {
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
}

#[cfg(test)]
mod tests {
    use super::spare_target;

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
