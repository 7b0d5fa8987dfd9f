//! browser-use cloud's `/api/v2`, so the official `browser-use-sdk` (`BrowserUse(api_key=…,
//! base_url="http://HOST/api/v2")`) runs tasks on browserd unchanged: the key goes in
//! `X-Browser-Use-API-Key` (the same keys as `/v1`), errors are FastAPI's `{"detail": …}`
//! (422 with its list shape for invalid input), and cloud-only features answer 501.
//!
//! v1 and v2 are two views of the same tasks: `tasks/` maps the rows both ways, `sessions.rs`
//! serves the sessions (browser state that later tasks reuse), `profiles.rs` the profiles,
//! `skills.rs` the skills (on the task core's skills, as `/v1/skills`).

mod profiles;
mod sessions;
mod skills;
mod tasks;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use browserd_tasks::TaskError;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::Caller;

/// Where the v2 routes are mounted (the SDK's `base_url` ends with it).
pub(crate) const PREFIX: &str = "/api/v2";

/// The header the SDK sends the key in.
pub(crate) const API_KEY_HEADER: &str = "x-browser-use-api-key";

/// The document of the `/api/v2` subset browserd implements (paths relative to `/api/v2`, the
/// server URL), generated from the same handlers [`router`] serves: `openapi-v2.yaml`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "browserd /api/v2",
        description = "The subset of browser-use cloud's v2 task API that browserd implements, so the official `browser-use-sdk` works with `base_url=\"http://HOST/api/v2\"`. The key goes in `X-Browser-Use-API-Key`; errors are FastAPI's `{\"detail\": …}`. Every other path under `/api/v2` answers 501.",
        license(name = "MIT OR Apache-2.0")
    ),
    servers((url = "/api/v2")),
    modifiers(&BrowserUseKey),
    tags(
        (name = "tasks", description = "Tasks (v2 view of browserd's tasks)"),
        (name = "sessions", description = "Browser state that later tasks reuse"),
        (name = "files", description = "Task output files"),
        (name = "profiles", description = "Browser profiles: the cookies and localStorage of a login, which tasks start from and save back into"),
    )
)]
struct V2ApiDoc;

struct BrowserUseKey;

impl Modify for BrowserUseKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "browser_use_key",
            // The SDK's spelling (header names are case-insensitive on the wire).
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-Browser-Use-API-Key"))),
        );
    }
}

/// An `/api/v2` error body: FastAPI's `detail`, a message or (422) a list of
/// `{"loc", "msg", "type"}`.
#[derive(ToSchema)]
#[allow(dead_code)] // Documentation only: the bodies are built by `V2Error`.
pub(crate) struct V2ErrorBody {
    #[schema(value_type = V2ErrorDetail)]
    detail: (),
}

/// A message, or the list of invalid values.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum V2ErrorDetail {
    Message(String),
    Invalid(Vec<V2InvalidValue>),
}

/// One invalid value: where (`["body", "maxSteps"]`, `["path", "task_id"]`, …), what is wrong,
/// and FastAPI's error type.
#[derive(ToSchema)]
#[allow(dead_code)]
struct V2InvalidValue {
    #[schema(value_type = Vec<Value>)]
    loc: (),
    msg: String,
    #[serde(rename = "type")]
    kind: String,
}

/// Body of `PATCH /tasks/{task_id}`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct TaskUpdateRequest {
    action: TaskUpdateAction,
}

/// `stop` ends the task, `stop_task_and_session` its session too; `pause` and `resume` are
/// browserd's (a paused task still reads `started`).
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum TaskUpdateAction {
    Stop,
    StopTaskAndSession,
    Pause,
    Resume,
}

/// Body of `PATCH /sessions/{session_id}`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct SessionUpdateRequest {
    action: SessionUpdateAction,
}

/// `stop`: the session and its unfinished tasks.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum SessionUpdateAction {
    Stop,
}

/// A task's whole AgentHistory (the log `logs` points at).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct V2History {
    /// AgentHistory items in step order (step 0 is the initial navigation).
    #[schema(value_type = Vec<Object>)]
    history: (),
    /// The task's usage so far (`{}` before its first model call).
    #[schema(value_type = Object)]
    usage: (),
}

