//! A skill's script replayed on the fake browser: the row chosen by the value it showed is
//! found again by the new value (and ambiguity is a miss), a step whose element is gone or
//! whose page is not reached is healed by the model and the replay goes on, and a step that
//! reached the page and failed is never healed.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::replay::{MatchedBy, ReplayOptions, ReplayReport, ReplayRun, replay_steps};
use browserd_agent::secrets::Secrets;
use browserd_agent::skill::{
    HealOutcome, HealRequest, ModelHealer, SkillScript, StepHealer, bind, make_script, parse_prompt,
};
use browserd_agent::{
    Agent, AgentControl, AgentEvent, AgentHistoryList, SensitiveData, TaskConfig,
};
use serde_json::{Value, json};
use support::*;

const ITEMS: &str = "http://shop.test/items";

async fn record(browser: Arc<FakeBrowser>, replies: Vec<Value>) -> AgentHistoryList {
    let mut config = TaskConfig::new("Add the item to the cart.");
    config.start_url = Some(ITEMS.into());
    let history = Agent::new(
        config,
        browser,
        ScriptedModel::json(replies),
        RecordingSink::new(),
    )
    .expect("valid config")
    .run()
    .await;
    assert!(history.is_done(), "the recorded run ends");
    history
}

async fn execute(
    browser: &FakeBrowser,
    script: &SkillScript,
    values: Value,
    healer: Option<&dyn StepHealer>,
    sink: &RecordingSink,
) -> (ReplayReport, AgentHistoryList) {
    let (_, steps) = bind(script, values.as_object().unwrap()).expect("values fit");
    let control = AgentControl::new();
    let run = ReplayRun {
        sink,
        control: &control,
        screenshots: false,
        skip_steps: 0,
        first_step: 1,
        healer,
    };
    let options = ReplayOptions {
        skip_failures: false,
        max_retries: 1,
        retry_delay: Duration::ZERO,
    };
    replay_steps(
        browser,
        &steps,
        &Secrets::new(&SensitiveData::default()),
        &options,
        &run,
        |_| {},
    )
    .await
}

fn rows(rows: &[(u64, &str)]) -> Page {
    let mut page = Page::new("Items", "Your orders");
    for (index, order) in rows {
        page = page
            .el(
                *index,
                "button",
                Element::Link(format!("http://shop.test/cart/{order}")),
            )
            .named(*index, "Add to cart", &format!("Order {order} Add to cart"));
    }
    page
}

fn shop(rows_page: Page) -> Arc<FakeBrowser> {
    FakeBrowser::new(vec![
        (ITEMS, rows_page),
        (
            "http://shop.test/cart/1042",
            Page::new("Cart", "1042 is in the cart"),
        ),
        (
            "http://shop.test/cart/77",
            Page::new("Cart", "77 is in the cart"),
        ),
    ])
}

async fn order_script() -> SkillScript {
    let recorder = shop(rows(&[(1, "1042"), (2, "77"), (3, "770")]));
    let history = record(
        recorder,
        vec![
            reply("add order 1042", json!([{"click": {"index": 1}}])),
            done("Order 1042 is in the cart", true),
        ],
    )
    .await;
    let prompt = parse_prompt("Add order {{order=1042}} to the cart").unwrap();
    make_script(&history, &prompt.parameters, &prompt.examples)
}

fn clicked(browser: &FakeBrowser) -> Vec<Value> {
    browser
        .executed()
        .into_iter()
        .filter(|(name, _)| name == "click")
        .map(|(_, params)| params["index"].clone())
        .collect()
}

#[tokio::test]
async fn near_matching_clicks_the_row_that_shows_the_new_value() {
    let script = order_script().await;
    let near = script.steps.history[1].state.interacted_element[0]
        .as_ref()
        .and_then(|e| e.near.clone());
    assert_eq!(near.as_deref(), Some("{{order}}"));

    // Rows in another order: the recorded index now shows another order.
    let browser = shop(rows(&[(1, "77"), (2, "1042"), (3, "770")]));
    let sink = RecordingSink::new();
    let (report, _) = execute(&browser, &script, json!({"order": 77}), None, &sink).await;
    assert!(report.success, "{report:?}");
    assert_eq!(clicked(&browser), [json!(1)]);
    assert_eq!(browser.url(), "http://shop.test/cart/77");
    let click = report.actions.iter().find(|a| a.action == "click").unwrap();
    assert_eq!(click.matched_by, Some(MatchedBy::Near));
    assert_eq!(browser.region_lookups(), 3);
}

