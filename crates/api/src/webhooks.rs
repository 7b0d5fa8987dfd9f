//! `/v1/webhooks`: register, list and delete the endpoints that receive signed task status
//! events, and list their deliveries. Deliveries are made by workers from the outbox.

use std::net::IpAddr;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use browserd_domains::addr::{AddressRange, first_refused};
use browserd_tasks::records::WebhookRecord;
use browserd_types::dto::ErrorBody;
use browserd_types::v2::V2TaskStatus;
use browserd_types::webhooks::{
    CreateWebhookRequest, CreatedWebhook, DeliveryList, DeliveryView, WebhookList, WebhookView,
};
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, QueryParams};

/// Webhooks per API key.
const MAX_WEBHOOKS: usize = 20;

fn view(webhook: WebhookRecord) -> WebhookView {
    WebhookView {
        id: webhook.id,
        url: webhook.url,
        events: webhook.events,
        created_at: webhook.created_at,
    }
}

/// Register a webhook; the answer carries its signing secret, shown this once.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "webhooks",
    request_body = CreateWebhookRequest,
    responses(
        (status = 201, description = "Registered; `secret` is shown only here", body = CreatedWebhook),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid URL or event; a target host that does not resolve, or resolves to a private, loopback, link-local, metadata or other non-public address", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateWebhookRequest>,
) -> Result<Response, ApiError> {
    if request.url.chars().count() > dto_url_max() {
        return Err(ApiError::validation(
            "url",
            format!("url must be at most {} characters", dto_url_max()),
        ));
    }
    let url = url::Url::parse(&request.url)
        .map_err(|err| ApiError::validation("url", format!("url is not a valid URL: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(ApiError::validation(
            "url",
            "url must be an http or https URL with a host",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ApiError::validation(
            "url",
            "url must not carry credentials; verify deliveries with the signature instead",
        ));
    }
    check_target(&url, state.webhook_allow_loopback).await?;
    let events: Vec<String> = match request.events {
        None => V2TaskStatus::WEBHOOK_DEFAULT
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect(),
        Some(events) => {
            if events.is_empty() {
                return Err(ApiError::validation("events", "events must not be empty"));
            }
            let known = browserd_types::webhooks::webhook_events();
            if let Some(bad) = events.iter().find(|e| !known.contains(&e.as_str())) {
                return Err(ApiError::validation(
                    "events",
                    format!(
                        "unknown event `{}` (expected some of: {})",
                        bad.chars().take(50).collect::<String>(),
                        known.join(", ")
                    ),
                ));
            }
            let mut events = events;
            events.sort();
            events.dedup();
            events
        }
    };
    if state.core.list_webhooks(caller.key_id).await?.len() >= MAX_WEBHOOKS {
        return Err(ApiError::validation(
            "url",
            format!("at most {MAX_WEBHOOKS} webhooks per API key"),
        ));
    }
    let (webhook, secret) = state
        .core
        .create_webhook(caller.key_id, url.as_str(), &events)
        .await?;
    tracing::info!(webhook_id = %webhook.id, "webhook registered");
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhook {
            webhook: view(webhook),
            secret,
        }),
    )
        .into_response())
}

/// How long the registration waits for the target's DNS answer.
const DNS_TIMEOUT: Duration = Duration::from_secs(5);

