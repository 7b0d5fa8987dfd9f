//! Wire shapes of browser profiles: `/v1/profiles` (snake_case) and browser-use cloud's
//! `/api/v2/profiles` (camelCase, `ProfileView`). A profile's browser state itself (cookies,
//! localStorage) is never shown: only its cookie domains.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

/// The longest `name` (and v2 `userId`), in characters.
pub const PROFILE_NAME_MAX_CHARS: usize = 200;

/// Body of `POST /v1/profiles`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProfileRequest {
    /// A label for people (at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub name: Option<String>,
}

/// Body of `PATCH /v1/profiles/{id}`: the new name (`null` clears it).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProfileRequest {
    #[schema(max_length = 200)]
    pub name: Option<String>,
}

/// A profile (`/v1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProfileView {
    pub id: Uuid,
    pub name: Option<String>,
    /// Writes of its state so far (each step boundary where a task changed it counts one).
    pub version: i64,
    /// The domains of its saved cookies.
    pub cookie_domains: Vec<String>,
    /// When a task last started with it.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_used_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

/// A page of the caller's profiles, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ProfileList {
    pub items: Vec<ProfileView>,
    /// All profiles matching the query.
    pub total: i64,
}

/// Body of `POST /api/v2/profiles` and `PATCH /api/v2/profiles/{id}` (unknown fields are
/// ignored, as the cloud does).
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2ProfileRequest {
    #[serde(default)]
    #[schema(max_length = 200)]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub user_id: Option<String>,
}

/// browser-use cloud's `ProfileView`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct V2ProfileView {
    pub id: Uuid,
    pub user_id: Option<String>,
    pub name: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_used_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
    pub cookie_domains: Vec<String>,
}
