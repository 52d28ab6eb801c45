//! Flap detection as Nagios does it.
//!
//! Each evaluation appends the instance's verdict code (0 no level, 1–5 a severity, 6 nodata,
//! 7 error) to a history of the last [`HISTORY_LEN`] (21) codes. The 20 places where two
//! consecutive codes can differ are weighted linearly, 0.75 for the oldest to 1.25 for the
//! newest; the percent state change is the sum of the weights of the places that do differ,
//! × 100 / 20. An instance starts flapping at a change of at least `high` percent and stops at
//! no more than `low`; in between it keeps what it was.
//!
//! The history packs into one `u64`: 21 codes × 3 bits, newest in the low bits, plus the count
//! of codes recorded so far (fewer than 21 at first: missing places count as no change).

/// Codes kept.
pub const HISTORY_LEN: u32 = 21;
const CODE_BITS: u32 = 3;
const CODE_MASK: u64 = (1 << CODE_BITS) - 1;
const CODES_MASK: u64 = (1 << (HISTORY_LEN * CODE_BITS)) - 1;
/// Weight of the oldest and of the newest change.
const WEIGHT_OLDEST: f64 = 0.75;
const WEIGHT_NEWEST: f64 = 1.25;

/// The verdict code of one evaluation.
pub const CODE_NONE: u8 = 0;
pub const CODE_NODATA: u8 = 6;
pub const CODE_ERROR: u8 = 7;

/// The last 21 verdict codes and how many were recorded (capped at 21).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub codes: u64,
    pub len: u8,
}

impl History {
    /// A history of `len` codes all equal to `code`.
    pub fn filled(code: u8, len: u8) -> History {
        let mut h = History::default();
        for _ in 0..len {
            h.push(code);
        }
        h
    }

    pub fn push(&mut self, code: u8) {
        self.codes = ((self.codes << CODE_BITS) | (u64::from(code) & CODE_MASK)) & CODES_MASK;
        self.len = (self.len + 1).min(HISTORY_LEN as u8);
    }

    /// The code `age` evaluations ago (0 = newest).
    pub fn code(&self, age: u32) -> u8 {
        ((self.codes >> (age * CODE_BITS)) & CODE_MASK) as u8
    }

    pub fn newest(&self) -> u8 {
        self.code(0)
    }

    /// Whether any two consecutive recorded codes differ.
    pub fn has_change(&self) -> bool {
        (1..u32::from(self.len)).any(|age| self.code(age) != self.code(age - 1))
    }

    /// Nagios's weighted percent state change.
    pub fn percent_change(&self) -> f64 {
        let places = HISTORY_LEN - 1;
        let mut sum = 0.0;
        // Place `i` (0 oldest … 19 newest) compares codes of ages 20 − i and 19 − i.
        for i in 0..places {
            let (older, newer) = (places - i, places - i - 1);
            if older >= u32::from(self.len) {
                continue;
            }
            if self.code(older) != self.code(newer) {
                sum += WEIGHT_OLDEST
                    + f64::from(i) * (WEIGHT_NEWEST - WEIGHT_OLDEST) / f64::from(places - 1);
            }
        }
        sum * 100.0 / f64::from(places)
    }

    /// The flapping flag after this history, given the flag before.
    pub fn flapping(&self, was: bool, low: f64, high: f64) -> bool {
        let p = self.percent_change();
        if p >= high {
            true
        } else if p <= low {
            false
        } else {
            was
        }
    }

    /// The history after `n` more evaluations whose code stayed the newest (restoring from a
    /// record: an evaluation whose code changed would have written one).
    pub fn advanced(mut self, n: i64) -> History {
        let code = self.newest();
        for _ in 0..n.clamp(0, i64::from(HISTORY_LEN)) {
            self.push(code);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(codes: &[u8]) -> History {
        let mut h = History::default();
        for &c in codes {
            h.push(c);
        }
        h
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    // Worked examples, computed by hand from the weights 0.75 + i × 0.5 / 19.

    #[test]
    fn steady_is_zero_and_alternating_is_one_hundred() {
        assert!(close(of(&[1; 21]).percent_change(), 0.0));
        let alt: Vec<u8> = (0..21).map(|i| (i % 2) as u8).collect();
        // 20 changes, weights averaging 1.0: 20 × 100 / 20.
        assert!(close(of(&alt).percent_change(), 100.0));
    }

    #[test]
    fn one_change_weighs_by_its_age() {
        // Newest place only: 1.25 × 100 / 20 = 6.25 %.
        let mut newest = vec![0; 20];
        newest.push(1);
        assert!(close(of(&newest).percent_change(), 6.25));
        // Oldest place only: 0.75 × 100 / 20 = 3.75 %.
        let mut oldest = vec![0];
        oldest.extend([1; 20]);
        assert!(close(of(&oldest).percent_change(), 3.75));
    }

    #[test]
    fn a_clean_episode_does_not_flap() {
        // ok for 10, firing for 5, ok again: changes at places 9 and 14:
        // (0.75 + 9 × 0.5/19) + (0.75 + 14 × 0.5/19) = 1.5 + 23/38 = 2.10526…, × 5 = 10.53 %.
        let mut codes = vec![0; 10];
        codes.extend([1; 5]);
        codes.extend([0; 6]);
        let p = of(&codes).percent_change();
        assert!(close(p, (1.5 + 23.0 / 38.0) * 5.0), "{p}");
        assert!(!of(&codes).flapping(false, 5.0, 20.0));
    }

    #[test]
    fn starts_at_high_stops_at_low_holds_between() {
        // Changes at the 4 newest places: weights 1.25, 1.2237, 1.1974, 1.1711 → 24.2 %.
        let mut codes = vec![0; 17];
        codes.extend([1, 0, 1, 0]);
        let h = of(&codes);
        let p = (4.0 * 0.75 + (19.0 + 18.0 + 17.0 + 16.0) * 0.5 / 19.0) * 5.0;
        assert!(close(h.percent_change(), p), "{}", h.percent_change());
        assert!(h.flapping(false, 5.0, 20.0));
        // Two changes in the middle: between low and high, the flag holds.
        let mut mid = vec![0; 10];
        mid.extend([1; 4]);
        mid.extend([0; 7]);
        let m = of(&mid);
        assert!(m.percent_change() > 5.0 && m.percent_change() < 20.0);
        assert!(m.flapping(true, 5.0, 20.0));
        assert!(!m.flapping(false, 5.0, 20.0));
        assert!(!of(&[2; 21]).flapping(true, 5.0, 20.0));
    }

    #[test]
    fn short_histories_count_missing_places_as_steady() {
        let h = of(&[0, 1]);
        assert_eq!(h.len, 2);
        assert!(close(h.percent_change(), 6.25));
        assert!(h.has_change());
        assert!(!of(&[3, 3, 3]).has_change());
        assert_eq!(of(&[0, 1]).advanced(3), of(&[0, 1, 1, 1, 1]));
    }
}
