//! Operational endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document, and the
//! request metrics middleware.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use browserd_tasks::TaskCore;
use browserd_types::TaskStatus;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;

#[derive(Serialize, ToSchema)]
pub struct HealthStatus {
    /// `ok`
    pub status: &'static str,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "Process is up", body = HealthStatus)))]
pub async fn healthz() -> Json<HealthStatus> {
    Json(HealthStatus { status: "ok" })
}

/// The database is reachable.
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready", body = HealthStatus),
        (status = 503, description = "Database unreachable", body = browserd_types::dto::ErrorBody),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<HealthStatus>, ApiError> {
    // A probe flood costs at most one ping per interval.
    if recently(&LAST_READY) {
        return Ok(Json(HealthStatus { status: "ok" }));
    }
    match tokio::time::timeout(Duration::from_secs(3), state.core.ping()).await {
        Ok(Ok(())) => {
            mark(&LAST_READY);
            Ok(Json(HealthStatus { status: "ok" }))
        }
        Ok(Err(err)) => {
            tracing::warn!(%err, "readiness check failed");
            Err(ApiError::Unavailable("database unreachable".to_owned()))
        }
        Err(_) => Err(ApiError::Unavailable(
            "database did not answer in time".to_owned(),
        )),
    }
}

/// Postgres is asked at most once per this interval by `/readyz` and by the task gauges of
/// `/metrics`, whatever the number of requests: neither takes a key, so a flood of them must
/// not become a flood of queries.
const DATABASE_READ_INTERVAL: Duration = Duration::from_secs(1);
static LAST_READY: Mutex<Option<Instant>> = Mutex::new(None);
static LAST_GAUGES: Mutex<Option<Instant>> = Mutex::new(None);

/// Whether `last` is within [`DATABASE_READ_INTERVAL`].
fn recently(last: &Mutex<Option<Instant>>) -> bool {
    last.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some_and(|at| at.elapsed() < DATABASE_READ_INTERVAL)
}

fn mark(last: &Mutex<Option<Instant>>) {
    *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
}

/// Prometheus metrics in the text exposition format, on the api port only behind
/// `--metrics-token` (the scraper sends it as `Authorization: Bearer <token>`; 401 otherwise).
/// Without a token they are not served here (404): the open exposition is on the metrics
/// listener (`--metrics-listen`, by default 127.0.0.1:9464). The task gauges are read from
/// Postgres at most once a second.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, description = "The metrics token is required", body = browserd_types::dto::ErrorBody),
        (status = 404, description = "No metrics token is configured: metrics are served on the metrics listener (`--metrics-listen`) only", body = browserd_types::dto::ErrorBody),
    ))]
pub async fn metrics_text(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if state.metrics_token.is_none() {
        return ApiError::NotFound {
            code: "not_found",
            message: "metrics are not served on the api port without --metrics-token; scrape \
                      the metrics listener (--metrics-listen / BROWSERD_METRICS_LISTEN)"
                .to_owned(),
        }
        .into_response();
    }
    if let Err(err) = check_metrics_token(state.metrics_token.as_deref(), &headers) {
        return err.into_response();
    }
    exposition(&state.core, &state.metrics).await
}

/// `Err` (401) unless `token` is unset or the request carries it as a bearer token. Compared
/// as SHA-256 digests, so the time taken says nothing about the token.
fn check_metrics_token(token: Option<&SecretString>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = token else {
        return Ok(());
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let digest = |text: &str| Sha256::digest(text.as_bytes());
    if digest(sent) == digest(token.expose_secret()) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized {
            code: "invalid_metrics_token",
            message: "send the metrics token as `Authorization: Bearer <token>`".to_owned(),
        })
    }
}

async fn exposition(store: &TaskCore, handle: &PrometheusHandle) -> Response {
    if !recently(&LAST_GAUGES) {
        mark(&LAST_GAUGES);
        refresh_task_gauges(store).await;
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// Sets `browserd_tasks{status}`, `browserd_queue_depth` and
/// `browserd_queue_oldest_age_seconds` from one query. On a database error the previous values
/// stay (and the error is counted).
async fn refresh_task_gauges(store: &TaskCore) {
    match tokio::time::timeout(Duration::from_secs(2), store.task_gauges()).await {
        Ok(Ok(rows)) => {
            for status in TaskStatus::ALL.into_iter().filter(|s| !s.is_terminal()) {
                let row = rows.iter().find(|r| r.status == status);
                let tasks = row.map_or(0, |r| r.tasks);
                metrics::gauge!("browserd_tasks", "status" => status.as_str()).set(tasks as f64);
                if status == TaskStatus::Queued {
                    metrics::gauge!("browserd_queue_depth").set(tasks as f64);
                    metrics::gauge!("browserd_queue_oldest_age_seconds")
                        .set(row.map_or(0.0, |r| r.oldest_age_s));
                }
            }
        }
        Ok(Err(err)) => {
            tracing::debug!(%err, "reading the task gauges failed");
            metrics::counter!("browserd_metrics_refresh_errors_total").increment(1);
        }
        Err(_) => {
            tracing::debug!("reading the task gauges timed out");
            metrics::counter!("browserd_metrics_refresh_errors_total").increment(1);
        }
    }
}

/// `/metrics` (and `/healthz`) alone, for a process without the api: the worker role's
/// `--metrics-addr` listener. Same exposition (and token) as the api's `/metrics`.
pub fn metrics_router(store: TaskCore, token: Option<SecretString>) -> axum::Router {
    let handle = metrics_handle();
    let token = token.map(Arc::new);
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move |headers: HeaderMap| {
                let store = store.clone();
                let handle = handle.clone();
                let token = token.clone();
                async move {
                    if let Err(err) = check_metrics_token(token.as_deref(), &headers) {
                        return err.into_response();
                    }
                    exposition(&store, &handle).await
                }
            }),
        )
        .route("/healthz", axum::routing::get(healthz))
}

