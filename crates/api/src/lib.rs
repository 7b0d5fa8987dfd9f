//! HTTP and WebSocket API (axum): `/v1` native routes, auth, events.
