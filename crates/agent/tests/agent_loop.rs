//! Scripted-model tests of the agent loop: one or more per rule of browser-use's step.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use browserd_agent::{
    Agent, AgentEvent, AgentHistoryList, SecretEntry, SensitiveData, TaskConfig, VisionMode,
};
use browserd_llm::ContentPart;
use serde_json::{Value, json};
use support::*;

fn make(
    config: TaskConfig,
    browser: &Arc<FakeBrowser>,
    model: &Arc<ScriptedModel>,
    sink: &Arc<RecordingSink>,
) -> Agent {
    Agent::new(config, browser.clone(), model.clone(), sink.clone()).expect("valid config")
}

fn login_config() -> TaskConfig {
    let mut c = TaskConfig::new("Log in as alice and report the balance.");
    c.start_url = Some("http://app.test/login".into());
    c.sensitive_data = SensitiveData(BTreeMap::from([(
        "password".to_owned(),
        SecretEntry::Value("s3cret-pw".into()),
    )]));
    c
}

fn login_script() -> Vec<Value> {
    vec![
        reply(
            "type user",
            json!([{"input": {"index": 1, "text": "alice"}}]),
        ),
        reply(
            "type password",
            json!([{"input": {"index": 2, "text": "<secret>password</secret>"}}]),
        ),
        reply("submit", json!([{"click": {"index": 3}}])),
        done("Balance is 42", true),
    ]
}

