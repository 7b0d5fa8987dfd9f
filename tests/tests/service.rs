//! The service runs its tasks: whole-system tests with real browserd processes (api, worker,
//! serve), real Postgres, real Chromium on local pages, and a mock OpenAI-compatible model.
//! One scenario at a time: every worker launches its own Chrome on a 2-core machine.

use std::sync::Arc;
use std::time::Duration;

use browserd_agent::AgentHistoryList;
use browserd_tests::{
    Client, MockModel, Process, Site, TestDb, assert_steps_contiguous, create_key, done_reply,
    index_of, reply, stairs_brain, stored_history, stored_steps,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

static ONE_SCENARIO_AT_A_TIME: Semaphore = Semaphore::const_new(1);

const LONG: Duration = Duration::from_secs(90);

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

fn assert_contiguous_seqs(events: &[Value]) {
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"],
            json!(i as i64 + 1),
            "seq gap or duplicate at {i}: {events:?}"
        );
    }
}

async fn pg_dump(db: &TestDb) -> String {
    let output = tokio::process::Command::new("pg_dump")
        .arg("--data-only")
        .arg(&db.url)
        .output()
        .await
        .expect("pg_dump runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_task_runs_with_every_field_and_is_persisted_and_streamed() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let brain_blocked = format!("http://localhost:{}/stairs/1", site.addr.port());
    let tried = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let brain = Arc::new(move |page: &str| {
        if page.contains("Top reached") {
            let code = regex::Regex::new(r"Top reached: (\w+)")
                .unwrap()
                .captures(page)
                .unwrap()[1]
                .to_owned();
            return reply(
                "report the code",
                json!([{"done": {"data": {"code": code}, "success": true}}]),
            );
        }
        if page.contains("Stair 1 of") && !tried.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // Once: try a host the task's allowed_domains do not list.
            return reply(
                "try the other host",
                json!([{"navigate": {"url": brain_blocked, "new_tab": false}}]),
            );
        }
        match index_of(page, "a", r"/>\s*Next") {
            Some(i) => reply("climb", json!([{"click": {"index": i}}])),
            None => done_reply("lost", false),
        }
    });
    let model = MockModel::start(brain, Duration::from_millis(20)).await;
    let db = TestDb::create().await;
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--concurrency", "2"],
    )
    .await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    let secret = format!("s3cret-{}", uuid::Uuid::new_v4().simple());
    let id = client
        .create_task(json!({
            "task": "Climb the stairs and report the code at the top. The password is <secret>pw</secret>.",
            "start_url": site.url("/stairs/1?top=3"),
            "model": "mock",
            "allowed_domains": ["127.0.0.1"],
            "prohibited_domains": ["evil.example"],
            "output_schema": {"type": "object", "properties": {"code": {"type": "string"}},
                              "required": ["code"]},
            "use_vision": false,
            "max_actions_per_step": 3,
            "max_failures": 4,
            "timeout_s": 600,
            "max_steps": 12,
            "max_tokens": 1_000_000,
            "max_cost_usd": 50.0,
            "secrets": {"pw": secret},
            "metadata": {"customer": "acme"}
        }))
        .await;
    let mut stream = client.events(&id, 0).await;
    let events = stream.until_closed(LONG).await;
    assert_contiguous_seqs(&events);
    let kinds = kinds(&events);
    assert_eq!(kinds.first().map(String::as_str), Some("status:queued"));
    assert_eq!(kinds.get(1).map(String::as_str), Some("status:running"));
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("status:finished"),
        "{kinds:?}\n{events:#?}"
    );
    assert_eq!(kinds[kinds.len() - 2], "result");
    for kind in ["step_started", "model_output", "action_result", "step"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }

    let task = client.task(&id).await;
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["is_success"], true);
    let output: Value = serde_json::from_str(task["output"].as_str().unwrap()).unwrap();
    assert_eq!(output, json!({"code": "CODE3X"}));
    assert_eq!(task["metadata"], json!({"customer": "acme"}));
    assert_eq!(task["max_tokens"], 1_000_000);
    assert!(
        task["usage"]["invocations"].as_u64().unwrap() >= 3,
        "{task}"
    );

    // Steps, their events, the screenshots and the history agree.
    let steps = stored_steps(&client, &id).await;
    assert_steps_contiguous(&steps);
    let step_events: Vec<&Value> = events.iter().filter(|e| e["kind"] == "step").collect();
    assert_eq!(step_events.len(), steps.len());
    for (event, step) in step_events.iter().zip(&steps) {
        assert_eq!(event["payload"]["number"], step["number"]);
        assert_eq!(event["payload"]["screenshot_url"], step["screenshot_url"]);
    }
    let shot = steps[1]["screenshot_url"]
        .as_str()
        .expect("step 1 has a screenshot");
    let (status, content_type, bytes) = client.get_bytes(shot).await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("image/"), "{content_type}");
    assert!(bytes.len() > 100);
    let history = stored_history(&client, &id).await;
    let parsed: AgentHistoryList =
        serde_json::from_value(history.clone()).expect("the history has the CLI's shape");
    assert_eq!(parsed.history.len(), steps.len());
    for (i, item) in parsed.history.iter().enumerate() {
        assert_eq!(item.metadata.step_number as usize, i);
    }
    assert!(parsed.is_done() && parsed.is_successful() == Some(true));
    // The browser got the domain lists: the other host was blocked at step 1.
    let first = &parsed.history[1];
    assert_eq!(
        first.model_output.as_ref().unwrap().action[0].name,
        "navigate"
    );
    assert!(first.result[0].error.is_some(), "{:?}", first.result);
    // The model got no screenshot (use_vision false), the secret's name but never its value.
    let requests = model.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        let text = request.to_string();
        assert!(
            !text.contains("image_url"),
            "no image with use_vision=false"
        );
        assert!(!text.contains(&secret));
    }
    assert!(requests[0].to_string().contains("pw"));

    // The secret is nowhere: not in the database (pg_dump), logs, events, steps or history.
    let dump = pg_dump(&db).await;
    assert!(dump.contains("CODE3X"), "the dump holds the run");
    assert!(!dump.contains(&secret), "secret in pg_dump");
    assert!(!server.logs().contains(&secret));
    assert!(!serde_json::to_string(&events).unwrap().contains(&secret));
    assert!(!history.to_string().contains(&secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_typed_into_the_page_and_never_stored() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let brain = Arc::new(|page: &str| {
        if page.contains("Balance: 42") {
            return done_reply("The balance is 42 EUR", true);
        }
        match (
            index_of(page, "input", "name=username"),
            index_of(page, "input", "type=password"),
            index_of(page, "button", "signin"),
        ) {
            (Some(user), Some(pass), Some(button)) => reply(
                "log in",
                json!([
                    {"input": {"index": user, "text": "alice"}},
                    {"input": {"index": pass, "text": "<secret>pw</secret>"}},
                    {"click": {"index": button}}
                ]),
            ),
            _ => done_reply("no form", false),
        }
    });
    let model = MockModel::start(brain, Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let secret = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let id = client
        .create_task(json!({
            "task": "Log in as alice with the password <secret>pw</secret>",
            "start_url": site.url("/login"),
            "secrets": {format!("http://{}", site.addr): {"pw": secret}},
        }))
        .await;
    let events = client.events(&id, 0).await.until_closed(LONG).await;
    let task = client.task(&id).await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert_eq!(
        site.logins.lock().unwrap().clone(),
        [("alice".to_owned(), secret.clone())],
        "the page received the real value"
    );
    let history = stored_history(&client, &id).await;
    let dump = pg_dump(&db).await;
    for (what, text) in [
        ("pg_dump", dump),
        ("logs", server.logs()),
        ("events", serde_json::to_string(&events).unwrap()),
        ("history", history.to_string()),
        (
            "model requests",
            serde_json::to_string(&model.requests()).unwrap(),
        ),
    ] {
        assert!(!text.contains(&secret), "secret found in {what}");
    }
    // The sealed value is gone with the terminal status.
    let pool = db.pool().await;
    let sealed: Option<Vec<u8>> =
        sqlx::query_scalar("select secrets_sealed from tasks where id = $1::uuid")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(sealed.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_is_replaced_and_clients_of_any_api_follow_the_task() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start(stairs_brain(), Duration::from_millis(300)).await;
    let db = TestDb::create().await;
    let api_a = Process::start(&db, model.addr, "api", &[]).await;
    let api_b = Process::start(&db, model.addr, "api", &[]).await;
    // A lease long enough that a loaded machine's stalls do not expire it before the kill
    // (heartbeats come every third of it); short enough that the survivor takes over soon.
    let worker_args = [
        "--allow-loopback",
        "--lease-s",
        "8",
        "--poll-interval-ms",
        "500",
    ];
    let mut workers = [
        Process::start(&db, model.addr, "worker", &worker_args).await,
        Process::start(&db, model.addr, "worker", &worker_args).await,
    ];
    let key = create_key(&db).await;
    let client_a = Client::new(api_a.address(), &key);
    let client_b = Client::new(api_b.address(), &key);
    let id = client_b
        .create_task(json!({
            "task": "Climb to the top and report the code",
            "start_url": site.url("/stairs/1?top=8"),
            "use_vision": false,
        }))
        .await;
    // A client of api A follows the task that api B accepted.
    let mut stream = client_a.events(&id, 0).await;
    let mut events = Vec::new();
    while let Some(event) = stream.next(LONG).await {
        let third_step = event["kind"] == "step" && event["payload"]["number"] == 3;
        events.push(event);
        if third_step {
            break;
        }
    }
    // kill -9 the worker that holds the task.
    let pool = db.pool().await;
    let owner: String = sqlx::query_scalar("select lease_owner from tasks where id = $1::uuid")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let victim = workers
        .iter()
        .position(|w| owner.contains(&format!(":{}:", w.pid())))
        .expect("the lease owner is one of our workers");
    workers[victim].signal("KILL").await;
    workers[victim].wait(Duration::from_secs(10)).await;
    events.extend(stream.until_closed(LONG).await);
    assert_contiguous_seqs(&events);
    let kinds = kinds(&events);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("status:finished"),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|k| k == "status:queued"),
        "requeued after the lease expired"
    );

    let task = client_a.task(&id).await;
    assert_eq!(task["attempts"], 2, "{task}");
    assert!(
        task["output"].as_str().unwrap().contains("CODE8X"),
        "{task}"
    );
    let steps = stored_steps(&client_b, &id).await;
    assert_steps_contiguous(&steps);
    // The history reads as one run: one initial navigation, then model steps that climb
    // stair after stair to the top.
    let history = stored_history(&client_a, &id).await;
    let history: AgentHistoryList = serde_json::from_value(history).unwrap();
    assert_eq!(history.history.len(), steps.len());
    let navigations = history
        .history
        .iter()
        .filter(|h| h.state.title == "Initial Actions")
        .count();
    assert_eq!(navigations, 1, "the resumed run did not start over");
    assert!(history.is_done());
    let survivor = &workers[1 - victim];
    assert!(
        survivor.logs().contains("resuming the task"),
        "{}",
        survivor.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_pause_resume_sigterm_and_a_dropped_listener() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start(stairs_brain(), Duration::from_millis(200)).await;
    let db = TestDb::create().await;
    let api = Process::start(&db, model.addr, "api", &[]).await;
    // The default lease: nothing here waits for one to expire (SIGTERM hands the task back).
    let worker_args = ["--allow-loopback", "--task-grace-s", "20"];
    let mut worker = Process::start(&db, model.addr, "worker", &worker_args).await;
    let client = Client::new(api.address(), &create_key(&db).await);
    let long_task = |top: u32| {
        json!({
            "task": "Climb to the top and report the code",
            "start_url": site.url(&format!("/stairs/1?top={top}")),
            "use_vision": false,
            "max_steps": 60,
        })
    };

    // Pause and resume while running.
    let id = client.create_task(long_task(40)).await;
    let mut stream = client.events(&id, 0).await;
    wait_for_step(&mut stream, 2).await;
    let (status, _) = client
        .post(&format!("/v1/tasks/{id}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    let steps_at_pause = step_count(&client, &id).await;
    // The worker finishes at most the step in flight, then nothing moves.
    let mut last_seen = 0;
    let quiet = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some(event) = stream.next(LONG).await {
            if event["kind"] == "step" {
                last_seen = event["payload"]["number"].as_i64().unwrap();
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "the stream stays open while paused");
    let steps_when_paused = step_count(&client, &id).await;
    assert!(
        steps_when_paused <= steps_at_pause + 2,
        "{steps_when_paused} steps after pausing at {steps_at_pause} (last seen {last_seen})"
    );
    let (status, task) = client
        .post(&format!("/v1/tasks/{id}/resume"), json!({}))
        .await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["status"], "running");
    wait_for_step(&mut stream, steps_when_paused as i64 + 1).await;

    // Stop: the task ends `stopped` at once, with its history kept.
    let (status, task) = client
        .post(&format!("/v1/tasks/{id}/stop"), json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(task["status"], "stopped");
    let rest = stream.until_closed(LONG).await;
    assert_eq!(rest.last().unwrap()["payload"]["status"], "stopped");
    assert!(step_count(&client, &id).await > steps_when_paused);

    // SIGTERM during a step: the worker finishes the step, hands the task back and exits 0;
    // a new worker resumes it.
    let id = client.create_task(long_task(20)).await;
    let mut stream = client.events(&id, 0).await;
    wait_for_step(&mut stream, 2).await;
    worker.signal("TERM").await;
    assert_eq!(
        worker.wait(Duration::from_secs(40)).await,
        Some(0),
        "{}",
        worker.logs()
    );
    assert!(
        worker.logs().contains("handed the task back"),
        "{}",
        worker.logs()
    );
    let task = client.task(&id).await;
    assert_eq!(task["status"], "queued", "{task}");
    let worker = Process::start(&db, model.addr, "worker", &worker_args).await;
    let task = client.wait_status(&id, &["finished"], LONG).await;
    assert!(
        task["output"].as_str().unwrap().contains("CODE20X"),
        "{task}"
    );
    assert_eq!(task["attempts"], 2, "{task}");
    let steps = stored_steps(&client, &id).await;
    assert_steps_contiguous(&steps);

    // The LISTEN connections are dropped: claims and events still flow.
    let pool = db.pool().await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and query ilike 'listen%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(killed.len() >= 2, "the api's and the worker's listeners");
    let id = client.create_task(long_task(3)).await;
    let events = client.events(&id, 0).await.until_closed(LONG).await;
    assert_eq!(
        events.last().unwrap()["payload"]["status"],
        "finished",
        "{}",
        worker.logs()
    );
}

async fn wait_for_step(stream: &mut browserd_tests::EventStream, number: i64) {
    while let Some(event) = stream.next(LONG).await {
        if event["kind"] == "step" && event["payload"]["number"].as_i64() >= Some(number) {
            return;
        }
    }
    panic!("the task ended before step {number}");
}

async fn step_count(client: &Client, id: &str) -> usize {
    stored_steps(client, &id).await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_admission_and_bad_input() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let site = Site::start().await;
    let model = MockModel::start(stairs_brain(), Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    // The api knows a model `other` that the worker does not.
    let config = std::env::temp_dir().join(format!("browserd-other-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &config,
        "[models.other]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"other\"\n",
    )
    .unwrap();
    let api = Process::start_with_env(
        &db,
        model.addr,
        "api",
        &["--max-queued-tasks", "3"],
        &[("BROWSERD_CONFIG", config.to_str().unwrap())],
    )
    .await;
    let _ = std::fs::remove_file(&config);
    let client = Client::new(api.address(), &create_key(&db).await);

    // Bad input is a 422 naming the field, not a failed run.
    for (body, field) in [
        (json!({"task": "t", "model": "nope"}), "model"),
        (
            json!({"task": "t", "output_schema": {"type": 5}}),
            "output_schema",
        ),
        (
            json!({"task": "t", "start_url": "https://shop.example.com/",
                   "allowed_domains": ["docs.example.com"]}),
            "start_url",
        ),
        (
            json!({"task": "t", "start_url": "https://shop.example.com/",
                   "prohibited_domains": ["*.example.com"]}),
            "start_url",
        ),
        (json!({"task": "t", "max_tokens": 0}), "max_tokens"),
        (json!({"task": "t", "max_cost_usd": -1}), "max_cost_usd"),
    ] {
        let (status, error) = client.post("/v1/tasks", body.clone()).await;
        assert_eq!(status, 422, "{body} → {error}");
        assert_eq!(error["error"]["field"], field, "{body} → {error}");
    }

    // Queue positions, then admission control once 3 tasks wait.
    let stairs = |top: u32| {
        json!({"task": "Climb", "start_url": site.url(&format!("/stairs/1?top={top}")),
               "use_vision": false})
    };
    let tokens = client
        .create_task(
            json!({"task": "Climb", "start_url": site.url("/stairs/1?top=20"),
                            "use_vision": false, "max_tokens": 2500}),
        )
        .await;
    let other = client
        .create_task(json!({"task": "Climb", "model": "other"}))
        .await;
    let third = client
        .create_task(
            // Stairs no machine climbs in 10 s; 10 s leaves a slow one time for steps.
            json!({"task": "Climb", "start_url": site.url("/stairs/1?top=5000"),
                            "use_vision": false, "max_steps": 6000, "timeout_s": 10}),
        )
        .await;
    assert_eq!(client.task(&third).await["queue_position"], 3);
    let response = client
        .http
        .post(format!("{}/v1/tasks", client.base))
        .bearer_auth(&client.key)
        .json(&stairs(2))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "queue_full");

    // A worker drains the queue: budgets end tasks with a reason naming them; a model the
    // worker does not have fails at once.
    let worker = Process::start(&db, model.addr, "worker", &["--allow-loopback"]).await;
    let task = client.wait_status(&other, &["failed"], LONG).await;
    assert!(task["error"].as_str().unwrap().contains("other"), "{task}");
    assert_eq!(
        step_count(&client, &other).await,
        0,
        "no browser step was taken"
    );
    let task = client.wait_status(&tokens, &["failed"], LONG).await;
    assert!(
        task["error"].as_str().unwrap().contains("max_tokens"),
        "{task}"
    );
    let task = client.wait_status(&third, &["failed"], LONG).await;
    assert!(
        task["error"].as_str().unwrap().contains("timeout_s"),
        "{task}"
    );
    assert!(
        step_count(&client, &third).await >= 1,
        "it ran until the budget ended it"
    );
    let last = client.create_task(stairs(2)).await;
    let task = client
        .wait_status(&last, &["finished", "failed"], LONG)
        .await;
    assert_eq!(task["status"], "finished", "{task}\n{}", worker.logs());
}
