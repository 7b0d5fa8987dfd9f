//! Every route's tenant boundary, derived from the router: [`browserd_api::routes`] lists every
//! route the application serves (taken from the lists the router is built from), and each must
//! have a case in [`CASES`] — a route added without one fails this test, and so does a case
//! whose route is gone. The same holds for the MCP tools: the server's `tools/list` must match
//! [`MCP_TOOLS`].
//!
//! For a route that names a resource, key B acting on key A's resource must get exactly the
//! answer it gets for a resource that does not exist (status and body, ids aside), while A
//! itself gets something else (so the resource really is there). Calls that could change a
//! resource run as B first; A's own calls that delete run last. A route that names no resource
//! (creating, listing, ops, the dashboard) is listed as such, with why; a listing must not show
//! B any of A's ids.
//!
//! Real Postgres and the real router; no task runs (rows are created through the API, and steps
//! and files with the store as a worker would write them).

use std::collections::BTreeSet;
use std::time::Duration;

use browserd_api::ApiConfig;
use browserd_store::{
    ArtifactContent, NewArtifact, NewOutputFile, NewSkill, NewStep, NewTask, SkillAttach,
};
use browserd_tasks::ModelCatalog;
use browserd_types::{TaskId, TaskOptions};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

mod support;

use support::TestServer;

/// The resources one key acts on (or, for [`Ids::missing`], ids nobody has).
#[derive(Clone, Debug)]
struct Ids {
    task: String,
    /// A replay task (of `task`).
    replay: String,
    /// A step of `task` that has a screenshot.
    step: i32,
    /// An output file of `task`.
    file: String,
    session: String,
    webhook: String,
    /// A profile (`/v1` deletes it) and another (`/api/v2` deletes it).
    profile: String,
    profile_v2: String,
    /// A skill (generating, with a version) and an execution of it; another skill (`/api/v2`
    /// deletes it).
    skill: String,
    skill_run: String,
    skill_v2: String,
    /// A schedule (of a task that never fires in the test: once a year).
    schedule: String,
}

impl Ids {
    fn missing() -> Self {
        let id = || uuid::Uuid::new_v4().to_string();
        Ids {
            task: id(),
            replay: id(),
            step: 1,
            file: id(),
            session: id(),
            webhook: id(),
            profile: id(),
            profile_v2: id(),
            skill: id(),
            skill_run: id(),
            skill_v2: id(),
            schedule: id(),
        }
    }

    fn all(&self) -> [&str; 11] {
        [
            &self.schedule,
            &self.skill,
            &self.skill_run,
            &self.skill_v2,
            &self.task,
            &self.replay,
            &self.file,
            &self.session,
            &self.webhook,
            &self.profile,
            &self.profile_v2,
        ]
    }
}

/// One request, built from the target's ids and the caller's own.
#[derive(Clone, Debug)]
enum Call {
    /// With the key as `Authorization: Bearer` (`/v1`) or `X-Browser-Use-API-Key` (`v2`).
    Http {
        method: Method,
        path: String,
        body: Option<Value>,
        v2: bool,
    },
    /// A WebSocket upgrade with the key as bearer header.
    WebSocket { path: String },
    /// A WebSocket upgrade with a ticket the caller mints for `ticket_task` (no key).
    Ticket { path: String, ticket_task: String },
    /// An MCP tool call over `/mcp`.
    Tool { name: String, arguments: Value },
}

fn get(path: String) -> Call {
    Call::Http {
        method: Method::GET,
        path,
        body: None,
        v2: false,
    }
}

fn post(path: String, body: Option<Value>) -> Call {
    Call::Http {
        method: Method::POST,
        path,
        body,
        v2: false,
    }
}

fn v2(method: Method, path: String, body: Option<Value>) -> Call {
    Call::Http {
        method,
        path,
        body,
        v2: true,
    }
}

