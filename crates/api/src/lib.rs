//! The HTTP and WebSocket API of browserd (axum): the native `/v1` task routes, bearer-key auth
//! with per-key rate limits, the event WebSocket, the MCP task tools at `/mcp` (streamable
//! HTTP), the live view WebSocket, health/readiness/metrics endpoints, the OpenAPI document
//! generated from the handlers, and the web dashboard at `/` (static files embedded in the
//! binary, [`dashboard`]).
//!
//! The edge is hardened: unauthenticated and invalid-key requests are rate-limited per client
//! address before any database lookup ([`auth`]), every request has a timeout, WebSocket
//! subscriptions are capped per key, size-limited, and closed when their key is revoked or
//! their task deleted ([`events`]).
//!
//! The api is stateless: every request reads and writes through the task core
//! ([`browserd_tasks::TaskCore`], which holds the store and the process's event hub); it has no
//! store handle of its own and never touches a browser.

mod auth;
mod client_ip;
mod dashboard;
mod error;
mod events;
mod extract;
mod live;
mod mcp;
mod models;
mod ops;
mod output_files;
mod profiles;
mod schedules;
mod skills;
mod tasks;
mod v2;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::Request;
use axum::http::header::{AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL};
use axum::middleware;
use browserd_tasks::{ModelCatalog, TaskCore, TaskSettings};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{BEARER_SUBPROTOCOL, KEY_CACHE_TTL, RateLimit};
pub use client_ip::{InvalidIpRange, IpRange, client_ip, parse_trusted_proxies};
pub use error::ApiError;
pub use live::VIEW_ONLY_CLOSE;
pub use ops::{metrics_handle, metrics_router};

/// Joins requests to distributed traces. The binary implements it with OpenTelemetry, so this
/// crate only deals in `tracing` spans and W3C header values.
pub trait TraceContext: Send + Sync + std::fmt::Debug {
    /// Makes `span` (a request's span, not entered yet) a child of the caller's W3C
    /// `traceparent` (and `tracestate`).
    fn set_remote_parent(&self, span: &tracing::Span, traceparent: &str, tracestate: Option<&str>);
    /// The W3C `traceparent` of `span` when it is traced.
    fn traceparent(&self, span: &tracing::Span) -> Option<String>;
}

/// Default maximum request body size.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 1024 * 1024;
/// Default time a request may take before it is answered 408 (a WebSocket's stream is not a
/// request: only its upgrade counts).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap of a client WebSocket message (and frame) in bytes. Clients have nothing to
/// send on the event stream but pings and a close.
pub const DEFAULT_WS_MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Lifetime of an event WebSocket ticket.
pub const WS_TICKET_TTL: Duration = Duration::from_secs(30);

/// Settings of the api role.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Larger request bodies get 413.
    pub body_limit_bytes: usize,
    /// Per-key request budget; `None` disables rate limiting.
    pub rate_limit: Option<RateLimit>,
    /// Models a task may name.
    pub models: ModelCatalog,
    /// Upstream proxies a task may name (`proxy`); empty: tasks may name none.
    pub proxies: Vec<String>,
    /// Above this many queued tasks (all keys together), `POST /v1/tasks` answers 429 with
    /// `Retry-After` (`None`: no limit). Per-key quotas are the store's
    /// (the store's defaults, and each key's own).
    pub max_queued_tasks: Option<i64>,
    /// Trace propagation (`None`: tracing is off; a task then keeps the caller's own
    /// `traceparent` header, if valid).
    pub trace_context: Option<Arc<dyn TraceContext>>,
    /// Per-client-address budget of requests that are not authenticated by a cached key (no
    /// key, unknown key, ticket), taken before any database lookup; `None` disables it.
    pub unauthenticated_rate_limit: Option<RateLimit>,
    /// Peers whose `X-Forwarded-For` is believed (reverse proxies, load balancers).
    pub trusted_proxies: Vec<IpRange>,
    /// Every request is answered 408 after this long.
    pub request_timeout: Duration,
    /// Largest message (and frame) a client may send on a WebSocket.
    pub ws_max_message_bytes: usize,
    /// Webhooks may target loopback (the operator's `--allow-loopback`, the switch the
    /// worker's delivery obeys); every other private, link-local and metadata address is
    /// refused at registration whatever this says.
    pub webhook_allow_loopback: bool,
    /// How long a successful key lookup is reused ([`KEY_CACHE_TTL`]; revocations evict at
    /// once).
    pub key_cache_ttl: Duration,
    /// `/metrics` on the api port answers only requests that carry this as a bearer token;
    /// `None`: the api port does not serve `/metrics` (404) — the open exposition is
    /// [`metrics_router`]'s, on a listener of its own (`--metrics-listen`).
    pub metrics_token: Option<secrecy::SecretString>,
    /// The base of every absolute URL built for a client (v2 `liveUrl`, `downloadUrl`,
    /// `screenshotUrl`): the operator's `--public-url`, else `http://<listen address>`. Never
    /// the request's `Host` or `X-Forwarded-Host`. `None`: those URLs are paths alone.
    pub public_url: Option<PublicUrl>,
}

