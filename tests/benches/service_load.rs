//! Service load: N tasks submitted at once to one `browserd serve` (a Chrome pool shared by all
//! tasks), against the same N tasks run as N concurrent `browserd run` processes (one Chrome
//! each) in the same run. Real Postgres, real Chromium on local pages, a mock OpenAI-compatible
//! model answering after a fixed delay; every task climbs `/stairs/1?top=T` (T−1 clicks and a
//! `done`, so T model calls) with `use_vision: false`.
//!
//! Measured per side: wall time of the whole batch → tasks per minute; peak memory of the
//! browserd process(es) and every Chrome process they started (VmRSS summed over the process
//! tree, sampled from /proc every 100 ms; PSS sampled every second next to it), per concurrently
//! running task. Service only: POST → first `step` event on the task's WebSocket, and for every
//! `step` event its delivery latency = client receive time − the event's `created_at`.
//! `created_at` is Postgres `now()`, the start of the step's write transaction, so the delivery
//! latency also counts that transaction (event row, screenshot artifact, step row, usage).
//!
//! Knobs: `BENCH_TASKS` (20), `BENCH_STEPS` (stairs top, 5), `BENCH_MODEL_DELAY_MS` (300),
//! `BENCH_RUNS` (1; medians over runs when more), `BENCH_CONCURRENCY` (20),
//! `BENCH_CHROME_PROCESSES` (2: one Chrome per core — each Chrome's browser process serialises
//! the CDP traffic of all its contexts on one main thread, and every extra Chrome adds its fixed
//! processes: browser, zygotes, GPU, network and storage services, crashpad).
//!
//! Needs the `browserd` binary of the same profile: `cargo build --release -p browserd` before
//! `cargo bench -p browserd-tests --bench service_load` (or `BROWSERD_BIN`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use browserd_tests::{
    Client, MockModel, Process, Site, TestDb, browserd_bin, create_key, stairs_brain,
};
use browserd_types::TaskEvent;
use serde_json::{Value, json};
use tokio::process::Command;

/// Longest wait for any one event on a task's stream.
const EVENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a whole side (all N tasks) may take.
const SIDE_TIMEOUT: Duration = Duration::from_secs(900);
/// Memory sampling period.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// PSS (smaps_rollup, costlier to read) is read every this many samples.
const PSS_EVERY: u32 = 10;
/// The environment variable marking every process of one side (its crashpad handlers are
/// re-parented to init, so the process tree alone misses them).
const TAG_VAR: &str = "BROWSERD_BENCH_TAG";
const TASK: &str = "Climb to the top and report the code";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug)]
struct Config {
    tasks: usize,
    top: u64,
    model_delay: Duration,
    runs: usize,
    concurrency: usize,
    chrome_processes: usize,
}

impl Config {
    fn from_env() -> Self {
        Self {
            tasks: env_u64("BENCH_TASKS", 20).max(1) as usize,
            top: env_u64("BENCH_STEPS", 5).max(2),
            model_delay: Duration::from_millis(env_u64("BENCH_MODEL_DELAY_MS", 300)),
            runs: env_u64("BENCH_RUNS", 1).max(1) as usize,
            concurrency: env_u64("BENCH_CONCURRENCY", 20).max(1) as usize,
            chrome_processes: env_u64("BENCH_CHROME_PROCESSES", 2).max(1) as usize,
        }
    }
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of `values` (sorted here), `NaN` when empty.
fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// ---------------------------------------------------------------- memory sampling

/// One process of a side: pid, VmRSS (KiB), what it is.
struct Member {
    pid: u32,
    rss_kib: u64,
    kind: String,
}

/// The processes carrying `tag` in their environment (browserd itself, Chrome's crashpad
/// handlers) and all their descendants.
fn members(tag_entry: &[u8]) -> Vec<Member> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut roots = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().unwrap_or("");
        let ppid: u32 = rest.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if state == "Z" {
            continue;
        }
        children.entry(ppid).or_default().push(pid);
        if (comm == "browserd" || comm.starts_with("chrome_crashpad"))
            && std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == tag_entry))
        {
            roots.push(pid);
        }
    }
    let mut seen = HashSet::new();
    let mut queue = roots;
    let mut out = Vec::new();
    while let Some(pid) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Some(kids) = children.get(&pid) {
            queue.extend(kids.iter().copied());
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        out.push(Member {
            pid,
            rss_kib,
            kind: kind_of(pid),
        });
    }
    out
}

