//! `/mcp`: the MCP task tools over streamable HTTP (`rmcp`'s `StreamableHttpService`, mounted
//! as a tower service). The `/v1` auth middleware runs first, so a request without a valid
//! key gets the REST API's 401 before any MCP session exists; the tools then act as that key's
//! tenant through the task core, as the `/v1` handlers do ([`browserd_mcp::TaskBackend`], with
//! the key of each HTTP request).

use std::sync::Arc;

use axum::http::request::Parts;
use browserd_mcp::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use browserd_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};
use browserd_mcp::{Backend, BrowserdMcp, CallContext, TaskBackend, ToolError};

use crate::AppState;
use crate::extract::Caller;

/// The streamable HTTP MCP service. Sessions end when `state.shutdown` is cancelled.
pub(crate) fn service(
    state: AppState,
    body_limit_bytes: usize,
) -> StreamableHttpService<BrowserdMcp, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown.child_token())
        .with_max_request_body_bytes(body_limit_bytes)
        // Every request carries a bearer key checked before it gets here, which is what the
        // Host check protects unauthenticated local servers with; deployments use any name.
        .disable_allowed_hosts();
    let backend: Arc<dyn Backend> = Arc::new(TaskBackend::per_call(
        state.core.clone(),
        Arc::new(request_caller),
        state.shutdown.clone(),
    ));
    StreamableHttpService::new(
        move || Ok(BrowserdMcp::new(backend.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The key the auth middleware resolved for the HTTP request of this tool call.
fn request_caller(cx: &CallContext) -> Result<browserd_tasks::Caller, ToolError> {
    cx.get::<Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .map(|caller| caller.0.clone())
        .ok_or_else(|| {
            ToolError::new(
                "missing_api_key",
                "send your API key as `Authorization: Bearer <key>`",
            )
        })
}
