//! `browserd replay HISTORY.json`: re-runs a recorded task's actions without a model
//! (browser-use's `rerun_history`) in a fresh headless Chrome, finding each element again by
//! the identity the history recorded, and reports per action what matched and how.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use browserd_agent::AgentHistoryList;
use browserd_agent::replay::{ActionReplay, ReplayOptions, ReplayOutcome, ReplayReport};
use browserd_llm::ModelsConfig;
use browserd_types::TaskOptions;
use browserd_worker::TaskSpec;
use clap::Args;

use crate::run::{EXIT_UNSUCCESSFUL, check_secret_binding, load_secrets, parse_secret_name};
use crate::runtime::{BrowserArgs, PoolShape, Runtime};
use crate::step_lines::one_line;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recorded history: `browserd run --history-out FILE`, or the JSON of
    /// `GET /v1/tasks/{id}/history`.
    pub history: PathBuf,

    /// Go on after an action that failed for good (by default the replay stops there).
    #[arg(long)]
    pub skip_failures: bool,

    /// Further attempts of an action whose element is not found yet or that fails.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub max_retries: u32,

    /// Pause before the first retry in ms (doubled for each further one).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub retry_delay_ms: u64,

    /// Only these domains may be requested (repeatable; `*.example.com` patterns).
    #[arg(long = "allowed-domain")]
    pub allowed_domains: Vec<String>,

    /// These domains may never be requested (repeatable).
    #[arg(long = "prohibited-domain")]
    pub prohibited_domains: Vec<String>,

    /// A secret the history types as `<secret>NAME</secret>` (repeatable; value from
    /// `BROWSERD_SECRET_<NAME>`, as for `browserd run`).
    #[arg(long = "secret", value_name = "NAME", value_parser = parse_secret_name)]
    pub secrets: Vec<String>,

    /// A JSON file of secrets in browser-use's `sensitive_data` shape (as for `browserd run`).
    #[arg(long, value_name = "FILE")]
    pub secrets_file: Option<PathBuf>,

    /// Accept secrets bound to no domain without `--allowed-domain` (as for `browserd run`).
    #[arg(long)]
    pub allow_secrets_on_any_domain: bool,

    /// Write the report (every action: indices, how it matched, outcome) as JSON here.
    #[arg(long)]
    pub report_out: Option<PathBuf>,

    /// Chrome, its viewport (use the recording's) and settle cap, loopback and egress.
    #[command(flatten)]
    pub browser: BrowserArgs,
}

/// Reads the history, replays it, prints each action; exit 0 when every action that ran
/// worked.
pub async fn run(
    args: &ReplayArgs,
    proxies: &crate::egress::ProxiesArgs,
) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.history)
        .with_context(|| format!("reading {}", args.history.display()))?;
    let history: AgentHistoryList = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not an AgentHistory JSON (from `browserd run --history-out` or \
             GET /v1/tasks/{{id}}/history)",
            args.history.display()
        )
    })?;
    anyhow::ensure!(
        !history.history.is_empty(),
        "{} records no steps",
        args.history.display()
    );

    let options = TaskOptions {
        allowed_domains: args.allowed_domains.clone(),
        prohibited_domains: args.prohibited_domains.clone(),
        ..TaskOptions::default()
    };
    let secrets = load_secrets(args.secrets_file.as_deref(), &args.secrets)?;
    check_secret_binding(
        &secrets,
        &args.allowed_domains,
        args.allow_secrets_on_any_domain,
    )?;
    let mut spec = TaskSpec::with_options("replay", options);
    spec.secrets = browserd_worker::sensitive_data(secrets.bind_unbound_to(&args.allowed_domains));

    // No model is called: an empty catalog.
    let Runtime { pool, runner } = Runtime::build(
        &args.browser,
        proxies,
        ModelsConfig::default(),
        PoolShape::single(1),
    )?;
    let options = ReplayOptions {
        skip_failures: args.skip_failures,
        max_retries: args.max_retries,
        retry_delay: Duration::from_millis(args.retry_delay_ms),
    };
    eprintln!(
        "▶ replaying {} steps from {}",
        history.history.len(),
        args.history.display()
    );
    let report = runner
        .replay(&spec, &history, &options, None, print_action)
        .await;
    pool.shutdown().await;
    let report = report.context("starting the replay")?;
    if let Some(path) = &args.report_out {
        let json = serde_json::to_vec_pretty(&report).context("serializing the report")?;
        std::fs::write(path, json)
            .with_context(|| format!("writing --report-out {}", path.display()))?;
        eprintln!("report written to {}", path.display());
    }
    Ok(summary(&report))
}

fn print_action(action: &ActionReplay) {
    let target = match (action.recorded_index, action.index, action.matched_by) {
        (Some(old), Some(new), Some(by)) if by.refound() => {
            format!(
                " [{old}] → [{new}] (found again by {})",
                matched_by_name(by)
            )
        }
        (Some(old), Some(_), _) => format!(" [{old}]"),
        (Some(old), None, _) => format!(" [{old}]"),
        _ => String::new(),
    };
    let retries = if action.attempts > 1 {
        format!(" after {} attempts", action.attempts)
    } else {
        String::new()
    };
    let outcome = match action.outcome {
        ReplayOutcome::Ok => "✓".to_owned(),
        ReplayOutcome::Skipped => format!(
            "skipped: {}",
            one_line(action.detail.as_deref().unwrap_or_default(), 200)
        ),
        ReplayOutcome::Failed => format!(
            "✗ {}",
            one_line(action.detail.as_deref().unwrap_or_default(), 300)
        ),
    };
    eprintln!(
        "  step {} {}{target} → {outcome}{retries}",
        action.step, action.action
    );
}

fn matched_by_name(by: browserd_agent::replay::MatchedBy) -> &'static str {
    use browserd_agent::replay::MatchedBy;
    match by {
        MatchedBy::Index => "index",
        MatchedBy::Hash => "identity hash",
        MatchedBy::XPath => "xpath",
        MatchedBy::AxName => "accessible name",
        MatchedBy::Near => "the value its row shows",
    }
}

fn summary(report: &ReplayReport) -> ExitCode {
    let count = |outcome: ReplayOutcome| {
        report
            .actions
            .iter()
            .filter(|a| a.outcome == outcome)
            .count()
    };
    let refound = report
        .actions
        .iter()
        .filter(|a| a.matched_by.is_some_and(|m| m.refound()))
        .count();
    eprintln!(
        "\n{} actions: {} replayed ({refound} found again at another index), {} skipped, {} failed",
        report.actions.len(),
        count(ReplayOutcome::Ok),
        count(ReplayOutcome::Skipped),
        count(ReplayOutcome::Failed)
    );
    if report.success {
        if let Some(result) = &report.final_result {
            println!("{result}");
        }
        eprintln!("replay succeeded");
        ExitCode::SUCCESS
    } else {
        eprintln!("replay failed");
        ExitCode::from(EXIT_UNSUCCESSFUL)
    }
}
