//! Task output files (the files the agent left in its workspace; stored by the worker when the
//! task ends). `/v1`: `GET /v1/tasks/{id}/files` and `GET /v1/tasks/{id}/files/{file_id}`, with
//! the key, scoped to its owner like screenshots. `/api/v2`: `outputFiles` on the task,
//! `GET /files/tasks/{task_id}/output-files/{file_id}` → `{id, fileName, downloadUrl}` (with the
//! key), where `downloadUrl` is a signed link valid for [`DOWNLOAD_LINK_TTL`] that needs no key,
//! as browser-use cloud's presigned URLs (its users fetch it with a plain HTTP GET).
//!
//! Link signature: hex HMAC-SHA256 over `"{file_id}.{expires}"` (unix seconds) under the file's
//! own random 32-byte key (stored with it, never returned). No server-wide secret is needed,
//! every api replica can verify, and deleting the task (or the file) revokes its links.

use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use browserd_tasks::TaskCore;
use browserd_tasks::records::{OutputFile, OutputFileRecord};
use browserd_types::TaskId;
use browserd_types::dto::{ErrorBody, OutputFileList, OutputFileView};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{Caller, QueryParams, TaskPath};
use crate::v2::V2Error;

/// How long a v2 `downloadUrl` works.
pub const DOWNLOAD_LINK_TTL: Duration = Duration::from_secs(3600);

/// The path of the signed download route (under `/api/v2`).
pub(crate) fn signed_path(file_id: Uuid, expires: i64, signature: &str) -> String {
    format!("/api/v2/files/output-files/{file_id}/content?expires={expires}&signature={signature}")
}

fn mac(key: &[u8], file_id: Uuid, expires: i64) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(format!("{file_id}.{expires}").as_bytes());
    mac
}

/// A signed link to `file` valid for [`DOWNLOAD_LINK_TTL`] from `now` (a path; the caller makes
/// it absolute).
pub(crate) fn sign_link(file: &OutputFile, now: OffsetDateTime) -> String {
    let ttl = i64::try_from(DOWNLOAD_LINK_TTL.as_secs()).unwrap_or(3600);
    let expires = now.unix_timestamp() + ttl;
    let signature = hex::encode(
        mac(&file.download_key, file.record.id, expires)
            .finalize()
            .into_bytes(),
    );
    signed_path(file.record.id, expires, &signature)
}

/// A download is read from Postgres this many bytes at a time.
const DOWNLOAD_CHUNK_BYTES: i32 = 256 * 1024;

/// The bytes of `file`, streamed from `store` one chunk at a time (a broken stream when the
/// file disappears or the database fails midway: the status is sent already).
fn file_body(store: TaskCore, file: &OutputFile) -> Body {
    let id = file.record.id;
    let size = i32::try_from(file.record.size).unwrap_or(i32::MAX);
    let chunks = futures::stream::unfold(0i32, move |offset| {
        let store = store.clone();
        async move {
            if offset >= size {
                return None;
            }
            let len = DOWNLOAD_CHUNK_BYTES.min(size - offset);
            let chunk = match store.output_file_chunk(id, offset, len).await {
                Ok(Some(chunk)) if !chunk.is_empty() => chunk,
                Ok(_) => {
                    tracing::warn!(file_id = %id, "an output file went away during its download");
                    return Some((Err(std::io::Error::other("the file went away")), size));
                }
                Err(err) => {
                    tracing::error!(file_id = %id, error = %err, "streaming an output file failed");
                    return Some((Err(std::io::Error::other("reading the file failed")), size));
                }
            };
            let next = offset.saturating_add(i32::try_from(chunk.len()).unwrap_or(len));
            Some((Ok(axum::body::Bytes::from(chunk)), next))
        }
    });
    Body::from_stream(chunks)
}

/// An output file as a download, its bytes streamed: its content type, `attachment` with its
/// name, and headers that keep a browser from rendering it on our origin (an agent-written
/// HTML file must never run here).
pub(crate) fn file_response(store: TaskCore, file: OutputFile) -> Result<Response, String> {
    let content_type = HeaderValue::try_from(file.record.content_type.as_str())
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    // Agent file names are `[A-Za-z0-9_\-. ()]` only (the file actions' rule), but stay safe.
    let name: String = file
        .record
        .file_name
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() && c != '"' && c != '\\') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        )
        .header(header::CONTENT_LENGTH, file.record.size.max(0))
        .header(header::CACHE_CONTROL, "private, no-store")
        .header("x-content-type-options", "nosniff")
        .header(
            header::CONTENT_SECURITY_POLICY,
            "sandbox; default-src 'none'",
        )
        .body(file_body(store, &file))
        .map_err(|err| err.to_string())
}

fn view(task: TaskId, file: OutputFileRecord) -> OutputFileView {
    OutputFileView {
        download_url: file
            .skipped
            .is_none()
            .then(|| format!("/v1/tasks/{task}/files/{}", file.id)),
        id: file.id,
        file_name: file.file_name,
        content_type: file.content_type,
        size: file.size,
        skipped: file.skipped,
        created_at: file.created_at,
    }
}

