//! [`RemoteBackend`]: the tools as calls to a browserd server's `/v1` REST API with one key
//! (`browserd mcp --server URL --key-env VAR`). The server validates and answers; its error
//! bodies become the tool errors unchanged. A watched task is followed over the server's event
//! WebSocket, resumed from the last `seq` after a dropped connection.

use std::time::Duration;

use async_trait::async_trait;
use browserd_types::dto::{CreateTaskRequest, ErrorBody, StepList, StepView, TaskList, TaskView};
use browserd_types::skills::{SkillList, SkillView};
use browserd_types::{TaskEvent, TaskId, TaskStatus, Transition};
use futures::StreamExt;
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::{Backend, CallContext, Screenshot, TaskUpdate, ToolError, latest_screenshot_step};

/// Timeout of each REST call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The first wait before reconnecting a dropped event stream, doubled up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// The server pings every 30 s: a stream silent this long is dead.
const SILENCE_LIMIT: Duration = Duration::from_secs(75);
/// Steps asked for per page of `GET /v1/tasks/{id}/steps` (the server's largest page).
const STEP_PAGE: i64 = browserd_types::dto::limits::STEP_PAGE_MAX;

/// A browserd server reached over HTTP with one API key.
#[derive(Clone)]
pub struct RemoteBackend {
    client: reqwest::Client,
    base: String,
    key: SecretString,
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBackend")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl RemoteBackend {
    /// `base` is the server's URL (`http://host:8080`); `key` its API key.
    pub fn new(base: &str, key: SecretString) -> Result<Self, reqwest::Error> {
        // reqwest has no TLS provider of its own: the process's is rustls on ring, as
        // `browserd_llm::install_tls_provider` (out of this crate's layer) installs it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            key,
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<reqwest::Response, ToolError> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(self.key.expose_secret());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|err| {
            // reqwest's error names the URL, never the headers.
            ToolError::new(
                "server_unreachable",
                format!("the browserd server did not answer: {err}"),
            )
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.json::<ErrorBody>().await.map_err(|_| {
            ToolError::new(
                "server_error",
                format!("the browserd server answered {status}"),
            )
        })?;
        Err(body.into())
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, ToolError> {
        self.send(method, path, body)
            .await?
            .json::<T>()
            .await
            .map_err(|err| {
                ToolError::new(
                    "server_error",
                    format!("unexpected answer from the browserd server: {err}"),
                )
            })
    }
}

/// Why a task's event stream could not be opened.
enum StreamRefused {
    /// Not now: the server is down, busy or restarting; try again.
    Transient(String),
    /// Not at all: the task is gone, or the key is refused.
    Final { status: u16, message: String },
}

type EventStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl RemoteBackend {
    /// Opens task `id`'s event stream after `after_seq`, the key in the `Authorization`
    /// header (never in the URL).
    async fn events(&self, id: TaskId, after_seq: i64) -> Result<EventStream, StreamRefused> {
        let refused = |message: String| StreamRefused::Final { status: 0, message };
        let mut url = reqwest::Url::parse(&format!("{}/v1/tasks/{id}/events", self.base))
            .map_err(|err| refused(format!("the server URL is not valid: {err}")))?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme)
            .map_err(|()| refused("cannot make a WebSocket URL of the server URL".to_owned()))?;
        url.query_pairs_mut()
            .append_pair("after_seq", &after_seq.to_string());
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|err| refused(err.to_string()))?;
        let bearer = format!("Bearer {}", self.key.expose_secret())
            .parse()
            .map_err(|_| refused("the API key is not a valid header value".to_owned()))?;
        request.headers_mut().insert(AUTHORIZATION, bearer);
        let connect = tokio_tungstenite::connect_async(request);
        match tokio::time::timeout(REQUEST_TIMEOUT, connect).await {
            Err(_) => Err(StreamRefused::Transient(
                "no WebSocket handshake in time".to_owned(),
            )),
            Ok(Ok((stream, _))) => Ok(stream),
            Ok(Err(tungstenite::Error::Http(response))) => {
                let status = response.status();
                let message = response
                    .body()
                    .as_deref()
                    .and_then(|body| serde_json::from_slice::<ErrorBody>(body).ok())
                    .map_or_else(|| status.to_string(), |body| body.error.message);
                if status.is_server_error() || status.as_u16() == 429 {
                    Err(StreamRefused::Transient(message))
                } else {
                    Err(StreamRefused::Final {
                        status: status.as_u16(),
                        message,
                    })
                }
            }
            // The error names the URL (without the key, which is a header), never a header.
            Ok(Err(err)) => Err(StreamRefused::Transient(err.to_string())),
        }
    }