/// A validated public base URL (`--public-url`): http or https, a host, no credentials, query
/// or fragment; kept without a trailing `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicUrl(Arc<str>);

/// Why a public base URL was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublicUrlError {
    #[error("not a valid URL: {0}")]
    Invalid(#[from] url::ParseError),
    #[error("the scheme must be http or https, not `{0}`")]
    Scheme(String),
    #[error("it must have a host")]
    NoHost,
    #[error("it must not carry a user name or password")]
    Credentials,
    #[error("it must not have a query")]
    Query,
    #[error("it must not have a fragment")]
    Fragment,
}

impl PublicUrl {
    /// `raw` (e.g. `https://browserd.example.com`, or with a path prefix) if it is a valid base.
    pub fn parse(raw: &str) -> Result<Self, PublicUrlError> {
        let url = url::Url::parse(raw.trim())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(PublicUrlError::Scheme(url.scheme().to_owned()));
        }
        if url.host().is_none() {
            return Err(PublicUrlError::NoHost);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(PublicUrlError::Credentials);
        }
        if url.query().is_some() {
            return Err(PublicUrlError::Query);
        }
        if url.fragment().is_some() {
            return Err(PublicUrlError::Fragment);
        }
        Ok(Self(url.as_str().trim_end_matches('/').into()))
    }

    /// `http://<address>`: the base when the operator sets none.
    pub fn from_listen_address(address: std::net::SocketAddr) -> Self {
        Self(format!("http://{address}").into())
    }

    /// The base, without a trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
            rate_limit: None,
            models: ModelCatalog::default(),
            proxies: Vec::new(),
            max_queued_tasks: None,
            trace_context: None,
            unauthenticated_rate_limit: None,
            trusted_proxies: Vec::new(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            ws_max_message_bytes: DEFAULT_WS_MAX_MESSAGE_BYTES,
            webhook_allow_loopback: false,
            key_cache_ttl: KEY_CACHE_TTL,
            metrics_token: None,
            public_url: None,
        }
    }
}

/// The edge's own state: limits, caches and counters of this process.
pub(crate) struct Edge {
    pub(crate) trusted_proxies: Vec<IpRange>,
    pub(crate) ip_limiter: Option<Arc<auth::IpRateLimiter>>,
    pub(crate) key_cache: Arc<auth::KeyCache>,
    pub(crate) websockets: events::WebSocketCounter,
    pub(crate) ws_max_message_bytes: usize,
}

