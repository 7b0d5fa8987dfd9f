//! `browserd skills …`: a terminal client of a running server's skills (`/v1/skills`): make a
//! skill from a prompt with `{{name=example}}` parameters or from an ended task, run it with
//! parameters (no model unless a step must be healed), list them. `--follow` prints the
//! generation's or the execution's steps live, as `browserd tasks watch` does.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use browserd_types::TaskId;
use browserd_types::dto::TaskView;
use browserd_types::skills::{SkillList, SkillView};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::remote::{Api, ServerArgs, watch};

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Make a skill: an agent run of --prompt (its `{{name=example}}` parameters take their
    /// examples), or a replay of an ended task (--from-task); prints the skill's id.
    Create(CreateArgs),
    /// Run a skill with --param name=value (one per parameter); prints the execution's task id.
    Run(RunArgs),
    /// The key's skills, newest first: id, status, version, title and parameters.
    List {
        /// Only skills whose title, goal or description contains this.
        #[arg(long)]
        query: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The agent prompt; `{{name}}` or `{{name=example}}` declares a parameter.
    #[arg(
        long,
        conflicts_with = "from_task",
        required_unless_present = "from_task"
    )]
    prompt: Option<String>,
    /// An ended, successful task of the key to make the skill from.
    #[arg(long)]
    from_task: Option<uuid::Uuid>,
    /// With --from-task: a parameter and the value the task used (`name=value`, repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", requires = "from_task")]
    params: Vec<String>,
    /// What the skill achieves.
    #[arg(long)]
    goal: Option<String>,
    #[arg(long)]
    title: Option<String>,
    /// Where the generating run starts.
    #[arg(long)]
    start_url: Option<String>,
    /// The generating run's model (a configured name).
    #[arg(long)]
    model: Option<String>,
    /// A domain the generating run may visit (repeatable).
    #[arg(long = "allowed-domain")]
    allowed_domains: Vec<String>,
    /// Print the generation's steps until it ends (exit code as `tasks watch`).
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The skill's id.
    id: uuid::Uuid,
    /// A parameter's value (`name=value`, repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// Print the execution's steps until it ends (exit code as `tasks watch`).
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// `name=value` pairs (a value may contain `=`).
fn parameters(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut parameters = BTreeMap::new();
    for pair in pairs {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("--param {pair}: expected NAME=VALUE"))?;
        anyhow::ensure!(!name.trim().is_empty(), "--param {pair}: the name is empty");
        parameters.insert(name.trim().to_owned(), value.to_owned());
    }
    Ok(parameters)
}

fn create_body(args: &CreateArgs) -> anyhow::Result<Value> {
    let mut body = json!({});
    if let Some(prompt) = &args.prompt {
        body["prompt"] = json!(prompt);
    }
    if let Some(task) = args.from_task {
        body["from_task"] = json!(task);
        body["parameters"] = json!(parameters(&args.params)?);
    }
    for (field, value) in [
        ("goal", &args.goal),
        ("title", &args.title),
        ("start_url", &args.start_url),
        ("model", &args.model),
    ] {
        if let Some(value) = value {
            body[field] = json!(value);
        }
    }
    if !args.allowed_domains.is_empty() {
        body["allowed_domains"] = json!(args.allowed_domains);
    }
    Ok(body)
}

/// One line per skill: id, status, version, title, then its parameters.
fn skill_line(skill: &SkillView) -> String {
    let version = skill
        .current_version
        .map_or_else(|| "-".to_owned(), |v| format!("v{v}"));
    let parameters: Vec<String> = skill
        .parameters
        .iter()
        .map(|p| {
            let optional = if p.required { "" } else { "?" };
            format!("{}{optional}:{}", p.name, p.kind)
        })
        .collect();
    format!(
        "{}  {:<10} {:<4} {}  ({})",
        skill.id,
        skill.status,
        version,
        skill.title,
        parameters.join(", ")
    )
}

pub async fn run(command: &SkillsCommand) -> anyhow::Result<ExitCode> {
    match command {
        SkillsCommand::Create(args) => {
            let api = Api::new(&args.server)?;
            let skill: SkillView = api
                .call(Method::POST, "v1/skills", Some(&create_body(args)?))
                .await?;
            println!("{}", skill.id);
            match (args.follow, skill.generation_task_id) {
                (true, Some(task)) => {
                    let code = watch(&api, task).await?;
                    let skill: SkillView = api
                        .call(Method::GET, &format!("v1/skills/{}", skill.id), None)
                        .await?;
                    println!("{}", skill_line(&skill));
                    if let Some(error) = &skill.error {
                        eprintln!("{error}");
                    }
                    Ok(code)
                }
                _ => Ok(ExitCode::SUCCESS),
            }
        }
        SkillsCommand::Run(args) => {
            let api = Api::new(&args.server)?;
            let body = json!({ "parameters": parameters(&args.params)? });
            let task: TaskView = api
                .call(
                    Method::POST,
                    &format!("v1/skills/{}/runs", args.id),
                    Some(&body),
                )
                .await?;
            println!("{}", task.id.0);
            if args.follow {
                watch(&api, TaskId(task.id.0)).await
            } else {
                Ok(ExitCode::SUCCESS)
            }
        }
        SkillsCommand::List { query, server } => {
            let api = Api::new(server)?;
            let path = match query {
                Some(query) => format!(
                    "v1/skills?limit=100&query={}",
                    url::form_urlencoded::byte_serialize(query.as_bytes()).collect::<String>()
                ),
                None => "v1/skills?limit=100".to_owned(),
            };
            let list: SkillList = api.call(Method::GET, &path, None).await?;
            for skill in &list.items {
                println!("{}", skill_line(skill));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
