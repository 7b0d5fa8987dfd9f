//! Admission by pressure: a worker claims a new task only while its machine — or the cgroup it
//! runs in, where one limits it — has memory headroom, and (when configured) CPU to spare.
//! `--concurrency` stays the hard ceiling. Real pages differ by 50× in memory, so a count alone
//! either wastes a big machine or runs a small one out of memory.
//!
//! Memory available = the cgroup's limit minus its working set (usage less inactive file
//! pages, which the kernel reclaims first — what the kubelet evicts on), cgroup v2
//! (`memory.max`, `memory.current`, `memory.stat`) or v1 (`memory.limit_in_bytes`,
//! `memory.usage_in_bytes`), and never more than the host's `MemAvailable`. CPU pressure is
//! PSI's `some avg10` (the share of the last 10 s in which some task waited for a CPU) of the
//! cgroup (`cpu.pressure`) or the host (`/proc/pressure/cpu`). A value that cannot be read is not
//! checked.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A worker refused by pressure looks again after this long.
pub const RECHECK: Duration = Duration::from_secs(1);

/// A worker's admission thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionLimits {
    /// Claim only while at least this many bytes are available (0: no check).
    pub min_available_memory: u64,
    /// Claim only while CPU pressure (`some avg10`, percent) is at most this, unless the
    /// worker runs nothing (a busy neighbour must not stop it entirely). `None`: no check.
    pub max_cpu_pressure: Option<f64>,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            min_available_memory: 256 * 1024 * 1024,
            max_cpu_pressure: None,
        }
    }
}

/// Why a worker does not claim now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Refusal {
    Memory { available: u64, needed: u64 },
    Cpu { pressure: f64, max: f64 },
}

impl Refusal {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Memory { .. } => "memory",
            Refusal::Cpu { .. } => "cpu",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Memory { available, needed } => write!(
                f,
                "{} MiB of memory available, below the {} MiB to claim a task",
                available / (1024 * 1024),
                needed / (1024 * 1024)
            ),
            Refusal::Cpu { pressure, max } => {
                write!(f, "CPU pressure {pressure:.1}% is above {max:.1}%")
            }
        }
    }
}

/// Where the numbers are read: `/` in production, a directory tree shaped like it in tests.
#[derive(Clone, Debug)]
pub struct Gauges {
    root: PathBuf,
}

impl Default for Gauges {
    fn default() -> Self {
        Self::at(Path::new("/"))
    }
}

/// What the gauges read now (`None`: unreadable).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Headroom {
    pub available_memory: Option<u64>,
    pub cpu_pressure: Option<f64>,
}

impl Gauges {
    /// Reads `proc/…` and `sys/fs/cgroup/…` under `root`.
    pub fn at(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(path.trim_start_matches('/'))).ok()
    }

    /// The process's cgroup paths: the v2 one (`0::/x`) and the v1 memory one (`n:memory:/x`).
    fn cgroups(&self) -> (Option<String>, Option<String>) {
        let mut v2 = None;
        let mut v1_memory = None;
        for line in self.read("proc/self/cgroup").unwrap_or_default().lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
            match (controllers, path) {
                (Some(""), Some(path)) => v2 = Some(path.to_owned()),
                (Some(list), Some(path)) if list.split(',').any(|c| c == "memory") => {
                    v1_memory = Some(path.to_owned());
                }
                _ => {}
            }
        }
        (v2, v1_memory)
    }

    /// The numbers now.
    pub fn headroom(&self) -> Headroom {
        let (v2, v1_memory) = self.cgroups();
        let host = self
            .read("proc/meminfo")
            .and_then(|info| meminfo_available(&info));
        let cgroup = v2
            .as_deref()
            .and_then(|path| self.cgroup_v2_available(path))
            .or_else(|| {
                v1_memory
                    .as_deref()
                    .and_then(|path| self.cgroup_v1_available(path))
            });
        let available_memory = match (host, cgroup) {
            (Some(host), Some(cgroup)) => Some(host.min(cgroup)),
            (host, cgroup) => host.or(cgroup),
        };
        let cpu_pressure = v2
            .as_deref()
            .and_then(|path| self.read(&format!("sys/fs/cgroup{}/cpu.pressure", slash(path))))
            .or_else(|| self.read("proc/pressure/cpu"))
            .and_then(|psi| some_avg10(&psi));
        Headroom {
            available_memory,
            cpu_pressure,
        }
    }

    fn cgroup_v2_available(&self, path: &str) -> Option<u64> {
        let dir = format!("sys/fs/cgroup{}", slash(path));
        let max = self.read(&format!("{dir}/memory.max"))?;
        let max: u64 = max.trim().parse().ok()?; // "max": no limit here
        let current: u64 = self
            .read(&format!("{dir}/memory.current"))?
            .trim()
            .parse()
            .ok()?;
        let inactive = self
            .read(&format!("{dir}/memory.stat"))
            .and_then(|stat| stat_value(&stat, "inactive_file"))
            .unwrap_or(0);
        Some(max.saturating_sub(current.saturating_sub(inactive)))
    }

    fn cgroup_v1_available(&self, path: &str) -> Option<u64> {
        let dir = format!("sys/fs/cgroup/memory{}", slash(path));
        let limit: u64 = self
            .read(&format!("{dir}/memory.limit_in_bytes"))?
            .trim()
            .parse()
            .ok()?;
        // "Unlimited" is a page-aligned i64::MAX.
        if limit >= (i64::MAX as u64) / 2 {
            return None;
        }
        let usage: u64 = self
            .read(&format!("{dir}/memory.usage_in_bytes"))?
            .trim()
            .parse()
            .ok()?;
        let inactive = self
            .read(&format!("{dir}/memory.stat"))
            .and_then(|stat| stat_value(&stat, "total_inactive_file"))
            .unwrap_or(0);
        Some(limit.saturating_sub(usage.saturating_sub(inactive)))
    }
}

