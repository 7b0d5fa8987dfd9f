//! `browserd replay`: a task recorded with `browserd run --history-out` (real Chromium, local
//! shop, mock model) is re-run without a model after the shop changed so that every index
//! shifts (a banner, an input and a product inserted before the targets): the replay still
//! types the same search and buys the same product, and its report says which actions had to
//! find their element again and how. With the product gone, the replay fails clearly.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::cable_shop::{CableShop, button_labelled};
use browserd_tests::{MockModel, done_reply, index_of, reply};
use serde_json::{Value, json};

/// The recording's model: search for "usb cable", buy the USB cable, report.
fn shopper() -> browserd_tests::Brain {
    Arc::new(|page: &str| {
        if let Some(line) = page.lines().find(|l| l.contains("Order placed")) {
            return done_reply(&format!("Bought: {}", line.trim()), true);
        }
        if let Some(index) = button_labelled(page, "Buy USB cable") {
            return reply("buy the USB cable", json!([{"click": {"index": index}}]));
        }
        match (
            index_of(page, "input", "Search products"),
            index_of(page, "button", "id=search"),
        ) {
            (Some(input), Some(button)) => reply(
                "search for the cable",
                json!([
                    {"input": {"index": input, "text": "usb cable", "clear": true}},
                    {"click": {"index": button}}
                ]),
            ),
            _ => done_reply(&format!("lost on:\n{page}"), false),
        }
    })
}

async fn browserd(args: &[&str]) -> std::process::Output {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("BROWSERD_CONFIG")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(180), output)
        .await
        .expect("browserd took longer than 3 minutes")
        .expect("spawn browserd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_task_replays_on_a_changed_page_and_reports_what_was_found_again() {
    let (addr, shop) = CableShop::start().await;
    let model = MockModel::start(shopper(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    let start = format!("http://{addr}/");

    // 1. Record.
    let recorded = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
        .args(["run", "Buy a USB cable", "--allow-loopback", "--no-vision"])
        .args(["--start-url", &start, "--max-steps", "6"])
        .arg("--history-out")
        .arg(&history)
        .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
        .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
        .env(
            "BROWSERD_LLM_MOCK_BASE_URL",
            format!("http://{}/v1", model.addr),
        )
        .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
        .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
        .env("RUST_LOG", "warn")
        .env_remove("BROWSERD_CONFIG")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert_eq!(*shop.orders.lock().unwrap(), ["usb-cable"]);
    let model_calls = model.requests().len();
    let record: Value = serde_json::from_slice(&std::fs::read(&history).unwrap()).unwrap();
    let clicked = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|step| {
            step["state"]["interacted_element"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|e| e["ax_name"] == "Buy USB cable")
        .expect("the history describes the clicked button");
    assert!(
        clicked["x_path"].as_str().unwrap().ends_with("button"),
        "{clicked}"
    );
    assert_eq!(
        clicked["element_hash"].as_str().unwrap().len(),
        16,
        "{clicked}"
    );

    // 2. The shop changes: a banner with a button and an input before the search form, a
    //    product before the USB cable. Replay without the model.
    shop.set_version(1);
    let report_path = dir.path().join("report.json");
    let replayed = browserd(&[
        "replay",
        history.to_str().unwrap(),
        "--allow-loopback",
        "--report-out",
        report_path.to_str().unwrap(),
    ])
    .await;
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success(), "{stderr}");
    assert_eq!(model.requests().len(), model_calls, "no model call");
    assert_eq!(shop.searches.lock().unwrap().last().unwrap(), "usb cable");
    assert_eq!(
        *shop.orders.lock().unwrap(),
        ["usb-cable", "usb-cable"],
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&replayed.stdout).starts_with("Bought: Order placed: usb-cable"),
        "the recorded result is printed"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let actions = report["actions"].as_array().unwrap();
    let names: Vec<&str> = actions
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["navigate", "input", "click", "click", "done"],
        "{report}"
    );
    assert_eq!(report["success"], true);
    for action in &actions[1..4] {
        assert_eq!(action["outcome"], "ok", "{action}");
        // Inserted elements shifted every index after them: each was found again.
        assert_ne!(action["index"], action["recorded_index"], "{action}");
        assert_eq!(action["matched_by"], "hash", "{action}");
    }
    assert_eq!(actions[4]["outcome"], "skipped");
    assert!(stderr.contains("found again by identity hash"), "{stderr}");

    // 3. The product is gone: the replay stops with a clear error instead of buying another.
    shop.set_version(2);
    let failed = browserd(&[
        "replay",
        history.to_str().unwrap(),
        "--allow-loopback",
        "--max-retries",
        "1",
        "--retry-delay-ms",
        "50",
    ])
    .await;
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("element not found") && stderr.contains("Buy USB cable"),
        "{stderr}"
    );
    assert_eq!(
        shop.orders.lock().unwrap().len(),
        2,
        "nothing else was bought"
    );

    // 4. Not a history: a clear error.
    let bogus = dir.path().join("bogus.json");
    std::fs::write(&bogus, "{\"steps\": []}").unwrap();
    let refused = browserd(&["replay", bogus.to_str().unwrap()]).await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is not an AgentHistory JSON"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
