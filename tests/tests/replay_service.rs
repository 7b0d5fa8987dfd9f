//! `POST /v1/tasks {"replay_of": id}`: a task recorded through the service (real Chromium,
//! local shop, mock model) is replayed by a worker without a model after the shop changed so
//! that every index shifts; each replayed action is a persisted, streamed step that says how
//! its element was found again, and the replay report says the same. The refusals (another
//! key's task, a running one, one without steps, fields a replay does not use) and a replay
//! whose target is gone (failed, with the precise error) are checked too.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::cable_shop::{CableShop, button_labelled};
use browserd_tests::{
    Client, MockModel, Process, TestDb, create_key, done_reply, index_of, reply, stored_history,
    stored_steps,
};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(120);

/// The recording's model: search (the query is the task's secret), buy the USB cable, report.
/// On the hold page it waits, so that task stays running.
fn shopper() -> browserd_tests::Brain {
    Arc::new(|page: &str| {
        if page.contains("Please hold") {
            return reply("wait", json!([{"wait": {"seconds": 1}}]));
        }
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
                    {"input": {"index": input, "text": "<secret>query</secret>", "clear": true}},
                    {"click": {"index": button}}
                ]),
            ),
            _ => done_reply(&format!("lost on:\n{page}"), false),
        }
    })
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let kind = e["kind"].as_str().unwrap_or("").to_owned();
            if kind == "status" {
                format!("status:{}", e["payload"]["status"].as_str().unwrap_or(""))
            } else {
                kind
            }
        })
        .collect()
}

