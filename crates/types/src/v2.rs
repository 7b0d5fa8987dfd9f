//! Wire shapes of browser-use cloud's `/api/v2` (what the official `browser-use-sdk` sends and
//! validates): camelCase keys, UUID ids, RFC 3339 timestamps in UTC (`Z`), costs as decimal
//! strings, and the v2 status vocabulary. Requests ignore unknown fields, as the SDK expects.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{TaskSecrets, TaskStatus};

/// Limits of the v2 create request (the cloud's, where browserd can honour them).
pub mod limits {
    /// `maxSteps` range of the v2 spec: the same as `/v1`'s `max_steps`.
    pub const MAX_STEPS_RANGE: std::ops::RangeInclusive<i64> = crate::dto::limits::MAX_STEPS_RANGE;
    pub const SYSTEM_PROMPT_EXTENSION_MAX_CHARS: usize = 10_000;
    pub const METADATA_MAX_PAIRS: usize = 10;
    pub const PAGE_SIZE_DEFAULT: i64 = 10;
    pub const PAGE_SIZE_RANGE: std::ops::RangeInclusive<i64> = 1..=100;
    /// `sessionSettings.browserScreenWidth` (the cloud's range).
    pub const SCREEN_WIDTH_RANGE: std::ops::RangeInclusive<i64> = 320..=6144;
    /// `sessionSettings.browserScreenHeight` (the cloud's range).
    pub const SCREEN_HEIGHT_RANGE: std::ops::RangeInclusive<i64> = 320..=3456;
}

/// A task's status in v2 words: `queued` is `created`; `running`, `paused` and `waiting` (for a
/// person's answer to `ask_human`, which the cloud does not have) are `started`: the closest
/// cloud status, since the task is under way and keeps its browser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum V2TaskStatus {
    Created,
    Started,
    Finished,
    Failed,
    Stopped,
}

impl V2TaskStatus {
    /// Every v2 status: also the events a webhook may ask for (migration 0008's
    /// `browserd_webhook_event` names a status change with them).
    pub const ALL: [V2TaskStatus; 5] = [
        V2TaskStatus::Created,
        V2TaskStatus::Started,
        V2TaskStatus::Finished,
        V2TaskStatus::Failed,
        V2TaskStatus::Stopped,
    ];

    /// The events a webhook gets when it names none (a task's creation is the caller's own act).
    pub const WEBHOOK_DEFAULT: [V2TaskStatus; 4] = [
        V2TaskStatus::Started,
        V2TaskStatus::Finished,
        V2TaskStatus::Failed,
        V2TaskStatus::Stopped,
    ];

    /// The lowercase name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            V2TaskStatus::Created => "created",
            V2TaskStatus::Started => "started",
            V2TaskStatus::Finished => "finished",
            V2TaskStatus::Failed => "failed",
            V2TaskStatus::Stopped => "stopped",
        }
    }

    /// The browserd statuses a v2 status stands for (the `filterBy` of the listing).
    pub fn statuses(self) -> &'static [TaskStatus] {
        match self {
            V2TaskStatus::Created => &[TaskStatus::Queued],
            V2TaskStatus::Started => {
                &[TaskStatus::Running, TaskStatus::Paused, TaskStatus::Waiting]
            }
            V2TaskStatus::Finished => &[TaskStatus::Finished],
            V2TaskStatus::Failed => &[TaskStatus::Failed],
            V2TaskStatus::Stopped => &[TaskStatus::Stopped],
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

impl From<TaskStatus> for V2TaskStatus {
    fn from(status: TaskStatus) -> Self {
        match status {
            TaskStatus::Queued => V2TaskStatus::Created,
            // The SDK knows no `paused` nor `waiting`: such a task is still started.
            TaskStatus::Running | TaskStatus::Paused | TaskStatus::Waiting => V2TaskStatus::Started,
            TaskStatus::Finished => V2TaskStatus::Finished,
            TaskStatus::Failed => V2TaskStatus::Failed,
            TaskStatus::Stopped => V2TaskStatus::Stopped,
        }
    }
}

/// `sessionSettings` of the create request (only for a new session).
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSettings {
    /// A profile of the caller's (`/api/v2/profiles`) the new session's task starts from and
    /// saves back into (404 `Profile not found` otherwise).
    #[serde(default)]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub profile_id: Option<String>,
    /// The viewport's width in CSS pixels (with `browserScreenHeight`; the cloud's range).
    #[serde(default)]
    #[schema(minimum = 320, maximum = 6144)]
    pub browser_screen_width: Option<i64>,
    /// The viewport's height in CSS pixels (with `browserScreenWidth`).
    #[serde(default)]
    #[schema(minimum = 320, maximum = 3456)]
    pub browser_screen_height: Option<i64>,
}

/// `vision` of the create request: a switch, or `"auto"`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum VisionSetting {
    Switch(bool),
    Auto(VisionAuto),
}

/// The `"auto"` of [`VisionSetting`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
pub enum VisionAuto {
    #[serde(rename = "auto")]
    Auto,
}

