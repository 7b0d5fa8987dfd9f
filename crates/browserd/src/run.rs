//! `browserd run`: one task in-process — one Chrome, one session, the agent — with each step
//! printed live on stderr and the final result on stdout.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use async_trait::async_trait;
use browserd_agent::{AgentControl, AgentEvent, AgentHistoryList, EventSink};
use browserd_types::dto::{CreateTaskRequest, limits};
use browserd_types::{TaskSecret, TaskSecrets};
use browserd_worker::{RunEnd, RunRequest, TaskSpec};
use clap::Args;
use secrecy::SecretString;
use tracing::Instrument;

use crate::runtime::{BrowserArgs, PoolShape, Runtime};
use crate::{config, step_lines};

/// Exit code when the agent called `done` with `success: false`.
pub const EXIT_UNSUCCESSFUL: u8 = 1;
/// Exit code when the run ended without `done` (max steps, failures, budgets, browser lost).
pub const EXIT_NOT_DONE: u8 = 2;
/// Exit code when the run was stopped with Ctrl-C.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The task fields `browserd run` and `browserd tasks run` share.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// What the agent should do, in plain words.
    pub task: String,

    /// Open this URL before the first step.
    #[arg(long)]
    pub start_url: Option<String>,

    /// Model name from the models config (default: `default_model`, or the only model).
    #[arg(long)]
    pub model: Option<String>,

    /// Step budget, 1–10 000 (default 100).
    #[arg(long, value_parser = clap::value_parser!(i64).range(limits::MAX_STEPS_RANGE))]
    pub max_steps: Option<i64>,

    /// JSON Schema file; the `done` data must match it.
    #[arg(long)]
    pub output_schema: Option<PathBuf>,

    /// Only these domains may be requested (repeatable; `*.example.com` patterns).
    #[arg(long = "allowed-domain")]
    pub allowed_domains: Vec<String>,

    /// These domains may never be requested (repeatable; ignored when --allowed-domain is set).
    #[arg(long = "prohibited-domain")]
    pub prohibited_domains: Vec<String>,

    /// Draw the interactive elements' boxes and indices onto each step's screenshot
    /// (browser-use's `highlight_elements`).
    #[arg(long)]
    pub highlight_elements: bool,
}

impl TaskArgs {
    /// The task as the REST API takes it (`POST /v1/tasks`): the one mapping of these flags,
    /// which `browserd run` validates with the api's rules and `browserd tasks run` sends.
    pub fn request(&self) -> anyhow::Result<CreateTaskRequest> {
        let list = |items: &Vec<String>| (!items.is_empty()).then(|| items.clone());
        Ok(CreateTaskRequest {
            task: Some(self.task.clone()),
            start_url: self.start_url.clone(),
            model: self.model.clone(),
            max_steps: self.max_steps,
            output_schema: self.output_schema()?,
            allowed_domains: list(&self.allowed_domains),
            prohibited_domains: list(&self.prohibited_domains),
            highlight_elements: self.highlight_elements.then_some(true),
            ..CreateTaskRequest::default()
        })
    }