/// The keyed `/api/v2` routes and the signed download route (which needs no key), with their
/// document: one list, so the router serves exactly what the document describes.
fn routes() -> (OpenApiRouter<AppState>, OpenApiRouter<AppState>) {
    // Signed download links of output files: no key (the link is the credential, like the
    // cloud's presigned URLs).
    let public = OpenApiRouter::new().routes(routes!(crate::output_files::signed_download));
    let keyed = OpenApiRouter::new()
        .routes(routes!(tasks::create::create_task, tasks::list::list_tasks))
        .routes(routes!(tasks::read::get_task, tasks::control::update_task))
        .routes(routes!(tasks::read::task_status))
        .routes(routes!(tasks::history::task_logs))
        .routes(routes!(tasks::history::task_history))
        .routes(routes!(tasks::files::step_screenshot))
        .routes(routes!(tasks::files::output_file))
        .routes(routes!(sessions::create_session, sessions::list_sessions))
        .routes(routes!(
            sessions::get_session,
            sessions::update_session,
            sessions::delete_session
        ))
        .routes(routes!(skills::create_skill, skills::list_skills))
        .routes(routes!(
            skills::get_skill,
            skills::update_skill,
            skills::delete_skill
        ))
        .routes(routes!(skills::cancel_skill))
        .routes(routes!(skills::rollback_skill))
        .routes(routes!(skills::refine_skill))
        .routes(routes!(skills::execute_skill))
        .routes(routes!(skills::list_executions))
        .routes(routes!(skills::execution_output))
        .routes(routes!(profiles::create_profile, profiles::list_profiles))
        .routes(routes!(
            profiles::get_profile,
            profiles::update_profile,
            profiles::delete_profile
        ));
    (public, keyed)
}

/// [`V2ApiDoc`] with every route of [`router`].
pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    let (public, keyed) = routes();
    OpenApiRouter::<AppState>::with_openapi(V2ApiDoc::openapi())
        .merge(public)
        .merge(keyed)
        .into_openapi()
}

/// The `/api/v2` routes (to be nested under `/api/v2`).
pub(crate) fn router(state: AppState) -> Router<AppState> {
    let (public, keyed) = routes();
    let (public, _) = public.split_for_parts();
    let (keyed, _) = keyed
        .route_layer(middleware::from_fn_with_state(state, require_key))
        .split_for_parts();
    public.merge(keyed).fallback(not_implemented)
}

/// Everything of the cloud API browserd does not serve (browsers,
/// marketplace, billing, presigned uploads, public shares, …).
async fn not_implemented() -> V2Error {
    V2Error::Detail(
        StatusCode::NOT_IMPLEMENTED,
        "Not implemented on this server (a cloud-only feature of browser-use)".to_owned(),
    )
}

/// An `/api/v2` failure: `{"detail": "..."}` with a status, or FastAPI's 422 list.
#[derive(Debug)]
pub(crate) enum V2Error {
    Detail(StatusCode, String),
    /// 422 `{"detail":[{"loc","msg","type"}]}`.
    Invalid(Vec<Value>),
    /// 429 with `Retry-After`.
    TooMany(String, u64),
    /// Logged; the client sees a generic message.
    Internal(String),
}

impl V2Error {
    pub(crate) fn not_found(what: &str) -> Self {
        V2Error::Detail(StatusCode::NOT_FOUND, format!("{what} not found"))
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        V2Error::Detail(StatusCode::BAD_REQUEST, message.into())
    }

    /// One invalid value at `loc` (e.g. `["body", "maxSteps"]`).
    pub(crate) fn invalid(loc: &[&str], msg: impl Into<String>, kind: &str) -> Self {
        V2Error::Invalid(vec![json!({"loc": loc, "msg": msg.into(), "type": kind})])
    }
}

impl IntoResponse for V2Error {
    fn into_response(self) -> Response {
        match self {
            V2Error::Detail(status, detail) => {
                (status, axum::Json(json!({"detail": detail}))).into_response()
            }
            V2Error::Invalid(items) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({"detail": items})),
            )
                .into_response(),
            V2Error::TooMany(detail, retry_after) => {
                let mut response = (
                    StatusCode::TOO_MANY_REQUESTS,
                    axum::Json(json!({"detail": detail})),
                )
                    .into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after.max(1)));
                response
            }
            V2Error::Internal(detail) => {
                tracing::error!(error = %detail, "internal error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    axum::Json(json!({"detail": "Internal server error"})),
                )
                    .into_response()
            }
        }
    }
}

impl From<TaskError> for V2Error {
    fn from(err: TaskError) -> Self {
        match err {
            err if err.is_task_not_found() => V2Error::not_found("Task"),
            // One mapping of the rest: the task service's.
            other => ApiError::from(other).into(),
        }
    }
}