/// What a route is to this test.
enum Kind {
    /// It names no resource: why.
    NoResource(&'static str),
    /// It lists the caller's own resources: B must see none of A's ids.
    Listing(fn(&Ids) -> Vec<Call>),
    /// It names resources: the calls (target, caller's own) to compare.
    Names(fn(&Ids, &Ids) -> Vec<Call>),
    /// It names resources and deletes them: as [`Kind::Names`], run after everything else.
    Deletes(fn(&Ids, &Ids) -> Vec<Call>),
    /// The signed download link: the link is the credential, not a key.
    SignedLink,
}

/// Every route of the router (method, path template) and what it is to this test.
const CASES: &[(&str, &str, Kind)] = &[
    (
        "GET",
        "/",
        Kind::NoResource("the dashboard's page (no data)"),
    ),
    ("GET", "/ui/app.js", Kind::NoResource("a dashboard asset")),
    ("GET", "/ui/app.css", Kind::NoResource("a dashboard asset")),
    ("GET", "/healthz", Kind::NoResource("process health")),
    ("GET", "/readyz", Kind::NoResource("readiness")),
    (
        "GET",
        "/metrics",
        Kind::NoResource("process-wide counters, no tenant data"),
    ),
    ("GET", "/openapi.yaml", Kind::NoResource("the API document")),
    (
        "GET",
        "/v1/models",
        Kind::NoResource("the server's model catalog"),
    ),
    (
        "POST",
        "/v1/tasks",
        Kind::Names(|target, _| {
            // Creating names a resource only through `replay_of`.
            vec![post(
                "/v1/tasks".into(),
                Some(json!({"replay_of": target.task})),
            )]
        }),
    ),
    (
        "GET",
        "/v1/tasks",
        Kind::Listing(|_| vec![get("/v1/tasks".into())]),
    ),
    (
        "GET",
        "/v1/tasks/{id}",
        Kind::Names(|t, _| vec![get(format!("/v1/tasks/{}", t.task))]),
    ),
    (
        "DELETE",
        "/v1/tasks/{id}",
        Kind::Deletes(|t, _| {
            vec![Call::Http {
                method: Method::DELETE,
                path: format!("/v1/tasks/{}", t.replay),
                body: None,
                v2: false,
            }]
        }),
    ),
    (
        "POST",
        "/v1/tasks/{id}/pause",
        Kind::Names(|t, _| vec![post(format!("/v1/tasks/{}/pause", t.task), None)]),
    ),
    (
        "POST",
        "/v1/tasks/{id}/resume",
        Kind::Names(|t, _| vec![post(format!("/v1/tasks/{}/resume", t.task), None)]),
    ),
    (
        "POST",
        "/v1/tasks/{id}/input",
        Kind::Names(|t, _| {
            vec![
                post(
                    format!("/v1/tasks/{}/input", t.task),
                    Some(json!({"answer": "42"})),
                ),
                post(
                    format!("/v1/tasks/{}/input", t.task),
                    Some(json!({"choice": "yes", "secret": true})),
                ),
            ]
        }),
    ),
    (
        "POST",
        "/v1/tasks/{id}/stop",
        Kind::Names(|t, _| vec![post(format!("/v1/tasks/{}/stop", t.task), None)]),
    ),
    (
        "GET",
        "/v1/tasks/{id}/steps",
        Kind::Names(|t, _| {
            vec![
                get(format!("/v1/tasks/{}/steps", t.task)),
                get(format!("/v1/tasks/{}/steps?after_step=0&limit=1", t.task)),
            ]
        }),
    ),
    (
        "GET",
        "/v1/tasks/{id}/steps/{n}/screenshot",
        Kind::Names(|t, _| {
            vec![get(format!(
                "/v1/tasks/{}/steps/{}/screenshot",
                t.task, t.step
            ))]
        }),
    ),
    (
        "GET",
        "/v1/tasks/{id}/history",
        Kind::Names(|t, _| vec![get(format!("/v1/tasks/{}/history", t.task))]),
    ),
    (
        "GET",
        "/v1/tasks/{id}/replay-report",
        Kind::Names(|t, _| vec![get(format!("/v1/tasks/{}/replay-report", t.replay))]),
    ),
    (
        "GET",
        "/v1/tasks/{id}/files",
        Kind::Names(|t, _| vec![get(format!("/v1/tasks/{}/files", t.task))]),
    ),
    (
        "GET",
        "/v1/tasks/{id}/files/{file_id}",
        Kind::Names(|t, own| {
            vec![
                get(format!("/v1/tasks/{}/files/{}", t.task, t.file)),
                // The target's file through the caller's own task.
                get(format!("/v1/tasks/{}/files/{}", own.task, t.file)),
            ]
        }),
    ),
    (
        "GET",
        "/v1/tasks/{id}/events",
        Kind::Names(|t, own| {
            vec![
                Call::WebSocket {
                    path: format!("/v1/tasks/{}/events", t.task),
                },
                // A ticket of the caller's own task does not open the target's stream.
                Call::Ticket {
                    path: format!("/v1/tasks/{}/events", t.task),
                    ticket_task: own.task.clone(),
                },
            ]
        }),
    ),
    (
        "POST",
        "/v1/tasks/{id}/events/ticket",
        Kind::Names(|t, _| vec![post(format!("/v1/tasks/{}/events/ticket", t.task), None)]),
    ),
    (
        "GET",
        "/v1/tasks/{id}/live",
        Kind::Names(|t, own| {
            vec![
                Call::WebSocket {
                    path: format!("/v1/tasks/{}/live", t.task),
                },
                Call::Ticket {
                    path: format!("/v1/tasks/{}/live", t.task),
                    ticket_task: own.task.clone(),
                },
            ]
        }),
    ),
    (
        "POST",
        "/v1/webhooks",
        Kind::NoResource("registers a new webhook of the caller"),
    ),
    (
        "GET",
        "/v1/webhooks",
        Kind::Listing(|_| vec![get("/v1/webhooks".into())]),
    ),
    (
        "DELETE",
        "/v1/webhooks/{id}",
        Kind::Deletes(|t, _| {
            vec![Call::Http {
                method: Method::DELETE,
                path: format!("/v1/webhooks/{}", t.webhook),
                body: None,
                v2: false,
            }]
        }),
    ),
    (
        "GET",
        "/v1/webhooks/{id}/deliveries",
        Kind::Names(|t, _| vec![get(format!("/v1/webhooks/{}/deliveries", t.webhook))]),
    ),
    (
        "POST",
        "/v1/profiles",
        Kind::NoResource("creates a new profile of the caller"),
    ),
    (
        "GET",
        "/v1/profiles",
        Kind::Listing(|_| vec![get("/v1/profiles".into())]),
    ),
    (
        "GET",
        "/v1/profiles/{id}",
        Kind::Names(|t, _| vec![get(format!("/v1/profiles/{}", t.profile))]),
    ),
    (
        "PATCH",
        "/v1/profiles/{id}",
        Kind::Names(|t, _| {
            vec![Call::Http {
                method: Method::PATCH,
                path: format!("/v1/profiles/{}", t.profile),
                body: Some(json!({"name": "renamed"})),
                v2: false,
            }]
        }),
    ),
    (
        "DELETE",
        "/v1/profiles/{id}",
        Kind::Deletes(|t, _| {
            vec![Call::Http {
                method: Method::DELETE,
                path: format!("/v1/profiles/{}", t.profile),
                body: None,
                v2: false,
            }]
        }),
    ),
    (
        "POST",
        "/v1/skills",
        Kind::Names(|target, _| {
            // Creating names a resource only through `from_task`.
            vec![post(
                "/v1/skills".into(),
                Some(json!({"from_task": target.task, "parameters": {"x": "alice"}})),
            )]
        }),
    ),
    (
        "GET",
        "/v1/skills",
        Kind::Listing(|_| {
            vec![
                get("/v1/skills".into()),
                get("/v1/skills?query=alice".into()),
            ]
        }),
    ),
    (
        "GET",
        "/v1/skills/{id}",
        Kind::Names(|t, _| vec![get(format!("/v1/skills/{}", t.skill))]),
    ),
    (
        "PATCH",
        "/v1/skills/{id}",
        Kind::Names(|t, _| {
            vec![Call::Http {
                method: Method::PATCH,
                path: format!("/v1/skills/{}", t.skill),
                body: Some(json!({"title": "renamed", "is_enabled": true})),
                v2: false,
            }]
        }),
    ),
    (
        "POST",
        "/v1/skills/{id}/runs",
        Kind::Names(|t, _| {
            vec![post(
                format!("/v1/skills/{}/runs", t.skill),
                Some(json!({"parameters": {"order": "1"}})),
            )]
        }),
    ),
    (
        "GET",
        "/v1/skills/{id}/runs",
        Kind::Names(|t, _| vec![get(format!("/v1/skills/{}/runs", t.skill))]),
    ),
    (
        "GET",
        "/v1/skills/{id}/runs/{task_id}",
        Kind::Names(|t, own| {
            vec![
                get(format!("/v1/skills/{}/runs/{}", t.skill, t.skill_run)),
                // The target's run through the caller's own skill.
                get(format!("/v1/skills/{}/runs/{}", own.skill, t.skill_run)),
            ]
        }),
    ),
    (
        "GET",
        "/v1/skills/{id}/versions",
        Kind::Names(|t, _| vec![get(format!("/v1/skills/{}/versions", t.skill))]),
    ),
    (
        "POST",
        "/v1/skills/{id}/rollback",
        Kind::Names(|t, _| vec![post(format!("/v1/skills/{}/rollback", t.skill), None)]),
    ),
    (
        "POST",
        "/v1/skills/{id}/refine",
        Kind::Names(|t, _| {
            vec![post(
                format!("/v1/skills/{}/refine", t.skill),
                Some(json!({"feedback": "faster"})),
            )]
        }),
    ),
    (
        "POST",
        "/api/v2/skills",
        Kind::NoResource("creates a new skill of the caller"),
    ),
    (
        "GET",
        "/api/v2/skills",
        Kind::Listing(|_| {
            vec![
                v2(Method::GET, "/api/v2/skills".into(), None),
                v2(Method::GET, "/api/v2/skills?query=alice".into(), None),
            ]
        }),
    ),
    (
        "GET",
        "/api/v2/skills/{skill_id}",
        Kind::Names(|t, _| vec![v2(Method::GET, format!("/api/v2/skills/{}", t.skill), None)]),
    ),
    (
        "PATCH",
        "/api/v2/skills/{skill_id}",
        Kind::Names(|t, _| {
            vec![v2(
                Method::PATCH,
                format!("/api/v2/skills/{}", t.skill),
                Some(json!({"title": "renamed", "isEnabled": true})),
            )]
        }),
    ),
    (
        "POST",
        "/api/v2/skills/{skill_id}/execute",
        Kind::Names(|t, _| {
            vec![v2(
                Method::POST,
                format!("/api/v2/skills/{}/execute", t.skill),
                Some(json!({"parameters": {"order": "1"}})),
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/skills/{skill_id}/executions",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/skills/{}/executions", t.skill),
                None,
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/skills/{skill_id}/executions/{execution_id}/output",
        Kind::Names(|t, own| {
            vec![
                v2(
                    Method::GET,
                    format!(
                        "/api/v2/skills/{}/executions/{}/output",
                        t.skill, t.skill_run
                    ),
                    None,
                ),
                // The target's execution through the caller's own skill.
                v2(
                    Method::GET,
                    format!(
                        "/api/v2/skills/{}/executions/{}/output",
                        own.skill, t.skill_run
                    ),
                    None,
                ),
            ]
        }),
    ),
    (
        "POST",
        "/api/v2/skills/{skill_id}/rollback",
        Kind::Names(|t, _| {
            vec![v2(
                Method::POST,
                format!("/api/v2/skills/{}/rollback", t.skill),
                None,
            )]
        }),
    ),
    (
        "POST",
        "/api/v2/skills/{skill_id}/refine",
        Kind::Names(|t, _| {
            vec![v2(
                Method::POST,
                format!("/api/v2/skills/{}/refine", t.skill),
                Some(json!({"feedback": "be faster at it"})),
            )]
        }),
    ),
    // After the calls above: A's cancel ends the generation they rely on.
    (
        "POST",
        "/v1/skills/{id}/cancel",
        Kind::Names(|t, _| vec![post(format!("/v1/skills/{}/cancel", t.skill), None)]),
    ),
    (
        "POST",
        "/api/v2/skills/{skill_id}/cancel",
        Kind::Names(|t, _| {
            vec![v2(
                Method::POST,
                format!("/api/v2/skills/{}/cancel", t.skill),
                None,
            )]
        }),
    ),
    (
        "DELETE",
        "/api/v2/skills/{skill_id}",
        Kind::Deletes(|t, _| {
            vec![v2(
                Method::DELETE,
                format!("/api/v2/skills/{}", t.skill_v2),
                None,
            )]
        }),
    ),
    (
        "DELETE",
        "/v1/skills/{id}",
        Kind::Deletes(|t, _| {
            vec![Call::Http {
                method: Method::DELETE,
                path: format!("/v1/skills/{}", t.skill),
                body: None,
                v2: false,
            }]
        }),
    ),
    (
        "POST",
        "/v1/schedules",
        Kind::Names(|target, _| {
            // Creating names resources only through its target task's `replay_of` (and
            // `profile_id`: `a_task_cannot_name_another_keys_profile`).
            vec![post(
                "/v1/schedules".into(),
                Some(json!({"cron": "0 9 * * *", "target": {"task": {"replay_of": target.task}}})),
            )]
        }),
    ),
    (
        "GET",
        "/v1/schedules",
        Kind::Listing(|_| vec![get("/v1/schedules".into())]),
    ),
    (
        "GET",
        "/v1/schedules/{id}",
        Kind::Names(|t, _| vec![get(format!("/v1/schedules/{}", t.schedule))]),
    ),
    (
        "PATCH",
        "/v1/schedules/{id}",
        Kind::Names(|t, _| {
            vec![Call::Http {
                method: Method::PATCH,
                path: format!("/v1/schedules/{}", t.schedule),
                body: Some(json!({"name": "renamed", "enabled": false})),
                v2: false,
            }]
        }),
    ),
    (
        "GET",
        "/v1/schedules/{id}/runs",
        Kind::Names(|t, _| vec![get(format!("/v1/schedules/{}/runs", t.schedule))]),
    ),
    (
        "DELETE",
        "/v1/schedules/{id}",
        Kind::Deletes(|t, _| {
            vec![Call::Http {
                method: Method::DELETE,
                path: format!("/v1/schedules/{}", t.schedule),
                body: None,
                v2: false,
            }]
        }),
    ),
    (
        "POST",
        "/api/v2/profiles",
        Kind::NoResource("creates a new profile of the caller"),
    ),
    (
        "GET",
        "/api/v2/profiles",
        Kind::Listing(|_| vec![v2(Method::GET, "/api/v2/profiles".into(), None)]),
    ),
    (
        "GET",
        "/api/v2/profiles/{profile_id}",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/profiles/{}", t.profile_v2),
                None,
            )]
        }),
    ),
    (
        "PATCH",
        "/api/v2/profiles/{profile_id}",
        Kind::Names(|t, _| {
            vec![v2(
                Method::PATCH,
                format!("/api/v2/profiles/{}", t.profile_v2),
                Some(json!({"name": "renamed"})),
            )]
        }),
    ),
    (
        "DELETE",
        "/api/v2/profiles/{profile_id}",
        Kind::Deletes(|t, _| {
            vec![v2(
                Method::DELETE,
                format!("/api/v2/profiles/{}", t.profile_v2),
                None,
            )]
        }),
    ),
    (
        "POST",
        "/api/v2/tasks",
        Kind::Names(|t, _| {
            // Creating names a resource only through `sessionId`.
            vec![v2(
                Method::POST,
                "/api/v2/tasks".into(),
                Some(json!({"task": "into that session", "sessionId": t.session})),
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/tasks",
        Kind::Listing(|t| {
            vec![
                v2(Method::GET, "/api/v2/tasks".into(), None),
                v2(
                    Method::GET,
                    format!("/api/v2/tasks?sessionId={}", t.session),
                    None,
                ),
            ]
        }),
    ),
    (
        "GET",
        "/api/v2/tasks/{task_id}",
        Kind::Names(|t, _| vec![v2(Method::GET, format!("/api/v2/tasks/{}", t.task), None)]),
    ),
    (
        "PATCH",
        "/api/v2/tasks/{task_id}",
        Kind::Names(|t, _| {
            vec![v2(
                Method::PATCH,
                format!("/api/v2/tasks/{}", t.task),
                Some(json!({"action": "stop"})),
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/tasks/{task_id}/status",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/tasks/{}/status", t.task),
                None,
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/tasks/{task_id}/logs",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/tasks/{}/logs", t.task),
                None,
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/tasks/{task_id}/history",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/tasks/{}/history", t.task),
                None,
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/tasks/{task_id}/steps/{number}/screenshot",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/tasks/{}/steps/{}/screenshot", t.task, t.step),
                None,
            )]
        }),
    ),
    (
        "GET",
        "/api/v2/files/tasks/{task_id}/output-files/{file_id}",
        Kind::Names(|t, own| {
            vec![
                v2(
                    Method::GET,
                    format!("/api/v2/files/tasks/{}/output-files/{}", t.task, t.file),
                    None,
                ),
                v2(
                    Method::GET,
                    format!("/api/v2/files/tasks/{}/output-files/{}", own.task, t.file),
                    None,
                ),
            ]
        }),
    ),
    (
        "GET",
        "/api/v2/files/output-files/{file_id}/content",
        Kind::SignedLink,
    ),
    (
        "POST",
        "/api/v2/sessions",
        Kind::NoResource("creates a new session of the caller"),
    ),
    (
        "GET",
        "/api/v2/sessions",
        Kind::Listing(|_| vec![v2(Method::GET, "/api/v2/sessions".into(), None)]),
    ),
    (
        "GET",
        "/api/v2/sessions/{session_id}",
        Kind::Names(|t, _| {
            vec![v2(
                Method::GET,
                format!("/api/v2/sessions/{}", t.session),
                None,
            )]
        }),
    ),
    (
        "PATCH",
        "/api/v2/sessions/{session_id}",
        Kind::Names(|t, _| {
            vec![v2(
                Method::PATCH,
                format!("/api/v2/sessions/{}", t.session),
                Some(json!({"action": "stop"})),
            )]
        }),
    ),
    (
        "DELETE",
        "/api/v2/sessions/{session_id}",
        Kind::Deletes(|t, _| {
            vec![v2(
                Method::DELETE,
                format!("/api/v2/sessions/{}", t.session),
                None,
            )]
        }),
    ),
    (
        "ANY",
        "/mcp",
        Kind::Names(|t, _| {
            MCP_TOOLS
                .iter()
                .filter_map(|(name, arguments)| {
                    arguments.map(|arguments| Call::Tool {
                        name: (*name).to_owned(),
                        arguments: arguments(t),
                    })
                })
                .collect()
        }),
    ),
];

