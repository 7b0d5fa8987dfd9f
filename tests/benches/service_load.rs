//! Service load, the table of issue 28 as one command: N tasks submitted at once to one
//! `browserd serve` (a Chrome pool shared by all tasks), once per Chrome build compared — by
//! default Debian's headless shell (browserd's default) and the full build in its new headless
//! mode —, runs alternating between them; then, on the same idle service, tasks one at a time.
//! Real Postgres, real Chromium on local pages, a mock OpenAI-compatible model answering after
//! a fixed delay. Every task reads `/stairs/1?top=T` with `use_vision: false`: T = 1 (the
//! default) is the read-only task, one capture and a `done`; T > 1 climbs (T−1 clicks and a
//! `done`, so T model calls). Each service run starts a fresh `serve` and posts the batch once
//! it is warm (its first Chrome running with its spare contexts open; `BENCH_COLD=1` posts at
//! once, so that the batch pays for the launch).
//!
//! Measured per side, from /proc every 100 ms (PSS only in the samples whose RSS sum is the
//! side's highest so far, and at most every 300 ms in those within 5 % of it: reading PSS walks
//! every page table of a process, and at every near-peak sample it took the bench most of a
//! CPU-second per batch, which the 2-core machine took from the service; a PSS kept from an
//! earlier reading would be cheaper but wrong — what a process shares is divided among more
//! processes as others start — and overstated the peak by 7–15 %): the processes of the side are the `browserd`
//! processes (marked by an environment variable) and all their descendants, plus Chrome's
//! crashpad handlers (re-parented to init, found by the same mark).
//! - wall time of the whole batch → tasks per minute;
//! - peak memory per concurrently running task: PSS summed over the processes (from
//!   `smaps_rollup`: each shared page — chromium's code, fonts — divided among the processes
//!   that map it, so the sum is what the side costs the machine), divided by the most tasks
//!   running at once; also VmRSS summed (counts every shared page once per process, so it
//!   overstates many small processes) and RssAnon. Per kind of process (browser, renderer, the
//!   top-chrome WebUI renderer every window of the full build gets, GPU, …) the report shows
//!   the processes, PSS, VmRSS and RssAnon at the PSS peak and their CPU seconds;
//! - CPU seconds of the side's processes (utime + stime, the last ≤ 100 ms of a process that
//!   exits between samples is missed); for the service also those of its Postgres backends;
//! - machine-wide CPU busy share while the batch ran, and in the 2 s before it (others' load).
//!
//! POST → `running` status, → first `step_started` (step 0 = the start URL), → first `step`
//! event, each received on the task's WebSocket (opened right after the POST, from seq 0), in
//! the batch and at idle; and for every live event its delivery latency = client receive time
//! − `created_at`. `created_at` is Postgres `now()`, the *start* of the writing transaction; a
//! `step` event's transaction also stores the screenshot artifact, the step row and the usage,
//! so its delivery latency over-counts by that transaction's duration; other events are
//! one-insert transactions.
//!
//! browser-use's memory in the same run, when a Python with browser-use is found
//! (`BENCH_BROWSER_USE_PYTHON`, or the virtualenv `scripts/venv tests/benches/browser_use.txt`
//! makes): N agents at once in one Python process (`browser_use_agents.py`, each agent with its
//! own Chrome, `BENCH_BROWSER_USE_CHROME`, default `/usr/bin/chromium`), PSS per agent.
//! `BENCH_BASELINE=1` adds N concurrent `browserd run` processes (one Chrome each).
//!
//! Knobs: `BENCH_COLD` (0), `BENCH_TASKS` (20), `BENCH_STEPS` (stairs top, 1), `BENCH_MODEL_DELAY_MS` (300),
//! `BENCH_RUNS` (3; medians over runs), `BENCH_CHROMES` (comma-separated sides — `;`-separated
//! when there is a `;` —, each an executable maybe followed by `serve` flags of its own —
//! `/usr/bin/chromium-headless-shell --spare-contexts false` —, default `/usr/bin/chromium-headless-shell,/usr/bin/chromium`), `BENCH_IDLE_TASKS` (5),
//! `BENCH_CONCURRENCY` and `BENCH_CHROME_PROCESSES` (unset: `serve` runs with the default
//! install's settings, 5 tasks at once on one Chrome (4 when the issue measured its table); the saturation
//! run of the delivery measurement is `BENCH_CONCURRENCY=20 BENCH_CHROME_PROCESSES=2`, one
//! Chrome per core — each Chrome's browser process serialises the CDP traffic of all its
//! contexts on one main thread, while every extra Chrome adds its fixed processes),
//! `BENCH_VERBOSE=1` (a memory sample every second, and every event delivered in over 50 ms),
//! `BENCH_TASK_TIMES=1` (each task's `queued`, `running` and `finished`, ms from the first POST),
//! `BENCH_SERVE_LOG` (`serve`'s `RUST_LOG`, `info`) with `BENCH_SERVE_GREP` (its log lines
//! containing this text are printed after each batch: e.g. `browserd_browser=debug` and
//! `browser context opened` show where each context's opening went).
//!
//! Memory is reported two ways: the peak PSS over the tasks of the batch (the issue's "memory
//! per task": what N tasks cost the machine when the service runs them at its concurrency) and
//! the peak PSS over the tasks running at once at that peak (the marginal cost of concurrency
//! plus the fixed processes shared among fewer tasks).
//!
//! Needs the `browserd` binary of the same profile: `cargo build --release -p browserd` before
//! `cargo bench -p browserd-tests --bench service_load` (or point `BROWSERD_BIN` at one).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
/// Sampling period of /proc.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// A sample reads the processes' PSS when their RSS sum is the highest so far, or at least
/// this share (%) of it and the last PSS reading is [`PSS_NEAR_PEAK_EVERY`] old.
const PSS_NEAR_RSS_PEAK_PERCENT: u64 = 95;
/// Least time between two PSS readings near (not at) the RSS peak.
const PSS_NEAR_PEAK_EVERY: Duration = Duration::from_millis(300);
/// Marks every process of one side.
const TAG_VAR: &str = "BROWSERD_BENCH_TAG";
const TASK: &str = "Climb to the top and report the code";
const POSTGRES: &str = "postgres backend";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Debug)]
struct Config {
    tasks: usize,
    top: u64,
    model_delay: Duration,
    runs: usize,
    /// `serve`'s flags beyond the default install (`BENCH_CONCURRENCY` → `--concurrency`,
    /// `BENCH_CHROME_PROCESSES` → `--chrome-processes`); none by default.
    serve_flags: Vec<String>,
    verbose: bool,
    /// The Chrome executables compared, one service side each per run.
    chromes: Vec<String>,
    /// Tasks run one at a time on the idle service after each batch.
    idle_tasks: usize,
    /// POST the batch as soon as `serve` answers (`BENCH_COLD=1`): the batch pays for the
    /// first Chrome's launch. By default the batch waits until the service is warm — its
    /// first Chrome running with its spare contexts open, as on a service that has been up
    /// for a while — and CPU is counted from the batch's start.
    cold: bool,
    /// Also run the N concurrent `browserd run` processes.
    baseline: bool,
    /// A Python with browser-use: N browser-use agents at once, for their memory.
    browser_use_python: Option<String>,
    /// The Chrome browser-use's agents launch.
    browser_use_chrome: String,
}

