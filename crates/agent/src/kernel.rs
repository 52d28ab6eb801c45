//! Readers of the kernel's own files (`/proc`, `/sys`, statvfs): each a pure parser from the
//! file's text, so the parsers are tested on fixed text and the oracle tests compare a live
//! read with another implementation's. Nothing here keeps state or computes rates.

use std::io::Read;
use std::path::Path;

/// Longest kernel file read (a /proc/net/tcp of ~25 000 connections); past it, counted as read.
pub const KERNEL_FILE_BYTES_MAX: u64 = 4 << 20;
/// CPUs, disks, interfaces and filesystems reported, at most each.
pub const CPUS_MAX: usize = 1024;
pub const DEVICES_MAX: usize = 256;
pub const MOUNTS_MAX: usize = 256;
/// USER_HZ: the unit of /proc/stat's times on every Linux architecture Strata runs on.
pub const USER_HZ: f64 = 100.0;

/// Reads a kernel file, at most `KERNEL_FILE_BYTES_MAX` bytes of it.
pub fn read(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(KERNEL_FILE_BYTES_MAX)
        .read_to_string(&mut text)?;
    Ok(text)
}

fn num(field: Option<&str>) -> u64 {
    field.and_then(|f| f.parse().ok()).unwrap_or(0)
}

/// One `cpu` line of /proc/stat, in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// All ticks (guest time is already inside user and nice).
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }

    /// Ticks neither idle nor waiting for I/O.
    pub fn busy(&self) -> u64 {
        self.total() - self.idle - self.iowait
    }
}

/// /proc/stat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stat {
    pub total: CpuTimes,
    /// Per CPU, by its number.
    pub cpus: Vec<(u32, CpuTimes)>,
    pub context_switches: u64,
    pub forks: u64,
    pub interrupts: u64,
    pub procs_running: u64,
    pub procs_blocked: u64,
    pub boot_time_s: u64,
}

pub fn parse_stat(text: &str) -> Stat {
    let mut stat = Stat::default();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let Some(key) = f.next() else { continue };
        if let Some(n) = key.strip_prefix("cpu") {
            let t = CpuTimes {
                user: num(f.next()),
                nice: num(f.next()),
                system: num(f.next()),
                idle: num(f.next()),
                iowait: num(f.next()),
                irq: num(f.next()),
                softirq: num(f.next()),
                steal: num(f.next()),
            };
            if n.is_empty() {
                stat.total = t;
            } else if let (Ok(n), true) = (n.parse(), stat.cpus.len() < CPUS_MAX) {
                stat.cpus.push((n, t));
            }
            continue;
        }
        let value = num(f.next());
        match key {
            "ctxt" => stat.context_switches = value,
            "processes" => stat.forks = value,
            "intr" => stat.interrupts = value,
            "procs_running" => stat.procs_running = value,
            "procs_blocked" => stat.procs_blocked = value,
            "btime" => stat.boot_time_s = value,
            _ => {}
        }
    }
    stat
}

/// /proc/meminfo, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mem {
    pub total: u64,
    pub free: u64,
    pub available: u64,
    pub buffers: u64,
    pub cached: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

pub fn parse_meminfo(text: &str) -> Mem {
    let mut m = Mem::default();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(key), value) = (f.next(), num(f.next())) else {
            continue;
        };
        let bytes = if f.next() == Some("kB") {
            value * 1024
        } else {
            value
        };
        let slot = match key {
            "MemTotal:" => &mut m.total,
            "MemFree:" => &mut m.free,
            "MemAvailable:" => &mut m.available,
            "Buffers:" => &mut m.buffers,
            "Cached:" => &mut m.cached,
            "SwapTotal:" => &mut m.swap_total,
            "SwapFree:" => &mut m.swap_free,
            _ => continue,
        };
        *slot = bytes;
    }
    m
}

/// /proc/loadavg.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
    /// Kernel scheduling entities (threads) in existence.
    pub threads: u64,
}