/// Body of `POST /api/v2/tasks`. Unknown fields are ignored. Cloud-only features
/// (`opVaultId`, `judge: true`, `skillIds`) are answered 501.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateTaskRequest {
    /// What the agent should do (1–20 000 characters, not only whitespace: browserd's limit,
    /// below the cloud's 50 000).
    #[schema(min_length = 1, max_length = 20000, pattern = r"\S")]
    pub task: String,
    /// Name of a model of the server's catalog (the server's default when omitted).
    #[serde(default)]
    pub llm: Option<String>,
    /// An http(s) URL the browser opens before the first step.
    #[serde(default)]
    pub start_url: Option<String>,
    /// Step budget, 1–10 000 (default 100).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    pub max_steps: Option<i64>,
    /// A JSON Schema (an object), stringified; the output is a JSON string matching it.
    #[serde(default)]
    pub structured_output: Option<String>,
    /// Run in this active, idle session of the caller (its cookies and tabs).
    #[serde(default)]
    pub session_id: Option<Uuid>,
    /// At most 10 pairs.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Write-only secrets, as `/v1`'s: bound to domains, `{"https://*.bank.example": {"pw":
    /// "…"}}`, or flat, `{"pw": "…"}` (the official SDK's shape), which needs `allowedDomains`
    /// (the secrets are then bound to those domains) or `allowSecretsOnAnyDomain`.
    #[serde(default)]
    #[schema(value_type = Option<BTreeMap<String, crate::secrets::TaskSecretSchema>>)]
    pub secrets: Option<TaskSecrets>,
    /// Accept flat `secrets` without `allowedDomains` (browserd's addition): the agent may
    /// then type them on any site (never into a URL, `evaluate` or `extract`). Default false.
    #[serde(default)]
    pub allow_secrets_on_any_domain: Option<bool>,
    /// Only these domains may be visited (patterns like `*.example.com`).
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
    #[serde(default)]
    pub highlight_elements: Option<bool>,
    #[serde(default)]
    pub flash_mode: Option<bool>,
    #[serde(default)]
    pub thinking: Option<bool>,
    /// `true`, `false` or `"auto"`.
    #[serde(default)]
    #[schema(value_type = Option<VisionSetting>)]
    pub vision: Option<serde_json::Value>,
    /// At most 10 000 characters.
    #[serde(default)]
    #[schema(max_length = 10000)]
    pub system_prompt_extension: Option<String>,
    #[serde(default, deserialize_with = "object_or_null")]
    pub session_settings: Option<SessionSettings>,
    // Cloud-only features (answered with 501 when asked for).
    // Not in the document of what browserd implements.
    /// 1Password vaults are a cloud feature: any value is answered 501.
    #[serde(default)]
    #[schema(ignore)]
    pub op_vault_id: Option<String>,
    /// The judge is a cloud feature: `true` is answered 501.
    #[serde(default)]
    #[schema(ignore)]
    pub judge: Option<bool>,
    /// Skills are a cloud feature: a non-empty list is answered 501.
    #[serde(default)]
    #[schema(ignore)]
    pub skill_ids: Option<Vec<String>>,
}

/// A nested object of a request: a JSON object, or `null` for none. (serde's derived
/// `Deserialize` would also take an array for a struct, filling its fields in order.)
fn object_or_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value @ serde_json::Value::Object(_)) => serde_json::from_value(value)
            .map(Some)
            .map_err(D::Error::custom),
        Some(other) => Err(D::Error::custom(format!(
            "invalid type: {}, expected an object",
            match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                _ => "a boolean",
            }
        ))),
    }
}

impl fmt::Debug for CreateTaskRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateTaskRequest")
            .field("task", &self.task)
            .field("llm", &self.llm)
            .field("start_url", &self.start_url)
            .field("max_steps", &self.max_steps)
            .field("session_id", &self.session_id)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// Body of `PATCH /api/v2/tasks/{id}` (`stop`, `stop_task_and_session`, and browserd's
/// `pause` / `resume`) and `PATCH /api/v2/sessions/{id}` (`stop`).
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct UpdateRequest {
    pub action: String,
}

/// Body of `POST /api/v2/sessions` (optional). Unknown fields are ignored.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest {
    /// A profile of the caller's (`/api/v2/profiles`) every task of the session starts from
    /// and saves back into (404 `Profile not found` otherwise).
    #[serde(default)]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub profile_id: Option<String>,
    /// An absolute http(s) URL the session's first task opens.
    #[serde(default)]
    pub start_url: Option<String>,
    #[serde(default)]
    pub persist_memory: Option<bool>,
    #[serde(default)]
    pub keep_alive: Option<bool>,
    /// Not supported: any value but `null` is answered 501 (not in the document).
    #[serde(default)]
    #[schema(ignore)]
    pub custom_proxy: Option<serde_json::Value>,
}

/// `202` answer of `POST /api/v2/tasks`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskCreatedResponse {
    pub id: Uuid,
    pub session_id: Uuid,
}