/// Debian's two builds: the headless shell (browserd's default) and the full build.
const DEFAULT_CHROMES: &str = "/usr/bin/chromium-headless-shell,/usr/bin/chromium";

impl Config {
    fn from_env() -> Self {
        // Sides are separated by `;` when there is one (a side's flags may hold commas:
        // `--chrome-args=--disable-features=A,B`), else by `,`.
        let sides = std::env::var("BENCH_CHROMES").unwrap_or_else(|_| DEFAULT_CHROMES.to_owned());
        let separator = if sides.contains(';') { ';' } else { ',' };
        let chromes: Vec<String> = sides
            .split(separator)
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
        let missing: Vec<&String> = chromes
            .iter()
            .filter(|c| {
                let executable = c.split_whitespace().next().unwrap_or(c);
                !std::path::Path::new(executable).exists()
            })
            .collect();
        assert!(
            missing.is_empty(),
            "BENCH_CHROMES names executables that do not exist: {missing:?}"
        );
        let browser_use_python = std::env::var("BENCH_BROWSER_USE_PYTHON")
            .ok()
            .filter(|p| !p.is_empty())
            .or_else(find_browser_use_venv);
        Self {
            tasks: env_u64("BENCH_TASKS", 20).max(1) as usize,
            top: env_u64("BENCH_STEPS", 1).max(1),
            model_delay: Duration::from_millis(env_u64("BENCH_MODEL_DELAY_MS", 300)),
            runs: env_u64("BENCH_RUNS", 3).max(1) as usize,
            serve_flags: [
                ("BENCH_CONCURRENCY", "--concurrency"),
                ("BENCH_CHROME_PROCESSES", "--chrome-processes"),
            ]
            .into_iter()
            .filter_map(|(var, flag)| {
                let value = env_u64(var, 0);
                (value > 0).then(|| [flag.to_owned(), value.to_string()])
            })
            .flatten()
            .collect(),
            verbose: env_u64("BENCH_VERBOSE", 0) == 1,
            chromes,
            idle_tasks: env_u64("BENCH_IDLE_TASKS", 5) as usize,
            cold: env_u64("BENCH_COLD", 0) == 1,
            baseline: env_u64("BENCH_BASELINE", 0) == 1,
            browser_use_python,
            browser_use_chrome: std::env::var("BENCH_BROWSER_USE_CHROME")
                .unwrap_or_else(|_| "/usr/bin/chromium".to_owned()),
        }
    }
}

/// A virtualenv of `scripts/venv` holding browser-use (`tests/benches/browser_use.txt`), when
/// one was made: its Python.
fn find_browser_use_venv() -> Option<String> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))?
        .join("browserd-venvs");
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("benches-browser_use-"))
                && p.join(".complete").exists()
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|venv| venv.join("bin/python").display().to_string())
}

/// A short name of a side (a Chrome executable and its own `serve` flags) for the report.
fn chrome_label(chrome: &str) -> String {
    let mut words = chrome.split_whitespace();
    let executable = words.next().unwrap_or(chrome);
    let name = executable.rsplit('/').next().unwrap_or(executable);
    std::iter::once(name)
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ")
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

/// Nearest-rank percentile, `NaN` when empty.
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

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------- machine cpu

/// Clock ticks per second of /proc times.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Machine-wide (busy, total) CPU ticks from /proc/stat.
fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The machine's busy share (all cores = 1.0) since `since`.
fn busy_since(since: (u64, u64)) -> f64 {
    let (busy, total) = machine_cpu();
    (busy - since.0) as f64 / (total - since.1).max(1) as f64
}

/// The machine's busy share over the next 2 s: how loaded it is by others before a side.
async fn background_busy() -> f64 {
    let since = machine_cpu();
    tokio::time::sleep(Duration::from_secs(2)).await;
    busy_since(since)
}

/// CPU ticks (user + system) of this process.
fn own_cpu_ticks() -> u64 {
    read_stat("self").map_or(0, |s| s.cpu_ticks)
}

// ---------------------------------------------------------------- process sampling

struct Stat {
    ppid: u32,
    comm: String,
    zombie: bool,
    cpu_ticks: u64,
}

fn read_stat(pid: &str) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // After the comm: state(0) ppid(1) … utime(11) stime(12).
    let at = |i: usize| -> u64 { fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0) };
    Some(Stat {
        ppid: at(1) as u32,
        comm: stat[open + 1..close].to_owned(),
        zombie: fields.first() == Some(&"Z"),
        cpu_ticks: at(11) + at(12),
    })
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// browserd, Chrome's browser process, `chrome <--type>`, crashpad, or what else (the
/// `sh`/`tail` watchers next to each Chrome).
fn kind_of(pid: u32) -> String {
    let all = cmdline(pid);
    let program = all.split(' ').next().unwrap_or("");
    if program.ends_with("browserd") {
        return "browserd".into();
    }
    if program
        .rsplit('/')
        .next()
        .is_some_and(|p| p.starts_with("python"))
    {
        return "python (browser-use)".into();
    }
    if program.contains("crashpad") {
        return "chrome crashpad".into();
    }
    // Chrome starts some helpers as `/proc/self/exe --type=…`.
    if let Some(kind) = all.split(' ').find_map(|a| a.strip_prefix("--type=")) {
        // New headless Chrome gives every window (one per browser context) a renderer for
        // its top-chrome WebUI besides the page's.
        if all.split(' ').any(|a| a == "--top-chrome-webui") {
            return format!("chrome {kind} (webui)");
        }
        return format!("chrome {kind}");
    }
    if program.contains("chrom") {
        return "chrome browser".into();
    }
    format!("other ({})", program.rsplit('/').next().unwrap_or("?"))
}

/// Pss in KiB, from `smaps_rollup`: each shared page divided among the processes mapping it,
/// so the sum over a side is what the side costs the machine.
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|rollup| {
            rollup
                .lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// (VmRSS, RssAnon) in KiB.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some((field("VmRSS:"), field("RssAnon:")))
}

struct Member {
    pid: u32,
    kind: String,
    rss_kib: u64,
    anon_kib: u64,
    pss_kib: u64,
    cpu_ticks: u64,
}

/// Finds the processes of one side.
struct Scanner {
    tag_entry: Vec<u8>,
    /// The service's database: its Postgres backends are reported too.
    database: Option<String>,
    kinds: HashMap<u32, String>,
}

impl Scanner {
    fn new(tag: &str, database: Option<String>) -> Self {
        Self {
            tag_entry: format!("{TAG_VAR}={tag}").into_bytes(),
            database,
            kinds: HashMap::new(),
        }
    }

