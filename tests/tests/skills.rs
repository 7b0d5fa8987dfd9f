//! Skills end to end (`/v1/skills`, real Postgres, real Chromium, the scripted mock model): a
//! skill generated once on a local orders app from `Find order {{order=1042}} …`, then run with
//! other orders — the row of the new order opened (the server saw it), its status read from the
//! page, zero model calls; the app changed (the "View" button becomes an "Open" link, the status
//! field moves, a confirmation page appears) — healed with at most two model calls into a new
//! version, after which runs cost none again; a change nobody can heal fails naming the step;
//! rollback; a skill made from an ended task; the task secret typed during generation stays a
//! `<secret>` placeholder and is no parameter; and the refusals (422 naming the parameter, 409,
//! another key's skill 404).

use std::sync::atomic::Ordering;
use std::time::Duration;

use browserd_tests::orders_app::{ACCESS_CODE, OrdersApp, orders_brain};
use browserd_tests::{Client, MockModel, Process, TestDb, create_key, stored_history};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(180);

/// Waits for the generation task's end (its event stream closes); the skill's row was written
/// in the transaction of that end. Answers the skill's view.
async fn generated(client: &Client, skill: &str, task: &str) -> Value {
    client.events(task, 0).await.until_closed(LONG).await;
    let (status, view) = client.get(&format!("/v1/skills/{skill}")).await;
    assert_eq!(status, 200, "{view}");
    view
}

/// Runs the skill with `order`; answers the ended task and the model calls it made.
async fn run(client: &Client, model: &MockModel, skill: &str, order: &str) -> (Value, usize) {
    let before = model.requests().len();
    let (status, task) = client
        .post(
            &format!("/v1/skills/{skill}/runs"),
            json!({"parameters": {"order": order}, "secrets": {"code": ACCESS_CODE}}),
        )
        .await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    client.events(&id, 0).await.until_closed(LONG).await;
    (client.task(&id).await, model.requests().len() - before)
}