/// `GET /api/v2/tasks/{id}/status`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusView {
    pub id: Uuid,
    pub status: V2TaskStatus,
    pub output: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<OffsetDateTime>,
    pub is_success: Option<bool>,
    /// USD as a decimal string.
    pub cost: Option<String>,
}

/// One step of a task.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStepView {
    pub number: i32,
    pub memory: String,
    pub evaluation_previous_goal: String,
    pub next_goal: String,
    pub url: String,
    /// Each action as stringified JSON, e.g. `{"click": {"index": 5}}`.
    pub actions: Vec<String>,
    pub screenshot_url: Option<String>,
    /// Seconds since the previous step ended.
    pub duration: Option<f64>,
}

/// A file the task produced.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileView {
    pub id: Uuid,
    pub file_name: String,
}

/// A task in a listing (no steps, no files).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskItemView {
    pub id: Uuid,
    pub session_id: Uuid,
    pub llm: String,
    pub task: String,
    pub status: V2TaskStatus,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<OffsetDateTime>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub output: Option<String>,
    pub browser_use_version: Option<String>,
    pub is_success: Option<bool>,
    pub judgement: Option<String>,
    pub judge_verdict: Option<bool>,
    pub cost: Option<String>,
}

/// `GET /api/v2/tasks/{id}`: the item fields plus steps and output files.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    #[serde(flatten)]
    pub item: TaskItemView,
    pub steps: Vec<TaskStepView>,
    pub output_files: Vec<FileView>,
}

/// The envelope of every v2 listing (page-number pagination).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResponse<T> {
    pub items: Vec<T>,
    pub total_items: i64,
    pub page_number: i64,
    pub page_size: i64,
}

/// `active` or `stopped`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum V2SessionStatus {
    Active,
    Stopped,
}

/// A session in a listing (and the answer of `POST /api/v2/sessions`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionItemView {
    pub id: Uuid,
    pub status: V2SessionStatus,
    /// browserd has no live view yet: always `null`.
    pub live_url: Option<String>,
    pub recording_url: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<OffsetDateTime>,
    pub persist_memory: bool,
    pub keep_alive: bool,
    pub proxy_used_mb: String,
    pub proxy_cost: String,
}

/// `GET /api/v2/sessions/{id}`: the item fields plus the session's tasks.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    #[serde(flatten)]
    pub item: SessionItemView,
    pub tasks: Vec<TaskItemView>,
    pub public_share_url: Option<String>,
}

/// `GET /api/v2/tasks/{id}/logs`.
/// `GET /files/tasks/{task_id}/output-files/{file_id}`: where to download one output file.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskOutputFileResponse {
    pub id: Uuid,
    pub file_name: String,
    /// A signed link valid for a short time; it needs no key (as the cloud's presigned URL).
    pub download_url: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsResponse {
    pub download_url: String,
}

/// A cost in USD as the decimal string v2 uses (`"0.0123"`).
pub fn cost_string(usd: f64) -> String {
    let text = format!("{usd:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() || text == "-" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_and_costs() {
        assert_eq!(
            V2TaskStatus::from(TaskStatus::Paused),
            V2TaskStatus::Started
        );
        assert_eq!(
            V2TaskStatus::from(TaskStatus::Queued),
            V2TaskStatus::Created
        );
        assert_eq!(
            serde_json::to_value(V2TaskStatus::Finished).unwrap(),
            "finished"
        );
        assert_eq!(V2TaskStatus::parse("started").unwrap().statuses().len(), 3);
        assert_eq!(
            V2TaskStatus::from(TaskStatus::Waiting),
            V2TaskStatus::Started
        );
        assert!(V2TaskStatus::parse("running").is_none());
        assert_eq!(cost_string(0.0), "0");
        assert_eq!(cost_string(0.0021), "0.0021");
        assert_eq!(cost_string(12.0), "12");
    }

    #[test]
    fn nested_objects_are_objects() {
        let parse = |body: &str| serde_json::from_str::<CreateTaskRequest>(body);
        let err = parse(r#"{"task": "t", "sessionSettings": ["x"]}"#).unwrap_err();
        assert!(err.to_string().contains("expected an object"), "{err}");
        assert!(parse(r#"{"task": "t", "sessionSettings": 1}"#).is_err());
        let ok = parse(r#"{"task": "t", "sessionSettings": {"browserScreenWidth": 800}}"#).unwrap();
        assert_eq!(ok.session_settings.unwrap().browser_screen_width, Some(800));
        assert!(
            parse(r#"{"task": "t", "sessionSettings": null}"#)
                .unwrap()
                .session_settings
                .is_none()
        );
        assert!(
            parse(r#"{"task": "t"}"#)
                .unwrap()
                .session_settings
                .is_none()
        );
    }

    #[test]
    fn timestamps_are_utc_with_z() {
        let view = TaskStatusView {
            id: Uuid::nil(),
            status: V2TaskStatus::Finished,
            output: None,
            finished_at: Some(OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()),
            is_success: Some(true),
            cost: Some("0".into()),
        };
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["finishedAt"], "2023-11-14T22:13:20Z");
        assert_eq!(json["isSuccess"], true);
    }
}
