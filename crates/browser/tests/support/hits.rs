//! Requests a fixture server received, shared by the egress test supports.

use std::sync::Mutex;

/// Requests a server received: (Host header, path and query), in arrival order.
#[derive(Debug, Default)]
pub struct Hits(Mutex<Vec<(String, String)>>);

impl Hits {
    pub fn push(&self, host: String, target: String) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((host, target));
    }

    /// Requests whose path-and-query contains `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, t)| t.contains(needle))
            .count()
    }

    /// Every request, for failure messages.
    pub fn all(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