/// This API's OpenAPI document.
#[utoipa::path(get, path = "/openapi.yaml", tag = "ops",
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/yaml", body = Object)))]
pub async fn openapi_yaml() -> Response {
    (
        [(header::CONTENT_TYPE, "application/yaml")],
        crate::openapi_yaml(),
    )
        .into_response()
}

/// Buckets (seconds) of the histograms of whole steps and model calls.
const SLOW_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];
/// Buckets (seconds) of page captures and actions.
const CAPTURE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The process-wide Prometheus recorder, installed on first use (call it before recording
/// anything: metrics recorded before a recorder exists are lost). Every metric browserd
/// records, in any crate, lands here.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ])
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("browserd_step_duration_seconds".into()),
                        SLOW_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("browserd_model_request_duration_seconds".into()),
                        SLOW_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("browserd_capture_duration_seconds".into()),
                        CAPTURE_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("browserd_action_duration_seconds".into()),
                        CAPTURE_BUCKETS,
                    )
                })
                .expect("bucket lists are not empty");
            match builder.install_recorder() {
                Ok(handle) => {
                    describe_metrics();
                    handle
                }
                // Another recorder is installed (e.g. by an embedding application): render
                // our own, empty registry rather than fail.
                Err(err) => {
                    tracing::warn!(%err, "metrics recorder already installed");
                    PrometheusBuilder::new().build_recorder().handle()
                }
            }
        })
        .clone()
}

/// Help texts of the api's own metrics, and the task gauges at zero until the first scrape.
fn describe_metrics() {
    metrics::describe_counter!(
        "browserd_http_requests_total",
        "HTTP requests by method, matched route and status"
    );
    metrics::describe_histogram!(
        "browserd_http_request_duration_seconds",
        metrics::Unit::Seconds,
        "HTTP request latency by method, matched route and status"
    );
    metrics::describe_counter!(
        "browserd_rate_limited_total",
        "Requests answered 429 by a rate limit: limit=key (per API key) or client (per client \
         address, before any key lookup)"
    );
    metrics::describe_counter!(
        "browserd_http_request_timeouts_total",
        "Requests answered 408 because they exceeded the request timeout"
    );
    metrics::describe_histogram!(
        "browserd_event_delivery_seconds",
        metrics::Unit::Seconds,
        "From a task event's commit to the end of its send on a task event WebSocket (events \
         stored while the socket was open)"
    );
    metrics::describe_gauge!(
        "browserd_websocket_subscribers",
        "Open task event WebSockets on this api process"
    );
    metrics::gauge!("browserd_websocket_subscribers").set(0.0);
    metrics::describe_gauge!(
        "browserd_tasks",
        "Tasks by active status (queued, running, paused), read from Postgres on scrape"
    );
    metrics::describe_gauge!(
        "browserd_queue_depth",
        "Queued tasks (read from Postgres on scrape)"
    );
    metrics::describe_gauge!(
        "browserd_queue_oldest_age_seconds",
        metrics::Unit::Seconds,
        "How long the longest-waiting queued task has been queued"
    );
    metrics::describe_counter!(
        "browserd_metrics_refresh_errors_total",
        "Scrapes whose task gauges could not be read from Postgres"
    );
}

/// Middleware: counts requests and records latencies by method, matched route and status.
pub(crate) async fn track_metrics(request: Request, next: Next) -> Response {
    let path = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let labels = [("method", method), ("path", path), ("status", status)];
    metrics::counter!("browserd_http_requests_total", &labels).increment(1);
    metrics::histogram!("browserd_http_request_duration_seconds", &labels)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Middleware: answers 408 `request_timeout` (our JSON error) when the inner service has not
/// answered within `limit` — reading the body included. (tower-http's `TimeoutLayer` answers
/// with an empty body.) A WebSocket upgrade answers at once; its stream is not timed.
pub(crate) async fn request_timeout(limit: Duration, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            metrics::counter!("browserd_http_request_timeouts_total").increment(1);
            ApiError::Timeout(limit).into_response()
        }
    }
}

/// Fallback for unknown routes.
pub(crate) async fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "route_not_found",
        message: "no such route".to_owned(),
    }
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

pub(crate) fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("handler panicked".to_owned()).into_response()
}
