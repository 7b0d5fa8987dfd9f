//! A skill's execution against the agent's run of the same task, in the same run: one
//! `browserd serve` (real Postgres, real Chromium), the local orders app's public desk, and the
//! scripted model (`orders_brain`) answering after `BENCH_MODEL_DELAY_MS` (300, as
//! `service_load`). The workflow has three model steps: search for the order (type, click),
//! open its row (the row that shows it), read the status and report. A skill is generated once
//! from `Find order {{order=1042}}`; then `BENCH_RUNS` (5) rounds, each an agent task and a skill
//! execution for the same order (orders alternate), one at a time. Printed: per side the median
//! wall time (POST → the task's end, on its event stream) and model calls, and their ratio.
//! The target: an execution ≤ 1/5 of the agent's wall time and 0 model calls.

use std::time::{Duration, Instant};

use browserd_tests::orders_app::{OrdersApp, orders_brain};
use browserd_tests::{Client, MockModel, Process, TestDb, create_key};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(300);
const ORDERS: [&str; 4] = ["2077", "3150", "4411", "1042"];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Posts `body` to `path`, waits for the task's end; wall seconds, model calls, the task.
async fn timed(client: &Client, model: &MockModel, path: &str, body: Value) -> (f64, usize, Value) {
    let before = model.requests().len();
    let started = Instant::now();
    let (status, task) = client.post(path, body).await;
    assert!(status == 201 || status == 202, "{path}: {status} {task}");
    let id = task["id"].as_str().unwrap().to_owned();
    client.events(&id, 0).await.until_closed(LIMIT).await;
    let wall = started.elapsed().as_secs_f64();
    (
        wall,
        model.requests().len() - before,
        client.task(&id).await,
    )
}

#[tokio::main]
async fn main() {
    let runs = env_u64("BENCH_RUNS", 5) as usize;
    let delay = Duration::from_millis(env_u64("BENCH_MODEL_DELAY_MS", 300));
    let (site, _app) = OrdersApp::start().await;
    let model = MockModel::start_on_requests(orders_brain(), delay).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    let prompt = |order: &str| {
        format!("Go to http://{site}/public and Find order {order}, then report its status")
    };

    let (status, skill) = client
        .post(
            "/v1/skills",
            json!({"prompt": prompt("{{order=1042}}"), "use_vision": false}),
        )
        .await;
    assert_eq!(status, 201, "{skill}");
    let skill_id = skill["id"].as_str().unwrap().to_owned();
    let task = skill["generation_task_id"].as_str().unwrap().to_owned();
    client.events(&task, 0).await.until_closed(LIMIT).await;
    let (_, skill) = client.get(&format!("/v1/skills/{skill_id}")).await;
    assert_eq!(skill["status"], "finished", "{skill}");

    let (mut agent_walls, mut skill_walls) = (Vec::new(), Vec::new());
    let (mut agent_calls, mut skill_calls) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let order = ORDERS[round % ORDERS.len()];
        let (wall, calls, task) = timed(
            &client,
            &model,
            "/v1/tasks",
            json!({"task": prompt(order), "use_vision": false}),
        )
        .await;
        assert_eq!(task["is_success"], true, "{task}");
        agent_walls.push(wall);
        agent_calls.push(calls as f64);
        let (wall, calls, task) = timed(
            &client,
            &model,
            &format!("/v1/skills/{skill_id}/runs"),
            json!({"parameters": {"order": order}}),
        )
        .await;
        assert_eq!(task["is_success"], true, "{task}");
        assert_eq!(
            task["output"],
            format!(
                "Order {order}: {}",
                browserd_tests::orders_app::status_of(order)
            )
        );
        skill_walls.push(wall);
        skill_calls.push(calls as f64);
        println!(
            "round {}: order {order}: agent {:.2} s ({} calls), skill {:.2} s ({} calls)",
            round + 1,
            agent_walls[round],
            agent_calls[round],
            skill_walls[round],
            skill_calls[round]
        );
    }
    let agent = median(&mut agent_walls);
    let executed = median(&mut skill_walls);
    println!(
        "medians of {runs}, model delay {} ms: agent {agent:.2} s, {} model calls; skill execution {executed:.2} s, {} model calls; wall-time ratio skill/agent {:.3}",
        delay.as_millis(),
        median(&mut agent_calls),
        median(&mut skill_calls),
        executed / agent
    );
}
