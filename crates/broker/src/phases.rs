//! Where in its period each check runs. A check of period `P` and phase `φ` runs at every
//! wall-clock millisecond `t` with `t mod P = φ`. A new check goes to the least-loaded second of
//! its period, then to the least-loaded 10 ms slot of that second, "load" being the busiest
//! occurrence of that second (slot) over a 300 s horizon — the longest period, and a multiple of
//! every period that divides it, so for those the counts are exact. Ties go to the first
//! candidate at or after the id's hash, so placement is deterministic; placed phases are kept
//! by the caller (`state.rs`) so a restart or an added check moves nothing.

use std::collections::HashMap;

/// The horizon loads are counted over, in seconds.
pub const HORIZON_S: u64 = 300;
/// Slots per second of the fine grid.
pub const SLOTS_PER_S: u64 = 100;
const SLOT_MS: u64 = 1000 / SLOTS_PER_S;

/// FNV-1a (64-bit) of the id: stable across builds and platforms, unlike std's hasher.
pub fn id_hash(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Run counts per second and per slot over the horizon, of every placed check.
pub struct Placer {
    seconds: Vec<u32>,
    slots: Vec<u32>,
}

impl Default for Placer {
    fn default() -> Self {
        Placer {
            seconds: vec![0; HORIZON_S as usize],
            slots: vec![0; (HORIZON_S * SLOTS_PER_S) as usize],
        }
    }
}

/// Occurrences of a phase over the horizon (at least one).
fn occurrences(period_ms: u64, phase_ms: u64) -> impl Iterator<Item = u64> {
    let horizon_ms = HORIZON_S * 1000;
    let n = horizon_ms.div_ceil(period_ms).max(1);
    (0..n).map(move |k| (phase_ms + k * period_ms) % horizon_ms)
}

impl Placer {
    /// Counts a placed check's runs.
    pub fn add(&mut self, period_ms: u64, phase_ms: u64) {
        self.count(period_ms, phase_ms, true);
    }

    /// Forgets a removed check's runs.
    pub fn remove(&mut self, period_ms: u64, phase_ms: u64) {
        self.count(period_ms, phase_ms, false);
    }

    fn count(&mut self, period_ms: u64, phase_ms: u64, add: bool) {
        for t in occurrences(period_ms, phase_ms) {
            for cell in [
                &mut self.seconds[(t / 1000) as usize],
                &mut self.slots[(t / SLOT_MS) as usize],
            ] {
                *cell = if add {
                    cell.saturating_add(1)
                } else {
                    cell.saturating_sub(1)
                };
            }
        }
    }

    /// The phase a new check of `period_ms` gets (its runs are not counted yet: `add` them).
    pub fn choose(&self, id: &str, period_ms: u64) -> u64 {
        let hash = id_hash(id);
        let second_count = period_ms.div_ceil(1000);
        let second = least(second_count, hash, |c| {
            load(&self.seconds, period_ms, c * 1000, 1000)
        });
        let base = second * 1000;
        let slot_count = (period_ms - base).min(1000).div_ceil(SLOT_MS);
        let slot = least(slot_count, hash >> 32, |s| {
            load(&self.slots, period_ms, base + s * SLOT_MS, SLOT_MS)
        });
        base + slot * SLOT_MS
    }
}

/// (busiest, total) load of the cells a phase's occurrences fall in.
fn load(cells: &[u32], period_ms: u64, phase_ms: u64, cell_ms: u64) -> (u32, u64) {
    let mut busiest = 0;
    let mut total = 0u64;
    for t in occurrences(period_ms, phase_ms) {
        let c = cells[(t / cell_ms) as usize];
        busiest = busiest.max(c);
        total += u64::from(c);
    }
    (busiest, total)
}

/// The candidate in `0..n` with the least cost, the first at or after `start % n` winning ties.
fn least(n: u64, start: u64, cost: impl Fn(u64) -> (u32, u64)) -> u64 {
    let n = n.max(1);
    let start = start % n;
    let mut best = (start, cost(start));
    for i in 1..n {
        let c = (start + i) % n;
        let k = cost(c);
        if k < best.1 {
            best = (c, k);
        }
    }
    best.0
}

/// Places checks not yet in `phases` (id → (period, phase)), in the order of their ids'
/// hashes (so the same set gets the same phases whatever order it came in), and drops the
/// phases of ids no longer wanted. Returns whether anything changed.
pub fn place_all(wanted: &[(String, u64)], phases: &mut HashMap<String, (u64, u64)>) -> bool {
    let mut changed = false;
    let wanted_periods: HashMap<&str, u64> = wanted.iter().map(|(i, p)| (i.as_str(), *p)).collect();
    let before = phases.len();
    // A check whose period changed is placed again.
    phases.retain(|id, (period, _)| wanted_periods.get(id.as_str()) == Some(period));
    changed |= phases.len() != before;
    let mut placer = Placer::default();
    for (period, phase) in phases.values() {
        placer.add(*period, *phase);
    }
    let mut new: Vec<&(String, u64)> = wanted
        .iter()
        .filter(|(id, _)| !phases.contains_key(id))
        .collect();
    new.sort_by(|a, b| (id_hash(&a.0), &a.0).cmp(&(id_hash(&b.0), &b.0)));
    new.dedup_by(|a, b| a.0 == b.0);
    for (id, period) in new {
        let phase = placer.choose(id, *period);
        placer.add(*period, phase);
        phases.insert(id.clone(), (*period, phase));
        changed = true;
    }
    changed
}

/// The first scheduled time at or after `now_ms` of a check.
pub fn next_at(now_ms: u64, period_ms: u64, phase_ms: u64) -> u64 {
    let base = now_ms - now_ms % period_ms + phase_ms;
    if base >= now_ms {
        base
    } else {
        base + period_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_second(phases: &HashMap<String, (u64, u64)>) -> Vec<u64> {
        let mut counts = vec![0u64; HORIZON_S as usize];
        for (period, phase) in phases.values() {
            for t in occurrences(*period, *phase) {
                counts[(t / 1000) as usize] += 1;
            }
        }
        counts
    }

    #[test]
    fn one_period_spreads_within_one_of_the_mean() {
        for period_s in [1u64, 10, 60, 300] {
            let wanted: Vec<(String, u64)> = (0..1000)
                .map(|i| (format!("check-{i}"), period_s * 1000))
                .collect();
            let mut phases = HashMap::new();
            place_all(&wanted, &mut phases);
            let counts = per_second(&phases);
            let mean = 1000.0 / period_s as f64;
            for c in counts {
                assert!(
                    (c as f64 - mean).abs() <= 1.0,
                    "period {period_s}: {c} vs {mean}"
                );
            }
        }
    }

    #[test]
    fn mixed_periods_within_ten_percent() {
        let periods = [5u64, 10, 15, 30, 60];
        let wanted: Vec<(String, u64)> = (0..3000)
            .map(|i| (format!("c{i}"), periods[i % periods.len()] * 1000))
            .collect();
        let mut phases = HashMap::new();
        place_all(&wanted, &mut phases);
        let counts = per_second(&phases);
        let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        for c in counts {
            assert!((c as f64 - mean).abs() <= mean * 0.10, "{c} vs {mean}");
        }
    }

    #[test]
    fn same_set_same_phases_and_adding_moves_nothing() {
        let mut wanted: Vec<(String, u64)> = (0..200).map(|i| (format!("x{i}"), 60_000)).collect();
        let mut a = HashMap::new();
        place_all(&wanted, &mut a);
        wanted.reverse();
        let mut b = HashMap::new();
        place_all(&wanted, &mut b);
        assert_eq!(a, b, "order given does not matter");
        let before = a.clone();
        wanted.push(("new".into(), 60_000));
        assert!(place_all(&wanted, &mut a));
        for (id, p) in &before {
            assert_eq!(a.get(id), Some(p));
        }
    }

    #[test]
    fn slots_spread_within_a_second() {
        let wanted: Vec<(String, u64)> = (0..500).map(|i| (format!("s{i}"), 1000)).collect();
        let mut phases = HashMap::new();
        place_all(&wanted, &mut phases);
        let mut slots = [0u32; SLOTS_PER_S as usize];
        for (_, phase) in phases.values() {
            slots[(phase / SLOT_MS) as usize] += 1;
        }
        assert!(slots.iter().all(|&c| c == 5), "{slots:?}");
    }

    #[test]
    fn next_at_is_on_the_grid() {
        assert_eq!(next_at(10_500, 1000, 200), 11_200);
        assert_eq!(next_at(10_200, 1000, 200), 10_200);
        assert_eq!(next_at(0, 60_000, 59_990), 59_990);
    }
}
