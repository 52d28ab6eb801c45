//! `strata observe`: the protocol observer's command line. Captures live on an interface (or
//! reads a pcap file), pairs requests with responses for each `--wire PROTO:PORT`, and sends
//! per-period latency histograms to the core (or prints them when no core is given). Settings
//! come from flags, then a TOML file (`--config`). Exit codes: 0 success, 1 runtime failure
//! (no capture permission, an unreadable file), 2 bad usage.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use observe::config::Config;
use observe::run::{Live, Output, Summary};
use observe::send::{SendConfig, Sender};

#[derive(Args)]
pub struct ObserveArgs {
    /// Interface to capture on (needs CAP_NET_RAW).
    #[arg(long)]
    iface: Option<String>,
    /// Read packets from this pcap file instead of capturing.
    #[arg(long)]
    read: Option<String>,
    /// A protocol on a server port: http:8080, postgres:5432, redis:6379, mysql:3306, kafka:9092,
    /// cassandra:9042.
    #[arg(long)]
    wire: Vec<String>,
    /// The core's base URL (http://127.0.0.1:8112); without one, documents go to standard output.
    #[arg(long)]
    core: Option<String>,
    /// A file holding the core's httptrap secret (batches go to /module/httptrap/observe/<secret>;
    /// without one, to /write/observe).
    #[arg(long)]
    token_file: Option<String>,
    /// A file holding the core's bearer token (for a core started with auth.token).
    #[arg(long)]
    core_token_file: Option<String>,
    /// The httptrap check the documents are written as (default `observe`); an installed
    /// observer uses its host's, so each host's streams stay apart.
    #[arg(long)]
    check: Option<String>,
    /// Seconds per period (default 60).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    period: Option<u64>,
    /// An HTTP route, NAME=PATTERN (`login=/login`, `user=/users/:id`, `static=/static/**`).
    #[arg(long)]
    route: Vec<String>,
    /// Distinct values per tag, port and period before the rest are recorded as `overflow`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    tag_values_max: Option<u64>,
    /// Capture ring size in MiB (default 64).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    ring_mib: Option<u32>,
    /// Stop a live capture after this many seconds.
    #[arg(long)]
    duration: Option<u64>,
    /// Also write the captured packets to this pcap file.
    #[arg(long)]
    write_pcap: Option<String>,
    /// A TOML file with the same settings (keys: iface, read, wire, core, token_file, core_token_file,
    /// check, period_s,
    /// route, tag_values_max, ring_mib, duration_s); flags win.
    #[arg(long)]
    config: Option<String>,
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("strata observe: {msg}");
    ExitCode::from(2)
}

fn settings(args: &ObserveArgs) -> Result<Config, String> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            toml::from_str(&text).map_err(|e| format!("{path}: {}", e.message()))?
        }
        None => Config::default(),
    };
    let flags = Config {
        iface: args.iface.clone(),
        read: args.read.clone(),
        wire: args.wire.clone(),
        core: args.core.clone(),
        token_file: args.token_file.clone(),
        core_token_file: args.core_token_file.clone(),
        check: args.check.clone(),
        period_s: args.period,
        route: args.route.clone(),
        tag_values_max: args.tag_values_max.map(|v| v as usize),
        ring_mib: args.ring_mib,
        duration_s: args.duration,
    };
    Ok(Config::merged(file, flags))
}

/// Documents printed one per line.
struct Print;

impl Output for Print {
    fn document(&mut self, body: String) {
        println!("{body}");
    }
}

struct Send(Sender);

impl Output for Send {
    fn document(&mut self, body: String) {
        if !self.0.submit(body) {
            eprintln!("strata observe: the send queue is full; a period's batch was dropped");
        }
    }
}

fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    if name.is_empty() {
        "localhost".into()
    } else {
        name.into()
    }
}

/// The longest httptrap check name the observer writes as (`observe-<check>` is its
/// exactly-once source, at most 64 bytes).
const CHECK_BYTES_MAX: usize = 48;

/// A secret or token read from its file: one trimmed line.
fn read_secret(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let secret = text.trim();
    if secret.is_empty() || secret.contains(char::is_whitespace) {
        return Err(format!("{path}: expected one line holding the secret"));
    }
    Ok(secret.to_string())
}

/// The check name: a URL path segment and a tag value, so letters, digits, `.`, `_`, `-`.
fn check_name(cfg: &Config) -> Result<String, String> {
    let check = cfg.check.clone().unwrap_or_else(|| "observe".into());
    let valid = !check.is_empty()
        && check.len() <= CHECK_BYTES_MAX
        && check
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !valid {
        return Err(format!(
            "check `{check}`: use 1 to {CHECK_BYTES_MAX} letters, digits, `.`, `_` or `-`"
        ));
    }
    Ok(check)
}