pub fn parse_loadavg(text: &str) -> Load {
    let mut f = text.split_ascii_whitespace();
    let mut float = || f.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let (one, five, fifteen) = (float(), float(), float());
    let threads = text
        .split_ascii_whitespace()
        .nth(3)
        .and_then(|rt| rt.split('/').nth(1))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    Load {
        one,
        five,
        fifteen,
        threads,
    }
}

/// One device of /proc/diskstats.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Disk {
    pub name: String,
    pub reads: u64,
    pub read_sectors: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_sectors: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub io_ms: u64,
    pub weighted_ms: u64,
}

/// Whole disks only: those with a `/sys/block/<name>` entry, less loop and ram devices (a
/// partition's I/O is already in its disk's).
pub fn parse_diskstats(text: &str, is_disk: &dyn Fn(&str) -> bool) -> Vec<Disk> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().take(14).collect();
        if f.len() < 14 || out.len() >= DEVICES_MAX {
            continue;
        }
        let name = f[2];
        if name.starts_with("loop") || name.starts_with("ram") || !is_disk(name) {
            continue;
        }
        let n = |i: usize| num(Some(f[i]));
        out.push(Disk {
            name: name.to_owned(),
            reads: n(3),
            read_sectors: n(5),
            read_ms: n(6),
            writes: n(7),
            write_sectors: n(9),
            write_ms: n(10),
            in_flight: n(11),
            io_ms: n(12),
            weighted_ms: n(13),
        });
    }
    out
}

pub fn is_block_device(name: &str) -> bool {
    Path::new("/sys/block").join(name).exists()
}

/// One interface of /proc/net/dev.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Net {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_drops: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_drops: u64,
}

pub fn parse_net_dev(text: &str) -> Vec<Net> {
    let mut out = Vec::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if out.len() >= DEVICES_MAX {
            break;
        }
        let f: Vec<u64> = rest
            .split_ascii_whitespace()
            .take(16)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        if f.len() < 16 {
            continue;
        }
        out.push(Net {
            name: name.trim().to_owned(),
            rx_bytes: f[0],
            rx_packets: f[1],
            rx_errors: f[2],
            rx_drops: f[3],
            tx_bytes: f[8],
            tx_packets: f[9],
            tx_errors: f[10],
            tx_drops: f[11],
        });
    }
    out
}

/// `total=` microseconds of a /proc/pressure file: (some, full).
pub fn parse_pressure(text: &str) -> (u64, Option<u64>) {
    let total = |line: &str| {
        line.split_ascii_whitespace()
            .find_map(|kv| kv.strip_prefix("total="))
            .and_then(|v| v.parse().ok())
    };
    let mut some = 0;
    let mut full = None;
    for line in text.lines() {
        if line.starts_with("some") {
            some = total(line).unwrap_or(0);
        } else if line.starts_with("full") {
            full = total(line);
        }
    }
    (some, full)
}

/// A named counter from the two-line tables of /proc/net/snmp and /proc/net/netstat
/// (`Tcp: … RetransSegs …` then `Tcp: … 12 …`).
pub fn table_value(text: &str, table: &str, name: &str) -> Option<u64> {
    let prefix = format!("{table}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let at = names.split_ascii_whitespace().position(|n| n == name);
        if let Some(at) = at {
            return values.split_ascii_whitespace().nth(at)?.parse().ok();
        }
    }
    None
}

/// TCP states as /proc/net/tcp numbers them (`include/net/tcp_states.h`).
pub const TCP_STATES: [&str; 12] = [
    "established",
    "syn_sent",
    "syn_recv",
    "fin_wait1",
    "fin_wait2",
    "time_wait",
    "close",
    "close_wait",
    "last_ack",
    "listen",
    "closing",
    "new_syn_recv",
];