#[tokio::test]
async fn two_rows_showing_the_value_or_none_is_a_miss_never_a_guess() {
    let script = order_script().await;
    let browser = shop(rows(&[(1, "77"), (2, "77"), (3, "1042")]));
    let (report, _) = execute(
        &browser,
        &script,
        json!({"order": 77}),
        None,
        &RecordingSink::new(),
    )
    .await;
    assert!(!report.success);
    let error = report.error.unwrap_or_default();
    assert!(
        error.contains("element not found") && error.contains("ambiguous"),
        "{error}"
    );
    assert!(clicked(&browser).is_empty(), "nothing clicked");

    let browser = shop(rows(&[(1, "1042"), (2, "770")]));
    let (report, _) = execute(
        &browser,
        &script,
        json!({"order": 77}),
        None,
        &RecordingSink::new(),
    )
    .await;
    let error = report.error.unwrap_or_default();
    assert!(
        error.contains("none of the 2 candidates shows \"77\""),
        "{error}"
    );
    assert!(clicked(&browser).is_empty());
}

/// A recorded run on a site whose "Add to cart" button (5) leads to the cart.
async fn cart_script() -> SkillScript {
    let recorder = FakeBrowser::new(vec![
        (
            ITEMS,
            Page::new("Items", "A shirt")
                .el(5, "button", Element::Link("http://shop.test/cart".into()))
                .named(5, "Add to cart", "Shirt Add to cart"),
        ),
        ("http://shop.test/cart", Page::new("Cart", "In the cart")),
    ]);
    let history = record(
        recorder,
        vec![
            reply("add it", json!([{"click": {"index": 5}}])),
            done("In the cart", true),
        ],
    )
    .await;
    make_script(&history, &[], &BTreeMap::new())
}

fn model_healer(
    browser: Arc<FakeBrowser>,
    model: Arc<ScriptedModel>,
    sink: Arc<RecordingSink>,
) -> ModelHealer {
    ModelHealer {
        model,
        browser,
        sink,
        goal: "Add the shirt to the cart".into(),
        values: BTreeMap::new(),
        max_model_calls: 2,
    }
}

fn step_numbers(sink: &RecordingSink) -> Vec<u32> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::StepFinished { record } => Some(record.metadata.step_number),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_step_whose_element_is_gone_is_healed_and_the_replay_goes_on() {
    let script = cart_script().await;
    let renamed = FakeBrowser::new(vec![
        (
            ITEMS,
            Page::new("Items", "A shirt")
                .el(6, "button", Element::Link("http://shop.test/cart".into()))
                .named(6, "Add to basket", "Shirt Add to basket"),
        ),
        ("http://shop.test/cart", Page::new("Cart", "In the cart")),
    ]);
    let model = ScriptedModel::json(vec![reply(
        "add to basket",
        json!([{"click": {"index": 6}}]),
    )]);
    let sink = RecordingSink::new();
    let healer = model_healer(renamed.clone(), model.clone(), sink.clone());
    let (report, history) = execute(&renamed, &script, json!({}), Some(&healer), &sink).await;
    assert!(report.success, "{report:?}");
    assert_eq!(report.healed.len(), 1);
    assert_eq!(report.healed[0].step, 1);
    assert_eq!(report.healed[0].model_calls, 1);
    assert!(
        report.healed[0]
            .reason
            .starts_with("element not found: <BUTTON> \"Add to cart\""),
        "{}",
        report.healed[0].reason
    );
    assert_eq!(model.requests().len(), 1, "one model call");
    let task = state_of(&model.requests()[0]);
    assert!(
        task.contains("Add the shirt to the cart") && task.contains("element not found"),
        "{task}"
    );
    assert_eq!(renamed.url(), "http://shop.test/cart");
    // Replayed 0, 1 (missed), the healer's 3, then the replayed done as 4.
    assert_eq!(step_numbers(&sink), [1, 2, 3, 4]);
    assert_eq!(history.history.len(), 4);
    assert!(history.is_done());
}