fn sender(cfg: &Config) -> Result<Option<Sender>, String> {
    let Some(core) = &cfg.core else {
        return Ok(None);
    };
    let token = cfg.token_file.as_deref().map(read_secret).transpose()?;
    let bearer = cfg
        .core_token_file
        .as_deref()
        .map(read_secret)
        .transpose()?;
    let check = check_name(cfg)?;
    let source = match cfg.check {
        Some(_) => format!("observe-{check}"),
        None => format!("observe-{}", host()),
    };
    let send = SendConfig {
        core: core.clone(),
        token,
        bearer,
        check,
        source,
        epoch: clock::wall() / 1_000_000,
    };
    Sender::start(send)
        .map(Some)
        .map_err(|e| format!("cannot start the sender: {e}"))
}

pub fn run(args: ObserveArgs) -> ExitCode {
    let cfg = match settings(&args) {
        Ok(c) => c,
        Err(e) => return usage(&e),
    };
    let wires = match cfg.wires() {
        Ok(w) => w,
        Err(e) => return usage(&e),
    };
    if cfg.iface.is_some() == cfg.read.is_some() {
        return usage("give one of --iface (live capture) or --read (a pcap file)");
    }
    let routes = match observe::route::Routes::new(&cfg.route) {
        Ok(r) => r,
        Err(e) => return usage(&e),
    };
    let mut limits = observe::Limits::default();
    limits.period_ms = cfg.period_s.unwrap_or(60) * 1000;
    limits.tag_values_max = cfg.tag_values_max.unwrap_or(limits.tag_values_max);
    let mut obs = observe::Observer::new(&wires, routes, limits);
    let sender = match sender(&cfg) {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let result = match sender {
        Some(s) => {
            let mut out = Send(s);
            let r = capture(&cfg, &args, &wires, &mut obs, &mut out);
            report_sends(&out.0);
            out.0.finish(Duration::from_secs(10));
            r
        }
        None => capture(&cfg, &args, &wires, &mut obs, &mut Print),
    };
    match result {
        Ok(s) => {
            report(&s);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata observe: {e}");
            ExitCode::from(1)
        }
    }
}

fn capture(
    cfg: &Config,
    args: &ObserveArgs,
    wires: &[(observe::Protocol, u16)],
    obs: &mut observe::Observer,
    out: &mut dyn Output,
) -> Result<Summary, String> {
    if let Some(path) = &cfg.read {
        let f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        return observe::run::replay(std::io::BufReader::new(f), obs, out)
            .map_err(|e| format!("{path}: {e}"));
    }
    let iface = cfg.iface.as_deref().unwrap_or("lo");
    let stop = Arc::new(AtomicBool::new(false));
    on_interrupt(stop.clone());
    let ports: Vec<u16> = wires.iter().map(|w| w.1).collect();
    let mut ring = capture::ring::RingConfig::default();
    if let Some(mib) = cfg.ring_mib {
        ring.blocks = mib.max(1);
    }
    let mut writer = match &args.write_pcap {
        Some(p) => {
            let f = std::fs::File::create(p).map_err(|e| format!("{p}: {e}"))?;
            let w =
                capture::pcap::Writer::new(std::io::BufWriter::new(f), capture::linktype::ETHERNET);
            Some(w.map_err(|e| format!("{p}: {e}"))?)
        }
        None => None,
    };
    let mut tee = |ts: u64, data: &[u8]| {
        if let Some(w) = writer.as_mut() {
            let _ = w.write(&capture::Packet {
                ts_ns: ts,
                wire_len: data.len() as u32,
                data,
            });
        }
    };
    let live = Live {
        iface,
        ring,
        ports: &ports,
        duration: cfg.duration_s.map(Duration::from_secs),
        tee: if args.write_pcap.is_some() {
            Some(&mut tee)
        } else {
            None
        },
    };
    let s = observe::run::live(live, obs, &stop, out)
        .map_err(|e| format!("capture on {iface}: {e}"))?;
    if let Some(w) = writer {
        w.finish()
            .map_err(|e| format!("writing the capture: {e}"))?;
    }
    Ok(s)
}

/// Sets `stop` on SIGINT or SIGTERM.
fn on_interrupt(stop: Arc<AtomicBool>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("observe-signal".into())
        .spawn(move || {
            rt.block_on(async {
                let Ok(mut term) =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                else {
                    return;
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            });
            stop.store(true, Ordering::Relaxed);
        });
}

fn report(s: &Summary) {
    let c = &s.counters;
    eprintln!(
        "strata observe: {} packets ({:.0} per CPU-second), {} kernel drops, {} requests paired, {} unpaired, {} responses with no request, {} gaps, {} TLS connections",
        c.packets,
        s.packets_per_cpu_second(),
        c.kernel_drops,
        c.pairs,
        c.unpaired,
        c.orphans,
        c.gaps,
        c.tls_conns
    );
}

fn report_sends(s: &Sender) {
    let st = &s.stats;
    eprintln!(
        "strata observe: batches sent {}, retried {}, refused {}, dropped {}",
        st.sent.load(Ordering::Relaxed),
        st.retries.load(Ordering::Relaxed),
        st.rejected.load(Ordering::Relaxed),
        st.dropped.load(Ordering::Relaxed)
    );
}