/// browserd, Chrome's browser process, `--type=renderer|zygote|gpu-process|utility`, crashpad,
/// or what else (the `sh`/`tail` Chrome watchers).
fn kind_of(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let all = args.join(" ");
    let program = args.first().cloned().unwrap_or_default();
    if program.ends_with("browserd") {
        return "browserd".into();
    }
    if all.contains("chrome_crashpad_handler") {
        return "chrome crashpad".into();
    }
    if program.contains("chrom") {
        return match all.split_whitespace().find_map(|a| a.strip_prefix("--type=")) {
            Some(kind) => format!("chrome {kind}"),
            None => "chrome browser".into(),
        };
    }
    let name = program.rsplit('/').next().unwrap_or("?");
    format!("other ({name})")
}

fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Clone, Debug, Default)]
struct MemPeak {
    rss_kib: u64,
    pss_kib: u64,
    /// At the RSS peak: kind → (processes, RSS KiB).
    breakdown: BTreeMap<String, (usize, u64)>,
}

/// Samples a side's memory on a thread of its own until finished.
struct MemSampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<MemPeak>,
}

impl MemSampler {
    fn start(tag: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let entry = format!("{TAG_VAR}={tag}").into_bytes();
        let stopped = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = MemPeak::default();
            let mut tick = 0u32;
            while !stopped.load(Ordering::SeqCst) {
                let procs = members(&entry);
                let rss: u64 = procs.iter().map(|m| m.rss_kib).sum();
                if rss > peak.rss_kib {
                    peak.rss_kib = rss;
                    peak.breakdown.clear();
                    for m in &procs {
                        let slot = peak.breakdown.entry(m.kind.clone()).or_default();
                        slot.0 += 1;
                        slot.1 += m.rss_kib;
                    }
                }
                if tick % PSS_EVERY == 0 {
                    let pss: u64 = procs.iter().map(|m| pss_kib(m.pid)).sum();
                    peak.pss_kib = peak.pss_kib.max(pss);
                }
                tick += 1;
                std::thread::sleep(SAMPLE_EVERY);
            }
            peak
        });
        Self { stop, handle }
    }

    fn finish(self) -> MemPeak {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().expect("memory sampler")
    }
}

