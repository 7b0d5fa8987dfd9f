//! Take-over, end to end: `browserd serve` runs a task on a local sign-in page with the mock
//! model, which only waits until it sees the person's sign-in succeed. A person pauses the
//! task, drives its browser through the live view's WebSocket — clicks the name field, types,
//! clicks the password field, types the password as secret text, scrolls, presses Enter — and
//! resumes. The site receives exactly that sign-in, the agent's next step is told a person
//! used the browser, every input is in the task's events, and the password is nowhere: not in
//! the events, the steps, a model request or a leftover row.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{SECRETS_KEY, Scenario, done_reply, message_texts, reply};
use serde_json::{Value, json};

const PASSWORD: &str = "hunter2-by-hand";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_by_hand_while_the_task_is_paused_and_the_agent_carries_on() {
    let Scenario {
        site,
        model,
        db,
        server,
        client,
    } = Scenario::serve(
        Arc::new(|page: &str| {
            if page.contains("Welcome, alice!") {
                done_reply("Signed in; the balance is 42 EUR", true)
            } else {
                reply(
                    "wait for the person to sign in",
                    json!([{"wait": {"seconds": 1}}]),
                )
            }
        }),
        Duration::from_millis(50),
        &["--live-view-fps", "4"],
        &[("BROWSERD_SECRETS_KEY", SECRETS_KEY)],
    )
    .await;
    let pool = db.pool().await;
    let id = client
        .create_task(json!({
            "task": "Wait until the person has signed in, then report the balance",
            "start_url": site.url("/takeover"),
        }))
        .await;
    let mut events = client.events(&id, 0).await;
    loop {
        let event = events
            .next(Duration::from_secs(60))
            .await
            .expect("the task ended before its first step");
        if event["kind"] == "step" {
            break;
        }
    }

    // The viewer learns the page size the frames show before the first frame.
    let mut live = client.live(&id).await;
    let Some(viewport) = live.next_text(Duration::from_secs(60)).await else {
        panic!(
            "the live view closed without a viewport message; task {}\n{}",
            client.task(&id).await,
            server.logs()
        );
    };
    assert_eq!(viewport["type"], "viewport", "{viewport}");
    assert!(viewport["width"].as_i64().unwrap_or(0) >= 320, "{viewport}");

    // While the agent runs, the page is its own.
    let refused = live
        .send_input(json!({"type": "click", "x": 120, "y": 40}))
        .await;
    assert_eq!(refused["type"], "input_refused", "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("pause it"),
        "{refused}"
    );

    let (status, _) = client
        .post(&format!("/v1/tasks/{id}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    client
        .wait_status(&id, &["paused"], Duration::from_secs(30))
        .await;

    // A view ticket's live socket (a link handed to a watcher) watches, but its first input
    // closes it and never reaches the page: the site sees only the person's sign-in below,
    // and the task's events only the inputs sent on the key's socket.
    let mut watcher = client.live_with_ticket(&id, "view").await;
    let Some(viewport) = watcher.next_text(Duration::from_secs(60)).await else {
        panic!("the view ticket's live view closed before its first message");
    };
    assert_eq!(viewport["type"], "viewport", "{viewport}");
    for input in [
        json!({"type": "click", "x": 120, "y": 40}),
        json!({"type": "type", "text": "mallory"}),
    ] {
        let (code, reason) = watcher.send_until_closed(input).await;
        assert_eq!(code, 1008, "{reason}");
        assert!(reason.starts_with("view-only ticket"), "{reason}");
        watcher = client.live_with_ticket(&id, "view").await;
    }
    drop(watcher);

    // Inputs that cannot be applied are refused with the reason; the socket stays open.
    for (input, why) in [
        (
            json!({"type": "drag", "x": 1, "y": 1}),
            "not a take-over input",
        ),
        (json!({"type": "click", "x": -5, "y": 1}), "x must be"),
        (json!({"type": "type", "text": ""}), "text is empty"),
    ] {
        let answer = live.send_input(input).await;
        assert_eq!(answer["type"], "input_refused", "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(why),
            "{answer} should say {why}"
        );
    }

    // The person signs in.
    let mut seqs = Vec::new();
    for input in [
        json!({"type": "click", "x": 120, "y": 40}),
        json!({"type": "type", "text": "alice"}),
        json!({"type": "click", "x": 120, "y": 100}),
        json!({"type": "type", "text": PASSWORD, "secret": true}),
        json!({"type": "scroll", "x": 400, "y": 400, "delta_y": 120}),
        json!({"type": "keys", "keys": "Enter"}),
    ] {
        let answer = live.send_input(input.clone()).await;
        assert_eq!(answer["type"], "input_accepted", "{input}: {answer}");
        seqs.push(answer["seq"].as_i64().unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    let (status, _) = client
        .post(&format!("/v1/tasks/{id}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    let task = client
        .wait_status(
            &id,
            &["finished", "failed", "stopped"],
            Duration::from_secs(90),
        )
        .await;
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["output"], "Signed in; the balance is 42 EUR");
    assert_eq!(
        site.logins.lock().unwrap().clone(),
        vec![("alice".to_owned(), PASSWORD.to_owned())],
        "the site got the person's sign-in, once"
    );

    // The agent was told, once, in the step after the resume.
    let told: Vec<usize> = model
        .requests()
        .iter()
        .enumerate()
        .filter(|(_, request)| {
            message_texts(request)
                .iter()
                .any(|text| text.contains("a person used the browser"))
        })
        .map(|(i, _)| i)
        .collect();
    assert!(!told.is_empty(), "no model request mentions the person");
    let note = message_texts(&model.requests()[told[0]]).join("\n");
    for what in [
        "clicked at (120, 40)",
        "typed 5 characters",
        "typed 15 secret characters",
        "scrolled by (0, 120)",
        "pressed Enter",
    ] {
        assert!(note.contains(what), "the note lacks {what:?}");
    }

    // Every input is in the task's history, in order; the password only by its length.
    let recorded: Vec<(i64, Value)> = sqlx::query_as(
        "select seq, payload from task_events where task_id = $1::uuid and kind = 'person_input' order by seq",
    )
    .bind(&id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        recorded.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        seqs
    );
    assert_eq!(
        recorded[1].1["input"],
        json!({"type": "type", "text": "alice", "secret": false})
    );
    assert_eq!(recorded[3].1["input"]["text"], "");
    assert_eq!(recorded[3].1["secret_chars"], 15);
    let failures: i64 = sqlx::query_scalar(
        "select count(*) from task_events where task_id = $1::uuid and kind = 'log' and payload->>'message' like 'person input%'",
    )
    .bind(&id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(failures, 0, "an input was not applied");

    // The password is nowhere.
    let leftovers: i64 = sqlx::query_scalar("select count(*) from task_secret_inputs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(leftovers, 0, "a secret input outlived its use");
    let stored: Vec<String> = sqlx::query_scalar(
        "select row_to_json(e)::text from task_events e where task_id = $1::uuid
         union all select row_to_json(s)::text from task_steps s where task_id = $1::uuid
         union all select row_to_json(t)::text from tasks t where id = $1::uuid",
    )
    .bind(&id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        stored.iter().all(|text| !text.contains(PASSWORD)),
        "the password is stored in clear"
    );
    assert!(
        model
            .requests()
            .iter()
            .all(|request| !request.to_string().contains(PASSWORD)),
        "the password reached the model"
    );
}
