//! The web dashboard, used as a person would: a headless Chromium (driven through the project's
//! own browser crate) opens `browserd serve`'s `/`, signs in with a key, starts a task on a
//! local page with the mock model, watches its steps and live frames arrive, pauses, resumes
//! and stops it; a task that asks a question shows it with its choices, and a click answers it.
//! Any JavaScript error, unhandled rejection, `console.error` or CSP violation
//! on the page fails the test.

use std::sync::Arc;
use std::time::Duration;

use browserd_browser::{BrowserPool, BrowserSession, PoolConfig};
use browserd_tests::{Client, MockModel, Process, Site, TestDb, create_key, reply};
use serde_json::{Value, json};

/// Each scenario runs a `serve`, its Chrome and the dashboard user's Chrome: one at a time.
static ONE_SCENARIO_AT_A_TIME: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Collects the page's errors from the first script on (every document of the tab).
const ERROR_TRAP: &str = r#"
window.__errors = [];
addEventListener('error', (e) => {
  const where = e.target && e.target !== window ? ` (loading ${e.target.src || e.target.href})` : '';
  window.__errors.push(`error: ${e.message || 'resource failed'}${where}`);
}, true);
addEventListener('unhandledrejection', (e) => {
  window.__errors.push(`unhandled rejection: ${e.reason && e.reason.message || e.reason}`);
});
addEventListener('securitypolicyviolation', (e) => {
  window.__errors.push(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`);
});
const consoleError = console.error.bind(console);
console.error = (...args) => { window.__errors.push(`console.error: ${args.join(' ')}`); consoleError(...args); };
"#;

/// Records what the page asks of the server's sockets: the scope of each ticket it asks for
/// (`window.__tickets`) and each WebSocket it opens, with its subprotocols (`window.__sockets`).
const SOCKET_TRAP: &str = r#"
window.__tickets = [];
window.__sockets = [];
const realFetch = window.fetch.bind(window);
window.fetch = (input, init) => {
  const url = typeof input === 'string' ? input : input.url;
  if (url.includes('/events/ticket')) {
    const body = init && init.body ? JSON.parse(init.body) : {};
    window.__tickets.push(body.scope || 'view');
  }
  return realFetch(input, init);
};
const RealWebSocket = window.WebSocket;
window.WebSocket = class extends RealWebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    window.__sockets.push({ url: String(url), protocols: protocols === undefined ? [] : [].concat(protocols) });
  }
};
"#;

/// Resolves with `cond()`'s value once it is truthy: checked now and on every DOM change.
const WAIT_FOR: &str = r#"
(cond, what, ms) => new Promise((resolve, reject) => {
  const test = () => { try { return cond(); } catch (_) { return undefined; } };
  const now = test();
  if (now) { resolve(now); return; }
  const observer = new MutationObserver(() => {
    const value = test();
    if (value) { observer.disconnect(); clearTimeout(timer); resolve(value); }
  });
  observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  const timer = setTimeout(() => {
    observer.disconnect();
    reject(new Error(`timed out waiting for ${what}; page: ${document.body.innerText.slice(0, 1500)}`));
  }, ms);
})
"#;

struct Dashboard {
    session: BrowserSession,
    target: String,
}

impl Dashboard {
    /// A browser of its own (keep the pool) on the dashboard at `base`, at its sign-in form,
    /// every document's errors trapped.
    async fn open(base: &str) -> (BrowserPool, Self) {
        // The person's browser: the full Chromium build, as people run (the tasks' own Chrome
        // is browserd's default, the headless shell).
        let pool = BrowserPool::new(PoolConfig {
            chrome_path: browserd_browser::FULL_CHROME_PATH.into(),
            contexts_per_process: 1,
            recycle_after_tasks: 0,
            egress_proxy: false,
            ..PoolConfig::default()
        })
        .expect("pool");
        let session = pool
            .lease()
            .await
            .expect("a browser for the dashboard user");
        let target = session.focused_target().await.unwrap();
        session
            .cdp(
                Some(&target),
                "Page.addScriptToEvaluateOnNewDocument",
                json!({"source": format!("{ERROR_TRAP}\n{SOCKET_TRAP}")}),
            )
            .await
            .unwrap();
        session.navigate(&format!("{base}/")).await.unwrap();
        let page = Dashboard { session, target };
        page.wait_for("document.querySelector('#sign-in')", "the sign-in form", 20)
            .await;
        (pool, page)
    }

    /// Signs in with `key` and waits for the task form with the server's models.
    async fn sign_in(&self, key: &str) {
        self.eval(&format!(
            "document.querySelector('#api-key').value = {}; \
             document.querySelector('#sign-in').requestSubmit(); true",
            serde_json::to_string(key).unwrap()
        ))
        .await;
        self.wait_for(
            "document.querySelector('#new-model option[value=\"mock\"]')",
            "the task form with the server's models",
            20,
        )
        .await;
    }

    /// Evaluates `expression` (awaiting a promise); a thrown error fails the test.
    async fn eval(&self, expression: &str) -> Value {
        let raw = self
            .session
            .cdp(
                Some(&self.target),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await
            .expect("Runtime.evaluate");
        let answer: Value = serde_json::from_str(raw.as_str()).expect("json");
        let result = &answer["result"];
        if let Some(details) = result.get("exceptionDetails") {
            let errors = self.errors().await;
            panic!(
                "{}\npage errors: {errors:?}",
                details["exception"]["description"]
                    .as_str()
                    .unwrap_or(&details.to_string())
            );
        }
        result["result"]["value"].clone()
    }

    /// Waits (on DOM changes, up to `secs`) until the JS expression `cond` is truthy.
    async fn wait_for(&self, cond: &str, what: &str, secs: u64) -> Value {
        let what = serde_json::to_string(what).unwrap();
        self.eval(&format!(
            "({WAIT_FOR})(() => ({cond}), {what}, {})",
            secs * 1000
        ))
        .await
    }

    async fn errors(&self) -> Vec<String> {
        let raw = self
            .session
            .cdp(
                Some(&self.target),
                "Runtime.evaluate",
                json!({"expression": "window.__errors || ['the error trap is missing']", "returnByValue": true}),
            )
            .await
            .expect("read errors");
        let answer: Value = serde_json::from_str(raw.as_str()).expect("json");
        answer["result"]["result"]["value"]
            .as_array()
            .map(|a| a.iter().map(|v| v.to_string()).collect())
            .unwrap_or_default()
    }

    async fn click(&self, selector: &str) {
        let selector = serde_json::to_string(selector).unwrap();
        self.eval(&format!(
            "(() => {{ const b = document.querySelector({selector}); \
             if (!b) throw new Error('no ' + {selector}); \
             if (b.disabled) throw new Error({selector} + ' is disabled'); b.click(); return true; }})()"
        ))
        .await;
    }

    async fn status_shown(&self, status: &str) {
        self.wait_for(
            &format!("document.querySelector('#task-status [data-status=\"{status}\"]')"),
            &format!("status {status} on the task page"),
            30,
        )
        .await;
    }

    async fn frames(&self) -> u64 {
        self.eval("Number(document.querySelector('#live-frame')?.dataset.frames || 0)")
            .await
            .as_u64()
            .unwrap_or(0)
    }
}

/// Waits for the next `step` event on `events`.
async fn next_step(events: &mut browserd_tests::EventStream) -> i64 {
    loop {
        let event = events
            .next(Duration::from_secs(60))
            .await
            .expect("the task ended while a step was awaited");
        if event["kind"] == "step" {
            return event["payload"]["number"].as_i64().unwrap();
        }
    }
}

/// Waits for a step numbered above `number` (the stream may hold older ones).
async fn step_after(events: &mut browserd_tests::EventStream, number: i64) -> i64 {
    loop {
        let step = next_step(events).await;
        if step > number {
            return step;
        }
    }
}

/// Number of the newest step the API has stored for `task_id` (-1: none yet).
async fn newest_step(db: &sqlx::PgPool, task_id: &str) -> i64 {
    sqlx::query_scalar::<_, Option<i32>>(
        "select max(number) from task_steps where task_id = $1::uuid",
    )
    .bind(task_id)
    .fetch_one(db)
    .await
    .unwrap()
    .map_or(-1, i64::from)
}

async fn frame_seq(db: &sqlx::PgPool, task_id: &str) -> Option<i64> {
    sqlx::query_scalar("select seq from live_frames where task_id = $1::uuid")
        .bind(task_id)
        .fetch_optional(db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_signs_in_starts_watches_pauses_resumes_and_stops_a_task() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let db = TestDb::create().await;
    // The agent waits on the ticker page step after step until it is stopped.
    let model = MockModel::start(
        Arc::new(|_page: &str| reply("watch the ticker", json!([{"wait": {"seconds": 1}}]))),
        Duration::from_millis(150),
    )
    .await;
    let site = Site::start().await;
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--live-view-fps", "4"],
    )
    .await;
    let key = create_key(&db).await;
    let base = format!("http://{}", server.address());
    let client = Client::new(server.address(), &key);
    let pool_db = db.pool().await;

    // Unwatched, a running task never screencasts: two steps go by without a frame.
    let ticker = site.url("/ticker");
    let unwatched = client
        .create_task(json!({"task": "Watch the ticker unwatched", "start_url": ticker}))
        .await;
    let mut unwatched_events = client.events(&unwatched, 0).await;
    next_step(&mut unwatched_events).await;
    next_step(&mut unwatched_events).await;
    assert_eq!(
        frame_seq(&pool_db, &unwatched).await,
        None,
        "a task nobody watched made live frames"
    );

    let (pool, page) = Dashboard::open(&base).await;

    // Sign in: a wrong key is refused on the page, the right one opens the task list.
    page.eval(
        "document.querySelector('#api-key').value = 'bd_wrong'; \
         document.querySelector('#sign-in').requestSubmit(); true",
    )
    .await;
    page.wait_for(
        "document.querySelector('#sign-in-error').textContent.includes('not valid')",
        "the wrong key refused",
        20,
    )
    .await;
    page.sign_in(&key).await;
    let stored_key = page
        .eval("localStorage.length === 0 && sessionStorage.getItem('browserd.apiKey') !== null")
        .await;
    assert_eq!(
        stored_key,
        json!(true),
        "the key is kept in sessionStorage only"
    );

    // Watching the running task starts its screencast; leaving the page stops it.
    let mut viewer_changes = sqlx::postgres::PgListener::connect_with(&pool_db)
        .await
        .unwrap();
    viewer_changes.listen("live").await.unwrap();
    page.eval(&format!("location.hash = '#/tasks/{unwatched}'; true"))
        .await;
    page.wait_for(
        "Number(document.querySelector('#live-frame')?.dataset.frames || 0) >= 2",
        "live frames of the task that now has a viewer",
        60,
    )
    .await;
    page.eval("location.hash = '#/'; true").await;
    let gone = format!("{unwatched}:viewers");
    loop {
        let note = tokio::time::timeout(Duration::from_secs(30), viewer_changes.recv())
            .await
            .expect("no viewer change after leaving the task page")
            .unwrap();
        if note.payload() == gone {
            let viewers: i64 =
                sqlx::query_scalar("select count(*) from live_viewers where task_id = $1::uuid")
                    .bind(&unwatched)
                    .fetch_one(&pool_db)
                    .await
                    .unwrap();
            if viewers == 0 {
                break;
            }
        }
    }
    // The worker stops at the viewer change: once it has taken a step since (the stream
    // may still hold older ones), the frame stays the same one for the steps after.
    let newest = newest_step(&pool_db, &unwatched).await;
    let step = step_after(&mut unwatched_events, newest).await;
    let seq_after_leaving = frame_seq(&pool_db, &unwatched).await;
    assert!(
        seq_after_leaving.is_some(),
        "the watched task's frame is kept"
    );
    step_after(&mut unwatched_events, step + 1).await;
    assert_eq!(
        frame_seq(&pool_db, &unwatched).await,
        seq_after_leaving,
        "frames kept coming after the last viewer left"
    );
    client
        .post(&format!("/v1/tasks/{unwatched}/stop"), json!({}))
        .await;

    // Start a task from the form.
    page.eval(&format!(
        "document.querySelector('#new-task-text').value = 'Watch the ticker'; \
         document.querySelector('#new-model').value = 'mock'; \
         document.querySelector('#new-start-url').value = {}; \
         document.querySelector('#new-max-steps').value = '200'; \
         document.querySelector('#new-allowed-domains').value = '127.0.0.1'; \
         document.querySelector('#new-task').requestSubmit(); true",
        serde_json::to_string(&ticker).unwrap()
    ))
    .await;
    let hash = page
        .wait_for(
            "location.hash.startsWith('#/tasks/') && location.hash",
            "the task page",
            20,
        )
        .await;
    let task_id = hash
        .as_str()
        .unwrap()
        .trim_start_matches("#/tasks/")
        .to_owned();
    let task = client.task(&task_id).await;
    assert_eq!(task["model"], "mock");
    assert_eq!(task["start_url"], json!(ticker));
    assert_eq!(task["max_steps"], 200);
    assert_eq!(task["allowed_domains"], json!(["127.0.0.1"]));

    // Steps arrive live with the model's thoughts and action results, and so do frames.
    page.status_shown("running").await;
    page.wait_for(
        "document.querySelector('.step[data-step=\"1\"] .next-goal')?.textContent === 'watch the ticker'",
        "step 1's next goal",
        60,
    )
    .await;
    page.wait_for(
        "[...document.querySelectorAll('.step[data-step=\"1\"] .action')].some((a) => a.textContent.includes('wait') && a.textContent.includes('✓'))",
        "step 1's action result",
        60,
    )
    .await;
    page.wait_for(
        "document.querySelector('.step[data-step=\"1\"] .meta')?.textContent.includes('tokens')",
        "step 1's timings and tokens",
        60,
    )
    .await;
    page.wait_for(
        "document.querySelector('.step[data-step=\"1\"] img.shot')?.complete",
        "step 1's screenshot",
        60,
    )
    .await;
    page.wait_for(
        "Number(document.querySelector('#live-frame').dataset.frames || 0) >= 3",
        "three live frames",
        60,
    )
    .await;
    // A frame is shown once decoded: the image on the page is a real one.
    page.wait_for(
        "document.querySelector('#live-frame').naturalWidth > 0",
        "the live frame a decoded image",
        30,
    )
    .await;
    let frames_stored: i64 =
        sqlx::query_scalar("select count(*) from live_frames where task_id = $1::uuid")
            .bind(&task_id)
            .fetch_one(&pool_db)
            .await
            .unwrap();
    assert_eq!(frames_stored, 1, "only the newest frame is kept");

    // Controls follow the status machine.
    assert_eq!(
        page.eval(
            "[...['#pause','#resume','#stop']].map((s) => document.querySelector(s).disabled)"
        )
        .await,
        json!([false, true, false])
    );
    page.click("#pause").await;
    page.status_shown("paused").await;
    assert_eq!(client.task(&task_id).await["status"], "paused");
    assert_eq!(
        page.eval(
            "[...['#pause','#resume','#stop']].map((s) => document.querySelector(s).disabled)"
        )
        .await,
        json!([true, false, false])
    );

    // Take over from the live view: a click in the middle of the frame and keys typed on it
    // reach the page at the page's coordinates, as recorded person inputs.
    page.wait_for(
        "!document.querySelector('#take-over-panel').hidden",
        "the take-over panel of the paused task",
        20,
    )
    .await;
    // Until a person takes over, the page watches with view tickets only, and never sends
    // the key on a socket.
    let asked = page.eval("window.__tickets").await;
    assert!(
        !asked.as_array().unwrap().is_empty()
            && asked
                .as_array()
                .unwrap()
                .iter()
                .all(|scope| scope == "view"),
        "before take-over the dashboard asked for {asked}"
    );
    let sockets = page.eval("window.__sockets").await;
    assert!(
        sockets.as_array().unwrap().iter().all(|socket| {
            socket["protocols"] == json!([])
                && socket["url"].as_str().unwrap().contains("ticket=bdt_")
        }),
        "a socket was not opened with a ticket alone: {sockets}"
    );
    page.eval("document.querySelector('#take-over').click(); true")
        .await;
    // Pressing "take over" asks for a control ticket and reopens the live view with it.
    page.wait_for(
        "document.querySelector('#take-over-panel').dataset.control === 'ready'",
        "the live view reopened with a control ticket",
        30,
    )
    .await;
    assert_eq!(
        page.eval("window.__tickets.filter((scope) => scope === 'control').length")
            .await,
        json!(1),
        "one control ticket, on take-over"
    );
    // The frame's box once the layout has settled after the panel changed (the same box
    // on two frames in a row): a scrollbar coming or going moves and resizes the frame.
    let middle = page
        .eval(
            "(async () => { \
               const middle = () => { const r = document.querySelector('#live-frame').getBoundingClientRect(); \
                 return [r.left, r.top, r.width, r.height]; }; \
               const frame = () => new Promise((resolve) => requestAnimationFrame(resolve)); \
               let last = middle(); \
               for (let i = 0; i < 100; i++) { \
                 await frame(); const now = middle(); \
                 if (now.every((v, i) => v === last[i])) return now; \
                 last = now; } \
               throw new Error('the live frame never stopped moving'); })()",
        )
        .await;
    let frame: Vec<f64> = middle
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // Chrome delivers a mouse event at whole CSS pixels: click at one, in the frame's middle.
    let (x, y) = (
        (frame[0] + frame[2] / 2.0).floor(),
        (frame[1] + frame[3] / 2.0).floor(),
    );
    for kind in ["mousePressed", "mouseReleased"] {
        page.session
            .cdp(
                Some(&page.target),
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )
            .await
            .unwrap();
    }
    for (key, text) in [("h", Some("h")), ("i", Some("i")), ("Enter", None)] {
        let mut down = json!({"type": "keyDown", "key": key});
        if let Some(text) = text {
            down["text"] = json!(text);
        }
        for event in [down, json!({"type": "keyUp", "key": key})] {
            page.session
                .cdp(Some(&page.target), "Input.dispatchKeyEvent", event)
                .await
                .unwrap();
        }
    }
    page.wait_for(
        "document.querySelector('#take-over-state').textContent.startsWith('Sent to the page')",
        "the take-over inputs accepted",
        20,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let inputs: Vec<Value> = loop {
        let inputs: Vec<Value> = sqlx::query_scalar(
            "select payload->'input' from task_events where task_id = $1::uuid and kind = 'person_input' order by seq",
        )
        .bind(&task_id)
        .fetch_all(&pool_db)
        .await
        .unwrap();
        if inputs.len() >= 3 || tokio::time::Instant::now() > deadline {
            break inputs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(inputs.len(), 3, "{inputs:?}");
    // The page's size as the live view announced it (the frames are scaled down from it).
    let viewport = page
        .eval("document.querySelector('#live-frame').dataset.viewport || ''")
        .await;
    let (width, height) = viewport
        .as_str()
        .and_then(|size| size.split_once('x'))
        .map(|(w, h)| (w.parse::<f64>().unwrap(), h.parse::<f64>().unwrap()))
        .expect("the live view announced the page's size");
    assert_eq!((width, height), (1920.0, 1080.0), "browser-use's viewport");
    assert_eq!(inputs[0]["type"], "click", "{inputs:?}");
    // Where that pixel of the (scaled down) frame is on the page.
    let expected = (
        ((x - frame[0]) * width / frame[2]).round(),
        ((y - frame[1]) * height / frame[3]).round(),
    );
    assert!(
        (inputs[0]["x"].as_f64().unwrap() - expected.0).abs() <= 1.0
            && (inputs[0]["y"].as_f64().unwrap() - expected.1).abs() <= 1.0
            && (expected.0 - width / 2.0).abs() <= width / frame[2] + 1.0,
        "the click in the frame's middle is not at the page's middle: {inputs:?} (frame {frame:?}, expected {expected:?})"
    );
    assert_eq!(
        inputs[1],
        json!({"type": "type", "text": "hi", "secret": false})
    );
    assert_eq!(inputs[2], json!({"type": "keys", "keys": "Enter"}));

    page.click("#resume").await;
    page.status_shown("running").await;
    // Resuming gives the page back: the live view goes back to a view ticket.
    page.wait_for(
        "window.__tickets[window.__tickets.length - 1] === 'view' \
         && window.__tickets.filter((scope) => scope === 'control').length === 1",
        "a view ticket for the live view after resuming",
        30,
    )
    .await;
    let frames_before = page.frames().await;
    page.wait_for(
        &format!(
            "Number(document.querySelector('#live-frame').dataset.frames || 0) > {frames_before}"
        ),
        "live frames after resuming",
        60,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !model.requests().iter().any(|request| {
        browserd_tests::message_texts(request)
            .iter()
            .any(|text| text.contains("a person used the browser (clicked at"))
    }) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent was not told about the take-over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    page.click("#stop").await;
    page.status_shown("stopped").await;
    assert_eq!(client.task(&task_id).await["status"], "stopped");
    page.wait_for(
        "!document.querySelector('#result').hidden && document.querySelector('#live-state').dataset.state === 'ended'",
        "the ended task's result and live view",
        30,
    )
    .await;
    assert_eq!(
        page.eval(
            "[...['#pause','#resume','#stop']].map((s) => document.querySelector(s).disabled)"
        )
        .await,
        json!([true, true, true])
    );

    page.click("#download-history").await;

    // The viewer is gone once the task ended (the server removes it when it sees the page
    // close the socket), and the frame with it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let viewers: i64 = sqlx::query_scalar("select count(*) from live_viewers")
            .fetch_one(&pool_db)
            .await
            .unwrap();
        if viewers == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the live viewer was not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The list shows the task with its final status; the history downloads.
    page.eval("location.hash = '#/'; true").await;
    page.wait_for(
        &format!(
            "document.querySelector('tr[data-task-id=\"{task_id}\"] [data-status=\"stopped\"]')"
        ),
        "the stopped task in the list",
        20,
    )
    .await;
    page.eval(
        "document.querySelector('#status-filter').value = 'running'; \
         document.querySelector('#status-filter').dispatchEvent(new Event('change')); true",
    )
    .await;
    page.wait_for(
        "document.querySelector('#list-state').textContent === 'No tasks yet.'",
        "the filtered (empty) list",
        20,
    )
    .await;

    let errors = page.errors().await;
    assert!(
        errors.is_empty(),
        "JavaScript errors on the dashboard: {errors:?}"
    );
    let logs = server.logs();
    assert!(
        !logs.contains(&key),
        "the key appeared in the server's logs"
    );
    page.session.release().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_agents_question_and_sends_the_chosen_answer() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let waiting = browserd_tests::WaitingTask::start().await;
    let (server, key, client, id) = (&waiting.server, &waiting.key, &waiting.client, &waiting.id);

    // The task page shows the question with a button per choice and an answer box.
    let (pool, page) = Dashboard::open(&format!("http://{}", server.address())).await;
    page.sign_in(key).await;
    page.eval(&format!("location.hash = '#/tasks/{id}'; true"))
        .await;
    page.status_shown("waiting").await;
    page.wait_for(
        "!document.querySelector('#question').hidden && \
         document.querySelector('#question-text')?.textContent === 'Which code should I report?'",
        "the question card",
        30,
    )
    .await;
    let choices = page
        .eval("[...document.querySelectorAll('#question-choices button')].map(b => b.textContent)")
        .await;
    assert_eq!(choices, json!(["A", "B"]));
    assert_eq!(
        page.eval("document.querySelector('#answer-input').type")
            .await,
        json!("text")
    );

    // Choosing B answers the task: the card goes, the agent goes on with B.
    page.eval(
        "[...document.querySelectorAll('#question-choices button')] \
         .find(b => b.textContent === 'B').click(); true",
    )
    .await;
    page.wait_for(
        "document.querySelector('#question').hidden",
        "the question card gone once answered",
        30,
    )
    .await;
    let done = client
        .wait_status(id, &["finished", "failed"], Duration::from_secs(90))
        .await;
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["output"], "the user chose B");
    page.status_shown("finished").await;

    let errors = page.errors().await;
    assert!(
        errors.is_empty(),
        "JavaScript errors on the dashboard: {errors:?}"
    );
    page.session.release().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_schedules_a_task_and_shows_its_runs() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let db = TestDb::create().await;
    let model = MockModel::start(
        Arc::new(|_page: &str| browserd_tests::done_reply("checked", true)),
        Duration::ZERO,
    )
    .await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    let (pool, page) = Dashboard::open(&format!("http://{}", server.address())).await;
    page.sign_in(&key).await;
    page.click("#nav a[href='#/schedules']").await;
    page.wait_for(
        "document.querySelector('#new-schedule') && \
         document.querySelector('#schedules-state')?.textContent === 'No schedules yet.'",
        "the schedules page, empty",
        20,
    )
    .await;

    // A bad expression is refused with the server's words, naming the field's problem.
    page.eval(
        "document.querySelector('#schedule-task').value = 'Check the news'; \
         document.querySelector('#schedule-name').value = 'news'; \
         document.querySelector('#schedule-cron').value = '61 * * * *'; \
         document.querySelector('#schedule-zone').value = 'Europe/Paris'; \
         document.querySelector('#new-schedule').requestSubmit(); true",
    )
    .await;
    page.wait_for(
        "document.querySelector('#new-schedule-error').textContent.includes('not valid')",
        "the refusal of a bad cron expression",
        20,
    )
    .await;

    // Every second: the row shows its runs as status badges linking to their tasks.
    page.eval(
        "document.querySelector('#schedule-task').value = 'Check the news'; \
         document.querySelector('#schedule-name').value = 'news'; \
         document.querySelector('#schedule-cron').value = '* * * * * *'; \
         document.querySelector('#new-schedule').requestSubmit(); true",
    )
    .await;
    page.wait_for(
        "document.querySelectorAll('#schedule-rows tr td.runs a.run').length >= 2",
        "two runs of the schedule",
        60,
    )
    .await;
    let (_, list) = client.get("/v1/schedules").await;
    let schedule = list["items"][0].clone();
    assert_eq!(schedule["name"], "news");
    assert_eq!(schedule["time_zone"], "Europe/Paris");
    let link = page
        .eval("document.querySelector('#schedule-rows td.runs a.run').getAttribute('href')")
        .await;
    assert!(link.as_str().unwrap().starts_with("#/tasks/"), "{link}");

    // Disable: the row says so, and the API agrees.
    page.eval(
        "[...document.querySelectorAll('#schedule-rows button')] \
         .find(b => b.textContent === 'Disable').click(); true",
    )
    .await;
    page.wait_for(
        "[...document.querySelectorAll('#schedule-rows button')].some(b => b.textContent === 'Enable')",
        "the schedule disabled",
        20,
    )
    .await;
    let (_, shown) = client
        .get(&format!(
            "/v1/schedules/{}",
            schedule["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(shown["enabled"], false, "{shown}");

    let errors = page.errors().await;
    assert!(
        errors.is_empty(),
        "JavaScript errors on the dashboard: {errors:?}"
    );
    page.session.release().await;
    pool.shutdown().await;
}