/// `/x` for a cgroup path, `` for the root (`/`).
fn slash(path: &str) -> &str {
    if path == "/" { "" } else { path }
}

fn meminfo_available(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

fn some_avg10(psi: &str) -> Option<f64> {
    let line = psi.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}

impl AdmissionLimits {
    /// Why a worker running `running` tasks must not claim another now, if it must not.
    pub fn refusal(&self, headroom: &Headroom, running: usize) -> Option<Refusal> {
        if self.min_available_memory > 0
            && let Some(available) = headroom.available_memory
            && available < self.min_available_memory
        {
            return Some(Refusal::Memory {
                available,
                needed: self.min_available_memory,
            });
        }
        if running > 0
            && let (Some(max), Some(pressure)) = (self.max_cpu_pressure, headroom.cpu_pressure)
            && pressure > max
        {
            return Some(Refusal::Cpu { pressure, max });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        dir
    }

    const MEMINFO: &str = "MemTotal: 16000000 kB\nMemFree: 1000 kB\nMemAvailable: 8000000 kB\n";
    const PSI: &str = "some avg10=42.50 avg60=10.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn a_cgroup_v2_limit_bounds_the_available_memory() {
        let dir = tree(&[
            ("proc/self/cgroup", "0::/kubepods/pod1/worker\n"),
            ("proc/meminfo", MEMINFO),
            (
                "sys/fs/cgroup/kubepods/pod1/worker/memory.max",
                "2147483648\n",
            ),
            (
                "sys/fs/cgroup/kubepods/pod1/worker/memory.current",
                "1610612736\n",
            ),
            (
                "sys/fs/cgroup/kubepods/pod1/worker/memory.stat",
                "anon 1000\nfile 500\ninactive_file 536870912\nactive_file 1\n",
            ),
            ("sys/fs/cgroup/kubepods/pod1/worker/cpu.pressure", PSI),
        ]);
        let headroom = Gauges::at(dir.path()).headroom();
        // 2 GiB limit − (1.5 GiB used − 0.5 GiB reclaimable) = 1 GiB.
        assert_eq!(headroom.available_memory, Some(1 << 30));
        assert_eq!(headroom.cpu_pressure, Some(42.5));
    }

    #[test]
    fn without_a_limit_the_host_decides() {
        let dir = tree(&[
            ("proc/self/cgroup", "0::/\n"),
            ("proc/meminfo", MEMINFO),
            ("sys/fs/cgroup/memory.max", "max\n"),
            ("proc/pressure/cpu", PSI),
        ]);
        let headroom = Gauges::at(dir.path()).headroom();
        assert_eq!(headroom.available_memory, Some(8_000_000 * 1024));
        assert_eq!(headroom.cpu_pressure, Some(42.5));
    }

    #[test]
    fn a_cgroup_v1_memory_limit_counts_and_unlimited_does_not() {
        let limited = tree(&[
            ("proc/self/cgroup", "4:memory:/job\n1:cpu:/\n0::/\n"),
            ("proc/meminfo", MEMINFO),
            (
                "sys/fs/cgroup/memory/job/memory.limit_in_bytes",
                "1073741824\n",
            ),
            (
                "sys/fs/cgroup/memory/job/memory.usage_in_bytes",
                "805306368\n",
            ),
            (
                "sys/fs/cgroup/memory/job/memory.stat",
                "total_inactive_file 268435456\n",
            ),
        ]);
        assert_eq!(
            Gauges::at(limited.path()).headroom().available_memory,
            Some(512 << 20)
        );
        let unlimited = tree(&[
            ("proc/self/cgroup", "4:memory:/job\n"),
            ("proc/meminfo", MEMINFO),
            (
                "sys/fs/cgroup/memory/job/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "sys/fs/cgroup/memory/job/memory.usage_in_bytes",
                "805306368\n",
            ),
        ]);
        assert_eq!(
            Gauges::at(unlimited.path()).headroom().available_memory,
            Some(8_000_000 * 1024)
        );
    }

    #[test]
    fn unreadable_gauges_are_not_checked() {
        let dir = tree(&[]);
        let headroom = Gauges::at(dir.path()).headroom();
        assert_eq!(headroom, Headroom::default());
        let strict = AdmissionLimits {
            min_available_memory: u64::MAX,
            max_cpu_pressure: Some(0.0),
        };
        assert_eq!(strict.refusal(&headroom, 3), None);
    }

    #[test]
    fn refusals_name_their_reason_and_cpu_spares_an_idle_worker() {
        let limits = AdmissionLimits {
            min_available_memory: 1 << 30,
            max_cpu_pressure: Some(80.0),
        };
        let low_memory = Headroom {
            available_memory: Some(512 << 20),
            cpu_pressure: Some(10.0),
        };
        let refusal = limits.refusal(&low_memory, 0).unwrap();
        assert_eq!(refusal.reason(), "memory");
        assert!(refusal.to_string().contains("512 MiB"), "{refusal}");
        let busy_cpu = Headroom {
            available_memory: Some(4 << 30),
            cpu_pressure: Some(95.0),
        };
        assert_eq!(limits.refusal(&busy_cpu, 0), None, "an idle worker claims");
        assert_eq!(limits.refusal(&busy_cpu, 2).unwrap().reason(), "cpu");
        assert_eq!(
            limits.refusal(
                &Headroom {
                    available_memory: Some(4 << 30),
                    cpu_pressure: Some(50.0)
                },
                2
            ),
            None
        );
    }
}
