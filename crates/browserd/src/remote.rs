//! `browserd tasks …`: a terminal client of a running browserd api. `tasks watch ID` prints a
//! task's events live from the WebSocket event stream with the same lines as `browserd run`, and
//! after a dropped connection reconnects from the last `seq` it printed (the stream replays
//! `seq > after_seq`, so nothing is printed twice and nothing is skipped). `tasks run "TASK"`
//! submits a task over `/v1` and, with `--follow`, watches it to its end. The key is read from an
//! environment variable, never from the command line (where every user of the machine sees it).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use browserd_agent::{ActionCall, ActionResult, AgentOutput, StepMetadata};
use browserd_types::dto::TaskView;
use browserd_types::{EventBody, StatusEvent, TaskEvent, TaskId, TaskStatus};
use clap::{Args, Subcommand};
use futures::StreamExt;
use serde::Deserialize as _;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::{self, Message};
use url::Url;

use crate::run::{EXIT_INTERRUPTED, EXIT_NOT_DONE, EXIT_UNSUCCESSFUL, TaskArgs};
use crate::step_lines;

/// Timeout of one REST call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of the WebSocket handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The server pings every 30 s: a connection silent for this long is dead.
const SILENCE_LIMIT: Duration = Duration::from_secs(75);
/// First and largest pause between reconnection attempts.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Watching gives up after the server has been unreachable this long.
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// Where the api is and which key to use.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Base URL of the browserd api.
    #[arg(long, env = "BROWSERD_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: Url,

    /// Name of the environment variable holding the API key.
    #[arg(long, default_value = "BROWSERD_API_KEY")]
    pub key_env: String,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Print a task's steps live, as `browserd run` prints them, until it ends. Exit code:
    /// 0 succeeded, 1 finished without success, 2 failed or stopped, 130 Ctrl-C (the task goes
    /// on).
    Watch {
        /// Task id.
        id: uuid::Uuid,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Submit a task to the server and print its id; with --follow, watch it to its end.
    Run(RemoteRunArgs),
}

/// `browserd tasks run`: the task fields of `POST /v1/tasks` that make sense on a command line.
#[derive(Debug, Args)]
pub struct RemoteRunArgs {
    #[command(flatten)]
    pub task: TaskArgs,

    /// Watch the task until it ends (exit code as `tasks watch`).
    #[arg(long)]
    pub follow: bool,

    #[command(flatten)]
    pub server: ServerArgs,
}

