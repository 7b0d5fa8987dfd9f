//! Pause, resume and stop, observed between steps; stop also aborts an in-flight model call.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A cloneable handle to control a running agent from another task.
#[derive(Debug, Clone)]
pub struct AgentControl {
    paused: Arc<watch::Sender<bool>>,
    stop: CancellationToken,
}

impl Default for AgentControl {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentControl {
    /// A handle in the running state.
    pub fn new() -> Self {
        Self {
            paused: Arc::new(watch::Sender::new(false)),
            stop: CancellationToken::new(),
        }
    }

    /// Pause before the next step (the current step finishes).
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Continue after a pause.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Stop: the run ends before the next step, and an in-flight model call is abandoned.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Paused now.
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Stop was requested.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Resolves when stop is requested.
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// Waits while paused; returns false if stopped meanwhile.
    pub(crate) async fn wait_while_paused(&self) -> bool {
        let mut rx = self.paused.subscribe();
        loop {
            if self.is_stopped() {
                return false;
            }
            if !*rx.borrow_and_update() {
                return true;
            }
            tokio::select! {
                () = self.stop.cancelled() => return false,
                changed = rx.changed() => {
                    if changed.is_err() {
                        return true;
                    }
                }
            }
        }
    }
}
