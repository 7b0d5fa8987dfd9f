//! The agent-owned `ask_human` action: the question goes to the [`HumanChannel`] and the agent
//! waits (bounded by the settings' timeout, ended by stop; the step timeout is held meanwhile);
//! the answer is the action's result. A secret answer joins the task's secrets under
//! `answer_{question id}` and the model only sees its placeholder.
//!
//! [`HumanChannel`]: crate::human::HumanChannel

use browserd_views::ActionResult;
use serde_json::Value;

use super::Agent;
use crate::human::{
    CHOICE_MAX_CHARS, CHOICES_MAX, HumanError, HumanQuestion, QUESTION_MAX_CHARS,
    answer_secret_name, question_id,
};

impl Agent {
    pub(super) async fn ask_human(
        &mut self,
        params: &Value,
        step: u32,
        index: usize,
    ) -> (ActionResult, Option<String>) {
        let Some(settings) = self.human.clone() else {
            return (
                ActionResult::error("ask_human is not available for this task"),
                None,
            );
        };
        let Some(question) = params
            .get("question")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|q| !q.is_empty())
        else {
            return (
                ActionResult::error("ask_human needs a non-empty `question`"),
                None,
            );
        };
        // A secret value the model repeated never reaches the person's screen either.
        let question: String = self
            .secrets
            .redact(question)
            .chars()
            .take(QUESTION_MAX_CHARS)
            .collect();
        let mut choices: Vec<String> = Vec::new();
        for choice in params
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let choice: String = self
                .secrets
                .redact(choice.trim())
                .chars()
                .take(CHOICE_MAX_CHARS)
                .collect();
            if !choice.is_empty() && !choices.contains(&choice) && choices.len() < CHOICES_MAX {
                choices.push(choice);
            }
        }
        let secret = params
            .get("secret")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let asked = HumanQuestion {
            id: question_id(step, index),
            question,
            choices,
            secret,
            timeout: settings.timeout,
        };
        self.held.send_replace(true);
        let answer = tokio::select! {
            answer = tokio::time::timeout(settings.timeout, settings.channel.ask(&asked)) => Some(answer),
            () = self.control.stopped() => None,
        };
        self.held.send_replace(false);
        let answer = match answer {
            None => {
                return (
                    ActionResult::error("ask_human was interrupted: the agent is stopping"),
                    None,
                );
            }
            Some(Err(_elapsed)) => {
                let error = format!(
                    "ask_human: nobody answered the question \"{}\" within {} s",
                    asked.question.chars().take(200).collect::<String>(),
                    settings.timeout.as_secs()
                );
                return (ActionResult::error(error.clone()), Some(error));
            }
            Some(Ok(Err(HumanError::Unavailable(why)))) => {
                return (ActionResult::error(format!("ask_human: {why}")), None);
            }
            Some(Ok(Err(HumanError::Fatal(why)))) => {
                let error = format!("ask_human: {why}");
                return (ActionResult::error(error.clone()), Some(error));
            }
            Some(Ok(Ok(answer))) => answer,
        };
        let content = if answer.secret || asked.secret {
            let name = answer_secret_name(&asked.id);
            self.secrets.insert(name.clone(), answer.text);
            format!(
                "The user answered with a secret: type it with <secret>{name}</secret> (its value is never shown)"
            )
        } else {
            format!("The user answered: {}", answer.text)
        };
        let memory = format!("Asked the user \"{}\". {content}", asked.question);
        (
            ActionResult {
                extracted_content: Some(content),
                long_term_memory: Some(memory),
                ..ActionResult::default()
            },
            None,
        )
    }
}
