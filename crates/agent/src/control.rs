//! Pause, resume and stop, observed between steps; stop also aborts an in-flight model call.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A cloneable handle to control a running agent from another task.
#[derive(Debug, Clone)]
pub struct AgentControl {
    paused: Arc<watch::Sender<bool>>,
    stop: CancellationToken,
    /// What a person did in the browser while the agent was paused, not told to it yet.
    person_inputs: Arc<Mutex<Vec<String>>>,
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
            person_inputs: Arc::default(),
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

    /// A person changed the page while the agent was paused (take-over): `what` (e.g.
    /// "clicked at (10, 20)") is told to the agent when it resumes, so that it reads the page
    /// again instead of trusting its last state.
    pub fn person_input_applied(&self, what: String) {
        if let Ok(mut inputs) = self.person_inputs.lock() {
            inputs.push(what);
        }
    }

    /// The person's inputs since the last call.
    pub(crate) fn take_person_inputs(&self) -> Vec<String> {
        self.person_inputs
            .lock()
            .map(|mut inputs| std::mem::take(&mut *inputs))
            .unwrap_or_default()
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