    /// Sends task `id`'s updates to `sender` until the task ends or the receiver is dropped,
    /// reconnecting (with backoff) from the last `seq` seen.
    async fn follow(&self, id: TaskId, sender: tokio::sync::mpsc::Sender<TaskUpdate>) {
        let mut last_seq = 0;
        let mut retry = RETRY_FIRST;
        loop {
            let stream = tokio::select! {
                () = sender.closed() => return,
                stream = self.events(id, last_seq) => stream,
            };
            let problem = match stream {
                Ok(mut stream) => {
                    retry = RETRY_FIRST;
                    loop {
                        let frame = tokio::select! {
                            () = sender.closed() => return,
                            frame = tokio::time::timeout(SILENCE_LIMIT, stream.next()) => frame,
                        };
                        let text = match frame {
                            Err(_) => break "the event stream went silent".to_owned(),
                            Ok(None) => break "the event stream closed".to_owned(),
                            Ok(Some(Err(err))) => break err.to_string(),
                            Ok(Some(Ok(Message::Text(text)))) => text,
                            Ok(Some(Ok(Message::Close(frame)))) => {
                                break format!(
                                    "the server closed the event stream ({})",
                                    frame.map(|f| f.reason.to_string()).unwrap_or_default()
                                );
                            }
                            // Pings are answered by tungstenite while reading.
                            Ok(Some(Ok(_))) => continue,
                        };
                        let event: TaskEvent = match serde_json::from_str(text.as_str()) {
                            Ok(event) => event,
                            Err(err) => {
                                tracing::warn!(task_id = %id, %err, "unreadable task event");
                                continue;
                            }
                        };
                        if event.seq <= last_seq {
                            continue;
                        }
                        last_seq = event.seq;
                        if let Some(update) = TaskUpdate::of_event(&event) {
                            let end = update == TaskUpdate::Ended;
                            if sender.send(update).await.is_err() || end {
                                let _ = stream.close(None).await;
                                return;
                            }
                        }
                    }
                }
                Err(StreamRefused::Final { status, message }) => {
                    tracing::warn!(task_id = %id, status, %message, "the server refused the task's event stream");
                    if status == 404 {
                        // Deleted meanwhile: it will not run any further.
                        let _ = sender.send(TaskUpdate::Ended).await;
                    }
                    return;
                }
                Err(StreamRefused::Transient(message)) => message,
            };
            tracing::info!(task_id = %id, last_seq, %problem, "reconnecting to the task's event stream");
            tokio::select! {
                () = sender.closed() => return,
                () = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(RETRY_MAX);
        }
    }
}

/// The JSON body of a create request: the request's own serialization (the options it was
/// given, never its secrets), so no option is listed here.
fn request_json(request: &CreateTaskRequest) -> Result<Value, ToolError> {
    serde_json::to_value(request)
        .map_err(|err| ToolError::new("internal", format!("encoding the create request: {err}")))
}

#[async_trait]
impl Backend for RemoteBackend {
    async fn create_task(
        &self,
        _cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError> {
        self.json(Method::POST, "/v1/tasks", Some(request_json(&request)?))
            .await
    }

    async fn get_task(&self, _cx: &CallContext, id: TaskId) -> Result<TaskView, ToolError> {
        self.json(Method::GET, &format!("/v1/tasks/{id}"), None)
            .await
    }

    async fn list_tasks(
        &self,
        _cx: &CallContext,
        status: Option<TaskStatus>,
        limit: Option<i64>,
    ) -> Result<Vec<TaskView>, ToolError> {
        let mut query = Vec::new();
        if let Some(status) = status {
            query.push(format!("status={status}"));
        }
        if let Some(limit) = limit {
            query.push(format!("limit={limit}"));
        }
        let path = if query.is_empty() {
            "/v1/tasks".to_owned()
        } else {
            format!("/v1/tasks?{}", query.join("&"))
        };
        let list: TaskList = self.json(Method::GET, &path, None).await?;
        Ok(list.items)
    }

    /// Every step, page after page (`next_after_step`).
    async fn steps(&self, _cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError> {
        let mut steps = Vec::new();
        let mut path = format!("/v1/tasks/{id}/steps?limit={STEP_PAGE}");
        loop {
            let page: StepList = self.json(Method::GET, &path, None).await?;
            steps.extend(page.items);
            match page.next_after_step {
                Some(after) => {
                    path = format!("/v1/tasks/{id}/steps?limit={STEP_PAGE}&after_step={after}")
                }
                None => return Ok(steps),
            }
        }
    }

    async fn control(
        &self,
        _cx: &CallContext,
        id: TaskId,
        transition: Transition,
    ) -> Result<TaskView, ToolError> {
        self.json(
            Method::POST,
            &format!("/v1/tasks/{id}/{}", transition.name()),
            None,
        )
        .await
    }

    async fn answer(
        &self,
        _cx: &CallContext,
        id: TaskId,
        answer: browserd_types::dto::AnswerRequest,
    ) -> Result<TaskView, ToolError> {
        let body = serde_json::to_value(&answer).map_err(|err| {
            ToolError::new(
                "invalid_answer",
                format!("the answer does not serialize: {err}"),
            )
        })?;
        self.json(Method::POST, &format!("/v1/tasks/{id}/input"), Some(body))
            .await
    }

    async fn screenshot(
        &self,
        cx: &CallContext,
        id: TaskId,
        step: Option<i32>,
    ) -> Result<Screenshot, ToolError> {
        let number = match step {
            Some(number) => number,
            None => {
                let steps = self.steps(cx, id).await?;
                latest_screenshot_step(&steps).ok_or_else(|| crate::screenshot_not_found(None))?
            }
        };
        let response = self
            .send(
                Method::GET,
                &format!("/v1/tasks/{id}/steps/{number}/screenshot"),
                None,
            )
            .await?;
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("image/png")
            .to_owned();
        let bytes = response.bytes().await.map_err(|err| {
            ToolError::new(
                "server_error",
                format!("reading the screenshot failed: {err}"),
            )
        })?;
        Ok(Screenshot {
            step: number,
            content_type,
            bytes: bytes.to_vec(),
        })
    }

    /// Follows the task over the server's event WebSocket (`/v1/tasks/{id}/events`), as
    /// `browserd tasks watch` does: from the first event, and after a dropped connection from
    /// the last `seq` seen, so no update is repeated or lost.
    async fn watch(
        &self,
        cx: &CallContext,
        id: TaskId,
    ) -> Result<tokio::sync::mpsc::Receiver<TaskUpdate>, ToolError> {
        // The REST API's answer for a missing task (or another key's).
        self.get_task(cx, id).await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(64);
        let this = self.clone();
        tokio::spawn(async move { this.follow(id, sender).await });
        Ok(receiver)
    }

    async fn list_skills(
        &self,
        _cx: &CallContext,
        query: Option<String>,
        limit: Option<i64>,
    ) -> Result<Vec<SkillView>, ToolError> {
        let path = {
            let mut pairs = url::form_urlencoded::Serializer::new(String::new());
            if let Some(query) = &query {
                pairs.append_pair("query", query);
            }
            if let Some(limit) = limit {
                pairs.append_pair("limit", &limit.to_string());
            }
            format!("/v1/skills?{}", pairs.finish())
        };
        let list: SkillList = self.json(Method::GET, &path, None).await?;
        Ok(list.items)
    }

    async fn run_skill(
        &self,
        _cx: &CallContext,
        id: uuid::Uuid,
        parameters: serde_json::Map<String, Value>,
    ) -> Result<TaskView, ToolError> {
        let body = serde_json::json!({ "parameters": parameters });
        self.json(Method::POST, &format!("/v1/skills/{id}/runs"), Some(body))
            .await
    }
}