/// `(status, error code, error field)` of a refused create.
async fn refused(client: &Client, body: Value) -> (u16, Value) {
    let (status, body) = client.post("/v1/tasks", body).await;
    (status, body["error"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_recorded_by_the_service_is_replayed_by_a_worker_without_a_model() {
    let (addr, shop) = CableShop::start().await;
    let model = MockModel::start(shopper(), Duration::ZERO).await;
    let db = TestDb::create().await;
    // One task at a time: a second task waits queued while the first runs.
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--concurrency", "1"],
    )
    .await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let other = Client::new(server.address(), &create_key(&db).await);

    // 1. Sources that cannot be replayed: a running task (409), a task stopped before its
    //    first step (422), an unknown id (404).
    let hold = client
        .create_task(
            json!({"task": "Wait on the hold page", "start_url": format!("http://{addr}/hold"),
                            "use_vision": false}),
        )
        .await;
    client
        .wait_status(&hold, &["running"], Duration::from_secs(60))
        .await;
    let never_ran = client.create_task(json!({"task": "queued"})).await;
    let (status, stopped) = client
        .post(&format!("/v1/tasks/{never_ran}/stop"), json!({}))
        .await;
    assert_eq!((status, &stopped["status"]), (200, &json!("stopped")));
    let (status, error) = refused(&client, json!({"replay_of": hold})).await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["code"], "replay_source_not_ended");
    assert_eq!(error["current_status"], "running");
    assert!(
        error["message"].as_str().unwrap().contains("is running"),
        "{error}"
    );
    let (status, error) = refused(&client, json!({"replay_of": never_ran})).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["field"], "replay_of");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("recorded no steps with actions"),
        "{error}"
    );
    let (status, error) = refused(&client, json!({"replay_of": uuid::Uuid::new_v4()})).await;
    assert_eq!((status, &error["code"]), (404, &json!("task_not_found")));
    let (status, _) = client
        .post(&format!("/v1/tasks/{hold}/stop"), json!({}))
        .await;
    assert_eq!(status, 200);

    // 2. Record: the agent searches (typing the secret) and buys the USB cable.
    let query = "usb cable";
    let recorded = client
        .create_task(json!({
            "task": "Buy a USB cable; search for <secret>query</secret>",
            "start_url": format!("http://{addr}/"),
            "use_vision": false,
            "max_steps": 6,
            "allowed_domains": ["127.0.0.1"],
            "secrets": {"query": query},
            "metadata": {"run": "recording"},
        }))
        .await;
    client.events(&recorded, 0).await.until_closed(LONG).await;
    let source = client.task(&recorded).await;
    assert_eq!(source["status"], "finished", "{source}\n{}", server.logs());
    assert_eq!(*shop.orders.lock().unwrap(), ["usb-cable"]);
    let model_calls = model.requests().len();

    // 3. Refusals about the recorded task: another key's (404, as for any task of another
    //    key), fields a replay does not use, options out of range, options without replay_of.
    let (status, error) = refused(&other, json!({"replay_of": recorded})).await;
    assert_eq!((status, &error["code"]), (404, &json!("task_not_found")));
    for (body, field) in [
        (json!({"replay_of": recorded, "model": "mock"}), "model"),
        (
            json!({"replay_of": recorded, "start_url": "http://example.com/"}),
            "start_url",
        ),
        (
            json!({"replay_of": recorded, "replay": {"max_retries": 11}}),
            "replay.max_retries",
        ),
        (
            json!({"task": "t", "replay": {"skip_failures": true}}),
            "replay",
        ),
        (json!({"start_url": "http://example.com/"}), "task"),
    ] {
        let (status, error) = refused(&client, body.clone()).await;
        assert_eq!(status, 422, "{body}: {error}");
        assert_eq!(error["field"], field, "{body}: {error}");
    }

    // 4. The shop changes so that every index shifts; replay without the model. The source's
    //    secrets were wiped when it ended: the replay brings its own.
    shop.set_version(1);
    let (status, created) = client
        .post(
            "/v1/tasks",
            json!({"replay_of": recorded, "secrets": {"query": query}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["task"], source["task"],
        "the source's text by default"
    );
    assert_eq!(created["model"], Value::Null, "no model for a replay");
    assert_eq!(created["allowed_domains"], source["allowed_domains"]);
    let replay = created["id"].as_str().unwrap().to_owned();
    let events = client.events(&replay, 0).await.until_closed(LONG).await;
    let task = client.task(&replay).await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert_eq!(task["is_success"], true);
    assert_eq!(task["output"], source["output"], "the recorded result");
    assert_eq!(task["usage"]["invocations"], 0, "{task}");
    assert_eq!(
        model.requests().len(),
        model_calls,
        "the replay made no model request"
    );
    assert_eq!(shop.searches.lock().unwrap().last().unwrap(), query);
    assert_eq!(*shop.orders.lock().unwrap(), ["usb-cable", "usb-cable"]);
    let kinds = kinds(&events);
    for kind in ["step_started", "action_result", "step", "result"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
    assert!(!kinds.iter().any(|k| k == "model_output"), "{kinds:?}");
    assert_eq!(kinds.last().unwrap(), "status:finished");

    // Its steps show the elements found again: the recorded actions with today's indices,
    // each result carrying its replay entry, a screenshot per step.
    let steps = stored_steps(&client, &replay).await;
    let numbers: Vec<i64> = steps
        .iter()
        .map(|s| s["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, (0..steps.len() as i64).collect::<Vec<_>>());
    let mut refound = Vec::new();
    for step in &steps {
        assert!(step["screenshot_url"].is_string(), "{step}");
        let actions = step["model_output"]["action"].as_array().unwrap();
        for (action, result) in actions.iter().zip(step["results"].as_array().unwrap()) {
            let entry = &result["metadata"]["replay"];
            assert!(entry.is_object(), "{result}");
            let params = action.as_object().unwrap().values().next().unwrap();
            if entry["matched_by"] == "hash" {
                assert_ne!(entry["index"], entry["recorded_index"], "{entry}");
                assert_eq!(params["index"], entry["index"], "{action} {entry}");
                refound.push(entry["action"].as_str().unwrap().to_owned());
            }
            assert!(
                !action.to_string().contains(query),
                "no secret value in {action}"
            );
        }
    }
    assert_eq!(refound, ["input", "click", "click"], "{steps:#?}");
    let shot = steps[1]["screenshot_url"].as_str().unwrap();
    let (status, content_type, bytes) = client.get_bytes(shot).await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("image/") && bytes.len() > 100);

    let (status, report) = client
        .get(&format!("/v1/tasks/{replay}/replay-report"))
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["replay_of"], json!(recorded));
    assert_eq!(report["success"], true);
    assert_eq!(report["options"]["max_retries"], 2);
    let names: Vec<&str> = report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["navigate", "input", "click", "click", "done"],
        "{report}"
    );
    assert_eq!(report["actions"][4]["outcome"], "skipped");
    assert_eq!(report["actions"][2]["replay_step"], 1, "{report}");
    let (status, error) = client
        .get(&format!("/v1/tasks/{recorded}/replay-report"))
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (404, &json!("not_a_replay"))
    );

    // 5. The product is gone: the replay fails at the click with the precise error and buys
    //    nothing else.
    shop.set_version(2);
    let failing = client
        .create_task(json!({
            "replay_of": recorded,
            "secrets": {"query": query},
            "replay": {"max_retries": 1, "retry_delay_ms": 50},
        }))
        .await;
    let task = client
        .wait_status(&failing, &["finished", "failed"], LONG)
        .await;
    assert_eq!(task["status"], "failed", "{task}");
    let error = task["error"].as_str().unwrap();
    assert!(
        error.contains("element not found") && error.contains("Buy USB cable"),
        "{error}"
    );
    assert_eq!(shop.orders.lock().unwrap().len(), 2, "nothing else bought");
    let (_, report) = client
        .get(&format!("/v1/tasks/{failing}/replay-report"))
        .await;
    assert_eq!(report["success"], false, "{report}");
    let last = report["actions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["action"].as_str(), last["outcome"].as_str()),
        (Some("click"), Some("failed"))
    );
    assert_eq!(last["attempts"], 2, "{last}");
    assert_eq!(
        model.requests().len(),
        model_calls,
        "still no model request"
    );
    // The secret typed by the replays is stored nowhere.
    let history = stored_history(&client, &replay).await;
    assert!(history.to_string().contains("<secret>query</secret>"));
}
