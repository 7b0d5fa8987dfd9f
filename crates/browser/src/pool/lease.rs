//! A session's claim on a pool slot.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use tokio::sync::OwnedSemaphorePermit;

use super::{Chrome, PoolInner};

/// A session's claim on a pool slot; returned by [`Lease::finish`].
pub(crate) struct Lease {
    pool: Arc<PoolInner>,
    chrome: Arc<Chrome>,
    permit: Option<OwnedSemaphorePermit>,
    /// This lease has not yet had its Chrome open the next spare context.
    spare_refill_due: AtomicBool,
}

impl Lease {
    pub(super) fn new(
        pool: Arc<PoolInner>,
        chrome: Arc<Chrome>,
        permit: OwnedSemaphorePermit,
    ) -> Self {
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