#[tokio::test]
async fn a_page_that_is_not_reached_is_healed_with_the_expected_url() {
    let script = cart_script().await;
    let confirm = FakeBrowser::new(vec![
        (
            ITEMS,
            Page::new("Items", "A shirt")
                .el(
                    5,
                    "button",
                    Element::Link("http://shop.test/confirm".into()),
                )
                .named(5, "Add to cart", "Shirt Add to cart"),
        ),
        (
            "http://shop.test/confirm",
            Page::new("Confirm", "Sure?")
                .el(8, "button", Element::Link("http://shop.test/cart".into()))
                .named(8, "Confirm", "Sure? Confirm"),
        ),
        ("http://shop.test/cart", Page::new("Cart", "In the cart")),
    ]);
    let model = ScriptedModel::json(vec![reply("confirm", json!([{"click": {"index": 8}}]))]);
    let sink = RecordingSink::new();
    let healer = model_healer(confirm.clone(), model.clone(), sink.clone());
    let (report, _) = execute(&confirm, &script, json!({}), Some(&healer), &sink).await;
    assert!(report.success, "{report:?}");
    assert_eq!(
        report.healed[0].reason,
        "expected to reach http://shop.test/cart after step 1, now on http://shop.test/confirm"
    );
    assert_eq!(
        clicked(&confirm),
        [json!(5), json!(8)],
        "the recorded click ran once"
    );
}

/// Counts the heal requests and never heals.
#[derive(Default)]
struct CountingHealer(AtomicU32);

#[async_trait]
impl StepHealer for CountingHealer {
    async fn heal(&self, _request: HealRequest<'_>) -> HealOutcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        HealOutcome {
            error: Some("cannot".into()),
            ..HealOutcome::default()
        }
    }
}

#[tokio::test]
async fn a_step_that_reached_the_page_and_failed_is_never_healed() {
    let script = cart_script().await;
    let failing = FakeBrowser::new(vec![(
        ITEMS,
        Page::new("Items", "A shirt")
            .el(5, "button", Element::FailingClick { sent_to_page: true })
            .named(5, "Add to cart", "Shirt Add to cart"),
    )]);
    let healer = CountingHealer::default();
    let (report, _) = execute(
        &failing,
        &script,
        json!({}),
        Some(&healer),
        &RecordingSink::new(),
    )
    .await;
    assert!(!report.success);
    assert_eq!(healer.0.load(Ordering::SeqCst), 0, "never healed");
    let error = report.error.unwrap_or_default();
    assert!(error.starts_with("replaying step 1 `click`"), "{error}");
    assert_eq!(clicked(&failing).len(), 1, "clicked once");
}

#[tokio::test]
async fn a_step_the_model_cannot_heal_ends_the_replay_naming_it() {
    let script = cart_script().await;
    let gone = FakeBrowser::new(vec![(ITEMS, Page::new("Items", "Sold out"))]);
    let model = ScriptedModel::json(vec![done("There is no add button any more", false)]);
    let sink = RecordingSink::new();
    let healer = model_healer(gone.clone(), model.clone(), sink.clone());
    let (report, _) = execute(&gone, &script, json!({}), Some(&healer), &sink).await;
    assert!(!report.success);
    assert_eq!(
        report.error.as_deref(),
        Some("step 1 could not be healed: There is no add button any more")
    );
    assert!(report.healed.is_empty());
}

#[tokio::test]
async fn the_healer_stops_after_its_model_calls() {
    let script = cart_script().await;
    let elsewhere = FakeBrowser::new(vec![
        (
            ITEMS,
            Page::new("Items", "A shirt")
                .el(6, "button", Element::Link("http://shop.test/help".into()))
                .named(6, "Help", "Help"),
        ),
        ("http://shop.test/help", Page::new("Help", "No cart here")),
    ]);
    let model = ScriptedModel::json(vec![
        reply("try help", json!([{"click": {"index": 6}}])),
        reply("wait", json!([{"wait": {"seconds": 1}}])),
        reply("never asked", json!([{"wait": {"seconds": 1}}])),
    ]);
    let sink = RecordingSink::new();
    let healer = model_healer(elsewhere.clone(), model.clone(), sink.clone());
    let (report, history) = execute(&elsewhere, &script, json!({}), Some(&healer), &sink).await;
    assert!(!report.success);
    assert_eq!(model.requests().len(), 2, "at most max_model_calls");
    let error = report.error.unwrap_or_default();
    assert!(
        error.starts_with("step 1 could not be healed: not healed after 2 model call(s): expected to reach http://shop.test/cart"),
        "{error}"
    );
    // The healer's steps are recorded (and emitted) like agent steps.
    assert_eq!(history.history.len(), 4);
    assert_eq!(step_numbers(&sink), [1, 2, 3, 4]);
}