pub async fn run(command: &TasksCommand) -> anyhow::Result<ExitCode> {
    match command {
        TasksCommand::Watch { id, server } => {
            let api = Api::new(server)?;
            watch(&api, TaskId(*id)).await
        }
        TasksCommand::Run(args) => {
            let api = Api::new(&args.server)?;
            let task = api.create_task(&create_body(&args.task)?).await?;
            println!("{}", task.id.0);
            if args.follow {
                watch(&api, task.id).await
            } else {
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn create_body(args: &TaskArgs) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(args.request()?)?)
}

/// The api's REST and WebSocket endpoints, with the key.
#[derive(Clone)]
pub(crate) struct Api {
    base: Url,
    key: String,
    http: reqwest::Client,
}

/// Why a WebSocket could not be opened.
enum ConnectError {
    /// The server answered the handshake with an error that retrying will not fix.
    Refused(String),
    /// Network trouble or a server error: worth another try.
    Transient(String),
}

impl Api {
    pub(crate) fn new(server: &ServerArgs) -> anyhow::Result<Self> {
        let key = std::env::var(&server.key_env).map_err(|_| {
            anyhow::anyhow!(
                "set the API key in the environment variable {} (or name another with --key-env)",
                server.key_env
            )
        })?;
        anyhow::ensure!(
            !key.trim().is_empty(),
            "the environment variable {} is empty",
            server.key_env
        );
        anyhow::ensure!(
            matches!(server.server.scheme(), "http" | "https"),
            "--server must be an http:// or https:// URL"
        );
        let mut base = server.server.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        browserd_llm::install_tls_provider();
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base,
            key: key.trim().to_owned(),
            http,
        })
    }

    fn url(&self, path: &str) -> anyhow::Result<Url> {
        self.base
            .join(path)
            .with_context(|| format!("joining {path} to --server"))
    }

    /// `method path` (relative to `--server`) with the key and an optional JSON body, its
    /// answer decoded (an error status is an error naming the server's message).
    pub(crate) async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<T> {
        let mut request = self
            .http
            .request(method.clone(), self.url(path)?)
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {}", self.base))?;
        decode(response).await
    }

    async fn task(&self, id: TaskId) -> anyhow::Result<TaskView> {
        let response = self
            .http
            .get(self.url(&format!("v1/tasks/{}", id.0))?)
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("GET {}", self.base))?;
        decode(response).await
    }

    async fn answer(&self, id: TaskId, body: &Value) -> anyhow::Result<TaskView> {
        let response = self
            .http
            .post(self.url(&format!("v1/tasks/{}/input", id.0))?)
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {}", self.base))?;
        decode(response).await
    }

    async fn create_task(&self, body: &Value) -> anyhow::Result<TaskView> {
        let response = self
            .http
            .post(self.url("v1/tasks")?)
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {}", self.base))?;
        decode(response).await
    }

    async fn events(
        &self,
        id: TaskId,
        after_seq: i64,
    ) -> Result<
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        ConnectError,
    > {
        let mut url = self
            .url(&format!("v1/tasks/{}/events", id.0))
            .map_err(|e| ConnectError::Refused(e.to_string()))?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme)
            .map_err(|()| ConnectError::Refused("cannot make a WebSocket URL".into()))?;
        url.query_pairs_mut()
            .append_pair("after_seq", &after_seq.to_string());
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| ConnectError::Refused(e.to_string()))?;
        let bearer = format!("Bearer {}", self.key)
            .parse()
            .map_err(|_| ConnectError::Refused("the API key is not a valid header value".into()))?;
        request.headers_mut().insert(AUTHORIZATION, bearer);
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(request)).await
        {
            Err(_) => Err(ConnectError::Transient(format!(
                "no WebSocket handshake within {}s",
                CONNECT_TIMEOUT.as_secs()
            ))),
            Ok(Ok((stream, _))) => Ok(stream),
            Ok(Err(tungstenite::Error::Http(response))) => {
                let status = response.status();
                let detail = response
                    .body()
                    .as_deref()
                    .map(error_message)
                    .unwrap_or_default();
                let message = format!("the server refused the event stream: {status} {detail}");
                if status.is_server_error() || status.as_u16() == 429 {
                    Err(ConnectError::Transient(message))
                } else {
                    Err(ConnectError::Refused(message))
                }
            }
            Ok(Err(err)) => Err(ConnectError::Transient(err.to_string())),
        }
    }
}

/// The `{"error": {"message"}}` of an api error body, or the body itself.
fn error_message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(300).collect())
}

async fn decode<T: serde::de::DeserializeOwned>(response: reqwest::Response) -> anyhow::Result<T> {
    let status = response.status();
    let body = response.bytes().await.context("reading the response")?;
    if !status.is_success() {
        bail!("the server answered {status}: {}", error_message(&body));
    }
    serde_json::from_slice(&body).context("decoding the server's answer")
}

/// What watching has seen so far.
struct Watch {
    /// Last event printed; a reconnection asks for the events after it.
    last_seq: i64,
    created_at: time::OffsetDateTime,
    /// The `result` event's error, printed with the final status.
    error: Option<String>,
    ended: bool,
    /// Questions the task asks go to the terminal's prompter (when stdin is interactive).
    questions: Option<tokio::sync::mpsc::UnboundedSender<browserd_types::QuestionEvent>>,
}

impl Watch {
    fn elapsed(&self, event: &TaskEvent) -> f64 {
        (event.created_at - self.created_at)
            .as_seconds_f64()
            .max(0.0)
    }

