//! `ask_human` in the agent loop, over the fake browser and a scripted model: the answer is the
//! action's result, a secret answer is typed through its placeholder and never shown, the wait
//! does not count against the step timeout, the action is offered only with a channel, and a
//! channel that cannot ask fails the action (the agent goes on).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::{
    Agent, HumanAnswer, HumanChannel, HumanError, HumanQuestion, HumanSettings, TaskConfig,
};
use serde_json::json;
use support::*;

/// Answers every question with `answer` after `delay`, and keeps the questions.
struct Person {
    answer: Result<HumanAnswer, HumanError>,
    delay: Duration,
    asked: Mutex<Vec<HumanQuestion>>,
}

#[async_trait]
impl HumanChannel for Person {
    async fn ask(&self, question: &HumanQuestion) -> Result<HumanAnswer, HumanError> {
        self.asked.lock().unwrap().push(question.clone());
        tokio::time::sleep(self.delay).await;
        self.answer.clone()
    }
}

fn person(text: &str, secret: bool, delay: Duration) -> Arc<Person> {
    Arc::new(Person {
        answer: Ok(HumanAnswer {
            text: text.to_owned(),
            secret,
        }),
        delay,
        asked: Mutex::new(Vec::new()),
    })
}

fn config() -> TaskConfig {
    let mut c = TaskConfig::new("Log in as alice and report the balance.");
    c.start_url = Some("http://app.test/login".into());
    c
}

fn agent(
    config: TaskConfig,
    browser: &Arc<FakeBrowser>,
    model: &Arc<ScriptedModel>,
    sink: &Arc<RecordingSink>,
    human: Option<(Arc<Person>, Duration)>,
) -> Agent {
    let agent = Agent::new(config, browser.clone(), model.clone(), sink.clone()).unwrap();
    match human {
        Some((channel, timeout)) => agent.with_human(HumanSettings { channel, timeout }),
        None => agent,
    }
}

#[tokio::test]
async fn a_secret_answer_is_typed_through_its_placeholder_and_the_wait_holds_the_step_clock() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply(
            "ask for the password",
            json!([{"ask_human": {"question": "What is the password?", "secret": true}}]),
        ),
        reply(
            "sign in",
            json!([
                {"input": {"index": 1, "text": "alice"}},
                {"input": {"index": 2, "text": "<secret>answer_s1a0</secret>"}},
                {"click": {"index": 3}}
            ]),
        ),
        done("Balance is 42", true),
    ]);
    let sink = RecordingSink::new();
    let mut config = config();
    // The person takes longer than a whole step may: the wait is not counted.
    config.step_timeout = Duration::from_millis(300);
    let person = person("s3cret-pw", true, Duration::from_millis(900));
    let history = agent(
        config,
        &browser,
        &model,
        &sink,
        Some((person.clone(), Duration::from_secs(60))),
    )
    .run()
    .await;
    assert_eq!(history.final_result(), Some("Balance is 42"), "{history:?}");
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].id, "s1a0");
    assert!(asked[0].secret);
    // The browser got the value; the model, the events and the history only the placeholder.
    assert!(
        browser
            .executed()
            .contains(&("input".to_owned(), json!({"index": 2, "text": "s3cret-pw"})))
    );
    assert!(
        !serde_json::to_string(&history)
            .unwrap()
            .contains("s3cret-pw")
    );
    assert!(!sink.json().contains("s3cret-pw"));
    for request in model.requests() {
        for i in 0..request.messages.len() {
            assert!(!text_of(&request, i).contains("s3cret-pw"));
        }
    }
    let result = &history.history[1].result[0];
    assert_eq!(
        result.extracted_content.as_deref(),
        Some(
            "The user answered with a secret: type it with <secret>answer_s1a0</secret> (its value is never shown)"
        )
    );
    assert!(allowed_actions(&model.step_requests()[0]).contains(&"ask_human".to_owned()));
}

#[tokio::test]
async fn the_answer_is_the_result_and_without_a_channel_the_action_is_not_offered() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply(
            "ask",
            json!([{"ask_human": {"question": "Which account?", "choices": ["A", "B", "A", " "]}}]),
        ),
        done("done", true),
    ]);
    let sink = RecordingSink::new();
    let person = person("B", false, Duration::ZERO);
    let history = agent(
        config(),
        &browser,
        &model,
        &sink,
        Some((person.clone(), Duration::from_secs(5))),
    )
    .run()
    .await;
    assert_eq!(
        history.history[1].result[0].extracted_content.as_deref(),
        Some("The user answered: B")
    );
    // Choices deduplicated, blanks dropped.
    assert_eq!(person.asked.lock().unwrap()[0].choices, ["A", "B"]);
    let next = state_of(&model.step_requests()[1]);
    assert!(next.contains("The user answered: B"), "{next}");

    let model = ScriptedModel::json([done("x", true)]);
    agent(config(), &browser, &model, &sink, None).run().await;
    assert!(!allowed_actions(&model.step_requests()[0]).contains(&"ask_human".to_owned()));
}

#[tokio::test]
async fn no_answer_in_time_ends_the_run_and_an_unavailable_person_fails_the_action() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([reply("ask", json!([{"ask_human": {"question": "Code?"}}]))]);
    let sink = RecordingSink::new();
    let slow = person("late", false, Duration::from_secs(30));
    let history = agent(
        config(),
        &browser,
        &model,
        &sink,
        Some((slow, Duration::from_millis(100))),
    )
    .run()
    .await;
    assert!(!history.is_done());
    let events = sink.json();
    assert!(
        events.contains("ask_human: nobody answered the question \\\"Code?\\\" within 0 s"),
        "{events}"
    );

    let model = ScriptedModel::json([
        reply("ask", json!([{"ask_human": {"question": "Code?"}}])),
        done("went on", true),
    ]);
    let nobody = Arc::new(Person {
        answer: Err(HumanError::Unavailable("no terminal".to_owned())),
        delay: Duration::ZERO,
        asked: Mutex::new(Vec::new()),
    });
    let history = agent(
        config(),
        &browser,
        &model,
        &RecordingSink::new(),
        Some((nobody, Duration::from_secs(5))),
    )
    .run()
    .await;
    assert_eq!(history.final_result(), Some("went on"));
    assert_eq!(
        history.history[1].result[0].error.as_deref(),
        Some("ask_human: no terminal")
    );
}