    fn tagged(&self, pid: u32) -> bool {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == self.tag_entry))
    }

    fn scan(&mut self) -> Vec<Member> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut stats = HashMap::new();
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut roots = Vec::new();
        let mut backends = Vec::new();
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(stat) = read_stat(&pid.to_string()) else {
                continue;
            };
            if stat.zombie {
                continue;
            }
            children.entry(stat.ppid).or_default().push(pid);
            // Chrome rewrites its helpers' environ area (setproctitle) but not the browser's
            // or crashpad's: the mark is found on browserd and crashpad, the rest by parentage.
            if (stat.comm == "browserd"
                || stat.comm.starts_with("chrome_crashpad")
                || stat.comm.starts_with("python"))
                && self.tagged(pid)
            {
                roots.push(pid);
            }
            if stat.comm == "postgres"
                && let Some(db) = &self.database
                && cmdline(pid).split(' ').any(|w| w == db)
            {
                backends.push(pid);
            }
            stats.insert(pid, stat);
        }
        let mut seen = HashSet::new();
        let mut queue: Vec<(u32, bool)> = roots.into_iter().map(|p| (p, false)).collect();
        queue.extend(backends.into_iter().map(|p| (p, true)));
        let mut out = Vec::new();
        while let Some((pid, backend)) = queue.pop() {
            if !seen.insert(pid) {
                continue;
            }
            if !backend && let Some(kids) = children.get(&pid) {
                queue.extend(kids.iter().map(|k| (*k, false)));
            }
            let Some((rss_kib, anon_kib)) = rss_kib(pid) else {
                continue;
            };
            let kind = if backend {
                POSTGRES.to_owned()
            } else {
                // A zygote's fork renames itself, an exec'd helper starts as
                // `/proc/self/exe`: look again until they have.
                match self.kinds.get(&pid) {
                    Some(kind) if kind != "chrome zygote" && !kind.starts_with("other") => {
                        kind.clone()
                    }
                    _ => {
                        let kind = kind_of(pid);
                        self.kinds.insert(pid, kind.clone());
                        kind
                    }
                }
            };
            out.push(Member {
                pid,
                kind,
                rss_kib,
                anon_kib,
                pss_kib: 0,
                cpu_ticks: stats.get(&pid).map_or(0, |s| s.cpu_ticks),
            });
        }
        out
    }
}

/// What one side used, from the samples.
#[derive(Clone, Debug, Default)]
struct Usage {
    /// Peak VmRSS sum (browserd + Chrome, no Postgres), KiB.
    rss_kib: u64,
    /// Peak RssAnon sum (browserd + Chrome, no Postgres), KiB.
    anon_kib: u64,
    /// Peak Pss sum (browserd + Chrome, no Postgres), KiB.
    pss_kib: u64,
    /// At the PSS peak: kind → (processes, VmRSS KiB, RssAnon KiB, Pss KiB).
    breakdown: BTreeMap<String, (usize, u64, u64, u64)>,
    /// CPU seconds of browserd + Chrome.
    cpu_s: f64,
    /// CPU seconds of the Postgres backends (service only).
    postgres_cpu_s: f64,
    /// CPU seconds by kind of process (Postgres included).
    cpu_by_kind: BTreeMap<String, f64>,
    /// Mean duration of one /proc scan.
    scan: Duration,
    /// Scans in all, and those that read PSS.
    scans: (u32, u32),
}

/// Samples a side's processes on a thread of its own until finished.
struct Sampler {
    stop: Arc<AtomicBool>,
    /// Per pid, the CPU ticks used before the batch (a warmed-up service's start-up), left
    /// out of the side's CPU once set.
    before_batch: Arc<Mutex<Option<HashMap<u32, u64>>>>,
    tag: String,
    database: Option<String>,
    handle: std::thread::JoinHandle<Usage>,
}