/// Waits (polling /proc) until no process of `tag` is left, so the next side starts alone.
async fn wait_gone(tag: &str) {
    let entry = format!("{TAG_VAR}={tag}").into_bytes();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = members(&entry);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            eprintln!(
                "warning: {} processes of {tag} still alive after 60 s: {:?}",
                left.len(),
                left.iter().map(|m| (m.pid, &m.kind)).collect::<Vec<_>>()
            );
            return;
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

// ---------------------------------------------------------------- service side

struct TaskOutcome {
    id: String,
    /// POST sent → first `step` event received.
    first_step: Option<Duration>,
    /// Receive time − `created_at` of every live `step` event, ms.
    deliveries_ms: Vec<f64>,
    /// `step` events committed before the WebSocket was open (served from the backlog).
    backlog_steps: usize,
    task: Value,
}

#[derive(Default)]
struct Running {
    now: usize,
    max: usize,
}

#[derive(Clone, Debug)]
struct ServiceRun {
    wall: Duration,
    max_running: usize,
    mem: MemPeak,
    first_step_ms: Vec<f64>,
    deliveries_ms: Vec<f64>,
    backlog_steps: usize,
}

async fn follow_task(
    client: Client,
    body: Value,
    running: Arc<Mutex<Running>>,
) -> Result<TaskOutcome, String> {
    let posted = Instant::now();
    let (status, created) = client.post("/v1/tasks", body).await;
    if status != 201 {
        return Err(format!("POST /v1/tasks answered {status}: {created}"));
    }
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    let mut stream = client.events(&id, 0).await;
    let connected_ns = now_ns();
    let mut outcome = TaskOutcome {
        id: id.clone(),
        first_step: None,
        deliveries_ms: Vec::new(),
        backlog_steps: 0,
        task: Value::Null,
    };
    let mut was_running = false;
    while let Some(raw) = stream.next(EVENT_TIMEOUT).await {
        let received_ns = now_ns();
        let received = Instant::now();
        let event: TaskEvent = serde_json::from_value(raw.clone())
            .map_err(|err| format!("task {id}: undecodable event {raw}: {err}"))?;
        if event.kind == "step" {
            outcome.first_step.get_or_insert(received - posted);
            let created_ns = event.created_at.unix_timestamp_nanos();
            if created_ns >= connected_ns {
                outcome
                    .deliveries_ms
                    .push((received_ns - created_ns) as f64 / 1e6);
            } else {
                outcome.backlog_steps += 1;
            }
        }
        if event.kind == "status" {
            let mut running = running.lock().unwrap();
            if event.payload["status"] == "running" && !was_running {
                was_running = true;
                running.now += 1;
                running.max = running.max.max(running.now);
            } else if event.is_final() && was_running {
                was_running = false;
                running.now -= 1;
            }
        }
    }
    outcome.task = client.task(&id).await;
    Ok(outcome)
}

async fn service_run(cfg: &Config, model: &MockModel, site: &Site) -> ServiceRun {
    let db = TestDb::create().await;
    let tag = format!("service-{}", uuid::Uuid::new_v4().simple());
    let concurrency = cfg.concurrency.to_string();
    let chrome_processes = cfg.chrome_processes.to_string();
    let sampler = MemSampler::start(&tag);
    let mut server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &[
            "--allow-loopback",
            "--concurrency",
            &concurrency,
            "--chrome-processes",
            &chrome_processes,
        ],
        &[(TAG_VAR, &tag), ("RUST_LOG", "info")],
    )
    .await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    let body = json!({
        "task": TASK,
        "start_url": site.url(&format!("/stairs/1?top={}", cfg.top)),
        "model": "mock",
        "use_vision": false,
        "max_steps": 20,
    });
    let running = Arc::new(Mutex::new(Running::default()));

    let started = Instant::now();
    let handles: Vec<_> = (0..cfg.tasks)
        .map(|_| {
            tokio::spawn(tokio::time::timeout(
                SIDE_TIMEOUT,
                follow_task(client.clone(), body.clone(), running.clone()),
            ))
        })
        .collect();
    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for handle in handles {
        match handle.await {
            Ok(Ok(Ok(outcome))) => outcomes.push(outcome),
            Ok(Ok(Err(err))) => failures.push(err),
            Ok(Err(_)) => failures.push(format!("a task took longer than {SIDE_TIMEOUT:?}")),
            Err(err) => failures.push(format!("following a task panicked: {err}")),
        }
    }
    let wall = started.elapsed();
    let mem = sampler.finish();

    let code = format!("CODE{}X", cfg.top);
    for outcome in &outcomes {
        let task = &outcome.task;
        let output = task["output"].as_str().unwrap_or("");
        if task["status"] != "finished" || task["is_success"] != true || !output.contains(&code)
        {
            failures.push(format!(
                "task {}: status {}, is_success {}, error {}, output {output:?}",
                outcome.id, task["status"], task["is_success"], task["error"]
            ));
        }
    }

    server.signal("TERM").await;
    server.wait(Duration::from_secs(60)).await;
    if !failures.is_empty() {
        let logs = server.logs();
        let tail: Vec<&str> = logs.lines().rev().take(40).collect();
        eprintln!("browserd serve log (last 40 lines, newest first):\n{}", tail.join("\n"));
        panic!(
            "{} of {} service tasks did not finish successfully:\n{}",
            failures.len(),
            cfg.tasks,
            failures.join("\n")
        );
    }
    wait_gone(&tag).await;
    drop(db);

    let max_running = running.lock().unwrap().max;
    ServiceRun {
        wall,
        max_running,
        mem,
        first_step_ms: outcomes
            .iter()
            .filter_map(|o| o.first_step.map(ms))
            .collect(),
        deliveries_ms: outcomes
            .iter()
            .flat_map(|o| o.deliveries_ms.iter().copied())
            .collect(),
        backlog_steps: outcomes.iter().map(|o| o.backlog_steps).sum(),
    }
}