fn invocations(task: &Value) -> u64 {
    task["usage"]["invocations"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_learned_once_runs_without_a_model_heals_and_rolls_back() {
    let (addr, app) = OrdersApp::start().await;
    let model = MockModel::start_on_requests(orders_brain(), Duration::ZERO).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let other = Client::new(server.address(), &create_key(&db).await);

    // Refusals before anything runs: a malformed declaration, both or neither source.
    for (body, field) in [
        (json!({"prompt": "Find order {{order=1042"}), "prompt"),
        (
            json!({"prompt": "x", "from_task": uuid::Uuid::new_v4()}),
            "from_task",
        ),
        (json!({"goal": "x"}), "prompt"),
    ] {
        let (status, error) = client.post("/v1/skills", body.clone()).await;
        assert_eq!(
            (status, &error["error"]["field"]),
            (422, &json!(field)),
            "{body}: {error}"
        );
    }

    // 1. Generate once: the agent searches 1042 (typing the access code, a task secret), opens
    //    its row and reports its status; the model writes the result reader.
    let (status, skill) = client
        .post(
            "/v1/skills",
            json!({
                "prompt": "Find order {{order=1042}} and report its status. The access code is <secret>code</secret>.",
                "title": "Order status",
                "start_url": format!("http://{addr}/"),
                "allowed_domains": ["127.0.0.1"],
                "secrets": {"code": ACCESS_CODE},
                "use_vision": false,
                "max_steps": 8,
            }),
        )
        .await;
    assert_eq!(status, 201, "{skill}");
    assert_eq!(skill["status"], "generating");
    assert_eq!(skill["parameters"][0]["name"], "order");
    let id = skill["id"].as_str().unwrap().to_owned();
    let generation = skill["generation_task_id"].as_str().unwrap().to_owned();
    let (status, early) = client
        .post(
            &format!("/v1/skills/{id}/runs"),
            json!({"parameters": {"order": "1"}}),
        )
        .await;
    if status != 202 {
        assert_eq!(
            (status, &early["error"]["code"]),
            (409, &json!("skill_not_ready"))
        );
    }
    let skill = generated(&client, &id, &generation).await;
    assert_eq!(skill["status"], "finished", "{skill}\n{}", server.logs());
    assert_eq!(skill["current_version"], 1);
    assert_eq!(skill["versions"][0]["origin"], "generated");
    assert_eq!(app.opened(), ["1042"]);
    let gen_task = client.task(&generation).await;
    assert_eq!(gen_task["output"], "Order 1042: Shipped");
    let script = &skill["versions"][0]["script"];
    assert_eq!(
        script["result"]["kind"], "script",
        "the learned reader: {script}"
    );

    // 6. The secret typed during generation stays a placeholder and is no parameter.
    let (_, versions) = client.get(&format!("/v1/skills/{id}/versions")).await;
    let text = versions.to_string();
    assert!(text.contains("<secret>code</secret>"), "{text}");
    assert!(
        !text.contains(ACCESS_CODE),
        "the secret's value is stored nowhere"
    );
    let names: Vec<&str> = skill["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["order"], "{skill}");

    // Refusals of a run: parameters named, another key's skill not found.
    for (parameters, named) in [
        (json!({}), "order"),
        (json!({"order": "2077", "customer": "Bob"}), "customer"),
    ] {
        let (status, error) = client
            .post(
                &format!("/v1/skills/{id}/runs"),
                json!({"parameters": parameters}),
            )
            .await;
        assert_eq!(
            (status, &error["error"]["field"]),
            (422, &json!("parameters")),
            "{error}"
        );
        assert!(
            error["error"]["message"].as_str().unwrap().contains(named),
            "{error}"
        );
    }
    let (status, _) = other.get(&format!("/v1/skills/{id}")).await;
    assert_eq!(status, 404);
    let (status, error) = other
        .post(
            &format!("/v1/skills/{id}/runs"),
            json!({"parameters": {"order": "2077"}}),
        )
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (404, &json!("skill_not_found"))
    );

    // 1. Run with 2077: its row is the one opened, its status the result, no model call.
    let (task, calls) = run(&client, &model, &id, "2077").await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert_eq!(task["output"], "Order 2077: Delivered");
    assert_eq!(
        app.opened().last().unwrap(),
        "2077",
        "the details of 2077 were opened"
    );
    assert_eq!(calls, 0, "no model call");
    assert_eq!(invocations(&task), 0, "{task}");

    // 2. The buttons become "Open" links and the status field moves: healed once.
    OrdersApp::set(&app.renamed, true);
    OrdersApp::set(&app.moved, true);
    let (task, calls) = run(&client, &model, &id, "3150").await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert_eq!(task["output"], "Order 3150: Processing");
    assert_eq!(app.opened().last().unwrap(), "3150");
    assert!((1..=2).contains(&calls), "{calls} model calls");
    assert_eq!(
        invocations(&task),
        calls as u64,
        "the usage counts the heal calls: {task}"
    );
    let (_, skill) = client.get(&format!("/v1/skills/{id}")).await;
    assert_eq!(skill["current_version"], 2, "{skill}");
    assert_eq!(skill["versions"][1]["origin"], "healed");
    assert!(
        !skill["versions"][1]["healed"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{skill}"
    );

    // 3. Again: the healed version runs without a model.
    let (task, calls) = run(&client, &model, &id, "4411").await;
    assert_eq!(task["output"], "Order 4411: Cancelled", "{task}");
    assert_eq!((calls, invocations(&task)), (0, 0));

    // 4. A confirmation page appears: healed likewise, then free again.
    OrdersApp::set(&app.confirm, true);
    let (task, calls) = run(&client, &model, &id, "1042").await;
    assert_eq!(
        task["output"],
        "Order 1042: Shipped",
        "{task}\n{}",
        server.logs()
    );
    assert!((1..=2).contains(&calls), "{calls} model calls");
    let (task, calls) = run(&client, &model, &id, "2077").await;
    assert_eq!(
        (task["output"].clone(), calls),
        (json!("Order 2077: Delivered"), 0)
    );
    let (_, skill) = client.get(&format!("/v1/skills/{id}")).await;
    assert_eq!(skill["current_version"], 3, "{skill}");

    //    The status field loses its id: the result cannot be read, and the run fails saying so
    //    (never a silent wrong answer).
    OrdersApp::set(&app.unlabelled, true);
    let (task, _) = run(&client, &model, &id, "4411").await;
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("reading the skill's result"),
        "{task}"
    );
    OrdersApp::set(&app.unlabelled, false);

    //    A change nobody can heal: the run fails naming the step; no new version.
    OrdersApp::set(&app.broken, true);
    let (task, calls) = run(&client, &model, &id, "3150").await;
    assert_eq!(task["status"], "failed", "{task}");
    let error = task["error"].as_str().unwrap();
    assert!(
        error.contains("step 2") && error.contains("search results are gone"),
        "the step and why it could not be healed: {error}"
    );
    assert!(calls <= 2, "{calls}");
    let (_, skill) = client.get(&format!("/v1/skills/{id}")).await;
    assert_eq!(skill["current_version"], 3);

    // 5. Rollback restores the previous version, down to the first; then there is none.
    for expected in [2, 1] {
        let (status, skill) = client
            .post(&format!("/v1/skills/{id}/rollback"), json!({}))
            .await;
        assert_eq!(
            (status, &skill["current_version"]),
            (200, &json!(expected)),
            "{skill}"
        );
    }
    let (status, error) = client
        .post(&format!("/v1/skills/{id}/rollback"), json!({}))
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("no_previous_version"))
    );

    // The runs are listed with their results; a disabled skill does not run.
    let (status, runs) = client.get(&format!("/v1/skills/{id}/runs")).await;
    assert_eq!(status, 200);
    assert_eq!(runs["items"].as_array().unwrap().len(), 7, "{runs}");
    let first = runs["items"][6]["id"].as_str().unwrap();
    let (status, one) = client.get(&format!("/v1/skills/{id}/runs/{first}")).await;
    assert_eq!(
        (status, &one["output"]),
        (200, &json!("Order 2077: Delivered"))
    );
    let (status, _) = client
        .patch(&format!("/v1/skills/{id}"), json!({"is_enabled": false}))
        .await;
    assert_eq!(status, 200);
    let (status, error) = client
        .post(
            &format!("/v1/skills/{id}/runs"),
            json!({"parameters": {"order": "2077"}}),
        )
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("skill_disabled"))
    );

    // from_task: a skill made from the ended generation task, replayed once on the original
    // app; it runs with another order without a model.
    for switch in [&app.renamed, &app.confirm, &app.moved, &app.broken] {
        switch.store(false, Ordering::SeqCst);
    }
    let (status, from) = client
        .post(
            "/v1/skills",
            json!({"from_task": generation, "parameters": {"order": "1042"},
                   "secrets": {"code": ACCESS_CODE}}),
        )
        .await;
    assert_eq!(status, 201, "{from}");
    let from_id = from["id"].as_str().unwrap().to_owned();
    let from_task = from["generation_task_id"].as_str().unwrap().to_owned();
    let from = generated(&client, &from_id, &from_task).await;
    assert_eq!(from["status"], "finished", "{from}\n{}", server.logs());
    assert_eq!(from["versions"][0]["origin"], "from_task");
    let (task, calls) = run(&client, &model, &from_id, "4411").await;
    assert_eq!(
        (task["output"].clone(), calls),
        (json!("Order 4411: Cancelled"), 0),
        "{task}"
    );

    // Refine: a new generation with the feedback in its prompt becomes the current version.
    let (status, refining) = client
        .post(
            &format!("/v1/skills/{id}/refine"),
            json!({"feedback": "Report the status word exactly as shown.",
                   "secrets": {"code": ACCESS_CODE}}),
        )
        .await;
    assert_eq!(
        (status, &refining["status"]),
        (202, &json!("generating")),
        "{refining}"
    );
    let refine_task = refining["generation_task_id"].as_str().unwrap().to_owned();
    assert_ne!(refine_task, generation);
    let (status, error) = client
        .post(
            &format!("/v1/skills/{id}/refine"),
            json!({"feedback": "again"}),
        )
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("skill_busy"))
    );
    let refined = generated(&client, &id, &refine_task).await;
    assert_eq!(
        refined["status"],
        "finished",
        "{refined}\n{}",
        server.logs()
    );
    assert_eq!(refined["current_version"], 4, "{refined}");
    assert_eq!(refined["versions"][3]["origin"], "refined");
    let refine_text = client.task(&refine_task).await["task"].clone();
    assert!(
        refine_text
            .as_str()
            .unwrap()
            .contains("Report the status word"),
        "{refine_text}"
    );

    // Cancel stops a generation.
    let (status, cancelled) = client
        .post(
            "/v1/skills",
            json!({"prompt": "Find order {{order=3150}}", "start_url": format!("http://{addr}/")}),
        )
        .await;
    assert_eq!(status, 201, "{cancelled}");
    let cancelled_id = cancelled["id"].as_str().unwrap();
    let (status, view) = client
        .post(&format!("/v1/skills/{cancelled_id}/cancel"), json!({}))
        .await;
    assert_eq!(
        (status, &view["status"]),
        (200, &json!("cancelled")),
        "{view}"
    );
    let (status, error) = client
        .post(&format!("/v1/skills/{cancelled_id}/cancel"), json!({}))
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("skill_not_generating"))
    );

    // No secret value anywhere: not in a version (the healer's steps saw it in a URL), not in
    // the stored steps of a healed run.
    let (_, versions) = client.get(&format!("/v1/skills/{id}/versions")).await;
    assert!(!versions.to_string().contains(ACCESS_CODE), "{versions}");
    assert!(versions.to_string().contains("<secret>code</secret>"));
    let (_, runs) = client.get(&format!("/v1/skills/{id}/runs")).await;
    for run in runs["items"].as_array().unwrap() {
        let history = stored_history(&client, run["id"].as_str().unwrap()).await;
        assert!(!history.to_string().contains(ACCESS_CODE), "{history}");
    }

    // Deleting a skill keeps its runs as tasks.
    let (status, _) = client.delete(&format!("/v1/skills/{from_id}")).await;
    assert_eq!(status, 204);
    let (status, _) = client.get(&format!("/v1/skills/{from_id}")).await;
    assert_eq!(status, 404);
    assert_eq!(
        client.task(task["id"].as_str().unwrap()).await["status"],
        "finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_with_an_output_schema_answers_json_read_from_the_page() {
    let (addr, app) = OrdersApp::start().await;
    let model = MockModel::start_on_requests(orders_brain(), Duration::ZERO).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let schema = json!({"type": "object", "required": ["order", "status"],
        "properties": {"order": {"type": "string"}, "status": {"type": "string"}}});
    let (status, skill) = client
        .post(
            "/v1/skills",
            json!({
                "prompt": "Look up order {{order=1042}}; the access code is <secret>code</secret>.",
                "output_schema": schema,
                "start_url": format!("http://{addr}/"),
                "allowed_domains": ["127.0.0.1"],
                "secrets": {"code": ACCESS_CODE},
                "use_vision": false,
            }),
        )
        .await;
    assert_eq!(status, 201, "{skill}");
    let id = skill["id"].as_str().unwrap().to_owned();
    let generation = skill["generation_task_id"].as_str().unwrap().to_owned();
    let skill = generated(&client, &id, &generation).await;
    assert_eq!(skill["status"], "finished", "{skill}\n{}", server.logs());
    assert_eq!(skill["output_schema"], schema);
    assert_eq!(skill["versions"][0]["script"]["result"]["kind"], "script");

    let (task, calls) = run(&client, &model, &id, "2077").await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    assert_eq!(calls, 0);
    let output: Value = serde_json::from_str(task["output"].as_str().unwrap()).unwrap();
    assert_eq!(output, json!({"order": "2077", "status": "Delivered"}));
    assert_eq!(app.opened().last().unwrap(), "2077");

    // A page whose status field lost its id gives no value the schema accepts: the run fails.
    OrdersApp::set(&app.unlabelled, true);
    let (task, _) = run(&client, &model, &id, "3150").await;
    assert_eq!(task["status"], "failed", "{task}");
    assert!(task["error"].as_str().unwrap().contains("result"), "{task}");
}
