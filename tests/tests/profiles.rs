//! Browser profiles end to end: real `browserd serve` processes, Postgres, Chromium and a
//! local site whose sign-in sets a cookie (server side) and a localStorage token (page side);
//! the mock model signs in when it sees the form and reports what the signed-in page shows.
//!
//! - a sign-in recorded into a profile makes the next task start signed in (cookie and
//!   localStorage both back before its first page loads), and the state is sealed at rest;
//! - `kill -9` of the serve mid-task keeps the profile (it was saved at the step boundary);
//! - two tasks on one profile at once: both start from version 0, the second write conflicts
//!   and merges, so both sign-ins are kept;
//! - a task whose state grows past `--max-profile-bytes` leaves the profile as it was (its
//!   sign-in still there for the next task) and gets one warning event, not one per step.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use browserd_tests::{
    Brain, Client, MockModel, Process, TestDb, create_key, done_reply, index_of, reply,
};
use regex::Regex;
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(120);

/// The site: `/{realm}/app[?n=N]` (signed in with the realm's cookie: a welcome that shows the
/// localStorage token, and a "Continue" link up to `n=3`; else a sign-in form that stores
/// the token on submit), `POST /{realm}/login` (sets `{realm}_sid`), `/both` (which realms'
/// cookies and tokens the browser has).
struct Site {
    addr: std::net::SocketAddr,
    logins: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone)]
struct SiteState {
    logins: Arc<Mutex<Vec<String>>>,
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    let all = headers.get(header::COOKIE)?.to_str().ok()?;
    all.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        (key == name).then(|| value.to_owned())
    })
}

async fn app_page(
    Path(realm): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Html<String> {
    let n: u32 = query.get("n").and_then(|n| n.parse().ok()).unwrap_or(0);
    match cookie(&headers, &format!("{realm}_sid")) {
        Some(user) => {
            let next = if n >= 3 {
                "<p>All done</p>".to_owned()
            } else {
                format!("<p><a href=\"/{realm}/app?n={}\">Continue</a></p>", n + 1)
            };
            Html(format!(
                "<!doctype html><html><head><title>Welcome</title></head><body>\
                 <h1>Welcome back, {user}</h1><p id=\"token\">Token: none</p>{next}\
                 <script>document.getElementById('token').textContent = 'Token: ' + \
                 (localStorage.getItem('{realm}_token') || 'none');</script></body></html>"
            ))
        }
        None => Html(format!(
            "<!doctype html><html><head><title>Sign in</title></head><body>\
             <h1>Sign in to {realm}</h1>\
             <form method=\"post\" action=\"/{realm}/login\" \
             onsubmit=\"localStorage.setItem('{realm}_token', 'tok-' + this.user.value)\">\
             <input name=\"user\" placeholder=\"Username\"><button type=\"submit\">Log in</button>\
             </form></body></html>"
        )),
    }
}

async fn login(
    State(state): State<SiteState>,
    Path(realm): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let user = form.get("user").cloned().unwrap_or_default();
    state.logins.lock().unwrap().push(format!("{realm}:{user}"));
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                format!("{realm}_sid={user}; Path=/; Max-Age=86400; HttpOnly"),
            ),
            (header::LOCATION, format!("/{realm}/app")),
        ],
    )
        .into_response()
}

/// `/{realm}/grow`: stores a large localStorage entry (more than a small profile limit), then
/// a "Continue" link into the signed-in pages.
async fn grow_page(Path(realm): Path<String>) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><title>Grown</title></head><body><h1>Grown</h1>\
         <p><a href=\"/{realm}/app?n=1\">Continue</a></p>\
         <script>localStorage.setItem('{realm}_blob', 'x'.repeat(20000));</script></body></html>"
    ))
}

