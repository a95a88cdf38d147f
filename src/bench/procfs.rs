//! What `keel bench` reads from `/proc`: a process's CPU time (`utime` + `stime` of
//! `/proc/PID/stat`) and memory (`VmRSS`, `VmHWM` of `/proc/PID/status`), for the kernel under
//! test (`--pid`) and for the bench itself (`/proc/self`), and the before/after deltas the
//! reports divide by the executions done.

use serde_json::{Value, json};

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`): 100 on every Linux architecture
/// this builds for; the kernel's internal `HZ` does not leak into these fields.
const TICKS_PER_SECOND: u64 = 100;

/// Memory of a process, from `/proc/PID/status` (KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// Process id read.
    pub pid: u32,
    /// Resident set size now.
    pub rss_kib: u64,
    /// Peak resident set size.
    pub peak_kib: u64,
}

impl Memory {
    /// Returns the memory as JSON (`pid`, `rss_kib`, `peak_rss_kib`).
    pub fn to_json(self) -> Value {
        json!({ "pid": self.pid, "rss_kib": self.rss_kib, "peak_rss_kib": self.peak_kib })
    }

    /// Returns `rss X MiB (peak Y MiB)`.
    pub fn to_text(self) -> String {
        format!(
            "rss {:.1} MiB (peak {:.1} MiB)",
            self.rss_kib as f64 / 1024.0,
            self.peak_kib as f64 / 1024.0
        )
    }
}

/// Reads `VmRSS` and `VmHWM` of `pid`; `None` when the process or the fields are missing.
pub fn read_memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status(pid, &status)
}

/// Parses the text of `/proc/PID/status`.
pub fn parse_status(pid: u32, status: &str) -> Option<Memory> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse::<u64>().ok())
    };
    Some(Memory {
        pid,
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:").unwrap_or_default(),
    })
}

/// CPU time (user + system) of `pid` in milliseconds; `None` when it cannot be read.
pub fn read_cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_ms(&stat)
}

/// CPU time of this process in milliseconds (0 when `/proc/self/stat` cannot be read).
pub fn self_cpu_ms() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| parse_stat_cpu_ms(&stat))
        .unwrap_or_default()
}

/// Parses `utime` + `stime` (fields 14 and 15) of a `/proc/PID/stat` line into milliseconds.
/// The command name (field 2) may hold spaces and parentheses, so fields are counted from the
/// last `)`.
pub fn parse_stat_cpu_ms(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // After the name: state (3), ppid (4) … utime is field 14, i.e. the 12th from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 1000 / TICKS_PER_SECOND)
}

/// The summed memory of several processes (several kernels); `pid` is the first one's.
/// `None` when any cannot be read.
pub fn read_memory_all(pids: &[u32]) -> Option<Memory> {
    let mut sum: Option<Memory> = None;
    for pid in pids {
        let memory = read_memory(*pid)?;
        sum = Some(match sum {
            None => memory,
            Some(total) => Memory {
                pid: total.pid,
                rss_kib: total.rss_kib + memory.rss_kib,
                peak_kib: total.peak_kib + memory.peak_kib,
            },
        });
    }
    sum
}

/// CPU readings taken at the start of a measured phase.
#[derive(Clone, Debug)]
pub struct CpuMeter {
    /// Each kernel process and its CPU time at the start (`None`: unreadable).
    kernels: Vec<(u32, Option<u64>)>,
    bench_start_ms: u64,
}

impl CpuMeter {
    /// Reads the kernel's (when `kernel_pid` is known) and the bench's CPU time now.
    pub fn start(kernel_pid: Option<u32>) -> Self {
        Self::start_all(kernel_pid.as_slice())
    }

    /// As [`CpuMeter::start`] for several kernel processes, whose CPU times are summed.
    pub fn start_all(kernel_pids: &[u32]) -> Self {
        Self {
            kernels: kernel_pids
                .iter()
                .map(|pid| (*pid, read_cpu_ms(*pid)))
                .collect(),
            bench_start_ms: self_cpu_ms(),
        }
    }

    /// Reads both again and returns the CPU spent since [`CpuMeter::start`].
    pub fn stop(&self) -> CpuUsage {
        let mut kernel_ms = (!self.kernels.is_empty()).then_some(0_u64);
        for (pid, start) in &self.kernels {
            let spent =
                start.and_then(|start| read_cpu_ms(*pid).map(|now| now.saturating_sub(start)));
            kernel_ms = match (kernel_ms, spent) {
                (Some(total), Some(spent)) => Some(total + spent),
                _ => None,
            };
        }
        CpuUsage {
            kernel_ms,
            bench_ms: self_cpu_ms().saturating_sub(self.bench_start_ms),
        }
    }
}

/// CPU spent during a phase, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuUsage {
    /// The kernel's, when its pid is known.
    pub kernel_ms: Option<u64>,
    /// The bench process's own.
    pub bench_ms: u64,
}

/// Divides a CPU total by a count of executions; `None` when there were none.
pub fn per_execution(total_ms: u64, executions: u64) -> Option<f64> {
    (executions > 0).then(|| total_ms as f64 / executions as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_counts_utime_and_stime_after_a_name_with_spaces_and_parens() {
        // Fields: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime …
        let stat = "4242 (keel (dev) x) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_stat_cpu_ms(stat), Some(3250));
    }

    #[test]
    fn stat_cpu_of_a_truncated_line_is_none() {
        assert_eq!(parse_stat_cpu_ms("4242 (keel) S 1 2 3"), None);
        assert_eq!(parse_stat_cpu_ms("no parenthesis here"), None);
    }

    #[test]
    fn status_memory_reads_rss_and_peak() {
        let status =
            "Name:\tkeel\nVmPeak:\t  900000 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   16384 kB\n";
        assert_eq!(
            parse_status(7, status),
            Some(Memory {
                pid: 7,
                rss_kib: 16384,
                peak_kib: 20480
            })
        );
        assert_eq!(parse_status(7, "Name:\tkeel\n"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let pid = std::process::id();
        assert!(read_memory(pid).is_some_and(|memory| memory.rss_kib > 0));
        let meter = CpuMeter::start(Some(pid));
        let mut spin = 0_u64;
        for index in 0..2_000_000_u64 {
            spin = spin.wrapping_add(index * index);
        }
        std::hint::black_box(spin);
        let usage = meter.stop();
        assert!(usage.kernel_ms.is_some());
    }

    #[test]
    fn several_processes_are_summed() {
        let pid = std::process::id();
        let one = read_memory(pid).expect("own memory");
        let two = read_memory_all(&[pid, pid]).expect("own memory twice");
        assert_eq!(two.pid, pid);
        assert!(two.rss_kib >= one.rss_kib * 2 - 1024, "{one:?} {two:?}");
        assert_eq!(read_memory_all(&[pid, u32::MAX]), None);
        assert_eq!(CpuMeter::start_all(&[]).stop().kernel_ms, None);
        assert!(CpuMeter::start_all(&[pid, pid]).stop().kernel_ms.is_some());
        assert_eq!(CpuMeter::start_all(&[pid, u32::MAX]).stop().kernel_ms, None);
    }

    #[test]
    fn per_execution_divides_and_refuses_zero() {
        assert_eq!(per_execution(600, 200), Some(3.0));
        assert_eq!(per_execution(600, 0), None);
    }
}
