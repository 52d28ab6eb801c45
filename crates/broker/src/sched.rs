//! The scheduler: one thread that fires every check at its scheduled wall-clock millisecond
//! (`phases.rs` says which) and hands the run to a callback. It sleeps to just before the
//! earliest due time and spins the rest, so a fire is late by the spin's granularity, not the
//! sleep's; every fire's lateness goes into a histogram.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use checks::CheckSpec;
use hist::Histogram;

use crate::phases;

/// Spin this long before a due time instead of sleeping through it (a sleep's wake-up is late
/// by tens of microseconds, more on a busy machine).
const SPIN_NS: u64 = 300_000;
/// Longest sleep between looks at the plan (a change also wakes the thread).
const SLEEP_NS_MAX: u64 = 50_000_000;
/// A fire this late, or a turn skipped because the previous run still goes, counts as late.
pub const LATE_MS: u64 = 1000;
/// The real-time priority (`SCHED_FIFO`, low among real-time threads) the scheduler thread asks
/// for: its work is tiny, but as an ordinary thread it waits for a CPU behind every runnable
/// thread when it wakes, milliseconds on a busy machine. Its spin is bounded (`SPIN_NS` per
/// due millisecond, and checks share 10 ms slots), so it cannot starve the machine.
const REALTIME_PRIORITY: i32 = 10;

/// One scheduled check.
pub struct Entry {
    pub spec: Arc<CheckSpec>,
    pub phase_ms: u64,
    /// Set while a run of it is going: the next turn is skipped rather than run twice.
    pub running: AtomicBool,
}

/// Counters the scheduler keeps.
#[derive(Default)]
pub struct SchedStats {
    /// Whether the scheduler thread runs at real-time priority.
    pub realtime: AtomicBool,
    pub fired: AtomicU64,
    pub late: AtomicU64,
    pub skipped: AtomicU64,
    /// Fire lateness in seconds, since last taken.
    lateness: Mutex<Histogram>,
}