/// The files the agent left in its workspace when the task ended (`write_file` /
/// `replace_file`, saved extractions; not `todo.md`), by name. Empty until the task ends.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/files",
    tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task's output files", body = OutputFileList),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task for this key", body = ErrorBody),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_files(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
) -> Result<Json<OutputFileList>, ApiError> {
    state.core.tasks().owned_task(&caller, id).await?;
    let files = state.core.list_output_files(id).await?;
    Ok(Json(OutputFileList {
        items: files.into_iter().map(|f| view(id, f)).collect(),
    }))
}

fn file_not_found() -> ApiError {
    ApiError::NotFound {
        code: "file_not_found",
        message: "no such output file (or its content was skipped)".to_owned(),
    }
}

/// One output file's bytes, with its `Content-Type` and `Content-Disposition: attachment`.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/files/{file_id}",
    tag = "tasks",
    params(
        ("id" = uuid::Uuid, Path, description = "Task id"),
        ("file_id" = uuid::Uuid, Path, description = "Output file id"),
    ),
    responses(
        (status = 200, description = "File bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such task or file for this key, or a skipped file", body = ErrorBody),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 408, description = "Request timeout", body = ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn download_file(
    State(state): State<AppState>,
    caller: Caller,
    TaskPath(id): TaskPath,
    Path(segments): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let file_id = segments.1;
    let file_id = Uuid::parse_str(&file_id).map_err(|_| ApiError::BadRequest {
        code: "invalid_file_id",
        message: format!(
            "`{}` is not a valid file id (expected a UUID)",
            file_id.chars().take(64).collect::<String>()
        ),
    })?;
    state.core.tasks().owned_task(&caller, id).await?;
    let file = state
        .core
        .output_file(Some(id), file_id)
        .await?
        .ok_or_else(file_not_found)?;
    file_response(state.core.clone(), file).map_err(ApiError::Internal)
}

/// `GET /api/v2/files/output-files/{file_id}/content?expires&signature`: a signed download
/// link (no key). It costs the client address a token of the pre-auth limit (like a request
/// without a key); the signature is checked with the file's key alone before its bytes are
/// read, and an unknown file answers exactly as a wrong signature does (403), so a link without
/// its signature tells nothing about which files exist.
#[utoipa::path(
    get,
    path = "/files/output-files/{file_id}/content",
    tag = "files",
    operation_id = "v2_signed_download",
    params(
        ("file_id" = uuid::Uuid, Path, description = "Output file id"),
        ("expires" = i64, Query, description = "Unix time the link expires at (from `downloadUrl`)"),
        ("signature" = String, Query, description = "Hex HMAC-SHA256 of the link (from `downloadUrl`)"),
    ),
    responses(
        (status = 200, description = "File bytes (`Content-Disposition: attachment`)", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 403, description = "The link is invalid, malformed or expired; a file that does not exist answers as a wrong signature", body = crate::v2::V2ErrorBody),
        (status = 422, description = "Malformed file id", body = crate::v2::V2ErrorBody),
        (status = 429, description = "Rate limited (the pre-auth limit of the client address); see `Retry-After`", body = crate::v2::V2ErrorBody),
    )
)]
pub(crate) async fn signed_download(
    State(state): State<AppState>,
    Path(file_id): Path<String>,
    QueryParams(params): QueryParams,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Result<Response, V2Error> {
    crate::auth::charge_unauthenticated(&state, &headers, request.extensions())?;
    let denied = |why: &str| V2Error::Detail(StatusCode::FORBIDDEN, why.to_owned());
    let invalid = || denied("Download link is invalid");
    let file_id = crate::v2::path_uuid("file_id", &file_id)?;
    let (Some(expires), Some(signature)) = (params.get("expires"), params.get("signature")) else {
        return Err(denied(
            "Download link is missing its expires or signature parameter",
        ));
    };
    let expires: i64 = expires
        .parse()
        .map_err(|_| denied("Download link is malformed"))?;
    let signature = hex::decode(signature).map_err(|_| denied("Download link is malformed"))?;
    let key = state
        .core
        .output_file_key(file_id)
        .await?
        .ok_or_else(invalid)?;
    if mac(&key, file_id, expires)
        .verify_slice(&signature)
        .is_err()
    {
        return Err(invalid());
    }
    if expires < OffsetDateTime::now_utc().unix_timestamp() {
        return Err(denied(
            "Download link expired; ask for a new one (GET /api/v2/files/tasks/{task_id}/output-files/{file_id})",
        ));
    }
    // Deleted between the two reads: as unknown.
    let file = state
        .core
        .output_file(None, file_id)
        .await?
        .ok_or_else(invalid)?;
    file_response(state.core.clone(), file).map_err(V2Error::Internal)
}

/// The absolute form (on the public base URL) of a signed link to `file`.
pub(crate) fn download_url(state: &AppState, file: &OutputFile) -> String {
    crate::v2::absolute_url(state, &sign_link(file, OffsetDateTime::now_utc()))
}