/// Shared state of all handlers. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The task core: every read and write of every handler.
    core: TaskCore,
    webhook_allow_loopback: bool,
    rate_limiter: Option<Arc<auth::KeyRateLimiter>>,
    shutdown: CancellationToken,
    metrics: PrometheusHandle,
    /// Required by `/metrics` when set.
    metrics_token: Option<Arc<secrecy::SecretString>>,
    /// The base of absolute URLs built for clients ([`ApiConfig::public_url`]).
    public_url: Option<PublicUrl>,
    trace_context: Option<Arc<dyn TraceContext>>,
    edge: Arc<Edge>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "browserd",
        description = "Self-hosted service running LLM browser agents. Every `/v1` call needs `Authorization: Bearer <key>`. Errors are `{\"error\":{\"code\",\"message\"}}`.",
        license(name = "MIT OR Apache-2.0")
    ),
    modifiers(&BearerAuth),
    components(schemas(browserd_types::TaskEvent)),
    tags(
        (name = "tasks", description = "Create, inspect and control agent tasks"),
        (name = "events", description = "Live task events over WebSocket"),
        (name = "webhooks", description = "Signed task status events delivered to your endpoints"),
        (name = "profiles", description = "Browser profiles: the cookies and localStorage of a login, which tasks start from and save back into"),
        (name = "skills", description = "Skills: a task saved as a parameterised script that runs again without a model and heals itself when the site changes"),
        (name = "schedules", description = "Tasks (or skill executions) created on a cron schedule, each tick exactly once"),
        (name = "ops", description = "Health, readiness, metrics"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

fn v1_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(tasks::create_task, tasks::list_tasks))
        .routes(routes!(tasks::get_task, tasks::delete_task))
        .routes(routes!(tasks::stop_task))
        .routes(routes!(tasks::pause_task))
        .routes(routes!(tasks::resume_task))
        .routes(routes!(tasks::answer_task))
        .routes(routes!(tasks::list_steps))
        .routes(routes!(tasks::step_screenshot))
        .routes(routes!(tasks::task_history))
        .routes(routes!(tasks::replay_report))
        .routes(routes!(output_files::list_files))
        .routes(routes!(output_files::download_file))
        .routes(routes!(events::task_events))
        .routes(routes!(events::create_ticket))
        .routes(routes!(live::task_live))
        .routes(routes!(models::list_models))
        .routes(routes!(webhooks::create_webhook, webhooks::list_webhooks))
        .routes(routes!(webhooks::delete_webhook))
        .routes(routes!(webhooks::list_deliveries))
        .routes(routes!(profiles::create_profile, profiles::list_profiles))
        .routes(routes!(
            profiles::get_profile,
            profiles::update_profile,
            profiles::delete_profile
        ))
        .routes(routes!(skills::create_skill, skills::list_skills))
        .routes(routes!(
            skills::get_skill,
            skills::update_skill,
            skills::delete_skill
        ))
        .routes(routes!(skills::run_skill, skills::list_skill_runs))
        .routes(routes!(skills::get_skill_run))
        .routes(routes!(skills::list_skill_versions))
        .routes(routes!(skills::rollback_skill))
        .routes(routes!(skills::refine_skill))
        .routes(routes!(skills::cancel_skill))
        .routes(routes!(
            schedules::create_schedule,
            schedules::list_schedules
        ))
        .routes(routes!(
            schedules::get_schedule,
            schedules::update_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(schedules::list_schedule_runs))
}

fn ops_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics_text))
        .routes(routes!(ops::openapi_yaml))
}

/// The OpenAPI document of every route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    OpenApiRouter::<AppState>::with_openapi(ApiDoc::openapi())
        .merge(v1_routes())
        .merge(ops_routes())
        .into_openapi()
}

/// [`openapi`] as YAML (the content of `openapi.yaml`).
pub fn openapi_yaml() -> String {
    openapi()
        .to_yaml()
        .unwrap_or_else(|err| format!("# could not render OpenAPI document: {err}\n"))
}

/// The OpenAPI document of the `/api/v2` subset browserd implements (paths relative to its
/// server URL, `/api/v2`).
pub fn openapi_v2() -> utoipa::openapi::OpenApi {
    v2::openapi()
}

/// [`openapi_v2`] as YAML (the content of `openapi-v2.yaml`).
pub fn openapi_v2_yaml() -> String {
    openapi_v2()
        .to_yaml()
        .unwrap_or_else(|err| format!("# could not render OpenAPI document: {err}\n"))
}

/// Where the MCP server is mounted (every method goes to rmcp's streamable HTTP service).
pub const MCP_PATH: &str = "/mcp";

/// One route of [`router`]: a method (`ANY` for a mounted service) and a path template
/// (`{name}` for a path segment), as written in the OpenAPI documents.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    pub method: String,
    pub path: String,
}

/// Every route [`router`] serves, taken from the same lists the router is built from: the
/// operations of [`openapi`] (`/v1` and ops), of [`openapi_v2`] (under `/api/v2`), the MCP
/// service at [`MCP_PATH`] and the dashboard's files. (Unknown paths get the fallbacks: 404,
/// and 501 under `/api/v2`.)
pub fn routes() -> Vec<Route> {
    fn operations(doc: &utoipa::openapi::OpenApi, prefix: &str, into: &mut Vec<Route>) {
        for (path, item) in &doc.paths.paths {
            let methods = [
                ("GET", item.get.is_some()),
                ("POST", item.post.is_some()),
                ("PUT", item.put.is_some()),
                ("PATCH", item.patch.is_some()),
                ("DELETE", item.delete.is_some()),
                ("HEAD", item.head.is_some()),
                ("OPTIONS", item.options.is_some()),
                ("TRACE", item.trace.is_some()),
            ];
            for (method, present) in methods {
                if present {
                    into.push(Route {
                        method: method.to_owned(),
                        path: format!("{prefix}{path}"),
                    });
                }
            }
        }
    }
    let mut routes = Vec::new();
    operations(&openapi(), "", &mut routes);
    operations(&openapi_v2(), v2::PREFIX, &mut routes);
    routes.push(Route {
        method: "ANY".to_owned(),
        path: MCP_PATH.to_owned(),
    });
    for (path, _, _) in dashboard::ASSETS {
        routes.push(Route {
            method: "GET".to_owned(),
            path: path.to_owned(),
        });
    }
    routes.sort();
    routes
}

