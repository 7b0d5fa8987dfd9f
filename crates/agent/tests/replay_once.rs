//! A replay never repeats an action that reached the page: a click whose failure the browser
//! reports after sending it is tried once, one that provably did not reach the page is tried
//! again, and a read is tried again whatever happened.

mod support;

use std::sync::Arc;
use std::time::Duration;

use browserd_agent::replay::{ReplayOptions, ReplayOutcome, replay};
use browserd_agent::secrets::Secrets;
use browserd_agent::{Agent, AgentHistoryList, SensitiveData, TaskConfig};
use serde_json::json;
use support::*;

const PAGE: &str = "http://shop.test/order";

fn shop(sent_to_page: bool) -> Arc<FakeBrowser> {
    FakeBrowser::new(vec![(
        PAGE,
        Page::new("Order", "Your order").el(4, "button", Element::FailingClick { sent_to_page }),
    )])
}

/// A recorded run that clicked element 4 once, then finished.
async fn recorded_click(browser: &Arc<FakeBrowser>) -> AgentHistoryList {
    let mut config = TaskConfig::new("Place the order.");
    config.start_url = Some(PAGE.into());
    let model = ScriptedModel::json(vec![
        reply("place it", json!([{"click": {"index": 4}}])),
        done("Placed", true),
    ]);
    let sink = RecordingSink::new();
    let history = Agent::new(config, browser.clone(), model, sink)
        .expect("valid config")
        .run()
        .await;
    assert!(history.is_done(), "the recorded run ends");
    history
}

fn clicks(browser: &FakeBrowser) -> usize {
    browser
        .executed_names()
        .iter()
        .filter(|name| *name == "click")
        .count()
}

fn options() -> ReplayOptions {
    ReplayOptions {
        skip_failures: false,
        max_retries: 3,
        retry_delay: Duration::ZERO,
    }
}

#[tokio::test]
async fn a_click_that_failed_after_reaching_the_page_is_replayed_once() {
    let recorder = shop(true);
    let history = recorded_click(&recorder).await;

    let browser = shop(true);
    let report = replay(
        &*browser,
        &history,
        &Secrets::new(&SensitiveData::default()),
        &options(),
        |_| {},
    )
    .await;

    assert_eq!(clicks(&browser), 1, "the click is sent once: {report:?}");
    let click = report
        .actions
        .iter()
        .find(|a| a.action == "click")
        .expect("the click is reported");
    assert_eq!(click.outcome, ReplayOutcome::Failed);
    assert_eq!(click.attempts, 1);
    let detail = click.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("not tried again"), "{detail}");
    assert!(!report.success);
}

#[tokio::test]
async fn a_click_that_provably_did_not_reach_the_page_is_tried_again() {
    let recorder = shop(false);
    let history = recorded_click(&recorder).await;

    let browser = shop(false);
    let report = replay(
        &*browser,
        &history,
        &Secrets::new(&SensitiveData::default()),
        &options(),
        |_| {},
    )
    .await;

    // The first attempt and every retry: each failed before the page.
    assert_eq!(clicks(&browser), 4, "{report:?}");
    let click = report
        .actions
        .iter()
        .find(|a| a.action == "click")
        .expect("the click is reported");
    assert_eq!(click.outcome, ReplayOutcome::Failed);
    assert_eq!(click.attempts, 4);
}