/// Every MCP tool, with the arguments that name a resource (`None`: it names none —
/// `run_task` creates a task, `list_tasks` and `list_skills` list the caller's own).
#[allow(clippy::type_complexity)]
const MCP_TOOLS: &[(&str, Option<fn(&Ids) -> Value>)] = &[
    ("run_task", None),
    ("list_tasks", None),
    ("list_skills", None),
    (
        "run_skill",
        Some(|t| json!({"id": t.skill, "parameters": {}, "wait_s": 0})),
    ),
    ("get_task", Some(|t| json!({"id": t.task}))),
    ("stop_task", Some(|t| json!({"id": t.task}))),
    ("pause_task", Some(|t| json!({"id": t.task}))),
    ("resume_task", Some(|t| json!({"id": t.task}))),
    (
        "answer_task",
        Some(|t| json!({"id": t.task, "answer": "42", "wait_s": 0})),
    ),
    (
        "get_screenshot",
        Some(|t| json!({"id": t.task, "step": t.step})),
    ),
    ("get_screenshot", Some(|t| json!({"id": t.task}))),
];

/// What a call was answered: a status and a body (JSON when it is JSON; a WebSocket's refusal
/// body; an MCP tool's result).
#[derive(Clone, Debug, PartialEq)]
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    /// The answer with every id of `ids` replaced by a placeholder (error messages name the id
    /// they were given).
    fn without(&self, ids: &[&Ids]) -> Answer {
        let mut body = self.body.clone();
        for ids in ids {
            for id in ids.all() {
                body = body.replace(id, "<id>");
            }
        }
        Answer {
            status: self.status,
            body,
        }
    }
}