impl Sampler {
    fn start(tag: &str, database: Option<String>, ticks: f64, verbose: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let before_batch = Arc::new(Mutex::new(None));
        let left_out = before_batch.clone();
        let mut scanner = Scanner::new(tag, database.clone());
        let handle = std::thread::spawn(move || {
            let mut usage = Usage::default();
            // Per pid: (kind, highest CPU ticks seen).
            let mut cpu: HashMap<u32, (String, u64)> = HashMap::new();

            let began = Instant::now();
            let mut scans = 0u32;
            let mut scanning = Duration::ZERO;
            let mut last_pss: Option<Instant> = None;
            let mut pss_scans = 0u32;
            while !stopped.load(Ordering::SeqCst) {
                let scan = Instant::now();
                let mut procs = scanner.scan();
                let ours = |procs: &[Member]| {
                    procs
                        .iter()
                        .filter(|m| m.kind != POSTGRES)
                        .map(|m| (m.rss_kib, m.anon_kib))
                        .fold((0, 0), |(r, a), (mr, ma)| (r + mr, a + ma))
                };
                let (rss, anon) = ours(&procs);
                // PSS (smaps_rollup walks every mapping of a process: most of a scan's cost,
                // which the 2-core machine would take from the service) only at or near the
                // side's RSS peak so far, where the PSS peak is.
                let at_peak = rss >= usage.rss_kib;
                let near_peak = rss * 100 >= usage.rss_kib * PSS_NEAR_RSS_PEAK_PERCENT
                    && last_pss.is_none_or(|at: Instant| at.elapsed() >= PSS_NEAR_PEAK_EVERY);
                if at_peak || near_peak {
                    last_pss = Some(Instant::now());
                    pss_scans += 1;
                    for m in procs.iter_mut().filter(|m| m.kind != POSTGRES) {
                        m.pss_kib = pss_kib(m.pid);
                    }
                }
                scanning += scan.elapsed();
                scans += 1;
                usage.anon_kib = usage.anon_kib.max(anon);
                let pss: u64 = procs
                    .iter()
                    .filter(|m| m.kind != POSTGRES)
                    .map(|m| m.pss_kib)
                    .sum();
                usage.rss_kib = usage.rss_kib.max(rss);
                if pss > usage.pss_kib {
                    usage.pss_kib = pss;
                    usage.breakdown.clear();
                    for m in &procs {
                        let slot = usage.breakdown.entry(m.kind.clone()).or_default();
                        slot.0 += 1;
                        slot.1 += m.rss_kib;
                        slot.2 += m.anon_kib;
                        slot.3 += m.pss_kib;
                    }
                }
                for m in &procs {
                    let slot = cpu.entry(m.pid).or_default();
                    // An exiting process shows an empty command line: keep what it was.
                    if slot.0.is_empty() || m.kind != "other ()" {
                        slot.0.clone_from(&m.kind);
                    }
                    slot.1 = slot.1.max(m.cpu_ticks);
                }
                if verbose && scans % 10 == 1 {
                    eprintln!(
                        "  t={:5.1}s procs={:3} rss={:6.0} MiB anon={:5.0} MiB pss={:5.0} MiB \
                         (scan {:.1} ms)",
                        began.elapsed().as_secs_f64(),
                        procs.len(),
                        mib(rss),
                        mib(anon),
                        mib(pss),
                        ms(scan.elapsed())
                    );
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            let before: HashMap<u32, u64> = left_out.lock().unwrap().take().unwrap_or_default();
            for (pid, (kind, t)) in &cpu {
                let t = t.saturating_sub(before.get(pid).copied().unwrap_or(0));
                *usage.cpu_by_kind.entry(kind.clone()).or_default() += t as f64 / ticks;
            }
            usage.postgres_cpu_s = usage.cpu_by_kind.get(POSTGRES).copied().unwrap_or(0.0);
            usage.cpu_s = usage.cpu_by_kind.values().sum::<f64>() - usage.postgres_cpu_s;
            usage.scan = scanning / scans.max(1);
            usage.scans = (scans, pss_scans);
            usage
        });
        Self {
            stop,
            before_batch,
            tag: tag.to_owned(),
            database,
            handle,
        }
    }

    /// From now on, CPU counts: what the processes used before is left out.
    fn count_cpu_from_now(&self) {
        let mut scanner = Scanner::new(&self.tag, self.database.clone());
        let used: HashMap<u32, u64> = scanner
            .scan()
            .iter()
            .map(|m| (m.pid, m.cpu_ticks))
            .collect();
        *self.before_batch.lock().unwrap() = Some(used);
    }

    fn finish(self) -> Usage {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().expect("sampler thread")
    }
}

/// Waits (polling /proc) until no process of `tag` is left, so the next side starts alone.
async fn wait_gone(tag: &str) {
    let mut scanner = Scanner::new(tag, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = scanner.scan();
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

/// What both sides report.
#[derive(Clone, Debug)]
struct Side {
    wall: Duration,
    /// Tasks running at once at the peak.
    running: usize,
    usage: Usage,
    /// CPU seconds of this bench process (model, pages, clients, sampler) during the batch.
    bench_cpu_s: f64,
    /// Machine busy share during the batch, and in the 2 s before it.
    busy: f64,
    busy_before: f64,
    /// Tasks that did not finish (baseline only: a Chrome that did not start among N
    /// simultaneous launches); they do not count in tasks/min.
    failed: usize,
}

impl Side {
    fn per_min(&self, tasks: usize) -> f64 {
        tasks.saturating_sub(self.failed) as f64 * 60.0 / self.wall.as_secs_f64()
    }

    fn rss_per_task(&self) -> f64 {
        mib(self.usage.rss_kib) / self.running.max(1) as f64
    }

    fn anon_per_task(&self) -> f64 {
        mib(self.usage.anon_kib) / self.running.max(1) as f64
    }

    fn pss_per_task(&self) -> f64 {
        mib(self.usage.pss_kib) / self.running.max(1) as f64
    }

    fn summary(&self, tasks: usize) -> String {
        format!(
            "{:5.1} s wall, {:5.1} tasks/min{}, peak PSS {:5.0} MiB / RSS {:6.0} MiB / anon \
             {:5.0} MiB over {} running, CPU {:5.1} s (bench {:.1} s), machine busy {:3.0} % \
             (before {:3.0} %)",
            self.wall.as_secs_f64(),
            self.per_min(tasks),
            if self.failed > 0 {
                format!(" ({} failed)", self.failed)
            } else {
                String::new()
            },
            mib(self.usage.pss_kib),
            mib(self.usage.rss_kib),
            mib(self.usage.anon_kib),
            self.running,
            self.usage.cpu_s,
            self.bench_cpu_s,
            self.busy * 100.0,
            self.busy_before * 100.0,
        )
    }
}

// ---------------------------------------------------------------- service side

struct TaskOutcome {
    id: String,
    /// POST sent → `running` status, first `step_started`, first `step` received.
    running: Option<Duration>,
    step_started: Option<Duration>,
    first_step: Option<Duration>,
    /// Receive time − `created_at` of every live `step` event, ms.
    step_deliveries_ms: Vec<f64>,
    /// The same for every live event of another kind.
    other_deliveries_ms: Vec<f64>,
    /// Events committed before the WebSocket was open (served from the backlog, not counted).
    backlog: usize,
    /// Live events delivered in more than 50 ms: (kind, seq, ms, created_at ns).
    slow: Vec<(String, i64, f64, i128)>,
    /// Every event, in order: its label (kind, with the status or step number) and
    /// `created_at` in ns.
    timeline: Vec<(String, i128)>,
    task: Value,
}

impl TaskOutcome {
    /// `created_at` (ns) of the task's first event labelled `label` (see [`timeline_label`]).
    fn event_at(&self, label: &str) -> Option<i128> {
        self.timeline
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, t)| *t)
    }
}

/// An event's label in the timeline: `status:running`, `step_started:0`, `step:1`, `model_output`.
fn timeline_label(event: &TaskEvent) -> String {
    let payload = &event.payload;
    if let Some(status) = payload["status"]
        .as_str()
        .filter(|_| event.kind == "status")
    {
        format!("status:{status}")
    } else if let Some(number) = payload["number"].as_i64() {
        format!("{}:{number}", event.kind)
    } else {
        event.kind.clone()
    }
}

/// Median milliseconds between consecutive events of the tasks, per transition (`a → b`), in
/// the order the transitions first appear; and, for the slots handed from a finished task to a
/// queued one, the median gap between a task's final event and the next `running`.
/// Rows of the batch's timeline: a name, the median over all tasks (ms), how many, and the
/// median over the tasks of the first slots (those running before any had finished).
fn timeline_medians(outcomes: &[TaskOutcome]) -> Vec<(String, f64, usize, Option<f64>)> {
    // The k-th start after the first slots' is the k-th end's successor.
    let at = |label: &str| -> Vec<i128> {
        let mut times: Vec<i128> = outcomes.iter().filter_map(|o| o.event_at(label)).collect();
        times.sort_unstable();
        times
    };
    let starts = at("status:running");
    let ends = at("status:finished");
    let slots = starts
        .iter()
        .filter(|t| ends.first().is_none_or(|e| *t < e))
        .count();
    let started_first = |o: &TaskOutcome| {
        o.timeline
            .iter()
            .find(|(l, _)| l == "status:running")
            .is_some_and(|(_, t)| ends.first().is_none_or(|e| t < e))
    };
    let mut order: Vec<String> = Vec::new();
    let mut gaps: HashMap<String, (Vec<f64>, Vec<f64>)> = HashMap::new();
    for outcome in outcomes {
        let first = started_first(outcome);
        for pair in outcome.timeline.windows(2) {
            let name = format!("{} → {}", pair[0].0, pair[1].0);
            if !gaps.contains_key(&name) {
                order.push(name.clone());
            }
            let gap = (pair[1].1 - pair[0].1) as f64 / 1e6;
            let (all, of_first) = gaps.entry(name).or_default();
            all.push(gap);
            if first {
                of_first.push(gap);
            }
        }
    }
    let mut rows: Vec<(String, f64, usize, Option<f64>)> = order
        .into_iter()
        .map(|name| {
            let (all, of_first) = &gaps[&name];
            let first = (!of_first.is_empty()).then(|| median(of_first));
            (name, median(all), all.len(), first)
        })
        .collect();
    let handoffs: Vec<f64> = starts
        .iter()
        .skip(slots)
        .zip(&ends)
        .map(|(start, end)| (start - end) as f64 / 1e6)
        .collect();
    // A task's whole run, for the tasks that started on the fresh service and the others.
    let mut runs: Vec<(i128, f64)> = outcomes
        .iter()
        .filter_map(|o| {
            let (start, end) = (
                o.event_at("status:running")?,
                o.event_at("status:finished")?,
            );
            Some((start, (end - start) as f64 / 1e6))
        })
        .collect();
    runs.sort_by_key(|(start, _)| *start);
    if env_u64("BENCH_TASK_TIMES", 0) == 1 {
        let t0 = at("status:queued").first().copied().unwrap_or(0);
        let mut rows: Vec<(i128, i128, i128)> = outcomes
            .iter()
            .filter_map(|o| {
                Some((
                    o.event_at("status:queued")?,
                    o.event_at("status:running")?,
                    o.event_at("status:finished")?,
                ))
            })
            .collect();
        rows.sort_by_key(|r| r.1);
        for (q, r, f) in rows {
            println!(
                "      task: queued {:6.0} running {:6.0} finished {:6.0} ms",
                (q - t0) as f64 / 1e6,
                (r - t0) as f64 / 1e6,
                (f - t0) as f64 / 1e6
            );
        }
    }
    let (first, later): (Vec<_>, Vec<_>) = runs.iter().enumerate().partition(|(i, _)| *i < slots);
    for (name, group) in [("first", first), ("later", later)] {
        let values: Vec<f64> = group.iter().map(|(_, (_, ms))| *ms).collect();
        if !values.is_empty() {
            rows.push((
                format!("running → finished, the {name} tasks"),
                median(&values),
                values.len(),
                None,
            ));
        }
    }
    if !handoffs.is_empty() {
        rows.push((
            "a task finished → a queued one running".to_owned(),
            median(&handoffs),
            handoffs.len(),
            None,
        ));
    }
    rows
}

#[derive(Default)]
struct Running {
    now: usize,
    max: usize,
}

#[derive(Clone, Debug)]
struct ServiceRun {
    side: Side,
    running_ms: Vec<f64>,
    step_started_ms: Vec<f64>,
    first_step_ms: Vec<f64>,
    step_deliveries_ms: Vec<f64>,
    other_deliveries_ms: Vec<f64>,
    backlog: usize,
    /// The same latencies of tasks run one at a time on the idle service after the batch.
    idle_running_ms: Vec<f64>,
    idle_step_started_ms: Vec<f64>,
    idle_first_step_ms: Vec<f64>,
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
        running: None,
        step_started: None,
        first_step: None,
        step_deliveries_ms: Vec::new(),
        other_deliveries_ms: Vec::new(),
        backlog: 0,
        slow: Vec::new(),
        timeline: Vec::new(),
        task: Value::Null,
    };
    let mut was_running = false;
    while let Some(raw) = stream.next(EVENT_TIMEOUT).await {
        let received_ns = now_ns();
        let since_post = posted.elapsed();
        let event: TaskEvent = serde_json::from_value(raw.clone())
            .map_err(|err| format!("task {id}: undecodable event {raw}: {err}"))?;
        let created_ns = event.created_at.unix_timestamp_nanos();
        let delivery_ms = (received_ns - created_ns) as f64 / 1e6;
        if created_ns >= connected_ns && delivery_ms > 50.0 {
            outcome
                .slow
                .push((event.kind.clone(), event.seq, delivery_ms, created_ns));
        }
        outcome.timeline.push((timeline_label(&event), created_ns));
        if created_ns < connected_ns {
            outcome.backlog += 1;
        } else if event.kind == "step" {
            outcome.step_deliveries_ms.push(delivery_ms);
        } else {
            outcome.other_deliveries_ms.push(delivery_ms);
        }
        match event.kind.as_str() {
            "step" => {
                outcome.first_step.get_or_insert(since_post);
            }
            "step_started" => {
                outcome.step_started.get_or_insert(since_post);
            }
            "status" => {
                let mut running = running.lock().unwrap();
                if event.payload["status"] == "running" && !was_running {
                    was_running = true;
                    outcome.running.get_or_insert(since_post);
                    running.now += 1;
                    running.max = running.max.max(running.now);
                } else if event.is_final() && was_running {
                    was_running = false;
                    running.now -= 1;
                }
            }
            _ => {}
        }
    }
    outcome.task = client.task(&id).await;
    Ok(outcome)
}

/// `browserd_browser_context_opens_total` of the service at `address`: (from a spare, new).
/// Longest wait for a service to be warm.
const WARM_TIMEOUT: Duration = Duration::from_secs(30);

/// The spare contexts an idle `serve` with this command line keeps: its first Chrome's, one
/// per context of that Chrome (`--concurrency` over `--chrome-processes`, 4 and 1 by
/// default), at most `--spare-contexts` (1 by default).
fn spare_contexts_of(flags: &[&str]) -> usize {
    let value_of = |name: &str| {
        flags.iter().enumerate().find_map(|(i, flag)| {
            flag.strip_prefix(name)?
                .strip_prefix('=')
                .or_else(|| flag.eq(&name).then(|| flags.get(i + 1).copied())?)
        })
    };
    let most = match value_of("--spare-contexts") {
        None | Some("true") => browserd_browser::DEFAULT_SPARE_CONTEXTS,
        Some("false") => 0,
        Some(n) => n
            .parse()
            .unwrap_or(browserd_browser::DEFAULT_SPARE_CONTEXTS),
    };
    let count = |name: &str, default: usize| {
        value_of(name)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(default)
            .max(1)
    };
    let per_chrome = count("--concurrency", 5).div_ceil(count("--chrome-processes", 1));
    if most == 0 {
        0
    } else {
        per_chrome.clamp(1, most)
    }
}

/// A gauge's value in a Prometheus exposition.
fn gauge(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the service at `address` has a Chrome running and `spares` spare contexts
/// open (its /metrics, polled); how long that took, or what it had at the deadline.
async fn wait_warm(address: &str, spares: usize) -> Result<Duration, String> {
    browserd_llm::install_tls_provider();
    let started = Instant::now();
    let mut last = String::from("no /metrics answer");
    while started.elapsed() < WARM_TIMEOUT {
        if let Ok(answer) = reqwest::get(format!("http://{address}/metrics")).await {
            let exposition = answer.text().await.unwrap_or_default();
            let processes = gauge(&exposition, "browserd_browser_processes");
            let kept = gauge(&exposition, "browserd_browser_spare_contexts");
            if processes >= 1.0 && kept >= spares as f64 {
                return Ok(started.elapsed());
            }
            last = format!("{processes} Chrome(s), {kept} spare context(s)");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(last)
}

async fn context_opens(address: &str) -> (u64, u64) {
    browserd_llm::install_tls_provider();
    let exposition = match reqwest::get(format!("http://{address}/metrics")).await {
        Ok(answer) => answer.text().await.unwrap_or_default(),
        Err(_) => return (0, 0),
    };
    let count = |from: &str| {
        let series = format!("browserd_browser_context_opens_total{{from=\"{from}\"}} ");
        exposition
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    (count("spare"), count("new"))
}

async fn service_run(
    cfg: &Config,
    model: &MockModel,
    site: &Site,
    ticks: f64,
    chrome: &str,
) -> ServiceRun {
    let db = TestDb::create().await;
    let database = db.url.rsplit('/').next().map(str::to_owned);
    let tag = format!("service-{}", uuid::Uuid::new_v4().simple());
    let busy_before = background_busy().await;
    let sampler = Sampler::start(&tag, database, ticks, cfg.verbose);
    let serve_log = std::env::var("BENCH_SERVE_LOG").unwrap_or_else(|_| "info".to_owned());
    // A side is a Chrome executable, maybe followed by `serve` flags of its own.
    let mut side = chrome.split_whitespace();
    let chrome = side.next().unwrap_or(chrome);
    let mut flags = vec!["--allow-loopback", "--chrome", chrome];
    flags.extend(cfg.serve_flags.iter().map(String::as_str));
    flags.extend(side);
    let spares = spare_contexts_of(&flags);
    let mut server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &flags,
        &[(TAG_VAR, &tag), ("RUST_LOG", &serve_log)],
    )
    .await;
    let key = create_key(&db).await;
    let client = Client::new(server.address(), &key);
    if !cfg.cold {
        match wait_warm(server.metrics_address(), spares).await {
            Ok(took) => println!(
                "    warm after {:.0} ms (Chrome and {spares} spare context(s))",
                ms(took)
            ),
            Err(state) => println!(
                "    warning: not warm after {WARM_TIMEOUT:?} ({state}); the batch starts anyway"
            ),
        }
        sampler.count_cpu_from_now();
    }
    let body = json!({
        "task": TASK,
        "start_url": site.url(&format!("/stairs/1?top={}", cfg.top)),
        "model": "mock",
        "use_vision": false,
        "max_steps": 20,
    });
    let running = Arc::new(Mutex::new(Running::default()));

    let machine = machine_cpu();
    let own = own_cpu_ticks();
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
    let busy = busy_since(machine);
    let bench_cpu_s = (own_cpu_ticks() - own) as f64 / ticks;
    let usage = sampler.finish();
    let contexts = context_opens(server.metrics_address()).await;

    // At idle: one task at a time on the same service (its Chromes running, nothing else).
    let mut idle = Vec::new();
    for _ in 0..cfg.idle_tasks {
        let alone = Arc::new(Mutex::new(Running::default()));
        match tokio::time::timeout(
            SIDE_TIMEOUT,
            follow_task(client.clone(), body.clone(), alone),
        )
        .await
        {
            Ok(Ok(outcome)) => idle.push(outcome),
            Ok(Err(err)) => failures.push(format!("idle task: {err}")),
            Err(_) => failures.push(format!("an idle task took longer than {SIDE_TIMEOUT:?}")),
        }
    }

    let code = format!("CODE{}X", cfg.top);
    for outcome in outcomes.iter().chain(&idle) {
        let task = &outcome.task;
        let output = task["output"].as_str().unwrap_or("");
        if task["status"] != "finished" || task["is_success"] != true || !output.contains(&code) {
            failures.push(format!(
                "task {}: status {}, is_success {}, error {}, output {output:?}",
                outcome.id, task["status"], task["is_success"], task["error"]
            ));
        }
    }
    if let Ok(pattern) = std::env::var("BENCH_SERVE_GREP") {
        for line in server.logs().lines().filter(|l| l.contains(&pattern)) {
            println!("    serve: {line}");
        }
    }
    server.signal("TERM").await;
    server.wait(Duration::from_secs(60)).await;
    if !failures.is_empty() {
        let logs = server.logs();
        let tail: Vec<&str> = logs.lines().rev().take(40).collect();
        eprintln!(
            "browserd serve log (last 40 lines, newest first):\n{}",
            tail.join("\n")
        );
        panic!(
            "{} of {} service tasks did not finish successfully:\n{}",
            failures.len(),
            cfg.tasks,
            failures.join("\n")
        );
    }
    wait_gone(&tag).await;
    drop(db);

    let collect = |f: &dyn Fn(&TaskOutcome) -> Option<Duration>| {
        outcomes
            .iter()
            .filter_map(|o| f(o).map(ms))
            .collect::<Vec<_>>()
    };
    if cfg.verbose {
        let start_ns = outcomes
            .iter()
            .flat_map(|o| o.slow.iter().map(|s| s.3))
            .min()
            .unwrap_or(0);
        for (i, outcome) in outcomes.iter().enumerate() {
            for (kind, seq, delivery, created) in &outcome.slow {
                eprintln!(
                    "  slow delivery: task {i} seq {seq:>3} {kind:<14} {delivery:6.1} ms, \
                     committed at +{:.3} s",
                    (created - start_ns) as f64 / 1e9
                );
            }
        }
    }
    let running = running.lock().unwrap().max;
    println!(
        "    browser contexts of the batch: {} from a spare, {} opened at the lease",
        contexts.0, contexts.1
    );
    println!(
        "    a task's events, median ms between consecutive ones (`created_at`), n, and the \
         median of the first slots' tasks:"
    );
    for (name, gap, n, first) in timeline_medians(&outcomes) {
        let first = first.map_or(String::new(), |f| format!("  first {f:8.1} ms"));
        println!("      {name:<44} {gap:8.1} ms  (n={n}){first}");
    }
    ServiceRun {
        side: Side {
            wall,
            running,
            usage,
            bench_cpu_s,
            busy,
            busy_before,
            failed: 0,
        },
        running_ms: collect(&|o| o.running),
        step_started_ms: collect(&|o| o.step_started),
        first_step_ms: collect(&|o| o.first_step),
        step_deliveries_ms: outcomes
            .iter()
            .flat_map(|o| o.step_deliveries_ms.iter().copied())
            .collect(),
        other_deliveries_ms: outcomes
            .iter()
            .flat_map(|o| o.other_deliveries_ms.iter().copied())
            .collect(),
        backlog: outcomes.iter().map(|o| o.backlog).sum(),
        idle_running_ms: idle.iter().filter_map(|o| o.running.map(ms)).collect(),
        idle_step_started_ms: idle.iter().filter_map(|o| o.step_started.map(ms)).collect(),
        idle_first_step_ms: idle.iter().filter_map(|o| o.first_step.map(ms)).collect(),
    }
}

// ---------------------------------------------------------------- baseline side

async fn baseline_run(
    cfg: &Config,
    model: &MockModel,
    site: &Site,
    ticks: f64,
    chrome: &str,
) -> Side {
    let tag = format!("baseline-{}", uuid::Uuid::new_v4().simple());
    let start_url = site.url(&format!("/stairs/1?top={}", cfg.top));
    let base_url = format!("http://{}/v1", model.addr);
    let busy_before = background_busy().await;
    let sampler = Sampler::start(&tag, None, ticks, cfg.verbose);
    let machine = machine_cpu();
    let own = own_cpu_ticks();
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..cfg.tasks {
        let child = Command::new(browserd_bin())
            .arg("run")
            .arg(TASK)
            .args(["--start-url", &start_url])
            .args(["--allow-loopback", "--no-vision", "--max-steps", "20"])
            .args([
                "--chrome",
                chrome.split_whitespace().next().unwrap_or(chrome),
            ])
            .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
            .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
            .env("BROWSERD_LLM_MOCK_BASE_URL", &base_url)
            .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
            .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
            .env("RUST_LOG", "warn")
            .env("RUST_BACKTRACE", "0")
            .env(TAG_VAR, &tag)
            .env_remove("BROWSERD_CONFIG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn browserd run");
        // On timeout the future, and with it the child, is dropped: that kills it.
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
                    let error: Vec<&str> = stderr
                        .lines()
                        .skip_while(|l| !l.starts_with("Error"))
                        .take(6)
                        .collect();
                    failures.push(format!(
                        "run {i}: {}, stdout {stdout:?}, error:\n{}",
                        output.status,
                        error.join("\n")
                    ));
                }
            }
            Ok(Ok(Err(err))) => failures.push(format!("run {i}: waiting failed: {err}")),
            Ok(Err(_)) => failures.push(format!("run {i}: longer than {SIDE_TIMEOUT:?}")),
            Err(err) => failures.push(format!("run {i}: {err}")),
        }
    }
    let wall = started.elapsed();
    let busy = busy_since(machine);
    let bench_cpu_s = (own_cpu_ticks() - own) as f64 / ticks;
    let usage = sampler.finish();
    if !failures.is_empty() {
        // Reported, not fatal: N Chromes launching at once on 2 cores is the baseline's own
        // weakness, and the run's throughput counts only the tasks that finished.
        eprintln!(
            "baseline: {} of {} runs did not succeed:\n{}",
            failures.len(),
            cfg.tasks,
            failures.join("\n")
        );
    }
    let failed = failures.len();
    wait_gone(&tag).await;
    Side {
        wall,
        running: cfg.tasks,
        usage,
        bench_cpu_s,
        busy,
        busy_before,
        failed,
    }
}

// ---------------------------------------------------------------- browser-use side

/// N browser-use agents at once in one Python process (each with its own Chrome, as
/// browser-use runs them), on the same page with a model of the same delay: its memory.
async fn browser_use_run(cfg: &Config, python: &str, site: &Site, ticks: f64) -> Option<Side> {
    let tag = format!("browser-use-{}", uuid::Uuid::new_v4().simple());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/browser_use_agents.py");
    let start_url = site.url(&format!("/stairs/1?top={}", cfg.top));
    let busy_before = background_busy().await;
    let sampler = Sampler::start(&tag, None, ticks, cfg.verbose);
    let machine = machine_cpu();
    let own = own_cpu_ticks();
    let started = Instant::now();
    let child = Command::new(python)
        .arg(script)
        .arg(&start_url)
        .arg(cfg.tasks.to_string())
        .env("BENCH_MODEL_MS", cfg.model_delay.as_millis().to_string())
        .env("BENCH_CHROME", &cfg.browser_use_chrome)
        .env(
            "BENCH_CHROME_FLAGS",
            "--disable-gpu --disable-dev-shm-usage --no-first-run",
        )
        .env(TAG_VAR, &tag)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let output = match child {
        Ok(child) => tokio::time::timeout(SIDE_TIMEOUT, child.wait_with_output()).await,
        Err(err) => {
            sampler.finish();
            eprintln!("browser-use: could not start {python}: {err}");
            return None;
        }
    };
    let wall = started.elapsed();
    let busy = busy_since(machine);
    let bench_cpu_s = (own_cpu_ticks() - own) as f64 / ticks;
    let usage = sampler.finish();
    wait_gone(&tag).await;
    let output = match output {
        Ok(Ok(output)) => output,
        _ => {
            eprintln!("browser-use: the agents did not finish within {SIDE_TIMEOUT:?}");
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Option<Value> = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok());
    let Some(report) = report.filter(|_| output.status.success()) else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        eprintln!(
            "browser-use: {} ({stdout}); stderr, newest first:\n{}",
            output.status,
            tail.join("\n")
        );
        return None;
    };
    let ok = report["ok"].as_u64().unwrap_or(0) as usize;
    Some(Side {
        wall,
        running: cfg.tasks,
        usage,
        bench_cpu_s,
        busy,
        busy_before,
        failed: cfg.tasks.saturating_sub(ok),
    })
}

// ---------------------------------------------------------------- report

fn print_breakdown(name: &str, usage: &Usage) {
    println!(
        "  {name} (PSS peak {:.0} MiB, VmRSS peak {:.0} MiB; one /proc scan took {:.1} ms on \
         average; {} of {} scans read PSS):",
        mib(usage.pss_kib),
        mib(usage.rss_kib),
        ms(usage.scan),
        usage.scans.1,
        usage.scans.0
    );
    let kinds: BTreeSet<&String> = usage
        .breakdown
        .keys()
        .chain(usage.cpu_by_kind.keys())
        .collect();
    for kind in kinds {
        let (count, rss, anon, pss) = usage.breakdown.get(kind).copied().unwrap_or_default();
        let cpu = usage.cpu_by_kind.get(kind).copied().unwrap_or(0.0);
        if count == 0 && cpu < 0.05 {
            continue;
        }
        println!(
            "    {kind:<24} {count:>4} processes  PSS {:>7.1} MiB  RSS {:>8.1} MiB  anon {:>7.1} MiB  \
             CPU {cpu:>5.1} s",
            mib(pss),
            mib(rss),
            mib(anon),
        );
    }
}

#[tokio::main]
async fn main() {
    let cfg = Config::from_env();
    let ticks = clock_ticks();
    let model = MockModel::start(stairs_brain(), cfg.model_delay).await;
    let site = Site::start().await;
    println!(
        "service_load: {} tasks at once × {} model call(s) each (stairs top {}{}), model delay {} \
         ms, serve {}, {} run(s) of {}, {} cores; loadavg {}",
        cfg.tasks,
        cfg.top,
        cfg.top,
        if cfg.top == 1 {
            ": read-only, a capture and a done"
        } else {
            ""
        },
        cfg.model_delay.as_millis(),
        if cfg.serve_flags.is_empty() {
            "with the default install's settings".to_owned()
        } else {
            cfg.serve_flags.join(" ")
        },
        cfg.runs,
        cfg.chromes.join(", "),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );

    let n = cfg.tasks;
    // Per Chrome, the runs' service sides; runs alternate between the Chromes, so a change of
    // the machine's load falls on both.
    let mut services: Vec<Vec<ServiceRun>> = vec![Vec::new(); cfg.chromes.len()];
    let mut baselines = Vec::new();
    let mut browser_uses = Vec::new();
    for run in 1..=cfg.runs {
        for (c, chrome) in cfg.chromes.iter().enumerate() {
            let service = service_run(&cfg, &model, &site, ticks, chrome).await;
            println!(
                "run {run} {:<24} {}; Postgres CPU {:.1} s",
                chrome_label(chrome),
                service.side.summary(n),
                service.side.usage.postgres_cpu_s
            );
            println!(
                "    POST→running p50 {:.0} ms, →step_started p50 {:.0} ms, →first step p50 {:.0} \
                 / p99 {:.0} ms; delivery: step p50 {:.1} / p99 {:.1} ms (n={}), other p50 {:.1} \
                 / p99 {:.1} ms (n={}), {} backlog events not counted; idle: →first step p50 \
                 {:.0} ms (n={})",
                percentile(&service.running_ms, 50.0),
                percentile(&service.step_started_ms, 50.0),
                percentile(&service.first_step_ms, 50.0),
                percentile(&service.first_step_ms, 99.0),
                percentile(&service.step_deliveries_ms, 50.0),
                percentile(&service.step_deliveries_ms, 99.0),
                service.step_deliveries_ms.len(),
                percentile(&service.other_deliveries_ms, 50.0),
                percentile(&service.other_deliveries_ms, 99.0),
                service.other_deliveries_ms.len(),
                service.backlog,
                percentile(&service.idle_first_step_ms, 50.0),
                service.idle_first_step_ms.len(),
            );
            services[c].push(service);
        }
        if cfg.baseline {
            let baseline = baseline_run(&cfg, &model, &site, ticks, &cfg.chromes[0]).await;
            println!(
                "run {run} baseline (N × browserd run): {}",
                baseline.summary(n)
            );
            baselines.push(baseline);
        }
        if let Some(python) = &cfg.browser_use_python
            && let Some(side) = browser_use_run(&cfg, python, &site, ticks).await
        {
            println!("run {run} browser-use ({n} agents): {}", side.summary(n));
            browser_uses.push(side);
        }
    }

    let med = |runs: &[ServiceRun], f: &dyn Fn(&ServiceRun) -> f64| {
        median(&runs.iter().map(f).collect::<Vec<_>>())
    };
    println!();
    println!(
        "medians over {} run(s); {n} tasks at once; per-run percentiles of latencies",
        cfg.runs
    );
    let mut header = format!("{:<40}", "");
    for chrome in &cfg.chromes {
        header.push_str(&format!(" {:>24}", chrome_label(chrome)));
    }
    if cfg.chromes.len() == 2 {
        header.push_str(&format!(" {:>10}", "first/2nd"));
    }
    println!("{header}");
    let row = |name: &str, f: &dyn Fn(&ServiceRun) -> f64| {
        let values: Vec<f64> = services.iter().map(|runs| med(runs, f)).collect();
        let mut line = format!("{name:<40}");
        for v in &values {
            line.push_str(&format!(" {v:>24.1}"));
        }
        if values.len() == 2 {
            line.push_str(&format!(" {:>10.2}", values[0] / values[1]));
        }
        println!("{line}");
    };
    row("tasks/min", &|r| r.side.per_min(n));
    row("wall of the batch (s)", &|r| r.side.wall.as_secs_f64());
    row("peak PSS / tasks of the batch (MiB)", &|r| {
        mib(r.side.usage.pss_kib) / n as f64
    });
    row("peak PSS per running task (MiB)", &|r| {
        r.side.pss_per_task()
    });
    row("peak PSS, browserd + Chrome (MiB)", &|r| {
        mib(r.side.usage.pss_kib)
    });
    row("peak RSS per running task (MiB)", &|r| {
        r.side.rss_per_task()
    });
    row("peak anon RSS per running task (MiB)", &|r| {
        r.side.anon_per_task()
    });
    row("peak tasks running at once", &|r| r.side.running as f64);
    row("CPU ms per task (browserd + Chrome)", &|r| {
        1000.0 * r.side.usage.cpu_s / n as f64
    });
    row("Postgres CPU ms per task", &|r| {
        1000.0 * r.side.usage.postgres_cpu_s / n as f64
    });
    let pct = |v: &[f64], p: f64| percentile(v, p);
    row("POST → running p50 (ms)", &|r| pct(&r.running_ms, 50.0));
    row("POST → running p99 (ms)", &|r| pct(&r.running_ms, 99.0));
    row("POST → first step_started p50 (ms)", &|r| {
        pct(&r.step_started_ms, 50.0)
    });
    row("POST → first step p50 (ms)", &|r| {
        pct(&r.first_step_ms, 50.0)
    });
    row("POST → first step p99 (ms)", &|r| {
        pct(&r.first_step_ms, 99.0)
    });
    row("step commit → WS delivery p50 (ms)", &|r| {
        pct(&r.step_deliveries_ms, 50.0)
    });
    row("step commit → WS delivery p99 (ms)", &|r| {
        pct(&r.step_deliveries_ms, 99.0)
    });
    row("other events → WS delivery p99 (ms)", &|r| {
        pct(&r.other_deliveries_ms, 99.0)
    });
    row("idle: POST → running p50 (ms)", &|r| {
        pct(&r.idle_running_ms, 50.0)
    });
    row("idle: POST → first step_started p50 (ms)", &|r| {
        pct(&r.idle_step_started_ms, 50.0)
    });
    row("idle: POST → first step p50 (ms)", &|r| {
        pct(&r.idle_first_step_ms, 50.0)
    });
    println!(
        "(the first step waits for one model call of {} ms; idle: {} task(s) one at a time on \
         the same service after each batch; targets of issue 28 for the default build: ≥ 450 \
         tasks/min and ≤ 20 MB PSS per task on 20 read-only tasks, idle POST → first step ≤ 1 s \
         + the model)",
        cfg.model_delay.as_millis(),
        cfg.idle_tasks
    );
    let side_median =
        |sides: &[Side], f: &dyn Fn(&Side) -> f64| median(&sides.iter().map(f).collect::<Vec<_>>());
    if !browser_uses.is_empty() {
        println!(
            "browser-use 0.13.14, {n} agents at once in one Python ({}; each its own Chrome): \
             peak PSS per agent {:.1} MiB, RSS per agent {:.1} MiB, {:.1} agents/min ({} of {} \
             runs)",
            cfg.browser_use_chrome,
            side_median(&browser_uses, &Side::pss_per_task),
            side_median(&browser_uses, &Side::rss_per_task),
            side_median(&browser_uses, &|s| s.per_min(n)),
            browser_uses.len(),
            cfg.runs
        );
    } else {
        println!(
            "browser-use: not measured (no BENCH_BROWSER_USE_PYTHON and no virtualenv of \
             `scripts/venv tests/benches/browser_use.txt`)"
        );
    }
    if !baselines.is_empty() {
        println!(
            "baseline, {n} × `browserd run` ({}): {:.1} tasks/min, peak PSS per task {:.1} MiB",
            chrome_label(&cfg.chromes[0]),
            side_median(&baselines, &|s| s.per_min(n)),
            side_median(&baselines, &Side::pss_per_task),
        );
    }
    println!("processes at the PSS peak, and CPU over the whole side (last run):");
    for (chrome, runs) in cfg.chromes.iter().zip(&services) {
        if let Some(last) = runs.last() {
            print_breakdown(&chrome_label(chrome), &last.side.usage);
        }
    }
    if let Some(last) = browser_uses.last() {
        print_breakdown("browser-use", &last.usage);
    }
    if let Some(last) = baselines.last() {
        print_breakdown("baseline", &last.usage);
    }
    println!("loadavg after: {}", loadavg());
}