async fn both(headers: HeaderMap) -> Html<String> {
    let a = cookie(&headers, "a_sid").unwrap_or_else(|| "nobody".into());
    let b = cookie(&headers, "b_sid").unwrap_or_else(|| "nobody".into());
    Html(format!(
        "<!doctype html><html><head><title>Both</title></head><body>\
         <p>Both: a={a} b={b}</p><p id=\"tokens\">Tokens: none</p>\
         <script>document.getElementById('tokens').textContent = 'Tokens: ' + \
         localStorage.getItem('a_token') + ' ' + localStorage.getItem('b_token');</script>\
         </body></html>"
    ))
}

impl Site {
    async fn start() -> Self {
        let state = SiteState {
            logins: Arc::default(),
        };
        let app = Router::new()
            .route("/{realm}/app", get(app_page))
            .route("/{realm}/login", post(login))
            .route("/{realm}/grow", get(grow_page))
            .route("/both", get(both))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            logins: state.logins,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn logins(&self) -> Vec<String> {
        self.logins.lock().unwrap().clone()
    }
}

/// How many sign-in forms the model has seen, for the two-task test: each waits (at most a
/// minute) until both tasks have theirs, so both sign in after both loaded version 0.
#[derive(Default)]
struct Gate {
    seen: Mutex<usize>,
    all: Condvar,
}

/// Signs in on a form (as `user-{realm}`), clicks "Continue", reports a welcome page at its
/// end and the `/both` page.
fn brain(gate: Option<Arc<Gate>>) -> Brain {
    Arc::new(move |page: &str| {
        let both = Regex::new(r"Both: [^\n]*").unwrap();
        if let Some(m) = both.find(page) {
            let tokens = Regex::new(r"Tokens: [^\n]*").unwrap();
            let tokens = tokens.find(page).map_or("", |m| m.as_str());
            return done_reply(&format!("{} {tokens}", m.as_str()), true);
        }
        if let Some(c) = Regex::new(r"Sign in to (\w+)").unwrap().captures(page) {
            if let Some(gate) = &gate {
                // The brain runs in the mock model's handler: the wait hands this runtime
                // thread's other work to another thread (`block_in_place`).
                tokio::task::block_in_place(|| {
                    let mut seen = gate.seen.lock().unwrap();
                    *seen += 1;
                    gate.all.notify_all();
                    let _ = gate
                        .all
                        .wait_timeout_while(seen, Duration::from_secs(60), |seen| *seen < 2)
                        .unwrap();
                });
            }
            let (Some(input), Some(button)) = (
                index_of(page, "input", "Username"),
                index_of(page, "button", r"/>\s*Log in"),
            ) else {
                return done_reply(&format!("no form on:\n{page}"), false);
            };
            return reply(
                "sign in",
                json!([
                    {"input": {"index": input, "text": format!("user-{}", &c[1])}},
                    {"click": {"index": button}}
                ]),
            );
        }
        if page.contains("Grown")
            && let Some(next) = index_of(page, "a", r"/>\s*Continue")
        {
            return reply("continue", json!([{"click": {"index": next}}]));
        }
        if page.contains("Welcome back") {
            if let Some(next) = index_of(page, "a", r"/>\s*Continue") {
                return reply("continue", json!([{"click": {"index": next}}]));
            }
            let welcome = Regex::new(r"Welcome back, [\w-]+").unwrap();
            let token = Regex::new(r"Token: [\w-]+").unwrap();
            return done_reply(
                &format!(
                    "{} / {}",
                    welcome.find(page).map_or("", |m| m.as_str()),
                    token.find(page).map_or("", |m| m.as_str())
                ),
                true,
            );
        }
        done_reply(&format!("unexpected page:\n{page}"), false)
    })
}

async fn new_profile(client: &Client) -> String {
    let (status, profile) = client
        .post("/v1/profiles", json!({"name": "site login"}))
        .await;
    assert_eq!(status, 201, "{profile}");
    profile["id"].as_str().unwrap().to_owned()
}

fn task(site: &Site, path: &str, profile: &str) -> Value {
    json!({
        "task": "Sign in if needed and report the welcome",
        "start_url": site.url(path),
        "use_vision": false,
        "profile_id": profile,
        "max_steps": 10,
    })
}

async fn finished_output(client: &Client, id: &str) -> String {
    let done = client.wait_status(id, &["finished", "failed"], LONG).await;
    assert_eq!(done["status"], "finished", "{done}");
    done["output"].as_str().unwrap_or_default().to_owned()
}

/// The profile row as stored: its clear state and sealed bytes.
async fn stored_profile(db: &TestDb, id: &str) -> (Option<Value>, Option<Vec<u8>>, i64) {
    let pool = db.pool().await;
    sqlx::query_as("select state, state_sealed, version from profiles where id = $1::uuid")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_recorded_into_a_profile_is_there_for_the_next_task() {
    let site = Site::start().await;
    let model = MockModel::start(brain(None), Duration::ZERO).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let profile = new_profile(&client).await;

    // First task: signs in (the form), then continues to the end.
    let first = client.create_task(task(&site, "/k/app", &profile)).await;
    let output = finished_output(&client, &first).await;
    assert_eq!(output, "Welcome back, user-k / Token: tok-user-k");
    assert_eq!(site.logins(), ["k:user-k"]);

    // Sealed at rest (serve runs with a secrets key): neither the cookie nor the token in
    // clear, and the view shows only the domain.
    let (plain, sealed, version) = stored_profile(&db, &profile).await;
    assert_eq!(plain, None);
    let sealed = sealed.expect("the state is sealed");
    assert!(!contains(&sealed, "user-k"), "the state is not in clear");
    assert!(version >= 1);
    let (_, view) = client.get(&format!("/v1/profiles/{profile}")).await;
    assert_eq!(view["cookie_domains"], json!(["127.0.0.1"]));
    assert!(view["last_used_at"].is_string());

    // Second task: starts signed in, with the token in localStorage before the page's script
    // read it; no second sign-in.
    let second = client
        .create_task(task(&site, "/k/app?n=3", &profile))
        .await;
    let output = finished_output(&client, &second).await;
    assert_eq!(output, "Welcome back, user-k / Token: tok-user-k");
    assert_eq!(site.logins(), ["k:user-k"], "no second sign-in");

    // Without the profile, the same page asks to sign in.
    let (status, plain) = client
        .post(
            "/v1/tasks",
            json!({"task": "t", "start_url": site.url("/k/app?n=3"), "use_vision": false}),
        )
        .await;
    assert_eq!(status, 201);
    let output = finished_output(&client, plain["id"].as_str().unwrap()).await;
    assert_eq!(output, "Welcome back, user-k / Token: tok-user-k");
    assert_eq!(
        site.logins().len(),
        2,
        "a task without the profile signs in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_task_keeps_the_sign_in() {
    let site = Site::start().await;
    // Slow answers: the task is still going when its server is killed.
    let model = MockModel::start(brain(None), Duration::from_secs(2)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let profile = new_profile(&client).await;

    let first = client.create_task(task(&site, "/k/app", &profile)).await;
    let mut events = client.events(&first, 0).await;
    // The sign-in is step 1; step 2 starts only after step 1's checkpoint.
    loop {
        let event = events.next(LONG).await.expect("the task goes on");
        if event["kind"] == "step_started" && event["payload"]["number"] == 2 {
            break;
        }
    }
    server.signal("KILL").await;
    let mut server = server;
    server.wait(Duration::from_secs(10)).await;
    assert_eq!(site.logins(), ["k:user-k"]);
    let (_, sealed, version) = stored_profile(&db, &profile).await;
    assert!(sealed.is_some() && version >= 1, "saved before the crash");

    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let client = Client::new(server.address(), &client.key);
    let (status, _) = client
        .post(&format!("/v1/tasks/{first}/stop"), json!({}))
        .await;
    assert!(status == 200 || status == 409, "{status}");
    let second = client
        .create_task(task(&site, "/k/app?n=3", &profile))
        .await;
    let output = finished_output(&client, &second).await;
    assert_eq!(output, "Welcome back, user-k / Token: tok-user-k");
    assert_eq!(site.logins(), ["k:user-k"], "no second sign-in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tasks_on_one_profile_keep_both_sign_ins() {
    let site = Site::start().await;
    let gate = Arc::new(Gate::default());
    let model = MockModel::start(brain(Some(gate.clone())), Duration::ZERO).await;
    let db = TestDb::create().await;
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--concurrency", "2"],
    )
    .await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let profile = new_profile(&client).await;

    let a = client
        .create_task(task(&site, "/a/app?n=3", &profile))
        .await;
    let b = client
        .create_task(task(&site, "/b/app?n=3", &profile))
        .await;
    assert_eq!(
        finished_output(&client, &a).await,
        "Welcome back, user-a / Token: tok-user-a"
    );
    assert_eq!(
        finished_output(&client, &b).await,
        "Welcome back, user-b / Token: tok-user-b"
    );
    assert_eq!(*gate.seen.lock().unwrap(), 2, "both saw a sign-in form");
    // Both started from version 0: the second write found the first and merged into it.
    assert!(
        server
            .logs()
            .contains("profile written by another task; merging"),
        "{}",
        server.logs()
    );

    // A third task has both cookies and both tokens.
    let third = client.create_task(task(&site, "/both", &profile)).await;
    assert_eq!(
        finished_output(&client, &third).await,
        "Both: a=user-a b=user-b Tokens: tok-user-a tok-user-b"
    );
    let mut logins = site.logins();
    logins.sort();
    assert_eq!(logins, ["a:user-a", "b:user-b"]);
}

/// `--max-profile-bytes` small enough for a sign-in but not for 20 kB of localStorage: the task
/// that grows its state past it finishes, the profile keeps its previous version (the next task
/// starts signed in, without signing in again) and the task has exactly one warning event
/// although every one of its step boundaries had the state too large.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_over_the_size_limit_keeps_the_previous_one_and_warns_once() {
    let site = Site::start().await;
    let model = MockModel::start(brain(None), Duration::ZERO).await;
    let db = TestDb::create().await;
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback", "--max-profile-bytes", "8000"],
    )
    .await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let profile = new_profile(&client).await;

    let first = client.create_task(task(&site, "/g/app", &profile)).await;
    assert_eq!(
        finished_output(&client, &first).await,
        "Welcome back, user-g / Token: tok-user-g"
    );
    let (_, _, signed_in_version) = stored_profile(&db, &profile).await;
    assert!(signed_in_version >= 1);

    // Grows localStorage past the limit, then walks three more pages (four step boundaries
    // and the end, each with the state too large).
    let grown = client.create_task(task(&site, "/g/grow", &profile)).await;
    assert_eq!(
        finished_output(&client, &grown).await,
        "Welcome back, user-g / Token: tok-user-g"
    );
    let (_, _, version) = stored_profile(&db, &profile).await;
    assert_eq!(version, signed_in_version, "nothing was written");
    let events = client.events(&grown, 0).await.until_closed(LONG).await;
    let warnings: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "log" && e["payload"]["level"] == "warn")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let message = warnings[0]["payload"]["message"].as_str().unwrap();
    assert!(
        message.contains("browser profile was not saved") && message.contains("8000 bytes"),
        "{message}"
    );

    // The sign-in is still there, without the blob: no second sign-in.
    let next = client
        .create_task(task(&site, "/g/app?n=3", &profile))
        .await;
    assert_eq!(
        finished_output(&client, &next).await,
        "Welcome back, user-g / Token: tok-user-g"
    );
    assert_eq!(site.logins(), ["g:user-g"], "no second sign-in");
}