    /// Prints one event (once: events at or before `last_seq` were printed already).
    fn apply(&mut self, event: &TaskEvent) {
        if event.seq <= self.last_seq {
            return;
        }
        self.last_seq = event.seq;
        let elapsed = self.elapsed(event);
        // Kinds added later are not for this client.
        let Some(body) = event.body() else { return };
        match body {
            EventBody::Status(status) => self.status(elapsed, &status),
            EventBody::StepStarted(started) => step_lines::step_started(
                elapsed,
                u32::try_from(started.number).unwrap_or(0),
                &started.url,
            ),
            EventBody::ModelOutput(model) => {
                if let Ok(output) = AgentOutput::deserialize(&model.output) {
                    step_lines::model_output(&output);
                }
            }
            EventBody::ActionResult(action) => {
                if let (Ok(call), Ok(result)) = (
                    ActionCall::deserialize(&action.action),
                    ActionResult::deserialize(&action.result),
                ) {
                    step_lines::action_result(&call, &result);
                }
            }
            EventBody::Step(step) => {
                if let Some(Ok(metadata)) =
                    step.record.get("metadata").map(StepMetadata::deserialize)
                {
                    step_lines::step_finished(&metadata);
                }
            }
            EventBody::Result(result) => self.error = result.error,
            EventBody::Question(question) => {
                eprintln!(
                    "[{elapsed:7.1}s] waiting: the agent asks: {}",
                    step_lines::one_line(&question.question, 500)
                );
                match &self.questions {
                    Some(questions) => {
                        let _ = questions.send(question);
                    }
                    None => eprintln!(
                        "  answer with POST /v1/tasks/{}/input (or watch on an interactive terminal)",
                        event.task_id.0
                    ),
                }
            }
            EventBody::Answered(answered) => {
                if answered.secret {
                    eprintln!("[{elapsed:7.1}s] answered (secret)");
                } else {
                    eprintln!(
                        "[{elapsed:7.1}s] answered: {}",
                        step_lines::one_line(answered.answer.as_deref().unwrap_or(""), 300)
                    );
                }
            }
            EventBody::Log(log) => {
                eprintln!(
                    "  [{}] {}",
                    log.level,
                    step_lines::one_line(&log.message, 300)
                );
            }
            EventBody::PersonInput(person) => {
                eprintln!("  [person] {}", person.input.describe(person.secret_chars));
            }
        }
    }

    fn status(&mut self, elapsed: f64, event: &StatusEvent) {
        if event.status.is_terminal() {
            self.ended = true;
            let error = self.error.clone().or_else(|| {
                event
                    .outcome
                    .as_ref()
                    .and_then(|outcome| outcome.error.clone())
            });
            match (event.status, error) {
                (TaskStatus::Stopped, _) => eprintln!("\n[{elapsed:7.1}s] stopped"),
                (_, error) => step_lines::ended(elapsed, error.as_deref()),
            }
            return;
        }
        match event.transition.as_deref() {
            Some("start") => {
                let attempt = event.attempt.unwrap_or(1);
                if attempt > 1 {
                    eprintln!("[{elapsed:7.1}s] started on a worker (attempt {attempt})");
                } else {
                    eprintln!("[{elapsed:7.1}s] started on a worker");
                }
            }
            Some("pause") => step_lines::paused(elapsed),
            Some("resume") => step_lines::resumed(elapsed),
            Some("requeue") => {
                let reason = event.reason.as_deref().unwrap_or("its worker went away");
                eprintln!(
                    "[{elapsed:7.1}s] back in the queue: {}",
                    step_lines::one_line(reason, 200)
                );
            }
            _ => {}
        }
    }
}

/// Streams one connection into `watch` until it closes or goes silent.
async fn pump(
    mut stream: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    watch: &mut Watch,
) -> Result<(), String> {
    loop {
        let frame = match tokio::time::timeout(SILENCE_LIMIT, stream.next()).await {
            Err(_) => {
                return Err(format!(
                    "nothing from the server for {}s",
                    SILENCE_LIMIT.as_secs()
                ));
            }
            Ok(None) => return Err("the connection closed".into()),
            Ok(Some(Err(err))) => return Err(err.to_string()),
            Ok(Some(Ok(frame))) => frame,
        };
        match frame {
            Message::Text(text) => {
                let event: TaskEvent = serde_json::from_str(text.as_str())
                    .map_err(|e| format!("an event the client cannot read: {e}"))?;
                watch.apply(&event);
                if watch.ended {
                    let _ = stream.close(None).await;
                    return Ok(());
                }
            }
            Message::Close(frame) => {
                return match frame {
                    Some(frame) if !frame.reason.is_empty() => {
                        Err(format!("the server closed the stream: {}", frame.reason))
                    }
                    _ => Err("the server closed the stream".into()),
                };
            }
            // Pings are answered by tungstenite while reading.
            _ => {}
        }
    }
}