    /// The `--output-schema` file's JSON, if one was given.
    pub fn output_schema(&self) -> anyhow::Result<Option<serde_json::Value>> {
        let Some(path) = &self.output_schema else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --output-schema {}", path.display()))?;
        let schema = serde_json::from_str(&text)
            .with_context(|| format!("--output-schema {} is not JSON", path.display()))?;
        Ok(Some(schema))
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub task: TaskArgs,

    /// Wall-clock budget of the run in seconds (1–86 400).
    #[arg(long, value_parser = clap::value_parser!(i64).range(limits::TIMEOUT_S_RANGE))]
    pub timeout_s: Option<i64>,

    /// Token budget (input + output of every model call).
    #[arg(long, value_parser = clap::value_parser!(i64).range(limits::MAX_TOKENS_RANGE))]
    pub max_tokens: Option<i64>,

    /// Cost budget in USD (needs a price table in the model's configuration).
    #[arg(long)]
    pub max_cost_usd: Option<f64>,

    /// Write the AgentHistory JSON here.
    #[arg(long)]
    pub history_out: Option<PathBuf>,

    /// Route the task's traffic (after the egress checks) through this upstream proxy of
    /// `--proxies` (a global flag: `browserd --proxies NAME=URL run --proxy NAME …`).
    #[arg(long, value_name = "NAME")]
    pub proxy: Option<String>,

    /// Chrome, its viewport and settle cap (the task's), loopback and egress.
    #[command(flatten)]
    pub browser: BrowserArgs,

    /// Never send screenshots to the model.
    #[arg(long, conflicts_with = "use_vision")]
    pub no_vision: bool,

    /// Send a screenshot every step (the default).
    #[arg(long)]
    pub use_vision: bool,

    /// Actions run per step at most, 1–20 (default 5).
    #[arg(long, value_parser = clap::value_parser!(i64).range(limits::MAX_ACTIONS_PER_STEP_RANGE))]
    pub max_actions_per_step: Option<i64>,

    /// Consecutive failures before the final done-only attempt, 0–50 (default 5).
    #[arg(long, value_parser = clap::value_parser!(i64).range(limits::MAX_FAILURES_RANGE))]
    pub max_failures: Option<i64>,

    /// A task secret by name (repeatable): its value is read from the environment variable
    /// `BROWSERD_SECRET_<NAME>` (upper-cased, other characters as `_`), never from the command
    /// line, where every user of the machine could read it. The model only sees
    /// `<secret>NAME</secret>`.
    #[arg(long = "secret", value_name = "NAME", value_parser = parse_secret_name)]
    pub secrets: Vec<String>,

    /// A JSON file of task secrets in browser-use's `sensitive_data` shape:
    /// `{"https://*.example.com": {"name": "value"}}` (used only on those domains) or
    /// `{"name": "value"}` (needs --allowed-domain or --allow-secrets-on-any-domain).
    #[arg(long, value_name = "FILE")]
    pub secrets_file: Option<PathBuf>,

    /// Accept secrets bound to no domain (`--secret`, flat `--secrets-file` entries) without
    /// `--allowed-domain`: the agent may then type them on any site. Otherwise they are refused;
    /// with `--allowed-domain` they are bound to those domains.
    #[arg(long)]
    pub allow_secrets_on_any_domain: bool,

    /// Workspace directory for the agent's files and downloads (default: a temporary one).
    #[arg(long)]
    pub workspace: Option<PathBuf>,

    /// A browser profile kept in this local JSON file (Playwright's `storageState` layout:
    /// `cookies` and `origins[].localStorage`): loaded into the browser before the first
    /// navigation, written back at every step boundary where it changed. Created when missing.
    /// It holds the login's cookies in clear: keep it private.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Do not offer the agent `ask_human` (otherwise it may ask you a question on this
    /// terminal; without an interactive stdin the action fails and the agent goes on).
    #[arg(long)]
    pub no_ask_human: bool,

    /// Longest wait for your answer to `ask_human`, in seconds (default 1 800).
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub ask_human_timeout_s: u64,
}

/// `ask_human` on the terminal of `browserd run`: the question on stderr, the answer from
/// stdin (not echoed when a secret is asked for); no interactive stdin, no answer.
struct TerminalHuman;

#[async_trait]
impl browserd_agent::HumanChannel for TerminalHuman {
    async fn ask(
        &self,
        question: &browserd_agent::HumanQuestion,
    ) -> Result<browserd_agent::HumanAnswer, browserd_agent::HumanError> {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Err(browserd_agent::HumanError::Unavailable(
                "nobody can answer: browserd run's stdin is not an interactive terminal                  (go on without the answer)"
                    .to_owned(),
            ));
        }
        let question = question.clone();
        tokio::task::spawn_blocking(move || prompt(&question))
            .await
            .map_err(|err| browserd_agent::HumanError::Fatal(err.to_string()))?
    }
}

/// Asks on the terminal until an acceptable answer is typed (`browserd run`, and
/// `browserd tasks watch` for a task's question).
pub(crate) fn prompt(
    question: &browserd_agent::HumanQuestion,
) -> Result<browserd_agent::HumanAnswer, browserd_agent::HumanError> {
    use std::io::{BufRead, Write};
    let unavailable = |err: std::io::Error| {
        browserd_agent::HumanError::Unavailable(format!("reading the answer failed: {err}"))
    };
    eprintln!("\n  ? the agent asks: {}", question.question);
    for (n, choice) in question.choices.iter().enumerate() {
        eprintln!("    {}. {choice}", n + 1);
    }
    loop {
        if question.secret {
            eprint!("  secret answer (not shown): ");
        } else if question.choices.is_empty() {
            eprint!("  answer: ");
        } else {
            eprint!("  answer (a number, or text): ");
        }
        let _ = std::io::stderr().flush();
        // Typing is not echoed for a secret (stty, when there is one).
        let hidden = question.secret
            && std::process::Command::new("stty")
                .arg("-echo")
                .stdin(std::process::Stdio::inherit())
                .status()
                .is_ok_and(|s| s.success());
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line);
        if hidden {
            let _ = std::process::Command::new("stty")
                .arg("echo")
                .stdin(std::process::Stdio::inherit())
                .status();
            eprintln!();
        }
        if read.map_err(unavailable)? == 0 {
            return Err(browserd_agent::HumanError::Unavailable(
                "stdin closed before an answer".to_owned(),
            ));
        }
        let text = line.trim_end_matches(['\r', '\n']).to_owned();
        if text.trim().is_empty() {
            continue;
        }
        let text = match text.trim().parse::<usize>() {
            Ok(n) if (1..=question.choices.len()).contains(&n) => question.choices[n - 1].clone(),
            _ => text,
        };
        return Ok(browserd_agent::HumanAnswer {
            text,
            secret: question.secret,
        });
    }
}