/// The v2 name of a `/v1` request field (validation messages name the field the client sent).
fn v2_field(field: &str) -> String {
    match field {
        "model" => "llm".to_owned(),
        "output_schema" => "structuredOutput".to_owned(),
        "use_vision" => "vision".to_owned(),
        "viewport.width" => "sessionSettings.browserScreenWidth".to_owned(),
        "viewport.height" => "sessionSettings.browserScreenHeight".to_owned(),
        other => {
            let mut out = String::new();
            let mut upper = false;
            for c in other.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    out.extend(c.to_uppercase());
                    upper = false;
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

impl From<ApiError> for V2Error {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::Validation { field, message } => {
                let mut loc = vec![json!("body")];
                if let Some(field) = field {
                    // `allowed_domains[0]` → "allowedDomains", 0 (FastAPI's loc items).
                    for part in v2_field(&field).split('.') {
                        match part.split_once('[') {
                            Some((name, index)) => {
                                loc.push(json!(name));
                                let index = index.trim_end_matches(']');
                                loc.push(index.parse::<u64>().map_or(json!(index), |i| json!(i)));
                            }
                            None => loc.push(json!(part)),
                        }
                    }
                }
                V2Error::Invalid(vec![
                    json!({"loc": loc, "msg": message, "type": "value_error"}),
                ])
            }
            ApiError::Unauthorized { message, .. } => {
                V2Error::Detail(StatusCode::UNAUTHORIZED, message)
            }
            ApiError::NotFound { message, .. } => V2Error::Detail(StatusCode::NOT_FOUND, message),
            ApiError::BadRequest { message, .. } => V2Error::bad_request(message),
            ApiError::Conflict { message, .. } => V2Error::bad_request(message),
            ApiError::RateLimited { retry_after_secs } => {
                V2Error::TooMany("Rate limit exceeded".to_owned(), retry_after_secs)
            }
            ApiError::QueueFull {
                queued,
                retry_after_secs,
            } => V2Error::TooMany(
                format!("The task queue is full ({queued} tasks waiting)"),
                retry_after_secs,
            ),
            ApiError::QuotaExceeded {
                message,
                retry_after_secs,
                ..
            } => V2Error::TooMany(message, retry_after_secs),
            ApiError::Internal(detail) => V2Error::Internal(detail),
            other => V2Error::Detail(StatusCode::BAD_REQUEST, other.to_string()),
        }
    }
}

/// Middleware: the key from `X-Browser-Use-API-Key` (or `Authorization: Bearer`), 401
/// `{"detail"}` otherwise; the key's rate limit; the key as [`Caller`] for the handlers.
async fn require_key(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let closing = crate::auth::closing_if_unread;
    let caller = match authenticate(&state, request.headers(), request.extensions()).await {
        Ok(caller) => caller,
        Err(err) => return closing(request.headers(), err.into_response()),
    };
    tracing::Span::current().record("api_key_id", tracing::field::display(caller.key_id));
    if let Some(limiter) = &state.rate_limiter
        && let Err(retry_after_secs) = limiter.check(&caller.key_id)
    {
        metrics::counter!("browserd_rate_limited_total", "limit" => "key").increment(1);
        let refused = V2Error::TooMany("Rate limit exceeded".to_owned(), retry_after_secs);
        return closing(request.headers(), refused.into_response());
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The key from `X-Browser-Use-API-Key` (or `Authorization: Bearer`), checked exactly as /v1
/// checks its keys (the per-address limit before any database lookup, the key cache that a
/// revocation clears), with the cloud's messages.
async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> Result<Caller, V2Error> {
    let token = match headers.get(API_KEY_HEADER) {
        Some(value) => Some(value.to_str().map(str::trim).unwrap_or("").to_owned()),
        None => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim().to_owned()),
    };
    let missing = token.is_none();
    let key = token.map(secrecy::SecretString::from);
    match crate::auth::authenticate_key(state, headers, extensions, key).await {
        Ok(caller) => Ok(caller),
        Err(ApiError::Unauthorized { .. }) => Err(V2Error::Detail(
            StatusCode::UNAUTHORIZED,
            if missing {
                "Missing X-Browser-Use-API-Key header"
            } else {
                "Invalid API key"
            }
            .to_owned(),
        )),
        Err(err) => Err(err.into()),
    }
}

/// A request body as bytes, whose rejections (too large, unreadable) are [`V2Error`]s.
pub(crate) struct V2Body(pub Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for V2Body {
    type Rejection = V2Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(V2Body)
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    V2Error::Detail(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "Request body is too large".to_owned(),
                    )
                } else {
                    V2Error::bad_request(format!(
                        "Could not read the request body: {}",
                        rejection.body_text()
                    ))
                }
            })
    }
}