// ---------------------------------------------------------------- baseline side

#[derive(Clone, Debug)]
struct BaselineRun {
    wall: Duration,
    mem: MemPeak,
}

async fn baseline_run(cfg: &Config, model: &MockModel, site: &Site) -> BaselineRun {
    let tag = format!("baseline-{}", uuid::Uuid::new_v4().simple());
    let start_url = site.url(&format!("/stairs/1?top={}", cfg.top));
    let base_url = format!("http://{}/v1", model.addr);
    let sampler = MemSampler::start(&tag);
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..cfg.tasks {
        let child = Command::new(browserd_bin())
            .arg("run")
            .arg(TASK)
            .args(["--start-url", &start_url])
            .args(["--allow-loopback", "--no-vision", "--max-steps", "20"])
            .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
            .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
            .env("BROWSERD_LLM_MOCK_BASE_URL", &base_url)
            .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
            .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
            .env("RUST_LOG", "warn")
            .env(TAG_VAR, &tag)
            .env_remove("BROWSERD_CONFIG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn browserd run");
        // Dropping the future on timeout drops the child, which kills it.
        handles.push(tokio::spawn(tokio::time::timeout(
            SIDE_TIMEOUT,
            child.wait_with_output(),
        )));
    }
    let code = format!("CODE{}X", cfg.top);
    let mut failures = Vec::new();
    for (i, handle) in handles.into_iter().enumerate() {
        match handle.await {
            Ok(Ok(Ok(output))) => {
                let stdout = String::from_utf8_lossy(&output.stdout);
                if !output.status.success() || !stdout.contains(&code) {
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
                    failures.push(format!(
                        "run {i}: {}, stdout {stdout:?}, stderr (newest first):\n{}",
                        output.status,
                        tail.join("\n")
                    ));
                }
            }
            Ok(Ok(Err(err))) => failures.push(format!("run {i}: waiting failed: {err}")),
            Ok(Err(_)) => failures.push(format!("run {i}: longer than {SIDE_TIMEOUT:?}")),
            Err(err) => failures.push(format!("run {i}: {err}")),
        }
    }
    let wall = started.elapsed();
    let mem = sampler.finish();
    assert!(
        failures.is_empty(),
        "{} of {} baseline runs did not succeed:\n{}",
        failures.len(),
        cfg.tasks,
        failures.join("\n")
    );
    wait_gone(&tag).await;
    BaselineRun { wall, mem }
}

// ---------------------------------------------------------------- report

fn per_min(tasks: usize, wall: Duration) -> f64 {
    tasks as f64 * 60.0 / wall.as_secs_f64()
}

fn print_breakdown(name: &str, mem: &MemPeak) {
    println!(
        "  {name} at its RSS peak ({:.0} MiB RSS; peak PSS {:.0} MiB):",
        mib(mem.rss_kib),
        mib(mem.pss_kib)
    );
    for (kind, (count, kib)) in &mem.breakdown {
        println!("    {kind:<34} {count:>4} processes {:>8.1} MiB", mib(*kib));
    }
}

