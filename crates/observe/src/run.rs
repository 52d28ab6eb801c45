//! The observer's loops: live from a ring, or a pcap file replayed; each closes periods as time
//! passes (wall time live, packet time in a replay) and hands their documents to an [`Output`].

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use capture::ring::{Ring, RingConfig};
use capture::{bpf, linktype, pcap};

use crate::output::{counter_deltas, httptrap_json};
use crate::{Counters, Observer};

/// How long after a period ends it stays open for requests that started in it and are answered
/// later.
pub const GRACE_NS: u64 = 5_000_000_000;
const TICK_NS: u64 = 1_000_000_000;

/// Where closed periods' documents go.
pub trait Output {
    fn document(&mut self, body: String);
}

/// Documents kept in memory (tests, and `--read` without a core prints them).
impl Output for Vec<String> {
    fn document(&mut self, body: String) {
        self.push(body);
    }
}

/// What a run did and what it cost.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub counters: Counters,
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

impl Summary {
    pub fn packets_per_cpu_second(&self) -> f64 {
        self.counters.packets as f64 / (self.cpu_ns.max(1) as f64 / 1e9)
    }
}

/// Closes periods up to `now_ns` (every one when `all`) and emits their documents.
fn flush(obs: &mut Observer, now_ns: u64, all: bool, before: &mut Counters, out: &mut dyn Output) {
    obs.counters.late = obs.agg.late;
    for closed in obs.agg.close(now_ns, all) {
        let deltas = counter_deltas(&obs.counters, before);
        *before = obs.counters;
        out.document(httptrap_json(&closed, &deltas));
    }
}

/// Reads a pcap file through the observer.
pub fn replay<R: io::Read>(
    input: R,
    obs: &mut Observer,
    out: &mut dyn Output,
) -> Result<Summary, pcap::Error> {
    let (cpu0, wall0) = (clock::process_cpu_ns(), Instant::now());
    let mut reader = pcap::Reader::new(input)?;
    let link = reader.linktype();
    let mut before = Counters::default();
    let mut next_tick = 0;
    while let Some(p) = reader.next_packet()? {
        let ts = p.ts_ns;
        obs.packet(link, ts, p.data);
        if ts >= next_tick {
            obs.agg.touch(ts);
            flush(obs, ts.saturating_sub(GRACE_NS), false, &mut before, out);
            next_tick = ts + TICK_NS;
        }
    }
    obs.finish();
    flush(obs, u64::MAX, true, &mut before, out);
    Ok(Summary {
        counters: obs.counters,
        cpu_ns: clock::process_cpu_ns() - cpu0,
        wall_ns: wall0.elapsed().as_nanos() as u64,
    })
}

/// Sees each kept packet: its capture time and bytes.
pub type Tee<'a> = dyn FnMut(u64, &[u8]) + 'a;

/// A live capture's settings.
pub struct Live<'a> {
    pub iface: &'a str,
    pub ring: RingConfig,
    pub ports: &'a [u16],
    /// Stop after this long; run until `stop` otherwise.
    pub duration: Option<Duration>,
    /// Sees every packet kept (to write a capture file beside the observation).
    pub tee: Option<&'a mut Tee<'a>>,
}

/// Live capture until `stop` is set or the duration passes.
pub fn live(
    cfg: Live<'_>,
    obs: &mut Observer,
    stop: &AtomicBool,
    out: &mut dyn Output,
) -> io::Result<Summary> {
    let Live {
        iface,
        ring: ring_cfg,
        ports,
        duration,
        mut tee,
    } = cfg;
    let filter = bpf::tcp_ports(ports)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "between 1 and 48 ports"))?;
    // After a stop, at most one ring's worth of blocks is still read (traffic that goes on does
    // not keep the reader from stopping).
    let drain_blocks_max = ring_cfg.blocks;
    let mut drained = 0;
    let mut ring = Ring::open(iface, &filter, ring_cfg)?;
    let (cpu0, wall0) = (clock::process_cpu_ns(), Instant::now());
    let mut before = Counters::default();
    let mut next_tick = 0;
    loop {
        let done = stop.load(Ordering::Relaxed) || duration.is_some_and(|d| wall0.elapsed() >= d);
        let more = ring
            .next_block(if done { 0 } else { 50 }, &mut |p| {
                if let Some(t) = tee.as_mut() {
                    t(p.ts_ns, p.data);
                }
                obs.packet(linktype::ETHERNET, p.ts_ns, p.data)
            })
            .map(|n| n > 0)
            .or_else(|e| if done { Ok(false) } else { Err(e) })?;
        // Once told to stop, the blocks the kernel has already handed over are still read, so a
        // reader running behind loses none of what was captured.
        if done && more && drained < drain_blocks_max {
            drained += 1;
            continue;
        }
        let now = clock::wall();
        if now >= next_tick || done {
            obs.counters.kernel_drops += ring.stats()?.drops;
            obs.sweep(now);
            obs.agg.touch(now);
            flush(obs, now.saturating_sub(GRACE_NS), false, &mut before, out);
            next_tick = now + TICK_NS;
        }
        if done {
            break;
        }
    }
    obs.finish();
    flush(obs, u64::MAX, true, &mut before, out);
    Ok(Summary {
        counters: obs.counters,
        cpu_ns: clock::process_cpu_ns() - cpu0,
        wall_ns: wall0.elapsed().as_nanos() as u64,
    })
}