/// One key's client: HTTP, WebSockets and an MCP session.
struct Tenant<'a> {
    app: &'a TestServer,
    key: String,
    mcp_session: String,
    next_rpc: std::sync::atomic::AtomicU64,
}

impl<'a> Tenant<'a> {
    async fn new(app: &'a TestServer, key: String) -> Self {
        let mut tenant = Tenant {
            app,
            key,
            mcp_session: String::new(),
            next_rpc: std::sync::atomic::AtomicU64::new(1),
        };
        let (session, answer) = tenant
            .rpc(
                "initialize",
                json!({"protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "tenancy-test", "version": "0"}}),
            )
            .await;
        assert!(answer.get("result").is_some(), "{answer}");
        tenant.mcp_session = session.expect("an MCP session id");
        let response = tenant
            .mcp_request()
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        tenant
    }

    fn mcp_request(&self) -> reqwest::RequestBuilder {
        let mut request = self
            .app
            .http
            .post(self.app.url(browserd_api::MCP_PATH))
            .bearer_auth(&self.key)
            .header("accept", "application/json, text/event-stream");
        if !self.mcp_session.is_empty() {
            request = request.header("mcp-session-id", &self.mcp_session);
        }
        request
    }

    /// A JSON-RPC request over `/mcp`: the session id the server gave and the response
    /// message (read from the SSE stream).
    async fn rpc(&self, method: &str, params: Value) -> (Option<String>, Value) {
        let id = self
            .next_rpc
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let response = self
            .mcp_request()
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.unwrap();
        let message = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .chain(serde_json::from_str::<Value>(&text).ok())
            .find(|message| message["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"));
        (session, message)
    }

    async fn tools(&self) -> BTreeSet<String> {
        let (_, answer) = self.rpc("tools/list", json!({})).await;
        answer["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect()
    }

    async fn http(&self, method: &Method, path: &str, body: Option<&Value>, v2: bool) -> Answer {
        let mut request = self.app.http.request(method.clone(), self.app.url(path));
        request = if v2 {
            request.header("x-browser-use-api-key", &self.key)
        } else {
            request.bearer_auth(&self.key)
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap();
        let body = serde_json::from_slice::<Value>(&bytes)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| format!("{} bytes", bytes.len()));
        Answer { status, body }
    }

    async fn call(&self, call: &Call) -> Answer {
        match call {
            Call::Http {
                method,
                path,
                body,
                v2,
            } => self.http(method, path, body.as_ref(), *v2).await,
            Call::WebSocket { path } => {
                let mut request = format!("ws://{}{path}", self.app.addr)
                    .into_client_request()
                    .unwrap();
                request.headers_mut().insert(
                    "authorization",
                    format!("Bearer {}", self.key).parse().unwrap(),
                );
                upgrade(request).await
            }
            Call::Ticket { path, ticket_task } => {
                let minted = self
                    .http(
                        &Method::POST,
                        &format!("/v1/tasks/{ticket_task}/events/ticket"),
                        None,
                        false,
                    )
                    .await;
                assert_eq!(minted.status, 201, "{minted:?}");
                let ticket: Value = serde_json::from_str(&minted.body).unwrap();
                let request = format!(
                    "ws://{}{path}?ticket={}",
                    self.app.addr,
                    ticket["ticket"].as_str().unwrap()
                )
                .into_client_request()
                .unwrap();
                upgrade(request).await
            }
            Call::Tool { name, arguments } => {
                let (_, answer) = self
                    .rpc("tools/call", json!({"name": name, "arguments": arguments}))
                    .await;
                let result = &answer["result"];
                let failed = result["isError"] == json!(true);
                Answer {
                    status: if failed { 404 } else { 200 },
                    body: result.to_string(),
                }
            }
        }
    }
}

/// A WebSocket handshake: 101 (then closed), or the refusal's status and JSON body.
async fn upgrade(request: tokio_tungstenite::tungstenite::handshake::client::Request) -> Answer {
    let connect = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .expect("the handshake is answered in time");
    match connect {
        Ok((mut ws, response)) => {
            let _ = ws.close(None).await;
            Answer {
                status: response.status().as_u16(),
                body: String::new(),
            }
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Answer {
            status: response.status().as_u16(),
            body: response
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
        },
        Err(other) => panic!("handshake failed: {other}"),
    }
}

/// Key A's resources: a task with steps (one with a screenshot) that has ended, an output
/// file of it, a replay of it, a session with a task, and a webhook with deliveries.
async fn resources(app: &TestServer, a: &Tenant<'_>, pool: &PgPool) -> Ids {
    let created = |answer: Answer, status: u16| -> Value {
        assert_eq!(answer.status, status, "{answer:?}");
        serde_json::from_str(&answer.body).unwrap()
    };
    let webhook = created(
        a.call(&post(
            "/v1/webhooks".into(),
            Some(json!({"url": "http://127.0.0.1:9/hook", "events": ["created", "stopped"]})),
        ))
        .await,
        201,
    );
    let task = created(
        a.call(&post(
            "/v1/tasks".into(),
            Some(json!({"task": "alice's confidential errand"})),
        ))
        .await,
        201,
    );
    let task_id: TaskId = task["id"].as_str().unwrap().parse().unwrap();
    let png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3];
    let shot = app
        .store
        .insert_artifact(
            task_id,
            NewArtifact {
                kind: "screenshot",
                name: None,
                content_type: "image/png".into(),
                size_bytes: png.len() as i64,
                content: ArtifactContent::Inline(png),
            },
        )
        .await
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    for (number, screenshot) in [(0, None), (1, Some(shot))] {
        app.store
            .insert_step(
                task_id,
                NewStep {
                    number,
                    url: Some("http://127.0.0.1/alice".into()),
                    title: Some("Alice's page".into()),
                    model_output: Some(json!({"memory": "alice", "next_goal": "alice",
                        "evaluation_previous_goal": "", "action": [{"click": {"index": 1}}]})),
                    results: json!([{"extracted_content": "alice's data"}]),
                    usage: None,
                    screenshot,
                    started_at: now,
                    finished_at: now,
                },
            )
            .await
            .unwrap();
    }
    sqlx::query(
        "update task_steps set record = jsonb_build_object('n', number) where task_id = $1",
    )
    .bind(task_id.0)
    .execute(pool)
    .await
    .unwrap();
    created(
        a.call(&post(format!("/v1/tasks/{task_id}/stop"), None))
            .await,
        200,
    );
    app.store
        .save_output_files(
            task_id,
            "nobody",
            &[NewOutputFile {
                file_name: "alice.txt".into(),
                content_type: "text/plain".into(),
                size: 5,
                content: Ok(b"alice".to_vec()),
            }],
        )
        .await
        .unwrap();
    let file = app.store.list_output_files(task_id).await.unwrap()[0].id;
    let replay = created(
        a.call(&post(
            "/v1/tasks".into(),
            Some(json!({"replay_of": task_id})),
        ))
        .await,
        201,
    );
    let session = created(
        a.call(&v2(
            Method::POST,
            "/api/v2/sessions".into(),
            Some(json!({})),
        ))
        .await,
        201,
    );
    created(
        a.call(&v2(
            Method::POST,
            "/api/v2/tasks".into(),
            Some(json!({"task": "alice's session task", "sessionId": session["id"]})),
        ))
        .await,
        202,
    );
    let profile = created(
        a.call(&post(
            "/v1/profiles".into(),
            Some(json!({"name": "alice's bank login"})),
        ))
        .await,
        201,
    );
    let profile_v2 = created(
        a.call(&v2(
            Method::POST,
            "/api/v2/profiles".into(),
            Some(json!({"name": "alice's shop login", "userId": "alice"})),
        ))
        .await,
        201,
    );
    let (skill, skill_run) = skill_fixture(app, task_id, pool).await;
    let (skill_v2, _) = skill_fixture(app, task_id, pool).await;
    let schedule = created(
        a.call(&post(
            "/v1/schedules".into(),
            Some(json!({
                "name": "alice's yearly report",
                "cron": "0 0 1 1 *",
                "target": {"task": {"task": "alice's report"}},
            })),
        ))
        .await,
        201,
    );
    Ids {
        schedule: schedule["id"].as_str().unwrap().to_owned(),
        skill,
        skill_run,
        skill_v2,
        profile: profile["id"].as_str().unwrap().to_owned(),
        profile_v2: profile_v2["id"].as_str().unwrap().to_owned(),
        task: task_id.to_string(),
        replay: replay["id"].as_str().unwrap().to_owned(),
        step: 1,
        file: file.to_string(),
        session: session["id"].as_str().unwrap().to_owned(),
        webhook: webhook["webhook"]["id"]
            .as_str()
            .or(webhook["id"].as_str())
            .unwrap()
            .to_owned(),
    }
}

/// Key A's skill, generating (its task queued) with a version 1 already saved, and a run of
/// it; written as the core and a worker would (no task runs here).
async fn skill_fixture(app: &TestServer, task_id: TaskId, pool: &PgPool) -> (String, String) {
    let new_task = |text: &str| NewTask {
        task: text.to_owned(),
        options: TaskOptions::default(),
        secrets: Default::default(),
        trace_context: None,
        replay: None,
    };
    let skill_id = uuid::Uuid::now_v7();
    let skill = NewSkill {
        id: skill_id,
        title: "alice's order check".into(),
        description: "alice's".into(),
        goal: "Find alice's order".into(),
        agent_prompt: "Find order {{order=1042}}".into(),
        output_schema: None,
        parameters: json!([{"name": "order", "type": "string", "required": true}]),
    };
    let attach = SkillAttach::Create {
        skill: Box::new(skill),
        parameters: json!({"order": "1042"}),
    };
    app.store
        .create_skill_task(app.key_id, new_task("alice's skill generation"), &attach)
        .await
        .unwrap();
    sqlx::query(
        "insert into skill_versions (skill_id, version, script, origin, source_task_id)
         values ($1, 1, $2, 'generated', $3)",
    )
    .bind(skill_id)
    .bind(json!({"steps": {"history": []}, "parameters": [], "result": {"kind": "text", "template": "alice"}}))
    .bind(task_id.0)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("update skills set current_version = 1 where id = $1")
        .bind(skill_id)
        .execute(pool)
        .await
        .unwrap();
    let run = app
        .store
        .create_skill_task(
            app.key_id,
            new_task("alice's skill run"),
            &SkillAttach::Execute {
                skill_id,
                version: 1,
                parameters: json!({"order": "2077"}),
            },
        )
        .await
        .unwrap();
    (skill_id.to_string(), run.id.to_string())
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn no_route_lets_one_key_reach_another_keys_resources(pool: PgPool) {
    // The table covers the router: no route without a case, no case without a route.
    let routes: BTreeSet<(String, String)> = browserd_api::routes()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect();
    let cases: BTreeSet<(String, String)> = CASES
        .iter()
        .map(|(method, path, _)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    let uncovered: Vec<_> = routes.difference(&cases).collect();
    assert!(
        uncovered.is_empty(),
        "routes without a tenant-boundary case in CASES: {uncovered:?}"
    );
    let stale: Vec<_> = cases.difference(&routes).collect();
    assert!(
        stale.is_empty(),
        "cases of routes that do not exist: {stale:?}"
    );
    assert_eq!(cases.len(), CASES.len(), "one case per route");

    let app = TestServer::serve(
        pool.clone(),
        ApiConfig {
            models: ModelCatalog::new(["m".to_owned()], Some("m".to_owned())).unwrap(),
            webhook_allow_loopback: true,
            ..ApiConfig::default()
        },
        false,
    )
    .await;
    let alice = Tenant::new(&app, app.key.clone()).await;
    let bob = Tenant::new(&app, app.new_key().await).await;

    // And the MCP tools: every tool has a case.
    let tools = alice.tools().await;
    let known: BTreeSet<String> = MCP_TOOLS.iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(tools, known, "every MCP tool needs a case in MCP_TOOLS");

    let a = resources(&app, &alice, &pool).await;
    let bob_task = bob
        .call(&post("/v1/tasks".into(), Some(json!({"task": "bob's"}))))
        .await;
    assert_eq!(bob_task.status, 201, "{bob_task:?}");
    let b = Ids {
        task: serde_json::from_str::<Value>(&bob_task.body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned(),
        ..Ids::missing()
    };
    let missing = Ids::missing();
    let a_ids = a.all().map(str::to_owned);

    let mut checked = 0;
    let mut deletes = Vec::new();
    for (method, path, kind) in CASES {
        let calls = match kind {
            Kind::NoResource(why) => {
                assert!(!why.is_empty());
                continue;
            }
            Kind::Listing(calls) => {
                for call in calls(&a) {
                    let seen = bob.call(&call).await;
                    assert!(seen.status < 500, "{method} {path}: {seen:?}");
                    for id in &a_ids {
                        assert!(
                            !seen.body.contains(id.as_str()),
                            "{method} {path} shows B one of A's ids: {seen:?}"
                        );
                    }
                    let own = alice.call(&call).await;
                    assert!(own.status < 300, "{method} {path} as A: {own:?}");
                    checked += 1;
                }
                continue;
            }
            Kind::SignedLink => {
                signed_link(&app, &alice, &a, &missing).await;
                checked += 1;
                continue;
            }
            Kind::Names(calls) => calls,
            Kind::Deletes(calls) => {
                deletes.push((method, path, calls));
                continue;
            }
        };
        checked += compare(method, path, &alice, &bob, *calls, [&a, &missing, &b]).await;
    }
    for (method, path, calls) in deletes {
        checked += compare(method, path, &alice, &bob, *calls, [&a, &missing, &b]).await;
    }
    assert!(checked >= 40, "{checked} calls checked");
}

/// B's calls on A's resources are answered exactly as the same calls on missing ones (a
/// not-found), never with A's data; A's own calls are answered otherwise. Answers the number of
/// calls compared.
async fn compare(
    method: &str,
    path: &str,
    alice: &Tenant<'_>,
    bob: &Tenant<'_>,
    calls: fn(&Ids, &Ids) -> Vec<Call>,
    [a, missing, b]: [&Ids; 3],
) -> usize {
    let cross = calls(a, b);
    let absent = calls(missing, b);
    let own = calls(a, a);
    assert_eq!(cross.len(), absent.len());
    for ((call, absent), own) in cross.iter().zip(&absent).zip(&own) {
        let as_bob = bob.call(call).await.without(&[a, missing, b]);
        let nothing = bob.call(absent).await.without(&[a, missing, b]);
        assert_eq!(
            as_bob, nothing,
            "{method} {path}: B on A's resource ({call:?}) is answered unlike a missing one"
        );
        assert!(
            matches!(as_bob.status, 401 | 404),
            "{method} {path}: B gets {as_bob:?} ({call:?})"
        );
        for leak in ["alice", "confidential"] {
            assert!(
                !as_bob.body.contains(leak),
                "{method} {path}: B sees A's data: {as_bob:?}"
            );
        }
        let mine = alice.call(own).await.without(&[a, missing, b]);
        assert_ne!(
            mine, nothing,
            "{method} {path}: A's own call ({own:?}) is answered as for a missing resource, so \
             the test did not reach it"
        );
    }
    cross.len()
}

/// The signed download: A's link works without a key; A's file with a signature that is not
/// its own is answered exactly as a file that does not exist.
async fn signed_link(app: &TestServer, alice: &Tenant<'_>, a: &Ids, missing: &Ids) {
    let view = alice
        .call(&v2(
            Method::GET,
            format!("/api/v2/files/tasks/{}/output-files/{}", a.task, a.file),
            None,
        ))
        .await;
    assert_eq!(view.status, 200, "{view:?}");
    let view: Value = serde_json::from_str(&view.body).unwrap();
    let url = view["downloadUrl"].as_str().unwrap().to_owned();
    let fetch = |url: String| async move {
        let response = app.http.get(url).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    };
    assert_eq!(fetch(url.clone()).await, (200, "alice".to_owned()));
    let signature = url.split("signature=").nth(1).unwrap().to_owned();
    let forged = url.replace(&signature, &"0".repeat(signature.len()));
    let unknown = forged.replace(&a.file, &missing.file);
    let (status, body) = fetch(forged).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!((status, body), fetch(unknown).await);
}

/// A task (or a v2 session, or a schedule's task) that names another key's profile is refused exactly as one that
/// names a profile nobody has; its owner's own request goes through.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_task_cannot_name_another_keys_profile(pool: PgPool) {
    let app = TestServer::serve(
        pool,
        ApiConfig {
            models: ModelCatalog::new(["m".to_owned()], Some("m".to_owned())).unwrap(),
            ..ApiConfig::default()
        },
        false,
    )
    .await;
    let alice = Tenant::new(&app, app.key.clone()).await;
    let bob = Tenant::new(&app, app.new_key().await).await;
    let created = alice
        .call(&post(
            "/v1/profiles".into(),
            Some(json!({"name": "alice's"})),
        ))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let profile: Value = serde_json::from_str(&created.body).unwrap();
    let profile = profile["id"].as_str().unwrap().to_owned();
    let missing = uuid::Uuid::now_v7().to_string();
    let calls = |id: &str| {
        vec![
            post(
                "/v1/tasks".into(),
                Some(json!({"task": "t", "profile_id": id})),
            ),
            v2(
                Method::POST,
                "/api/v2/tasks".into(),
                Some(json!({"task": "t", "sessionSettings": {"profileId": id}})),
            ),
            v2(
                Method::POST,
                "/api/v2/sessions".into(),
                Some(json!({"profileId": id})),
            ),
            Call::Tool {
                name: "run_task".into(),
                arguments: json!({"task": "t", "profile_id": id, "wait_s": 0}),
            },
            post(
                "/v1/schedules".into(),
                Some(
                    json!({"cron": "0 9 * * *", "target": {"task": {"task": "t", "profile_id": id}}}),
                ),
            ),
        ]
    };
    let scrub = |answer: Answer| Answer {
        status: answer.status,
        body: answer
            .body
            .replace(&profile, "<id>")
            .replace(&missing, "<id>"),
    };
    for ((cross, absent), own) in calls(&profile)
        .iter()
        .zip(calls(&missing))
        .zip(calls(&profile))
    {
        let as_bob = scrub(bob.call(cross).await);
        let nothing = scrub(bob.call(&absent).await);
        assert_eq!(as_bob, nothing, "{cross:?}");
        assert!(matches!(as_bob.status, 404 | 422), "{as_bob:?}");
        assert!(!as_bob.body.contains("alice"), "{as_bob:?}");
        let mine = alice.call(&own).await;
        assert!(mine.status < 300, "{own:?}: {mine:?}");
    }
}