/// Path parameters whose rejections are [`V2Error`]s.
pub(crate) struct V2Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> axum::extract::FromRequestParts<S> for V2Path<T> {
    type Rejection = V2Error;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| V2Path(value))
            .map_err(|rejection| V2Error::invalid(&["path"], rejection.body_text(), "value_error"))
    }
}

/// A path id: FastAPI's 422 when it is not a UUID.
pub(crate) fn path_uuid(name: &str, raw: &str) -> Result<Uuid, V2Error> {
    Uuid::parse_str(raw).map_err(|err| {
        V2Error::invalid(
            &["path", name],
            format!("Input should be a valid UUID, {err}"),
            "uuid_parsing",
        )
    })
}

/// A JSON body of type `T`: FastAPI's 422 naming the place for invalid JSON, a missing field
/// or a wrong type. Unknown fields are ignored (`T` does not deny them).
pub(crate) fn parse_body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, V2Error> {
    let value: Value = serde_json::from_slice(bytes).map_err(|err| {
        V2Error::invalid(
            &["body", &err.column().to_string()],
            format!("JSON decode error: {err}"),
            "json_invalid",
        )
    })?;
    if !value.is_object() {
        return Err(V2Error::invalid(
            &["body"],
            "Input should be a valid dictionary or object",
            "model_attributes_type",
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        if let Some(field) = inner
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            let mut loc = vec!["body".to_owned()];
            if path != "." {
                loc.extend(path.split('.').map(str::to_owned));
            }
            loc.push(field.to_owned());
            return V2Error::Invalid(vec![json!({
                "loc": loc, "msg": "Field required", "type": "missing"
            })]);
        }
        let mut loc = vec!["body".to_owned()];
        loc.extend(path.split('.').filter(|p| !p.is_empty()).map(str::to_owned));
        V2Error::Invalid(vec![
            json!({"loc": loc, "msg": inner, "type": "value_error"}),
        ])
    })
}

/// An absolute URL of `path` on the configured public base (`--public-url`, else the listen
/// address); the path alone without one. The request's `Host` and `X-Forwarded-*` headers are
/// never used: a client could point another client's links anywhere.
pub(crate) fn absolute_url(state: &AppState, path: &str) -> String {
    match &state.public_url {
        Some(base) => format!("{}{path}", base.as_str()),
        None => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_fields_get_their_v2_names() {
        assert_eq!(v2_field("start_url"), "startUrl");
        assert_eq!(v2_field("allowed_domains"), "allowedDomains");
        assert_eq!(v2_field("model"), "llm");
        assert_eq!(v2_field("secrets.a_b"), "secrets.aB");
    }

    #[test]
    fn bodies_fail_like_fastapi() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Body {
            task: String,
            #[serde(default)]
            max_steps: Option<i64>,
        }
        let err = parse_body::<Body>(&Bytes::from_static(b"{\"other\": 1}")).unwrap_err();
        let V2Error::Invalid(items) = err else {
            panic!("{err:?}")
        };
        assert_eq!(items[0]["loc"], json!(["body", "task"]));
        assert_eq!(items[0]["type"], "missing");
        let err = parse_body::<Body>(&Bytes::from_static(
            b"{\"task\": \"x\", \"max_steps\": \"a\"}",
        ))
        .unwrap_err();
        let V2Error::Invalid(items) = err else {
            panic!("{err:?}")
        };
        assert_eq!(items[0]["loc"], json!(["body", "max_steps"]));
        assert!(parse_body::<Body>(&Bytes::from_static(b"[1]")).is_err());
        assert!(
            parse_body::<Body>(&Bytes::from_static(b"{\"task\": \"x\", \"extra\": 1}")).is_ok()
        );
    }

    #[test]
    fn public_urls_are_validated() {
        use crate::PublicUrl;
        let base = PublicUrl::parse("https://browserd.example.com/").unwrap();
        assert_eq!(base.as_str(), "https://browserd.example.com");
        let base = PublicUrl::parse("https://example.com/browserd/").unwrap();
        assert_eq!(base.as_str(), "https://example.com/browserd");
        for bad in [
            "ftp://example.com",
            "https://example.com/?a=1",
            "https://example.com/#x",
            "https://user:pw@example.com",
            "example.com",
            "",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