fn pos(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` missing in:\n{haystack}"))
}

#[tokio::test]
async fn login_scenario_fills_secret_only_at_execution_and_records_history() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json(login_script());
    let sink = RecordingSink::new();
    let history = make(login_config(), &browser, &model, &sink).run().await;

    assert!(history.is_done());
    assert_eq!(history.is_successful(), Some(true));
    assert_eq!(history.final_result(), Some("Balance is 42"));
    assert_eq!(browser.url(), "http://app.test/welcome");
    // The browser got the real password…
    let executed = browser.executed();
    assert_eq!(executed[0].0, "navigate");
    assert_eq!(
        executed[2],
        ("input".to_owned(), json!({"index": 2, "text": "s3cret-pw"}))
    );
    // …nobody else did.
    let history_json = serde_json::to_string(&history).unwrap();
    assert!(!history_json.contains("s3cret-pw"));
    assert!(history_json.contains("<secret>password</secret>"));
    assert!(!sink.json().contains("s3cret-pw"));
    for r in model.requests() {
        for i in 0..r.messages.len() {
            assert!(!text_of(&r, i).contains("s3cret-pw"));
        }
    }
    // The model was told which secrets exist.
    let first = state_of(&model.step_requests()[0]);
    assert!(
        first.contains("<sensitive_data>") && first.contains("password"),
        "{first}"
    );
    // History: step 0 (initial navigation) + 4 steps, with page state and timings.
    assert_eq!(history.number_of_steps(), 5);
    let steps: Vec<u32> = history
        .history
        .iter()
        .map(|h| h.metadata.step_number)
        .collect();
    assert_eq!(steps, [0, 1, 2, 3, 4]);
    let step3 = &history.history[3];
    assert_eq!(step3.state.url, "http://app.test/login");
    assert_eq!(step3.state.title, "Login");
    assert_eq!(step3.state.tabs[0].tab_id, "AB12");
    assert_eq!(
        step3.state.interacted_element[0]
            .as_ref()
            .unwrap()
            .node_name,
        "BUTTON"
    );
    assert_eq!(step3.state.screenshot_ref.as_deref(), Some("shot-3"));
    assert_eq!(step3.metadata.usage.input_tokens, 100);
    assert!(step3.metadata.step_end_time >= step3.metadata.step_start_time);
    assert_eq!(history.usage.invocations, 4);
    assert_eq!(history.usage.total.input_tokens, 400);
    // Round trip through JSON (what the store persists).
    let back: AgentHistoryList = serde_json::from_str(&history_json).unwrap();
    assert_eq!(back, history);
    // Events in order.
    let kinds: Vec<String> = sink
        .events()
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("task_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("finished"));
    assert_eq!(kinds.iter().filter(|k| *k == "step_finished").count(), 5);
    let started = kinds.iter().position(|k| k == "step_started").unwrap();
    let finished = kinds.iter().position(|k| k == "step_finished").unwrap();
    assert!(started < finished);
}

#[tokio::test]
async fn state_message_sections_come_in_order_with_step_info_last() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([done("x", true)]);
    let sink = RecordingSink::new();
    make(login_config(), &browser, &model, &sink).run().await;
    let req = &model.step_requests()[0];
    assert_eq!(
        req.messages.len(),
        2,
        "[system, state] when there are no nudges"
    );
    let system = text_of(req, 0);
    assert!(system.contains("browser automation agent") && system.contains("up to 5 actions"));
    let state = state_of(req);
    let order = [
        "<user_request>",
        "<agent_history>",
        "<agent_state>",
        "<file_system>",
        "<todo_contents>",
        "<sensitive_data>",
        "</agent_state>",
        "<browser_state>",
        "<page_stats>",
        "Current tab: AB12",
        "Available tabs:",
        "<page_info>0.0 pages above, 2.0 pages below",
        "Interactive elements:",
        "[1]<input name=username />",
        "</browser_state>",
        "<step_info>Step 1 of at most 100",
    ];
    let positions: Vec<usize> = order.iter().map(|n| pos(&state, n)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{state}");
    assert!(state.trim_end().ends_with("</step_info>"));
    assert!(state.contains("[empty todo.md, fill it when applicable]"));
    let today = time::OffsetDateTime::now_utc().date().to_string();
    assert!(state.contains(&format!("Today: {today}")));
    // The initial navigation is the first history entry after the marker.
    assert!(pos(&state, "Agent initialized") < pos(&state, "<step_0>"));
    // Vision on: the screenshot is attached.
    assert!(
        req.messages[1]
            .content
            .iter()
            .any(|p| matches!(p, ContentPart::Image(_)))
    );
    // Schema: full AgentOutput with the browser's actions + agent-owned ones.
    let allowed = allowed_actions(req);
    for a in [
        "done",
        "click",
        "input",
        "navigate",
        "extract",
        "write_file",
        "read_file",
        "replace_file",
    ] {
        assert!(allowed.contains(&a.to_owned()), "{a} missing: {allowed:?}");
    }
    assert!(
        !allowed.contains(&"screenshot".to_owned()),
        "screenshot only in auto vision"
    );
    assert_eq!(allowed[0], "done");
}

#[tokio::test]
async fn vision_never_and_auto_and_flash_mode() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        json!({"memory": "m", "action": [{"screenshot": {}}]}),
        json!({"memory": "m", "action": [{"wait": {}}]}),
        json!({"memory": "m", "action": [{"done": {"text": "ok", "success": true}}]}),
    ]);
    let sink = RecordingSink::new();
    let mut c = login_config();
    c.use_vision = VisionMode::Auto;
    c.flash_mode = true;
    make(c, &browser, &model, &sink).run().await;
    let reqs = model.step_requests();
    let has_image = |i: usize| {
        reqs[i].messages[1]
            .content
            .iter()
            .any(|p| matches!(p, ContentPart::Image(_)))
    };
    assert!(!has_image(0));
    assert!(
        has_image(1),
        "the screenshot action asks for an image next step"
    );
    assert!(!has_image(2));
    let props: Vec<&String> = reqs[0].output_schema.schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(props, ["memory", "action"]);
    assert!(text_of(&reqs[0], 0).contains("fast browser automation agent"));
    assert!(allowed_actions(&reqs[0]).contains(&"screenshot".to_owned()));

    let model = ScriptedModel::json([done("x", true)]);
    let mut c = login_config();
    c.use_vision = VisionMode::Never;
    let shots_before = browser.screenshots_alone();
    let history = make(c, &browser, &model, &sink).run().await;
    // The model gets no image, but the step's history still has its screenshot, taken on
    // the side while the model was asked.
    assert_eq!(browser.screenshots_alone(), shots_before + 1);
    let last = history.history.last().unwrap();
    assert_eq!(
        last.state.screenshot_ref.as_deref(),
        Some(format!("shot-{}", last.metadata.step_number).as_str())
    );
    let req = &model.step_requests()[0];
    assert!(
        !req.messages[1]
            .content
            .iter()
            .any(|p| matches!(p, ContentPart::Image(_)))
    );
    assert!(!text_of(req, 0).contains("screenshot of the current viewport"));
}

#[tokio::test]
async fn history_shows_first_item_omitted_marker_and_last_items_with_short_errors() {
    let browser = FakeBrowser::login_site();
    let long_error_index = 9999;
    let mut script: Vec<Value> = (1..=7)
        .map(|i| {
            reply(
                &format!("goal {i}"),
                json!([{"scroll": {"down": true, "index": i}}]),
            )
        })
        .collect();
    script.push(reply(
        "bad click",
        json!([{"click": {"index": long_error_index}}]),
    ));
    script.push(done("x", true));
    let model = ScriptedModel::json(script);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("scroll around");
    c.max_history_items = Some(6);
    c.loop_detection_enabled = false;
    make(c, &browser, &model, &sink).run().await;
    let reqs = model.step_requests();
    let last = state_of(reqs.last().unwrap());
    assert!(
        last.contains("Agent initialized\n<sys>[... 3 previous steps omitted...]</sys>\n<step_4>"),
        "{last}"
    );
    assert!(!last.contains("goal 3") && last.contains("goal 7"));
    assert!(last.contains("Next goal: goal 7") && last.contains("Action 1/1: Scrolled down"));
    assert!(last.contains("Error: Element index 9999 not available"));
    // A long error keeps head and tail only.
    let mut script = vec![reply(
        "x",
        json!([{"navigate": {"url": format!("http://unreachable.test/{}", "p".repeat(400))}}]),
    )];
    script.push(done("x", false));
    let model = ScriptedModel::json(script);
    make(TaskConfig::new("go"), &browser, &model, &sink)
        .run()
        .await;
    let state = state_of(&model.step_requests()[1]);
    assert!(state.contains("......"), "{state}");
    assert!(!state.contains(&"p".repeat(250)));
}

#[tokio::test]
async fn one_time_content_appears_once_in_read_state() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply(
            "write",
            json!([{"write_file": {"file_name": "notes.md", "content": "alpha beta"}}]),
        ),
        reply("read", json!([{"read_file": {"file_name": "notes.md"}}])),
        reply("wait", json!([{"wait": {}}])),
        done("x", true),
    ]);
    let sink = RecordingSink::new();
    make(TaskConfig::new("notes"), &browser, &model, &sink)
        .run()
        .await;
    let reqs = model.step_requests();
    let s2 = state_of(&reqs[1]);
    assert!(
        s2.contains("notes.md - 1 lines") && s2.contains("alpha beta"),
        "{s2}"
    );
    assert!(!s2.contains("<read_state>"));
    let s3 = state_of(&reqs[2]);
    let rs = &s3[pos(&s3, "<read_state>")..pos(&s3, "</read_state>")];
    assert!(
        rs.contains("<read_state_0>\nRead from file notes.md."),
        "{rs}"
    );
    let s4 = state_of(&reqs[3]);
    assert!(!s4.contains("<read_state>"), "shown only once");
    // The history keeps the short memory of the read.
    assert!(s4.contains("Read from file notes.md.\nalpha beta"));
}

#[tokio::test]
async fn compaction_summarises_keeps_first_and_last_items_and_marks_unverified() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([]);
    let step = |i: u32| {
        Reply::Json(reply(
            &format!("goal {i} {}", "z".repeat(300)),
            json!([{"scroll": {"index": i}}]),
        ))
    };
    model.push(step(1));
    model.push(step(2));
    // Step 3 starts with the compaction call (3 steps since the start, history over 500 chars).
    model.push(Reply::Json(
        json!({"summary": "SUMMARY: scrolled three times"}),
    ));
    model.push(step(3));
    model.push(Reply::Json(done("x", true)));
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("scroll");
    c.compact_every_n_steps = 3;
    c.compaction_trigger_chars = 500;
    c.compaction_keep_last = 1;
    make(c, &browser, &model, &sink).run().await;
    let reqs = model.requests();
    let compaction = reqs
        .iter()
        .find(|r| r.output_schema.name == "history_summary")
        .expect("compaction call");
    assert!(text_of(compaction, 0).contains("IN-PROGRESS"));
    let input = text_of(compaction, 1);
    assert!(input.contains("goal 1") && input.contains("goal 2"));
    let before = state_of(&model.step_requests()[1]);
    assert!(!before.contains("<compacted_memory>"));
    let after = state_of(reqs.last().unwrap());
    assert!(
        after.contains("<compacted_memory>") && after.contains("unverified"),
        "{after}"
    );
    assert!(after.contains("SUMMARY: scrolled three times"));
    // First item and the last kept item survive; older ones are gone.
    assert!(
        after.contains("Agent initialized") && after.contains("goal 2") && after.contains("goal 3")
    );
    assert!(!after.contains("goal 1"));
}

#[tokio::test]
async fn budget_nudge_at_three_quarters_and_last_step_is_done_only() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply("a", json!([{"scroll": {"index": 1}}])),
        reply("b", json!([{"scroll": {"index": 2}}])),
        reply("c", json!([{"scroll": {"index": 3}}])),
        done("partial", false),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("scroll");
    c.max_steps = 4;
    let history = make(c, &browser, &model, &sink).run().await;
    let reqs = model.step_requests();
    assert!(nudges_of(&reqs[1]).is_empty());
    assert!(nudges_of(&reqs[2])[0].starts_with("Budget warning: this is step 3 of 4"));
    let last = nudges_of(&reqs[3]);
    assert!(
        last.iter().any(|n| n.starts_with("This is your last step")),
        "{last:?}"
    );
    assert!(!last.iter().any(|n| n.starts_with("Budget")));
    assert_eq!(allowed_actions(&reqs[3]), ["done"]);
    assert_eq!(history.is_successful(), Some(false));
}

#[tokio::test]
async fn max_steps_without_done_records_failure() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply("a", json!([{"scroll": {}}])),
        reply("still not done", json!([{"scroll": {}}])),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("scroll");
    c.max_steps = 2;
    let history = make(c, &browser, &model, &sink).run().await;
    assert!(!history.is_done());
    let last = history.history.last().unwrap();
    assert_eq!(
        last.result[0].error.as_deref(),
        Some("Failed to complete task in maximum steps")
    );
    let Some(AgentEvent::Finished { error, .. }) = sink.events().last().cloned() else {
        panic!()
    };
    assert_eq!(
        error.as_deref(),
        Some("Failed to complete task in maximum steps")
    );
}

#[tokio::test]
async fn failures_count_only_single_action_steps_then_done_only_attempt_then_stop() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply("f1", json!([{"click": {"index": 77}}])),
        // Two actions, second fails: not counted, resets.
        reply("mixed", json!([{"scroll": {}}, {"click": {"index": 77}}])),
        reply("f1", json!([{"click": {"index": 77}}])),
        reply("f2", json!([{"click": {"index": 78}}])),
        reply("f3", json!([{"click": {"index": 79}}])),
        reply("last chance", json!([{"click": {"index": 80}}])),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("click");
    c.max_failures = 3;
    c.loop_detection_enabled = false;
    c.enable_planning = false;
    let history = make(c, &browser, &model, &sink).run().await;
    let reqs = model.step_requests();
    assert_eq!(reqs.len(), 6);
    for r in &reqs[..5] {
        assert!(allowed_actions(r).len() > 1);
    }
    assert_eq!(
        allowed_actions(&reqs[5]),
        ["done"],
        "done-only after max_failures"
    );
    assert!(
        nudges_of(&reqs[5])
            .iter()
            .any(|n| n.starts_with("You have failed 3 times in a row"))
    );
    // The done-only attempt returned a non-done action: it fails, and the run stops.
    assert!(
        history.history.last().unwrap().result[0]
            .error
            .as_deref()
            .unwrap()
            .contains("not available now")
    );
    let Some(AgentEvent::Finished { error, .. }) = sink.events().last().cloned() else {
        panic!()
    };
    assert_eq!(
        error.as_deref(),
        Some("Stopped due to 4 consecutive failures")
    );
}

#[tokio::test]
async fn model_errors_and_invalid_output_count_as_failures() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::new([
        Reply::Error("upstream broke".into()),
        Reply::Json(json!({"memory": "m", "action": "not a list"})),
        Reply::Json(json!({"memory": "m", "action": [{"a": {}, "b": {}}]})),
        Reply::Json(done("ok", true)),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("t");
    c.enable_planning = false;
    let history = make(c, &browser, &model, &sink).run().await;
    assert!(history.is_done());
    let errors = history.errors();
    assert!(errors[0].unwrap().contains("upstream broke"));
    assert!(
        errors[1]
            .unwrap()
            .starts_with("Invalid model output format")
    );
    assert!(errors[2].unwrap().contains("exactly one key"));
    assert!(history.history[0].model_output.is_none());
    let reqs = model.step_requests();
    assert!(state_of(&reqs[3]).contains("Invalid model output format"));
}

#[tokio::test]
async fn replan_nudge_after_three_consecutive_failures() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply("f", json!([{"click": {"index": 50}}])),
        reply("f", json!([{"click": {"index": 51}}])),
        reply("f", json!([{"click": {"index": 52}}])),
        done("x", false),
    ]);
    let sink = RecordingSink::new();
    make(TaskConfig::new("t"), &browser, &model, &sink)
        .run()
        .await;
    let reqs = model.step_requests();
    assert!(!nudges_of(&reqs[2]).iter().any(|n| n.starts_with("Replan")));
    assert!(
        nudges_of(&reqs[3])
            .iter()
            .any(|n| n.starts_with("Replan suggested: your last 3 steps failed"))
    );
}

#[tokio::test]
async fn plan_update_is_rendered_and_advanced() {
    let browser = FakeBrowser::login_site();
    let mut first = reply("plan", json!([{"wait": {}}]));
    first["plan_update"] = json!(["open", "fill", "submit"]);
    let mut second = reply("next", json!([{"wait": {}}]));
    second["current_plan_item"] = json!(1);
    let model = ScriptedModel::json([first, second, done("x", true)]);
    let sink = RecordingSink::new();
    make(TaskConfig::new("t"), &browser, &model, &sink)
        .run()
        .await;
    let reqs = model.step_requests();
    assert!(
        state_of(&reqs[1]).contains("<plan>\n[>] 0: open\n[ ] 1: fill\n[ ] 2: submit\n</plan>")
    );
    assert!(
        state_of(&reqs[2]).contains("<plan>\n[x] 0: open\n[>] 1: fill\n[ ] 2: submit\n</plan>")
    );
}

#[tokio::test]
async fn loop_detector_nudges_after_five_repeats_and_stagnant_page() {
    let browser = FakeBrowser::login_site();
    let mut script: Vec<Value> = (0..6)
        .map(|_| reply("again", json!([{"scroll": {"down": true}}])))
        .collect();
    script.push(done("x", false));
    let model = ScriptedModel::json(script);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("t");
    c.enable_planning = false;
    make(c, &browser, &model, &sink).run().await;
    let reqs = model.step_requests();
    assert!(nudges_of(&reqs[4]).is_empty(), "{:?}", nudges_of(&reqs[4]));
    let n5 = nudges_of(&reqs[5]).join("\n");
    assert!(
        n5.contains("Heads up: you have repeated a similar action 5 times"),
        "{n5}"
    );
    assert!(n5.contains("The page has not changed for 5 steps"), "{n5}");
}

#[tokio::test]
async fn empty_action_list_is_retried_once_then_becomes_failing_done() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        json!({"evaluation_previous_goal": "", "memory": "", "next_goal": "", "action": []}),
        reply("ok", json!([{"wait": {}}])),
        json!({"evaluation_previous_goal": "", "memory": "", "next_goal": "", "action": []}),
        json!({"evaluation_previous_goal": "", "memory": "", "next_goal": "", "action": []}),
    ]);
    let sink = RecordingSink::new();
    let history = make(TaskConfig::new("t"), &browser, &model, &sink)
        .run()
        .await;
    let reqs = model.step_requests();
    assert_eq!(reqs.len(), 4);
    let retry = nudges_of(&reqs[1]);
    assert!(
        retry
            .last()
            .unwrap()
            .starts_with("You forgot to return an action")
    );
    assert_eq!(browser.executed_names(), ["wait"]);
    assert!(history.is_done());
    assert_eq!(history.is_successful(), Some(false));
    assert_eq!(
        history.final_result(),
        Some("No next action returned by LLM!")
    );
}

#[tokio::test]
async fn sequence_guards_stop_the_action_list() {
    let pages = vec![
        (
            "http://s.test/",
            Page::new("S", "start")
                .el(1, "a", Element::Link("http://s.test/next".into()))
                .el(
                    2,
                    "a target=_blank",
                    Element::NewTab("http://s.test/tab".into()),
                )
                .el(3, "input", Element::Input("q".into())),
        ),
        ("http://s.test/next", Page::new("Next", "next")),
    ];
    let browser = FakeBrowser::new(pages.clone());
    let model = ScriptedModel::json([
        // terminates_sequence (navigate) stops before the wait.
        reply(
            "nav",
            json!([{"navigate": {"url": "http://s.test/"}}, {"wait": {}}]),
        ),
        // URL changed after the click: the input is skipped.
        reply(
            "click",
            json!([{"click": {"index": 1}}, {"input": {"index": 3, "text": "x"}}]),
        ),
        reply("back", json!([{"go_back": {}}])),
        // Focus changed (new tab): skipped.
        reply(
            "tab",
            json!([{"click": {"index": 2}}, {"input": {"index": 3, "text": "x"}}]),
        ),
        // An error stops; done after other actions is dropped.
        reply("err", json!([{"switch": {"tab_id": "AB12"}}])),
        reply("err", json!([{"click": {"index": 42}}, {"wait": {}}])),
        reply(
            "done late",
            json!([{"wait": {}}, {"done": {"text": "late", "success": true}}]),
        ),
        // max_actions_per_step = 3 truncates.
        reply(
            "many",
            json!([{"wait": {}}, {"wait": {}}, {"wait": {}}, {"wait": {}}, {"wait": {}}]),
        ),
        done("x", true),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("guards");
    c.max_actions_per_step = 3;
    c.loop_detection_enabled = false;
    let history = make(c, &browser, &model, &sink).run().await;
    let ran: Vec<usize> = history.history.iter().map(|h| h.result.len()).collect();
    assert_eq!(ran, [1, 1, 1, 1, 1, 1, 1, 3, 1]);
    assert!(history.history[5].result[0].error.is_some());
    assert!(
        !history.history[6].result[0].is_done,
        "done after another action never runs"
    );
    assert!(history.is_done());
    assert_eq!(
        browser.executed_names(),
        [
            "navigate", "click", "go_back", "click", "switch", "click", "wait", "wait", "wait",
            "wait"
        ]
    );
}

#[tokio::test]
async fn domain_scoped_secrets_and_totp_codes() {
    let pages = vec![
        (
            "https://bank.test/login",
            Page::new("Bank", "login").el(1, "input", Element::Input("otp".into())),
        ),
        (
            "https://other.test/",
            Page::new("Other", "x").el(1, "input", Element::Input("x".into())),
        ),
    ];
    let browser = FakeBrowser::new(pages);
    let totp_secret = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP";
    let mut c = TaskConfig::new("enter the code on https://bank.test/login");
    c.sensitive_data = SensitiveData(BTreeMap::from([(
        "*.bank.test".to_owned(),
        SecretEntry::Scoped(BTreeMap::from([
            ("bank_pin".to_owned(), "918273".to_owned()),
            ("bank_2fa_code".to_owned(), totp_secret.to_owned()),
        ])),
    )]));
    let model = ScriptedModel::json([
        reply(
            "otp",
            json!([{"input": {"index": 1, "text": "<secret>bank_2fa_code</secret>"}}]),
        ),
        reply("pin", json!([{"input": {"index": 1, "text": "bank_pin"}}])),
        reply("go", json!([{"navigate": {"url": "https://other.test/"}}])),
        reply(
            "leak?",
            json!([{"input": {"index": 1, "text": "<secret>bank_pin</secret>"}}]),
        ),
        done("x", true),
    ]);
    let sink = RecordingSink::new();
    let history = make(c, &browser, &model, &sink).run().await;
    let executed = browser.executed();
    assert_eq!(
        executed[0].1["url"], "https://bank.test/login",
        "single task URL opened first"
    );
    let code = executed[1].1["text"].as_str().unwrap().to_owned();
    assert_eq!(code.len(), 6);
    assert!(code.chars().all(|c| c.is_ascii_digit()));
    let bytes = totp_rs::Secret::Encoded(totp_secret.into())
        .to_bytes()
        .unwrap();
    let expected = totp_rs::TOTP::new_unchecked(totp_rs::Algorithm::SHA1, 6, 1, 30, bytes);
    assert!(
        expected.check_current(&code).unwrap(),
        "a valid current TOTP code"
    );
    assert_eq!(
        executed[2].1["text"], "918273",
        "a bare secret name is replaced too"
    );
    // On another domain the scoped secret is not available and nothing is typed.
    assert_eq!(executed.len(), 4);
    let err = history.history[4].result[0].error.as_deref().unwrap();
    assert!(
        err.contains("secret `bank_pin` is not available on this page"),
        "{err}"
    );
    let reqs = model.step_requests();
    assert!(state_of(&reqs[0]).contains("bank_2fa_code, bank_pin"));
    assert!(!state_of(&reqs[3]).contains("<sensitive_data>"));
    let all = format!(
        "{}{}",
        serde_json::to_string(&history).unwrap(),
        sink.json()
    );
    assert!(!all.contains("918273") && !all.contains(&code) && !all.contains(totp_secret));
}

#[tokio::test]
async fn long_urls_are_shortened_in_prompts_and_restored_in_output() {
    let long = "http://shop.test/item?ref=campaign-2026-winter...abcdefghijklmnopqrstuvwxyz&utm=x";
    let page = Page::new("Shop", "s").el(1, "a", Element::Link(long.into()));
    let browser = FakeBrowser::new([("http://shop.test/", page)]);
    let seen_short = Arc::new(std::sync::Mutex::new(String::new()));
    let seen = seen_short.clone();
    // The model navigates to the (shortened) URL it was shown.
    let model = ScriptedModel::new([
        Reply::With(Box::new(move |request| {
            let state = state_of(request);
            let short = state
                .split_whitespace()
                .find_map(|w| w.strip_prefix("href=http://shop.test/item"))
                .map(|rest| format!("http://shop.test/item{rest}"))
                .expect("link shown");
            *seen.lock().unwrap() = short.clone();
            reply("open", json!([{"navigate": {"url": short}}]))
        })),
        Reply::Json(done("x", true)),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("open the item");
    c.start_url = Some("http://shop.test/".into());
    let history = make(c, &browser, &model, &sink).run().await;
    let short = seen_short.lock().unwrap().clone();
    assert!(short.len() < long.len(), "{short}");
    assert!(
        short.starts_with("http://shop.test/item?ref=campaign-2026-winter..."),
        "{short}"
    );
    assert!(!state_of(&model.step_requests()[0]).contains(long));
    let navs: Vec<Value> = browser
        .executed()
        .into_iter()
        .filter(|(n, _)| n == "navigate")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        navs.last().unwrap()["url"],
        long,
        "restored before execution"
    );
    // The record keeps the real URL the action used.
    assert_eq!(
        history.history[1].model_output.as_ref().unwrap().action[0].params["url"],
        long
    );
}

#[tokio::test]
async fn done_data_must_match_output_schema_else_model_is_told_why() {
    let browser = FakeBrowser::login_site();
    let schema = json!({
        "type": "object",
        "properties": {"balance": {"type": "integer"}, "user": {"type": "string"}},
        "required": ["balance", "user"],
        "additionalProperties": false
    });
    let model = ScriptedModel::json([
        reply(
            "done",
            json!([{"done": {"data": {"balance": "42"}, "success": true}}]),
        ),
        reply(
            "done again",
            json!([{"done": {"data": {"balance": 42, "user": "alice"}, "success": true}}]),
        ),
    ]);
    let sink = RecordingSink::new();
    let mut c = login_config();
    c.output_schema = Some(schema.clone());
    let history = make(c, &browser, &model, &sink).run().await;
    let reqs = model.step_requests();
    assert_eq!(reqs.len(), 2);
    let done_variant = &reqs[0].output_schema.schema["properties"]["action"]["items"]["anyOf"][0];
    assert_eq!(
        done_variant["properties"]["done"]["properties"]["data"],
        schema
    );
    assert!(state_of(&reqs[0]).contains("Expected output format"));
    let second = state_of(&reqs[1]);
    assert!(
        second.contains("does not match the required output schema"),
        "{second}"
    );
    assert!(
        second.contains("/balance") && second.contains("user"),
        "{second}"
    );
    assert_eq!(
        history.structured_output(),
        Some(json!({"balance": 42, "user": "alice"}))
    );
    assert_eq!(history.is_successful(), Some(true));
}

#[tokio::test]
async fn initial_navigation_from_start_url_or_single_task_url_only() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([done("x", true)]);
    let sink = RecordingSink::new();
    let history = make(
        TaskConfig::new("Log in at http://app.test/login please"),
        &browser,
        &model,
        &sink,
    )
    .run()
    .await;
    let step0 = &history.history[0];
    assert_eq!(step0.metadata.step_number, 0);
    assert_eq!(step0.state.title, "Initial Actions");
    let out = step0.model_output.as_ref().unwrap();
    assert_eq!(out.next_goal.as_deref(), Some("Initial navigation"));
    assert_eq!(
        out.action[0].params,
        json!({"url": "http://app.test/login", "new_tab": false})
    );
    assert!(
        state_of(&model.step_requests()[0])
            .contains("<step_0>\nEvaluation of previous step: Start")
    );

    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([done("x", true)]);
    let task = "Compare http://a.test/ and http://b.test/";
    let history = make(TaskConfig::new(task), &browser, &model, &sink)
        .run()
        .await;
    assert!(
        browser.executed().is_empty(),
        "two URLs: no initial navigation"
    );
    assert_eq!(history.history[0].metadata.step_number, 1);

    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([done("x", true)]);
    let mut c = TaskConfig::new("Open http://a.test/ first");
    c.start_url = Some("http://app.test/login".into());
    make(c, &browser, &model, &sink).run().await;
    assert_eq!(
        browser.executed()[0].1["url"],
        "http://app.test/login",
        "start_url wins"
    );
}

#[tokio::test]
async fn todo_md_and_workspace_files_are_listed_and_displayed_in_done() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([
        reply(
            "todo",
            json!([
                {"write_file": {"file_name": "todo.md", "content": "- [ ] log in\n- [ ] read balance"}},
                {"write_file": {"file_name": "results.md", "content": "balance: 42"}}
            ]),
        ),
        reply(
            "tick",
            json!([{"replace_file": {"file_name": "todo.md", "old_str": "- [ ] log in", "new_str": "- [x] log in"}}]),
        ),
        reply(
            "done",
            json!([{"done": {"text": "See results", "success": true, "files_to_display": ["results.md"]}}]),
        ),
    ]);
    let sink = RecordingSink::new();
    let mut agent = make(TaskConfig::new("t"), &browser, &model, &sink);
    let dir = agent.workspace_dir().to_path_buf();
    let history = agent.run().await;
    let reqs = model.step_requests();
    let s2 = state_of(&reqs[1]);
    assert!(
        s2.contains("<todo_contents>\n- [ ] log in\n- [ ] read balance\n</todo_contents>"),
        "{s2}"
    );
    assert!(s2.contains("results.md - 1 lines") && !s2.contains("todo.md - "));
    assert!(state_of(&reqs[2]).contains("- [x] log in"));
    let final_text = history.final_result().unwrap();
    assert!(
        final_text.starts_with("See results") && final_text.contains("results.md:\nbalance: 42")
    );
    let attachments = history.history.last().unwrap().result[0]
        .attachments
        .clone()
        .unwrap();
    assert_eq!(
        attachments,
        [dir.join("results.md").to_string_lossy().into_owned()]
    );
}

#[tokio::test]
async fn extract_calls_the_model_on_page_markdown_with_the_query() {
    let mut page = Page::new("Catalog", "items");
    page.markdown = "# Catalog\n\n| item | price |\n|---|---|\n| lamp | 19 EUR |".into();
    let browser = FakeBrowser::new([("http://c.test/", page)]);
    let model = ScriptedModel::json([
        reply(
            "extract",
            json!([{"extract": {"query": "price of the lamp"}}]),
        ),
        json!({"result": "The lamp costs 19 EUR."}),
        done("19 EUR", true),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("lamp price");
    c.start_url = Some("http://c.test/".into());
    make(c, &browser, &model, &sink).run().await;
    let reqs = model.requests();
    let extraction = reqs
        .iter()
        .find(|r| r.output_schema.name == "extraction")
        .expect("extract call");
    assert!(text_of(extraction, 0).contains("answer a query"));
    let user = text_of(extraction, 1);
    assert!(user.contains("<query>\nprice of the lamp\n</query>"));
    assert!(user.contains("| lamp | 19 EUR |") && user.contains("(complete)"));
    assert!(
        !browser.executed_names().contains(&"extract".to_owned()),
        "the agent owns extract"
    );
    let after = state_of(reqs.last().unwrap());
    assert!(
        after.contains("<result>\nThe lamp costs 19 EUR.\n</result>"),
        "{after}"
    );
}

#[tokio::test]
async fn page_specific_actions_only_on_their_domain() {
    let browser = {
        let mut b = FakeBrowser::build(login_pages());
        let mut special = browser_specs()
            .into_iter()
            .find(|s| s.name == "wait")
            .unwrap();
        special.name = "export_report".into();
        special.description = "Export the report".into();
        special.domains = vec!["reports.test".into()];
        b.specs.push(special);
        Arc::new(b)
    };
    let model = ScriptedModel::json([done("x", true)]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("t");
    c.start_url = Some("http://app.test/login".into());
    make(c, &browser, &model, &sink).run().await;
    let req = &model.step_requests()[0];
    assert!(!allowed_actions(req).contains(&"export_report".to_owned()));
    assert!(!state_of(req).contains("<page_specific_actions>"));

    let b2 = {
        let mut b = FakeBrowser::build([("http://reports.test/", Page::new("R", "r"))]);
        let mut special = browser_specs()
            .into_iter()
            .find(|s| s.name == "wait")
            .unwrap();
        special.name = "export_report".into();
        special.description = "Export the report".into();
        special.domains = vec!["reports.test".into()];
        b.specs.push(special);
        Arc::new(b)
    };
    let model = ScriptedModel::json([done("x", true)]);
    let mut c = TaskConfig::new("t");
    c.start_url = Some("http://reports.test/".into());
    make(c, &b2, &model, &sink).run().await;
    let req = &model.step_requests()[0];
    assert!(allowed_actions(req).contains(&"export_report".to_owned()));
    assert!(state_of(req).contains("<page_specific_actions>\nexport_report: Export the report"));
}

#[tokio::test]
async fn pause_resume_between_steps() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([done("x", true)]);
    let sink = RecordingSink::new();
    let mut agent = make(TaskConfig::new("t"), &browser, &model, &sink);
    let control = agent.control();
    control.pause();
    let run = tokio::spawn(async move { agent.run().await });
    loop {
        if sink
            .events()
            .iter()
            .any(|e| matches!(e, AgentEvent::Paused))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(model.requests().is_empty(), "no step while paused");
    assert_eq!(browser.captures(), 0);
    control.resume();
    let history = run.await.unwrap();
    assert!(history.is_done());
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::Resumed))
    );
}

#[tokio::test]
async fn stop_aborts_an_in_flight_model_call() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::new([Reply::Json(reply("w", json!([{"wait": {}}]))), Reply::Hang]);
    let sink = RecordingSink::new();
    let mut agent = make(TaskConfig::new("t"), &browser, &model, &sink);
    let control = agent.control();
    let run = tokio::spawn(async move { agent.run().await });
    while model.requests().len() < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    control.stop();
    let history = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stop is prompt")
        .unwrap();
    assert_eq!(
        history.number_of_steps(),
        1,
        "the interrupted step leaves no record"
    );
    let Some(AgentEvent::Finished { error, is_done, .. }) = sink.events().last().cloned() else {
        panic!()
    };
    assert!(!is_done);
    assert_eq!(error.as_deref(), Some("Agent stopped"));
}

#[tokio::test]
async fn stop_while_paused_ends_the_run() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([]);
    let sink = RecordingSink::new();
    let mut agent = make(TaskConfig::new("t"), &browser, &model, &sink);
    let control = agent.control();
    control.pause();
    let run = tokio::spawn(async move { agent.run().await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    control.stop();
    let history = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(history.number_of_steps(), 0);
}

#[tokio::test(start_paused = true)]
async fn llm_timeout_is_a_failure_with_a_clear_message() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::new([Reply::Hang, Reply::Json(done("x", true))]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("t");
    c.llm_timeout = Duration::from_secs(3);
    let history = make(c, &browser, &model, &sink).run().await;
    assert!(
        history.errors()[0]
            .unwrap()
            .starts_with("LLM call timed out after 3s")
    );
    assert!(history.is_done());
}

#[tokio::test]
async fn fatal_browser_error_ends_the_run() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([reply("crash", json!([{"crash": {}}]))]);
    let sink = RecordingSink::new();
    let mut b = FakeBrowser::build(login_pages());
    let mut crash = browser_specs()
        .into_iter()
        .find(|s| s.name == "wait")
        .unwrap();
    crash.name = "crash".into();
    b.specs.push(crash);
    let b = Arc::new(b);
    drop(browser);
    let history = make(TaskConfig::new("t"), &b, &model, &sink).run().await;
    assert_eq!(history.number_of_steps(), 1);
    let Some(AgentEvent::Finished { error, .. }) = sink.events().last().cloned() else {
        panic!()
    };
    assert!(error.unwrap().contains("browser process exited"));
}

#[test]
fn bad_configuration_is_a_clear_error() {
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([]);
    let sink = RecordingSink::new();
    let check = |c: TaskConfig| {
        Agent::new(c, browser.clone(), model.clone(), sink.clone())
            .unwrap_err()
            .to_string()
    };
    assert!(check(TaskConfig::new("  ")).contains("task is empty"));
    let mut c = TaskConfig::new("t");
    c.max_history_items = Some(3);
    assert!(check(c).contains("max_history_items"));
    let mut c = TaskConfig::new("t");
    c.output_schema = Some(json!({"type": 12}));
    assert!(check(c).contains("output_schema"));
    let mut c = TaskConfig::new("t");
    c.sensitive_data = SensitiveData(BTreeMap::from([(
        "pw".to_owned(),
        SecretEntry::Value("hunter2".into()),
    )]));
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[tokio::test(start_paused = true)]
async fn step_timeout_records_an_error_and_counts_a_failure() {
    let mut b = FakeBrowser::build(login_pages());
    let mut hang = browser_specs()
        .into_iter()
        .find(|s| s.name == "wait")
        .unwrap();
    hang.name = "hang".into();
    b.specs.push(hang);
    let browser = Arc::new(b);
    let model = ScriptedModel::json([reply("hang", json!([{"hang": {}}])), done("x", true)]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("t");
    c.step_timeout = Duration::from_secs(5);
    let history = make(c, &browser, &model, &sink).run().await;
    assert_eq!(
        history.errors()[0],
        Some("Step 1 timed out after 5 seconds")
    );
    assert_eq!(history.history[1].metadata.step_number, 2);
    assert!(state_of(&model.step_requests()[1]).contains("Step 1 timed out after 5 seconds"));
    assert!(history.is_done());
}

#[tokio::test]
async fn empty_actions_under_output_schema_end_as_failing_done() {
    let browser = FakeBrowser::login_site();
    let empty =
        json!({"evaluation_previous_goal": "", "memory": "", "next_goal": "", "action": []});
    let model = ScriptedModel::json([empty.clone(), empty]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("t");
    c.output_schema = Some(
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    );
    let history = make(c, &browser, &model, &sink).run().await;
    assert!(history.is_done());
    assert_eq!(history.is_successful(), Some(false));
    assert_eq!(
        history.final_result(),
        Some("No next action returned by LLM!")
    );
}

#[tokio::test]
async fn long_extraction_goes_to_a_workspace_file_and_is_shown_once() {
    let browser = FakeBrowser::new([("http://c.test/", Page::new("Catalog", "items"))]);
    let big = "row\n".repeat(3000);
    let model = ScriptedModel::json([
        reply(
            "extract",
            json!([{"extract": {"query": "all rows", "start_from_char": 3}}]),
        ),
        json!({"result": big}),
        reply("wait", json!([{"wait": {}}])),
        done("x", true),
    ]);
    let sink = RecordingSink::new();
    let mut c = TaskConfig::new("rows");
    c.start_url = Some("http://c.test/".into());
    let mut agent = make(c, &browser, &model, &sink);
    let dir = agent.workspace_dir().to_path_buf();
    agent.run().await;
    let saved = std::fs::read_to_string(dir.join("extracted_content_0.md")).unwrap();
    assert!(
        saved.contains("<query>\nall rows\n</query>") && saved.matches("row\n").count() >= 3000
    );
    let reqs = model.step_requests();
    let next = state_of(&reqs[1]);
    assert!(
        next.contains("<read_state_0>\n<url>\nhttp://c.test/"),
        "shown once"
    );
    assert!(next.contains("saved in full to extracted_content_0.md"));
    assert!(!state_of(&reqs[2]).contains("<read_state>"));
    let extraction = model
        .requests()
        .into_iter()
        .find(|r| r.output_schema.name == "extraction")
        .unwrap();
    let user = text_of(&extraction, 1);
    assert!(
        user.contains("<webpage_content>\natalog\n\nitems"),
        "starts at char 3: {user}"
    );
    let allowed = allowed_actions(&reqs[0]);
    assert_eq!(
        allowed.iter().filter(|a| *a == "extract").count(),
        1,
        "the agent's own extract spec only"
    );
}

#[tokio::test]
async fn a_resumed_run_continues_from_the_persisted_history() {
    let prior: AgentHistoryList = serde_json::from_value(json!({
        "history": [
            {
                "model_output": {"evaluation_previous_goal": "Start", "next_goal": "Initial navigation",
                                 "action": [{"navigate": {"url": "http://app.test/login", "new_tab": false}}]},
                "result": [{"is_done": false, "long_term_memory": "Navigated to http://app.test/login"}],
                "state": {"url": "http://app.test/login", "title": "Initial Actions", "tabs": [],
                          "interacted_element": [null]},
                "metadata": {"step_number": 0, "step_start_time": 1.0, "step_end_time": 2.0,
                             "capture_ms": 0, "model_ms": 0, "actions_ms": 5,
                             "usage": {"input_tokens": 0, "cached_input_tokens": 0,
                                       "cache_creation_input_tokens": 0, "output_tokens": 0}}
            },
            {
                "model_output": {"memory": "MEMO-ONE", "next_goal": "click sign in",
                                 "plan_update": ["open the form", "sign in"], "current_plan_item": 1,
                                 "action": [{"click": {"index": 99}}]},
                "result": [{"is_done": false, "error": "Element index 99 not found"}],
                "state": {"url": "http://app.test/login", "title": "Login", "tabs": [],
                          "interacted_element": [null]},
                "metadata": {"step_number": 1, "step_start_time": 3.0, "step_end_time": 4.0,
                             "capture_ms": 1, "model_ms": 2, "actions_ms": 3, "invocations": 1,
                             "usage": {"input_tokens": 1000, "cached_input_tokens": 0,
                                       "cache_creation_input_tokens": 0, "output_tokens": 50}}
            }
        ],
        "usage": {"total": {"input_tokens": 1000, "cached_input_tokens": 0,
                            "cache_creation_input_tokens": 0, "output_tokens": 50},
                  "invocations": 1}
    }))
    .unwrap();
    let browser = FakeBrowser::login_site();
    let model = ScriptedModel::json([done("resumed and done", true)]);
    let sink = RecordingSink::new();
    let mut config = login_config();
    config.max_failures = 1;
    let history = make(config, &browser, &model, &sink)
        .resume_from(prior)
        .run()
        .await;
    assert!(
        browser.executed().is_empty(),
        "no second initial navigation: {:?}",
        browser.executed()
    );
    let request = &model.step_requests()[0];
    let state = state_of(request);
    assert!(state.contains("<step_1>"), "{state}");
    assert!(state.contains("MEMO-ONE"), "{state}");
    assert!(state.contains("[x] 0: open the form") && state.contains("[>] 1: sign in"));
    // One failure was recorded before: with max_failures 1 only done is offered now.
    assert_eq!(allowed_actions(request), ["done"]);
    let numbers: Vec<u32> = history
        .history
        .iter()
        .map(|h| h.metadata.step_number)
        .collect();
    assert_eq!(numbers, [0, 1, 2]);
    assert!(history.is_done());
    assert_eq!(history.usage.invocations, 2);
    assert!(
        history.usage.total.input_tokens > 1000,
        "usage carried over"
    );
}