/// Builds the application. `shutdown` closes open WebSockets (code 1001) when cancelled.
///
/// Serve it with `into_make_service_with_connect_info::<SocketAddr>()` so that the per-address
/// rate limit sees each client's address (without it, all clients share one budget).
pub fn router(core: TaskCore, config: ApiConfig, shutdown: CancellationToken) -> Router {
    let rate_limiter = config.rate_limit.map(auth::KeyRateLimiter::new);
    let ip_limiter = config
        .unauthenticated_rate_limit
        .map(auth::IpRateLimiter::new);
    let metrics = ops::metrics_handle();
    spawn_housekeeping(
        metrics.clone(),
        rate_limiter.clone(),
        ip_limiter.clone(),
        shutdown.clone(),
    );
    let key_cache = Arc::new(auth::KeyCache::new(config.key_cache_ttl));
    key_cache.follow_revocations(&core, shutdown.clone());
    let edge = Arc::new(Edge {
        trusted_proxies: config.trusted_proxies,
        ip_limiter,
        key_cache,
        websockets: events::WebSocketCounter::default(),
        ws_max_message_bytes: config.ws_max_message_bytes,
    });
    let request_timeout = config.request_timeout;
    let trace_context = config.trace_context.clone();
    let core = core.configured(TaskSettings {
        models: config.models,
        proxies: config.proxies,
        max_queued_tasks: config.max_queued_tasks,
    });
    let state = AppState {
        core,
        webhook_allow_loopback: config.webhook_allow_loopback,
        rate_limiter,
        shutdown,
        metrics,
        metrics_token: config.metrics_token.map(Arc::new),
        public_url: config.public_url,
        trace_context: trace_context.clone(),
        edge,
    };

    let (v1, _) = v1_routes()
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ))
        .split_for_parts();
    let (ops, _) = ops_routes().split_for_parts();
    // MCP over streamable HTTP, behind the same key check (and rate limit) as /v1.
    let mcp = Router::new()
        .route_service(
            MCP_PATH,
            mcp::service(state.clone(), config.body_limit_bytes),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ));

    Router::new()
        .merge(v1)
        .nest(v2::PREFIX, v2::router(state.clone()))
        .merge(ops)
        .merge(mcp)
        .merge(dashboard::router())
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .with_state(state)
        .layer(DefaultBodyLimit::max(config.body_limit_bytes))
        .layer(middleware::from_fn(move |request, next| {
            ops::request_timeout(request_timeout, request, next)
        }))
        .layer(middleware::from_fn(ops::track_metrics))
        .layer(TraceLayer::new_for_http().make_span_with(
            move |request: &Request<axum::body::Body>| {
                let route = request
                    .extensions()
                    .get::<axum::extract::MatchedPath>()
                    .map_or("unmatched", |p| p.as_str());
                let request_id = request
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let span = tracing::info_span!(
                    "request",
                    method = %request.method(),
                    route,
                    request_id,
                    api_key_id = tracing::field::Empty,
                    otel.name = format!("{} {route}", request.method()),
                    otel.kind = "server",
                );
                if let Some(trace_context) = &trace_context
                    && let Some(parent) = header_str(request.headers(), "traceparent")
                {
                    let state = header_str(request.headers(), "tracestate");
                    trace_context.set_remote_parent(&span, parent, state);
                }
                span
            },
        ))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(SetSensitiveRequestHeadersLayer::new([
            AUTHORIZATION,
            SEC_WEBSOCKET_PROTOCOL,
            axum::http::HeaderName::from_static(v2::API_KEY_HEADER),
        ]))
        .layer(CatchPanicLayer::custom(ops::panic_response))
}

fn header_str<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Periodic upkeep: drains histogram buffers and forgets idle rate-limit buckets.
fn spawn_housekeeping(
    metrics: PrometheusHandle,
    rate_limiter: Option<Arc<auth::KeyRateLimiter>>,
    ip_limiter: Option<Arc<auth::IpRateLimiter>>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {
                    metrics.run_upkeep();
                    if let Some(limiter) = &rate_limiter {
                        limiter.retain_recent();
                    }
                    if let Some(limiter) = &ip_limiter {
                        limiter.retain_recent();
                    }
                }
            }
        }
    });
}