/// Checks a `--secret` name; a `NAME=VALUE` is refused so values never sit in the process list.
pub fn parse_secret_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if let Some((name, _)) = name.split_once('=') {
        return Err(format!(
            "--secret takes only a name: put the value in the environment variable {} \
             (values on the command line are visible to every user of the machine)",
            secret_env_var(name.trim())
        ));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err("the secret name must be letters, digits, '_', '-' or '.'".to_owned());
    }
    Ok(name.to_owned())
}

/// The environment variable holding the value of `--secret NAME` (the name upper-cased, other
/// characters `_`, as for the `BROWSERD_LLM_<MODEL>_*` variables).
pub fn secret_env_var(name: &str) -> String {
    format!("BROWSERD_SECRET_{}", browserd_llm::config::env_name(name))
}

/// The task's secrets: `--secrets-file` first, then each `--secret` (bound to no domain) from
/// its variable.
pub fn load_secrets(
    secrets_file: Option<&std::path::Path>,
    names: &[String],
) -> anyhow::Result<TaskSecrets> {
    let mut secrets = match secrets_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --secrets-file {}", path.display()))?;
            // serde_json's error names line and column only, never the text around it.
            serde_json::from_str::<TaskSecrets>(&text).map_err(|e| {
                anyhow::anyhow!(
                    "--secrets-file {} must be a JSON object of domain -> {{name -> value}} \
                     or name -> value ({e})",
                    path.display()
                )
            })?
        }
        None => TaskSecrets::default(),
    };
    for name in names {
        let var = secret_env_var(name);
        let value = std::env::var(&var).map_err(|_| {
            anyhow::anyhow!("--secret {name}: set its value in the environment variable {var}")
        })?;
        if value.is_empty() {
            anyhow::bail!("--secret {name}: the environment variable {var} is empty");
        }
        secrets
            .0
            .insert(name.clone(), TaskSecret::Value(SecretString::from(value)));
    }
    Ok(secrets)
}

/// Secrets bound to no domain need `--allowed-domain` (they are then bound to those domains)
/// or `--allow-secrets-on-any-domain`: the api's rule, in the flags' names.
pub fn check_secret_binding(
    secrets: &TaskSecrets,
    allowed_domains: &[String],
    on_any_domain: bool,
) -> anyhow::Result<()> {
    match browserd_tasks::unbound_secrets_refusal(
        secrets,
        !allowed_domains.is_empty(),
        on_any_domain,
        &browserd_tasks::SecretFixNames::CLI,
    ) {
        Some(message) => anyhow::bail!("{message}"),
        None => Ok(()),
    }
}

/// Prints each step as it happens.
struct TerminalSink {
    started: Instant,
}

#[async_trait]
impl EventSink for TerminalSink {
    async fn emit(&self, event: AgentEvent) {
        let elapsed = self.started.elapsed().as_secs_f64();
        match event {
            AgentEvent::TaskStarted { task } => step_lines::task(&task),
            AgentEvent::StepStarted { step, url } => step_lines::step_started(elapsed, step, &url),
            AgentEvent::ModelOutput { output, .. } => step_lines::model_output(&output),
            AgentEvent::ActionResult { action, result, .. } => {
                step_lines::action_result(&action, &result)
            }
            AgentEvent::StepFinished { record } => step_lines::step_finished(&record.metadata),
            AgentEvent::Paused => step_lines::paused(elapsed),
            AgentEvent::Resumed => step_lines::resumed(elapsed),
            AgentEvent::Finished { error, .. } => step_lines::ended(elapsed, error.as_deref()),
        }
    }
}