/// The address rules of webhook targets at registration, the same as at delivery
/// (`browserd_domains::addr::first_refused`: every address the host resolves to must be a
/// public one; loopback only when the operator allows it). Delivery checks again, since DNS
/// answers can change.
async fn check_target(url: &url::Url, allow_loopback: bool) -> Result<(), ApiError> {
    let port = url.port_or_known_default().unwrap_or(80);
    let (host, addresses): (String, Vec<IpAddr>) = match url.host() {
        Some(url::Host::Ipv4(ip)) => (ip.to_string(), vec![IpAddr::V4(ip)]),
        Some(url::Host::Ipv6(ip)) => (format!("[{ip}]"), vec![IpAddr::V6(ip)]),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let shown: String = name.chars().take(100).collect();
            let lookup =
                tokio::time::timeout(DNS_TIMEOUT, tokio::net::lookup_host((name.as_str(), port)))
                    .await;
            let addresses: Vec<IpAddr> = match lookup {
                Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                Ok(Err(err)) => {
                    return Err(ApiError::validation(
                        "url",
                        format!("url host `{shown}` could not be resolved: {err}"),
                    ));
                }
                Err(_) => {
                    return Err(ApiError::validation(
                        "url",
                        format!(
                            "url host `{shown}` could not be resolved within {} s",
                            DNS_TIMEOUT.as_secs()
                        ),
                    ));
                }
            };
            if addresses.is_empty() {
                return Err(ApiError::validation(
                    "url",
                    format!("url host `{shown}` has no address"),
                ));
            }
            (shown, addresses)
        }
        None => {
            return Err(ApiError::validation(
                "url",
                "url must be an http or https URL with a host",
            ));
        }
    };
    let Some(range) = first_refused(&addresses, allow_loopback) else {
        return Ok(());
    };
    if matches!(url.host(), Some(url::Host::Domain(_))) {
        // A name: say only that it resolves to an address that is not allowed. Neither the
        // address nor its class is echoed, so the endpoint cannot be used to map what the
        // server's resolver sees (internal names, split-horizon DNS).
        return Err(ApiError::validation(
            "url",
            format!(
                "url host `{host}` resolves to an address that is not allowed; webhooks may \
                 only target public addresses (loopback only when the operator allows it: \
                 --allow-loopback / BROWSERD_ALLOW_LOOPBACK)"
            ),
        ));
    }
    // An IP literal: the caller wrote the address, so naming its class reveals nothing.
    let hint = if range == AddressRange::Loopback {
        " unless the operator allows loopback (--allow-loopback / BROWSERD_ALLOW_LOOPBACK)"
    } else {
        ""
    };
    Err(ApiError::validation(
        "url",
        format!(
            "url host `{host}` is {}; webhooks may not target it{hint}",
            range.describe()
        ),
    ))
}

fn dto_url_max() -> usize {
    browserd_types::dto::limits::URL_MAX_CHARS
}

/// The caller's webhooks (without secrets).
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    responses(
        (status = 200, description = "Webhooks", body = WebhookList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_webhooks(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<WebhookList>, ApiError> {
    let items = state.core.list_webhooks(caller.key_id).await?;
    Ok(Json(WebhookList {
        items: items.into_iter().map(view).collect(),
    }))
}

fn webhook_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::BadRequest {
        code: "invalid_id",
        message: format!(
            "`{}` is not a webhook id (a UUID)",
            raw.chars().take(64).collect::<String>()
        ),
    })
}

fn webhook_not_found() -> ApiError {
    ApiError::NotFound {
        code: "webhook_not_found",
        message: "webhook not found".to_owned(),
    }
}

/// Delete a webhook and its deliveries (pending ones are not sent).
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "Webhook id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this key", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_webhook(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = webhook_id(&id)?;
    if !state.core.delete_webhook(caller.key_id, id).await? {
        return Err(webhook_not_found());
    }
    tracing::info!(webhook_id = %id, "webhook deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// The webhook's latest deliveries, newest first, with their last response code.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(
        ("id" = uuid::Uuid, Path, description = "Webhook id"),
        ("limit" = Option<i64>, Query, description = "At most this many, 1–100 (default 50)", minimum = 1, maximum = 100),
    ),
    responses(
        (status = 200, description = "Deliveries", body = DeliveryList),
        (status = 400, description = "The id is not a UUID (`invalid_id`)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this key", body = ErrorBody),
        (status = 422, description = "Invalid query parameter", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryParams,
) -> Result<Json<DeliveryList>, ApiError> {
    query.only(&["limit"])?;
    let limit = query.int_in("limit", 1..=100)?.unwrap_or(50);
    let id = webhook_id(&id)?;
    state
        .core
        .get_webhook(caller.key_id, id)
        .await?
        .ok_or_else(webhook_not_found)?;
    let items = state.core.list_deliveries(id, limit).await?;
    Ok(Json(DeliveryList {
        items: items
            .into_iter()
            .map(|d| DeliveryView {
                id: d.id,
                task_id: d.task_id,
                event: d.event,
                status: d.status,
                attempts: d.attempts,
                last_status_code: d.last_status_code,
                last_error: d.last_error,
                created_at: d.created_at,
                next_attempt_at: d.next_attempt_at,
                delivered_at: d.delivered_at,
            })
            .collect(),
    }))
}