impl SchedStats {
    /// The lateness histogram since the last take (emptied).
    pub fn take_lateness(&self) -> Histogram {
        std::mem::take(&mut *self.lateness.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What a fire hands over: the check and its scheduled time (ms since the epoch). `false` when
/// the run could not be started (its queue is full): the turn is skipped and counted.
pub type Fire = Box<dyn Fn(&Arc<Entry>, u64) -> bool + Send>;

struct Plan {
    entries: Vec<Arc<Entry>>,
    generation: u64,
}

struct Shared {
    plan: Mutex<Plan>,
    wake: Condvar,
    stop: AtomicBool,
    stats: Arc<SchedStats>,
}

pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn wall_ns() -> u64 {
    clock::wall()
}

impl Scheduler {
    pub fn start(fire: Fire) -> Result<Scheduler, String> {
        let shared = Arc::new(Shared {
            plan: Mutex::new(Plan {
                entries: Vec::new(),
                generation: 0,
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            stats: Arc::new(SchedStats::default()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("broker-sched".into())
            .spawn(move || run(&s, &fire))
            .map_err(|e| format!("starting the scheduler: {e}"))?;
        Ok(Scheduler {
            shared,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> Arc<SchedStats> {
        self.shared.stats.clone()
    }

    /// Replaces the plan. Entries whose spec and phase are unchanged keep their state.
    pub fn set(&self, specs: Vec<(Arc<CheckSpec>, u64)>) {
        let mut plan = self.shared.plan.lock().unwrap_or_else(|e| e.into_inner());
        let old: HashMap<&str, &Arc<Entry>> = plan
            .entries
            .iter()
            .map(|e| (e.spec.id.as_str(), e))
            .collect();
        let entries = specs
            .into_iter()
            .map(|(spec, phase_ms)| match old.get(spec.id.as_str()) {
                Some(e) if e.spec == spec && e.phase_ms == phase_ms => Arc::clone(e),
                _ => Arc::new(Entry {
                    spec,
                    phase_ms,
                    running: AtomicBool::new(false),
                }),
            })
            .collect();
        plan.entries = entries;
        plan.generation += 1;
        self.shared.wake.notify_all();
    }

    pub fn len(&self) -> usize {
        let plan = self.shared.plan.lock().unwrap_or_else(|e| e.into_inner());
        plan.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread's state between plan changes.
struct Queue {
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    entries: Vec<Arc<Entry>>,
    generation: u64,
}

/// Asks for real-time priority for the calling thread; whether it was granted (it needs root or
/// `CAP_SYS_NICE`, e.g. `AmbientCapabilities=CAP_SYS_NICE` in a systemd unit).
fn raise_priority() -> bool {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: `sched_setscheduler` only reads `param`, which outlives the call; pid 0 is the
    // calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

fn run(shared: &Shared, fire: &Fire) {
    let realtime = raise_priority();
    shared.stats.realtime.store(realtime, Ordering::Relaxed);
    if realtime {
        tracing::info!("scheduler thread at real-time priority (SCHED_FIFO {REALTIME_PRIORITY})");
    } else {
        tracing::info!(
            "scheduler thread at ordinary priority (real-time needs CAP_SYS_NICE): fires may be \
             late by milliseconds on a busy machine"
        );
    }
    let mut q = Queue {
        heap: BinaryHeap::new(),
        entries: Vec::new(),
        generation: u64::MAX,
    };
    let mut lateness = Histogram::new();
    let mut published_ns = wall_ns();
    while !shared.stop.load(Ordering::Acquire) {
        reload(shared, &mut q);
        let now = wall_ns();
        if now.saturating_sub(published_ns) > 1_000_000_000 || lateness.bin_count() > 256 {
            publish(shared, &mut lateness);
            published_ns = now;
        }
        let Some(&Reverse((due_ms, idx))) = q.heap.peek() else {
            wait(shared, SLEEP_NS_MAX);
            continue;
        };
        let due_ns = due_ms * 1_000_000;
        if due_ns > now + SPIN_NS {
            wait(shared, (due_ns - now - SPIN_NS).min(SLEEP_NS_MAX));
            continue;
        }
        while wall_ns() < due_ns {
            std::hint::spin_loop();
        }
        q.heap.pop();
        let entry = &q.entries[idx];
        fire_one(shared, fire, entry, due_ms, &mut lateness);
        let period = entry.spec.period_ms;
        let mut next = due_ms + period;
        let now_ms = wall_ns() / 1_000_000;
        if next + period <= now_ms {
            // Far behind (a suspended process, a stepped clock): skip to the next turn.
            let missed = (now_ms - next) / period;
            shared.stats.skipped.fetch_add(missed, Ordering::Relaxed);
            shared.stats.late.fetch_add(missed, Ordering::Relaxed);
            next = phases::next_at(now_ms, period, entry.phase_ms);
        }
        q.heap.push(Reverse((next, idx)));
    }
    publish(shared, &mut lateness);
}

fn fire_one(
    shared: &Shared,
    fire: &Fire,
    entry: &Arc<Entry>,
    due_ms: u64,
    lateness: &mut Histogram,
) {
    let late_ns = wall_ns().saturating_sub(due_ms * 1_000_000);
    lateness.insert_intscale(late_ns as i64, -9, 1);
    let stats = &shared.stats;
    stats.fired.fetch_add(1, Ordering::Relaxed);
    if late_ns >= LATE_MS * 1_000_000 {
        stats.late.fetch_add(1, Ordering::Relaxed);
    }
    if entry.running.swap(true, Ordering::AcqRel) {
        stats.skipped.fetch_add(1, Ordering::Relaxed);
        stats.late.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if !fire(entry, due_ms) {
        entry.running.store(false, Ordering::Release);
        stats.skipped.fetch_add(1, Ordering::Relaxed);
        stats.late.fetch_add(1, Ordering::Relaxed);
    }
}

fn publish(shared: &Shared, lateness: &mut Histogram) {
    if lateness.is_empty() {
        return;
    }
    let mut h = shared
        .stats
        .lateness
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    h.merge(lateness);
    lateness.clear();
}

fn wait(shared: &Shared, ns: u64) {
    let plan = shared.plan.lock().unwrap_or_else(|e| e.into_inner());
    if shared.stop.load(Ordering::Acquire) {
        return;
    }
    let _ = shared
        .wake
        .wait_timeout(plan, Duration::from_nanos(ns))
        .unwrap_or_else(|e| e.into_inner());
}

/// Takes a changed plan: every check's next turn from now.
fn reload(shared: &Shared, q: &mut Queue) {
    let plan = shared.plan.lock().unwrap_or_else(|e| e.into_inner());
    if plan.generation == q.generation {
        return;
    }
    q.generation = plan.generation;
    q.entries = plan.entries.clone();
    drop(plan);
    let now_ms = wall_ns() / 1_000_000 + 1;
    q.heap = q
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| Reverse((phases::next_at(now_ms, e.spec.period_ms, e.phase_ms), i)))
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, period_ms: u64) -> Arc<CheckSpec> {
        Arc::new(CheckSpec {
            id: id.into(),
            kind: "tcp".into(),
            target: "127.0.0.1:1".into(),
            period_ms,
            timeout_ms: 100,
            config: serde_json::Value::Null,
            tags: vec![],
        })
    }

    #[test]
    fn fires_on_the_grid() {
        let fired = Arc::new(Mutex::new(Vec::new()));
        let f = fired.clone();
        let sched = Scheduler::start(Box::new(move |e, due| {
            f.lock().unwrap().push((e.spec.id.clone(), due));
            e.running.store(false, Ordering::Release);
            true
        }))
        .unwrap();
        sched.set(vec![(spec("a", 1000), 250), (spec("b", 1000), 700)]);
        std::thread::sleep(Duration::from_millis(2300));
        drop(sched);
        let fired = fired.lock().unwrap();
        assert!(fired.len() >= 3, "{fired:?}");
        for (id, due) in fired.iter() {
            let phase = if id == "a" { 250 } else { 700 };
            assert_eq!(due % 1000, phase);
        }
    }
}