/// Adds a /proc/net/tcp{,6} file's sockets to counts by state (index into `TCP_STATES`).
pub fn count_tcp_states(text: &str, counts: &mut [u64; 12]) {
    for line in text.lines().skip(1) {
        let state = line.split_ascii_whitespace().nth(3);
        if let Some(s) = state.and_then(|s| u8::from_str_radix(s, 16).ok()) {
            if (1..=12).contains(&s) {
                counts[usize::from(s) - 1] += 1;
            }
        }
    }
}

/// /proc/sys/fs/file-nr: open file handles (allocated less free).
pub fn parse_file_nr(text: &str) -> u64 {
    let mut f = text.split_ascii_whitespace();
    let allocated = num(f.next());
    let free = num(f.next());
    allocated.saturating_sub(free)
}

/// /proc/uptime's first field, seconds.
pub fn parse_uptime(text: &str) -> f64 {
    text.split_ascii_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A mounted filesystem worth reporting: a device-backed one, each mountpoint once.
#[derive(Clone, Debug, PartialEq)]
pub struct Mount {
    pub device: String,
    pub mountpoint: String,
    pub fstype: String,
}

/// /proc/self/mounts, device-backed filesystems only (`/dev/…` sources), each mount point once.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    let mut out: Vec<Mount> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().take(3).collect();
        if f.len() < 3 || !f[0].starts_with("/dev/") || out.len() >= MOUNTS_MAX {
            continue;
        }
        // The kernel escapes spaces and tabs in paths as octal.
        let mountpoint = f[1].replace("\\040", " ").replace("\\011", "\t");
        if out.iter().any(|m| m.mountpoint == mountpoint) {
            continue;
        }
        out.push(Mount {
            device: f[0].to_owned(),
            mountpoint,
            fstype: f[2].to_owned(),
        });
    }
    out
}

/// A filesystem's space and inodes, from statvfs(2).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FsSpace {
    pub size_bytes: u64,
    pub free_bytes: u64,
    /// Free to an unprivileged user (`df`'s "Avail").
    pub avail_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

pub fn statvfs(path: &str) -> Option<FsSpace> {
    let s = rustix::fs::statvfs(path).ok()?;
    let unit = s.f_frsize;
    Some(FsSpace {
        size_bytes: s.f_blocks.saturating_mul(unit),
        free_bytes: s.f_bfree.saturating_mul(unit),
        avail_bytes: s.f_bavail.saturating_mul(unit),
        inodes: s.f_files,
        inodes_free: s.f_ffree,
    })
}

/// Processes: the numeric entries of /proc (bounded by the kernel's pid_max).
pub fn count_processes(proc_dir: &Path) -> u64 {
    std::fs::read_dir(proc_dir)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count() as u64
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines() {
        let s = parse_stat(
            "cpu  10 1 5 100 4 1 1 2 0 0\ncpu0 5 0 2 50 2 0 0 1 0 0\nctxt 77\nprocs_running 3\n",
        );
        assert_eq!(s.total.total(), 124);
        assert_eq!(s.total.busy(), 20);
        assert_eq!(s.cpus.len(), 1);
        assert_eq!(s.context_switches, 77);
        assert_eq!(s.procs_running, 3);
    }

    #[test]
    fn tables_and_states() {
        let snmp = "Tcp: RtoAlgorithm RetransSegs\nTcp: 1 42\n";
        assert_eq!(table_value(snmp, "Tcp", "RetransSegs"), Some(42));
        assert_eq!(table_value(snmp, "Udp", "RetransSegs"), None);
        let tcp = "  sl local rem st\n 0: 0100007F:1F90 00000000:0000 0A x\n 1: a b 01 x\n";
        let mut c = [0; 12];
        count_tcp_states(tcp, &mut c);
        assert_eq!((c[0], c[9]), (1, 1));
        assert_eq!(
            parse_pressure("some avg10=0 total=5\nfull avg10=0 total=2\n"),
            (5, Some(2))
        );
    }
}