/// Prints the task's events until it ends, reconnecting as needed; then its outcome.
pub(crate) async fn watch(api: &Api, id: TaskId) -> anyhow::Result<ExitCode> {
    let task = api.task(id).await?;
    step_lines::task(&task.task);
    // An interactive terminal answers the task's questions (only one still open: the stream
    // replays the ones answered before).
    let (questions, prompter) = {
        use std::io::IsTerminal;
        if std::io::stdin().is_terminal() {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            let prompter = tokio::spawn(answer_questions(api.clone(), id, receiver));
            (Some(sender), Some(AbortOnDrop(prompter)))
        } else {
            (None, None)
        }
    };
    let mut watch = Watch {
        last_seq: 0,
        created_at: task.created_at,
        error: None,
        ended: false,
        questions,
    };
    let follow = async {
        let mut retry = RETRY_FIRST;
        let mut unreachable_since: Option<Instant> = None;
        loop {
            let problem = match api.events(id, watch.last_seq).await {
                Ok(stream) => {
                    unreachable_since = None;
                    retry = RETRY_FIRST;
                    match pump(stream, &mut watch).await {
                        Ok(()) => return Ok(()),
                        Err(problem) => problem,
                    }
                }
                Err(ConnectError::Refused(message)) => bail!(message),
                Err(ConnectError::Transient(message)) => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > GIVE_UP_AFTER {
                        bail!(
                            "the server has been unreachable for {}s: {message}",
                            GIVE_UP_AFTER.as_secs()
                        );
                    }
                    message
                }
            };
            eprintln!(
                "  (event stream: {problem}; reconnecting from seq {})",
                watch.last_seq
            );
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_MAX);
        }
    };
    tokio::select! {
        outcome = follow => outcome?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\nstopped watching; the task goes on (browserd tasks watch {})", id.0);
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        }
    }
    drop(prompter);
    let task = api.task(id).await?;
    Ok(report(&task))
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Prompts for the answer to each question the task still asks and sends it.
async fn answer_questions(
    api: Api,
    id: TaskId,
    mut questions: tokio::sync::mpsc::UnboundedReceiver<browserd_types::QuestionEvent>,
) {
    while let Some(question) = questions.recv().await {
        let open = match api.task(id).await {
            Ok(task) => task.question,
            Err(err) => {
                eprintln!("  (could not read the task's question: {err:#})");
                continue;
            }
        };
        if open.as_ref().map(|q| &q.question_id) != Some(&question.question_id) {
            continue;
        }
        let asked = browserd_agent::HumanQuestion {
            id: question.question_id.clone(),
            question: question.question.clone(),
            choices: question.choices.clone(),
            secret: question.secret,
            timeout: Duration::from_secs(question.timeout_s),
        };
        let answer = tokio::task::spawn_blocking(move || crate::run::prompt(&asked)).await;
        let Ok(Ok(answer)) = answer else {
            eprintln!("  (no answer read from the terminal)");
            continue;
        };
        let choice = question.choices.contains(&answer.text);
        let body = if choice {
            serde_json::json!({"choice": answer.text, "secret": answer.secret})
        } else {
            serde_json::json!({"answer": answer.text, "secret": answer.secret})
        };
        match api.answer(id, &body).await {
            Ok(_) => eprintln!("  answer sent"),
            Err(err) => eprintln!("  the answer was refused: {err:#}"),
        }
    }
}

/// The summary after the last event, the result on stdout, and the exit code.
fn report(task: &TaskView) -> ExitCode {
    if let Some(usage) = &task.usage {
        let tokens = &usage["total"];
        eprintln!(
            "{} model calls, {} input / {} output tokens{}",
            usage["invocations"].as_u64().unwrap_or(0),
            tokens["input_tokens"].as_u64().unwrap_or(0),
            tokens["output_tokens"].as_u64().unwrap_or(0),
            usage["total_cost_usd"]
                .as_f64()
                .map(|c| format!(", ${c:.4}"))
                .unwrap_or_default()
        );
    }
    if let Some(output) = &task.output {
        println!("{output}");
    }
    match (task.status, task.is_success) {
        (TaskStatus::Finished, Some(true)) => {
            eprintln!("task succeeded");
            ExitCode::SUCCESS
        }
        (TaskStatus::Finished, _) => {
            eprintln!("task finished but the agent reports it did not succeed");
            ExitCode::from(EXIT_UNSUCCESSFUL)
        }
        (status, _) => {
            let why = task
                .error
                .as_deref()
                .map(|e| format!(": {}", step_lines::one_line(e, 300)))
                .unwrap_or_default();
            eprintln!("task {status}{why}");
            ExitCode::from(EXIT_NOT_DONE)
        }
    }
}
