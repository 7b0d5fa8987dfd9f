//! `GET /tasks` and the query parameters the v2 listings share (paging, ids, dates).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use browserd_tasks::records::V2TaskFilter;
use browserd_types::v2::{ListResponse, TaskItemView, V2TaskStatus, limits};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use super::super::{V2Error, V2ErrorBody};
use super::views::item_view;
use crate::AppState;
use crate::extract::Caller;

/// `GET /tasks`: newest first, page-number pagination; filters `sessionId`, `filterBy`
/// (status), `after` and `before` (creation time). Unknown parameters are ignored.
#[utoipa::path(
    get,
    path = "/tasks",
    tag = "tasks",
    operation_id = "v2_list_tasks",
    params(
        ("pageSize" = Option<i64>, Query, description = "Page size, 1–100 (default 10)", minimum = 1, maximum = 100),
        ("pageNumber" = Option<i64>, Query, description = "Page number from 1 (default 1)", minimum = 1, maximum = 1000000),
        ("sessionId" = Option<uuid::Uuid>, Query, description = "Only the tasks of this session"),
        ("filterBy" = Option<V2TaskStatus>, Query, description = "Only tasks in this status"),
        ("after" = Option<String>, Query, description = "Only tasks created after this time (RFC 3339)", format = DateTime),
        ("before" = Option<String>, Query, description = "Only tasks created before this time (RFC 3339)", format = DateTime),
    ),
    responses(
        (status = 200, description = "A page of tasks, newest first", body = ListResponse<TaskItemView>),
        (status = 422, description = "Invalid query parameter", body = V2ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = V2ErrorBody),
        (status = 429, description = "Rate limited; see `Retry-After`", body = V2ErrorBody),
    ),
    security(("browser_use_key" = []))
)]
pub(crate) async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ListResponse<TaskItemView>>, V2Error> {
    let params = query_params(query.as_deref());
    let (page_size, page_number) = paging(&params)?;
    let mut filter = V2TaskFilter::default();
    if let Some(raw) = params.get("sessionId") {
        filter.session_id = Some(uuid_query("sessionId", raw)?);
    }
    if let Some(raw) = params.get("filterBy") {
        let status = V2TaskStatus::parse(raw).ok_or_else(|| {
            V2Error::invalid(
                &["query", "filterBy"],
                "Input should be 'created', 'started', 'finished', 'failed' or 'stopped'",
                "enum",
            )
        })?;
        filter.statuses = status.statuses().to_vec();
    }
    filter.after = params
        .get("after")
        .map(|raw| date_query("after", raw))
        .transpose()?;
    filter.before = params
        .get("before")
        .map(|raw| date_query("before", raw))
        .transpose()?;
    let (tasks, total) = state
        .core
        .list_v2_tasks(caller.key_id, &filter, page_size, page_number)
        .await?;
    Ok(Json(ListResponse {
        items: tasks.into_iter().map(item_view).collect(),
        total_items: total,
        page_number,
        page_size,
    }))
}

pub(crate) fn query_params(query: Option<&str>) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// `pageSize` (1–100, default 10) and `pageNumber` (from 1, default 1).
pub(crate) fn paging(params: &BTreeMap<String, String>) -> Result<(i64, i64), V2Error> {
    let int =
        |name: &str, default: i64, range: std::ops::RangeInclusive<i64>| match params.get(name) {
            None => Ok(default),
            Some(raw) => raw
                .parse::<i64>()
                .ok()
                .filter(|v| range.contains(v))
                .ok_or_else(|| {
                    V2Error::invalid(
                        &["query", name],
                        format!(
                            "Input should be an integer between {} and {}",
                            range.start(),
                            range.end()
                        ),
                        "int_parsing",
                    )
                }),
        };
    Ok((
        int(
            "pageSize",
            limits::PAGE_SIZE_DEFAULT,
            limits::PAGE_SIZE_RANGE,
        )?,
        int("pageNumber", 1, 1..=1_000_000)?,
    ))
}

fn uuid_query(name: &str, raw: &str) -> Result<Uuid, V2Error> {
    Uuid::parse_str(raw).map_err(|err| {
        V2Error::invalid(
            &["query", name],
            format!("Input should be a valid UUID, {err}"),
            "uuid_parsing",
        )
    })
}

/// RFC 3339, or Python's `str(datetime)` (space separator; no offset = UTC).
fn date_query(name: &str, raw: &str) -> Result<OffsetDateTime, V2Error> {
    let normalized = raw.trim().replacen(' ', "T", 1);
    OffsetDateTime::parse(&normalized, &Rfc3339)
        .or_else(|_| OffsetDateTime::parse(&format!("{normalized}Z"), &Rfc3339))
        .map_err(|_| {
            V2Error::invalid(
                &["query", name],
                "Input should be a valid datetime (RFC 3339)",
                "datetime_parsing",
            )
        })
}