#[tokio::main]
async fn main() {
    let cfg = Config::from_env();
    let model = MockModel::start(stairs_brain(), cfg.model_delay).await;
    let site = Site::start().await;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "service_load: {} tasks × {} model calls (stairs top {}), model delay {} ms, \
         serve --concurrency {} --chrome-processes {}, {} run(s); loadavg before: {}",
        cfg.tasks,
        cfg.top,
        cfg.top,
        cfg.model_delay.as_millis(),
        cfg.concurrency,
        cfg.chrome_processes,
        cfg.runs,
        load.trim()
    );

    let mut services = Vec::new();
    let mut baselines = Vec::new();
    for run in 1..=cfg.runs {
        let service = service_run(&cfg, &model, &site).await;
        println!(
            "run {run} service:  {:6.1} s wall, {:6.1} tasks/min, peak RSS {:7.1} MiB \
             (PSS {:7.1}) over {} running tasks, POST→first step p50 {:.0} / p99 {:.0} ms, \
             step delivery p50 {:.1} / p99 {:.1} ms (n={}, {} from backlog excluded)",
            service.wall.as_secs_f64(),
            per_min(cfg.tasks, service.wall),
            mib(service.mem.rss_kib),
            mib(service.mem.pss_kib),
            service.max_running,
            percentile(&service.first_step_ms, 50.0),
            percentile(&service.first_step_ms, 99.0),
            percentile(&service.deliveries_ms, 50.0),
            percentile(&service.deliveries_ms, 99.0),
            service.deliveries_ms.len(),
            service.backlog_steps,
        );
        let baseline = baseline_run(&cfg, &model, &site).await;
        println!(
            "run {run} baseline: {:6.1} s wall, {:6.1} tasks/min, peak RSS {:7.1} MiB \
             (PSS {:7.1}) over {} processes",
            baseline.wall.as_secs_f64(),
            per_min(cfg.tasks, baseline.wall),
            mib(baseline.mem.rss_kib),
            mib(baseline.mem.pss_kib),
            cfg.tasks,
        );
        services.push(service);
        baselines.push(baseline);
    }

    let n = cfg.tasks;
    let s_rate = median(&services.iter().map(|s| per_min(n, s.wall)).collect::<Vec<_>>());
    let b_rate = median(&baselines.iter().map(|b| per_min(n, b.wall)).collect::<Vec<_>>());
    let per_task = |kib: u64, running: usize| mib(kib) / running.max(1) as f64;
    let s_rss = median(
        &services
            .iter()
            .map(|s| per_task(s.mem.rss_kib, s.max_running))
            .collect::<Vec<_>>(),
    );
    let b_rss = median(
        &baselines
            .iter()
            .map(|b| per_task(b.mem.rss_kib, n))
            .collect::<Vec<_>>(),
    );
    let s_pss = median(
        &services
            .iter()
            .map(|s| per_task(s.mem.pss_kib, s.max_running))
            .collect::<Vec<_>>(),
    );
    let b_pss = median(
        &baselines
            .iter()
            .map(|b| per_task(b.mem.pss_kib, n))
            .collect::<Vec<_>>(),
    );
    let stat = |f: &dyn Fn(&ServiceRun) -> f64| {
        median(&services.iter().map(f).collect::<Vec<_>>())
    };
    let first_p50 = stat(&|s| percentile(&s.first_step_ms, 50.0));
    let first_p99 = stat(&|s| percentile(&s.first_step_ms, 99.0));
    let deliv_p50 = stat(&|s| percentile(&s.deliveries_ms, 50.0));
    let deliv_p99 = stat(&|s| percentile(&s.deliveries_ms, 99.0));
    let max_running = services.iter().map(|s| s.max_running).max().unwrap_or(0);

    println!();
    println!(
        "medians over {} run(s); {n} tasks, service peak concurrency {max_running}",
        cfg.runs
    );
    println!(
        "{:<28} {:>10} {:>10} {:>18}",
        "", "service", "baseline", "service/baseline"
    );
    println!(
        "{:<28} {:>10.1} {:>10.1} {:>18.2}",
        "tasks/min",
        s_rate,
        b_rate,
        s_rate / b_rate
    );
    println!(
        "{:<28} {:>10.1} {:>10.1} {:>18.2}",
        "peak RSS per task (MiB)",
        s_rss,
        b_rss,
        s_rss / b_rss
    );
    println!(
        "{:<28} {:>10.1} {:>10.1} {:>18.2}",
        "peak PSS per task (MiB)",
        s_pss,
        b_pss,
        s_pss / b_pss
    );
    println!("service latencies:");
    println!("  POST → first step event     p50 {first_p50:7.0} ms   p99 {first_p99:7.0} ms");
    println!(
        "  step commit → WS delivery   p50 {deliv_p50:7.1} ms   p99 {deliv_p99:7.1} ms   \
         (target p99 ≤ 50 ms; created_at = start of the step's write transaction)"
    );
    if let (Some(s), Some(b)) = (services.last(), baselines.last()) {
        println!("memory at the peak (last run):");
        print_breakdown("service", &s.mem);
        print_breakdown("baseline", &b.mem);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg after: {}", load.trim());
}
