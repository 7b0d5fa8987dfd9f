//! [`RemoteBackend`]: the tools as calls to a browserd server's `/v1` REST API with one key
//! (`browserd mcp --server URL --key-env VAR`). The server validates and answers; its error
//! bodies become the tool errors unchanged.

use std::time::Duration;

use async_trait::async_trait;
use browserd_types::dto::{CreateTaskRequest, ErrorBody, StepList, StepView, TaskList, TaskView};
use browserd_types::{TaskId, TaskStatus, Transition};
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Backend, CallContext, Screenshot, TaskUpdate, ToolError, latest_screenshot_step};

/// Timeout of each REST call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a watched task's steps are read.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

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

/// The JSON body of a create request (secrets are not among the tools' fields).
fn request_json(request: &CreateTaskRequest) -> Value {
    let mut body = serde_json::json!({
        "task": request.task,
        "start_url": request.start_url,
        "model": request.model,
        "max_steps": request.max_steps,
        "allowed_domains": request.allowed_domains,
        "output_schema": request.output_schema,
        "timeout_s": request.timeout_s,
        "max_tokens": request.max_tokens,
        "max_cost_usd": request.max_cost_usd,
    });
    if let Some(object) = body.as_object_mut() {
        object.retain(|_, v| !v.is_null());
    }
    body
}

#[async_trait]
impl Backend for RemoteBackend {
    async fn create_task(
        &self,
        _cx: &CallContext,
        request: CreateTaskRequest,
    ) -> Result<TaskView, ToolError> {
        self.json(Method::POST, "/v1/tasks", Some(request_json(&request)))
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

    async fn steps(&self, _cx: &CallContext, id: TaskId) -> Result<Vec<StepView>, ToolError> {
        let list: StepList = self
            .json(Method::GET, &format!("/v1/tasks/{id}/steps"), None)
            .await?;
        Ok(list.items)
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

    /// Follows the task by reading its steps every second (the REST API's step list carries
    /// each step's next goal).
    async fn watch(
        &self,
        cx: &CallContext,
        id: TaskId,
    ) -> Result<tokio::sync::mpsc::Receiver<TaskUpdate>, ToolError> {
        self.get_task(cx, id).await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(64);
        let this = self.clone();
        let cx = cx.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                let view = this.get_task(&cx, id).await;
                let steps = this.steps(&cx, id).await;
                if let Ok(steps) = &steps {
                    for step in steps {
                        // Step 0 is the initial navigation, not a model's goal.
                        if step.number <= seen || step.number < 1 {
                            continue;
                        }
                        seen = step.number;
                        let goal = step
                            .model_output
                            .as_ref()
                            .and_then(|o| o.get("next_goal"))
                            .and_then(Value::as_str);
                        if let Some(goal) = goal {
                            let update = TaskUpdate::NextGoal {
                                step: i64::from(step.number),
                                goal: goal.to_owned(),
                            };
                            if sender.send(update).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                match view {
                    Ok(view) if view.status.is_terminal() => {
                        let _ = sender.send(TaskUpdate::Ended).await;
                        return;
                    }
                    Err(err) if err.code == "task_not_found" => return,
                    _ => {}
                }
                tokio::select! {
                    () = sender.closed() => return,
                    () = tokio::time::sleep(POLL_INTERVAL) => {}
                }
            }
        });
        Ok(receiver)
    }
}