fn task_spec(
    args: &RunArgs,
    proxies: &crate::egress::ProxiesArgs,
    models: &browserd_llm::ModelsConfig,
) -> anyhow::Result<TaskSpec> {
    if let Some(name) = &args.proxy {
        let names = proxies.upstream_proxies()?;
        anyhow::ensure!(
            names.contains_key(name),
            "--proxy {name:?} is not one of --proxies ({})",
            {
                let mut known: Vec<&String> = names.keys().collect();
                known.sort();
                known
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
    }
    let catalog = config::model_catalog(models)?;
    let request = CreateTaskRequest {
        use_vision: if args.no_vision {
            Some(false)
        } else {
            args.use_vision.then_some(true)
        },
        max_actions_per_step: args.max_actions_per_step,
        max_failures: args.max_failures,
        timeout_s: args.timeout_s,
        max_tokens: args.max_tokens,
        max_cost_usd: args.max_cost_usd,
        proxy: args.proxy.clone(),
        ..args.task.request()?
    };
    let secrets = load_secrets(args.secrets_file.as_deref(), &args.secrets)?;
    check_secret_binding(
        &secrets,
        &args.task.allowed_domains,
        args.allow_secrets_on_any_domain,
    )?;
    let request = CreateTaskRequest {
        secrets: Some(secrets),
        allow_secrets_on_any_domain: Some(args.allow_secrets_on_any_domain),
        ..request
    };
    // The api's rules and defaults (the secrets' too: bound to the allowed domains); the
    // viewport and settle cap are the runtime's (`--viewport`, `--settle-timeout-ms`): one
    // task, one browser.
    let task = browserd_tasks::validate_create_task(request, &catalog)
        .map_err(|err| anyhow::anyhow!("the task's flags: {err}"))?;
    let mut spec = TaskSpec::with_options(args.task.task.clone(), task.options);
    spec.secrets = browserd_worker::sensitive_data(task.secrets);
    Ok(spec)
}

/// Runs the task; the exit code tells how it ended.
pub async fn run(
    config_file: Option<&std::path::Path>,
    proxies: &crate::egress::ProxiesArgs,
    args: &RunArgs,
) -> anyhow::Result<ExitCode> {
    let models = config::load_models(config_file)?;
    let spec = task_spec(args, proxies, &models)?;
    let profile = args
        .profile
        .clone()
        .map(browserd_worker::FileProfileSaver::open)
        .transpose()
        .map_err(anyhow::Error::msg)
        .context("--profile")?;
    let Runtime { pool, runner } =
        Runtime::build(&args.browser, proxies, models, PoolShape::single(1))?;
    // An unknown model is an error before any browser starts.
    runner
        .model(spec.options.model.as_deref())
        .context("choosing the model (--model, default_model or BROWSERD_LLM_* variables)")?;
    let control = AgentControl::new();
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let interrupted = interrupted.clone();
        let control = control.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nCtrl-C: stopping the agent (press again to force)…");
                interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                control.stop();
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("forced exit");
                    std::process::exit(i32::from(EXIT_INTERRUPTED));
                }
            }
        })
    };
    let sink = Arc::new(TerminalSink {
        started: Instant::now(),
    });
    let human =
        (!args.no_ask_human && spec.options.ask_human).then(|| browserd_agent::HumanSettings {
            channel: Arc::new(TerminalHuman),
            timeout: std::time::Duration::from_secs(args.ask_human_timeout_s),
        });
    let outcome = runner
        .run(RunRequest {
            human,
            spec,
            workspace_dir: args.workspace.clone(),
            sink,
            control,
            prior: None,
            resume_url: None,
            live_view: None,
            take_over: None,
            profile,
            skill: None,
        })
        .instrument(tracing::info_span!("task", mode = "run"))
        .await;
    watcher.abort();
    pool.shutdown().await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => return Err(err).context("starting the task"),
    };
    let interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    if let RunEnd::Budget(reason) = &outcome.end {
        eprintln!("budget exhausted: {reason}");
    }
    report(&outcome.history, args, interrupted)
}

fn report(
    history: &AgentHistoryList,
    args: &RunArgs,
    interrupted: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.history_out {
        let json = serde_json::to_vec_pretty(history).context("serializing the history")?;
        std::fs::write(path, json)
            .with_context(|| format!("writing --history-out {}", path.display()))?;
        eprintln!("history written to {}", path.display());
    }
    let steps = history.history.len();
    let usage = &history.usage;
    eprintln!(
        "{steps} steps, {} model calls, {} input / {} output tokens{}",
        usage.invocations,
        usage.total.input_tokens,
        usage.total.output_tokens,
        usage
            .total_cost_usd
            .map(|c| format!(", ${c:.4}"))
            .unwrap_or_default()
    );
    if let Some(result) = history.final_result() {
        println!("{result}");
    }
    if interrupted {
        eprintln!("stopped by Ctrl-C before the task finished");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    match (history.is_done(), history.is_successful()) {
        (true, Some(true)) => {
            eprintln!("task succeeded");
            Ok(ExitCode::SUCCESS)
        }
        (true, _) => {
            eprintln!("task finished but the agent reports it did not succeed");
            Ok(ExitCode::from(EXIT_UNSUCCESSFUL))
        }
        (false, _) => {
            let why = history
                .errors()
                .into_iter()
                .rev()
                .flatten()
                .next()
                .map(|e| format!(": last error: {}", step_lines::one_line(e, 300)))
                .unwrap_or_default();
            eprintln!("task did not finish (no done after {steps} steps){why}");
            Ok(ExitCode::from(EXIT_NOT_DONE))
        }
    }
}
