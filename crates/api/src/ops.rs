//! Operational endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document, and the
//! request metrics middleware.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
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
    match tokio::time::timeout(Duration::from_secs(3), state.store.ping()).await {
        Ok(Ok(())) => Ok(Json(HealthStatus { status: "ok" })),
        Ok(Err(err)) => {
            tracing::warn!(%err, "readiness check failed");
            Err(ApiError::Unavailable("database unreachable".to_owned()))
        }
        Err(_) => Err(ApiError::Unavailable(
            "database did not answer in time".to_owned(),
        )),
    }
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
pub async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// This API's OpenAPI document.
#[utoipa::path(get, path = "/openapi.yaml", tag = "ops",
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/yaml", body = String)))]
pub async fn openapi_yaml() -> Response {
    (
        [(header::CONTENT_TYPE, "application/yaml")],
        crate::openapi_yaml(),
    )
        .into_response()
}

/// The process-wide Prometheus recorder (installed on first use).
pub(crate) fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ])
                .expect("bucket list is not empty");
            match builder.install_recorder() {
                Ok(handle) => handle,
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
