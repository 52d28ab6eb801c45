//! The alert instance and its state machine: a pure function from the previous instance, the
//! period's verdict and the period end `T` to the next instance.
//!
//! ```text
//! ok ──match──▶ pending ──for elapsed──▶ firing ──cleared──▶ recovering ──keep_firing_for──▶ resolved
//! ```
//! plus `nodata` (the window held too little data) and `error` (the instance's value could not
//! be judged). A firing episode — from the first `firing` to `resolved` — keeps its start
//! (`fired_ms`) through severity changes, `recovering` and `nodata`/`error`, so an alert whose
//! condition holds steadily never resolves and fires again.

use crate::flap::{History, CODE_ERROR, CODE_NODATA};

/// A resolved instance becomes `ok` after this long without a match.
pub const RESOLVED_KEEP_MS: i64 = 15 * 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum State {
    Ok = 0,
    Pending = 1,
    Firing = 2,
    Recovering = 3,
    Resolved = 4,
    NoData = 5,
    Error = 6,
}

impl State {
    pub const ALL: [State; 7] = [
        State::Ok,
        State::Pending,
        State::Firing,
        State::Recovering,
        State::Resolved,
        State::NoData,
        State::Error,
    ];

    pub fn from_u8(b: u8) -> Option<State> {
        State::ALL.into_iter().find(|s| *s as u8 == b)
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Pending => "pending",
            State::Firing => "firing",
            State::Recovering => "recovering",
            State::Resolved => "resolved",
            State::NoData => "nodata",
            State::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|x| x.name() == s)
    }

    /// Pending or firing (recovering counts as firing: it still alerts).
    pub fn is_active(self) -> bool {
        matches!(self, State::Pending | State::Firing | State::Recovering)
    }
}

/// One alert instance: a ruleset applied to one stream.
#[derive(Clone, Debug)]
pub struct Instance {
    pub fp: u64,
    pub ruleset: String,
    /// The stream's identity (its CAQL label, for a `find` the canonical key); empty for the
    /// ruleset's own error instance.
    pub stream: String,
    pub state: State,
    /// 0 when no level holds.
    pub severity: u8,
    /// When the current state began (a period end, or an eager evaluation's time).
    pub since_ms: i64,
    /// When the current pending began (0: not pending).
    pub active_ms: i64,
    /// When the current firing episode began (0: none).
    pub fired_ms: i64,
    /// The period end of the last evaluation that stepped it.
    pub last_t_ms: i64,
    /// The held level's left side at the last record (NaN: none).
    pub value: f64,
    pub history: History,
    pub flapping: bool,
    pub suppressed: bool,
    /// alertname, severity, the ruleset's labels and the stream's tags.
    pub labels: Vec<(String, String)>,
    /// Rendered at the last record.
    pub annotations: Vec<(String, String)>,
}

/// Equal field by field, the value by its bits (an instance without a value equals itself).
impl PartialEq for Instance {
    fn eq(&self, o: &Instance) -> bool {
        self.fp == o.fp
            && self.ruleset == o.ruleset
            && self.stream == o.stream
            && self.state == o.state
            && self.severity == o.severity
            && (self.since_ms, self.active_ms, self.fired_ms, self.last_t_ms)
                == (o.since_ms, o.active_ms, o.fired_ms, o.last_t_ms)
            && self.value.to_bits() == o.value.to_bits()
            && self.history == o.history
            && (self.flapping, self.suppressed) == (o.flapping, o.suppressed)
            && self.labels == o.labels
            && self.annotations == o.annotations
    }
}

impl Instance {
    pub fn new(fp: u64, ruleset: &str, stream: &str) -> Instance {
        Instance {
            fp,
            ruleset: ruleset.to_string(),
            stream: stream.to_string(),
            state: State::Ok,
            severity: 0,
            since_ms: 0,
            active_ms: 0,
            fired_ms: 0,
            last_t_ms: 0,
            value: f64::NAN,
            history: History::default(),
            flapping: false,
            suppressed: false,
            labels: Vec::new(),
            annotations: Vec::new(),
        }
    }

    /// Whether memory may forget it: an ok instance with a steady history is the same as one
    /// never seen.
    pub fn forgettable(&self) -> bool {
        self.state == State::Ok && !self.history.has_change() && !self.flapping
    }

    /// Whether `next` differs from `self` in anything a record must carry.
    pub fn differs(&self, next: &Instance) -> bool {
        self.state != next.state
            || self.severity != next.severity
            || self.flapping != next.flapping
            || self.suppressed != next.suppressed
            || self.history.newest() != next.history.newest()
    }
}

/// What one evaluation says about an instance (after hysteresis).
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// `severity` 0: no level holds.
    Level {
        severity: u8,
        value: f64,
    },
    NoData,
    Error(String),
}

impl Verdict {
    /// The flap history code.
    pub fn code(&self) -> u8 {
        match self {
            Verdict::Level { severity, .. } => *severity,
            Verdict::NoData => CODE_NODATA,
            Verdict::Error(_) => CODE_ERROR,
        }
    }
}

/// The ruleset's timers.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub for_ms: i64,
    pub keep_firing_for_ms: i64,
}

fn enter(i: &mut Instance, state: State, t: i64) {
    if i.state != state {
        i.state = state;
        i.since_ms = t;
    }
}

fn fire(i: &mut Instance, t: i64) {
    if i.fired_ms == 0 {
        i.fired_ms = t;
    }
    i.active_ms = 0;
    enter(i, State::Firing, t);
}

/// Starts an episode: pending, or firing at once when `for` is 0.
fn begin(i: &mut Instance, t: i64, timing: Timing) {
    if timing.for_ms == 0 {
        fire(i, t);
    } else {
        i.active_ms = t;
        enter(i, State::Pending, t);
    }
}

/// Ends a firing episode: recovering, or resolved at once when `keep_firing_for` is 0.
fn clear(i: &mut Instance, t: i64, timing: Timing) {
    if timing.keep_firing_for_ms == 0 {
        resolve(i, t);
    } else {
        enter(i, State::Recovering, t);
    }
}

fn resolve(i: &mut Instance, t: i64) {
    i.fired_ms = 0;
    i.active_ms = 0;
    enter(i, State::Resolved, t);
}

fn on_match(i: &mut Instance, severity: u8, t: i64, timing: Timing) {
    i.severity = severity;
    match i.state {
        State::Ok | State::Resolved => begin(i, t, timing),
        State::Pending if t - i.active_ms >= timing.for_ms => fire(i, t),
        State::Pending => {}
        State::Firing | State::Recovering => fire(i, t),
        State::NoData | State::Error if i.fired_ms != 0 => fire(i, t),
        State::NoData | State::Error => begin(i, t, timing),
    }
}

fn on_none(i: &mut Instance, t: i64, timing: Timing) {
    i.severity = 0;
    match i.state {
        State::Ok => {}
        State::Resolved if t - i.since_ms >= RESOLVED_KEEP_MS => enter(i, State::Ok, t),
        State::Resolved => {}
        State::Pending => {
            i.active_ms = 0;
            enter(i, State::Ok, t);
        }
        State::Firing => clear(i, t, timing),
        State::Recovering if t - i.since_ms >= timing.keep_firing_for_ms => resolve(i, t),
        State::Recovering => {}
        State::NoData | State::Error if i.fired_ms != 0 => clear(i, t, timing),
        State::NoData | State::Error => enter(i, State::Ok, t),
    }
}

/// The instance after the evaluation of period end `t` gave `verdict`. Flap history and the
/// flag are updated by the caller (they depend on the ruleset's settings).
pub fn step(prev: &Instance, verdict: &Verdict, t: i64, timing: Timing) -> Instance {
    let mut i = prev.clone();
    i.last_t_ms = t;
    match verdict {
        Verdict::Level { severity: 0, value } => {
            i.value = *value;
            on_none(&mut i, t, timing);
        }
        Verdict::Level { severity, value } => {
            i.value = *value;
            on_match(&mut i, *severity, t, timing);
        }
        Verdict::NoData | Verdict::Error(_) => {
            // A pending timer does not survive a gap; a firing episode does.
            i.active_ms = 0;
            i.value = f64::NAN;
            let s = if matches!(verdict, Verdict::NoData) {
                State::NoData
            } else {
                State::Error
            };
            enter(&mut i, s, t);
        }
    }
    i
}

/// An eager verdict (on the still-open period) only moves towards firing.
pub fn step_eager(prev: &Instance, verdict: &Verdict, t: i64, timing: Timing) -> Option<Instance> {
    let Verdict::Level { severity, .. } = verdict else {
        return None;
    };
    if *severity == 0 || prev.state == State::Firing && prev.severity <= *severity {
        return None;
    }
    let next = step(prev, verdict, t, timing);
    let towards = matches!(next.state, State::Pending | State::Firing);
    (towards && prev.differs(&next)).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        for_ms: 120_000,
        keep_firing_for_ms: 180_000,
    };
    const MIN: i64 = 60_000;

    fn lvl(s: u8) -> Verdict {
        Verdict::Level {
            severity: s,
            value: 1.0,
        }
    }

    /// Steps through verdicts at 1-minute period ends from minute 1, returning the states.
    fn run(timing: Timing, verdicts: &[Verdict]) -> Vec<(State, u8)> {
        let mut i = Instance::new(1, "r", "s");
        let mut out = Vec::new();
        for (k, v) in verdicts.iter().enumerate() {
            i = step(&i, v, (k as i64 + 1) * MIN, timing);
            out.push((i.state, i.severity));
        }
        out
    }

    use State::*;

    #[test]
    fn ok_pending_firing_recovering_resolved_ok() {
        let mut vs = vec![
            lvl(0),
            lvl(2),
            lvl(2),
            lvl(2),
            lvl(0),
            lvl(0),
            lvl(0),
            lvl(0),
        ];
        vs.extend(std::iter::repeat_n(lvl(0), 15));
        let got = run(T, &vs);
        assert_eq!(
            &got[..8],
            &[
                (Ok, 0),
                (Pending, 2),
                (Pending, 2),
                (Firing, 2), // minute 4: 2 minutes after minute 2
                (Recovering, 0),
                (Recovering, 0),
                (Recovering, 0),
                (Resolved, 0), // minute 8: 3 minutes after minute 5
            ]
        );
        // Resolved for 15 minutes, then ok.
        assert_eq!(got[21], (Resolved, 0));
        assert_eq!(got[22], (Ok, 0));
    }

    #[test]
    fn pending_that_clears_goes_back_to_ok() {
        assert_eq!(run(T, &[lvl(1), lvl(0)]), [(Pending, 1), (Ok, 0)]);
    }

    #[test]
    fn zero_timers_fire_and_resolve_at_once() {
        let z = Timing {
            for_ms: 0,
            keep_firing_for_ms: 0,
        };
        assert_eq!(run(z, &[lvl(3), lvl(0)]), [(Firing, 3), (Resolved, 0)]);
    }

    #[test]
    fn severity_change_while_firing_keeps_the_episode() {
        let mut i = Instance::new(1, "r", "s");
        let z = Timing {
            for_ms: 0,
            keep_firing_for_ms: 0,
        };
        i = step(&i, &lvl(3), MIN, z);
        let worse = step(&i, &lvl(1), 2 * MIN, z);
        assert_eq!(
            (worse.state, worse.severity, worse.fired_ms),
            (Firing, 1, MIN)
        );
        assert!(i.differs(&worse));
        assert_eq!(
            worse.since_ms, MIN,
            "the state did not change, only the severity"
        );
    }

    #[test]
    fn recovering_that_matches_again_continues_the_episode() {
        let got = run(T, &[lvl(1), lvl(1), lvl(1), lvl(0), lvl(1)]);
        assert_eq!(got[3], (Recovering, 0));
        assert_eq!(got[4], (Firing, 1));
        let mut i = Instance::new(1, "r", "s");
        for (k, v) in [lvl(1), lvl(1), lvl(1), lvl(0), lvl(1)].iter().enumerate() {
            i = step(&i, v, (k as i64 + 1) * MIN, T);
        }
        assert_eq!(i.fired_ms, 3 * MIN, "not a new episode");
    }

    #[test]
    fn nodata_and_error_keep_the_episode_but_not_pending_timers() {
        let got = run(T, &[lvl(1), lvl(1), lvl(1), Verdict::NoData, lvl(1)]);
        assert_eq!(got[3], (NoData, 1));
        assert_eq!(got[4], (Firing, 1));
        let got = run(T, &[lvl(1), Verdict::Error("x".into()), lvl(1), lvl(1)]);
        assert_eq!(got[1].0, Error);
        assert_eq!(got[2], (Pending, 1), "the pending timer restarted");
        let got = run(T, &[lvl(1), lvl(1), lvl(1), Verdict::NoData, lvl(0)]);
        assert_eq!(got[4], (Recovering, 0));
        let got = run(T, &[Verdict::NoData, lvl(0)]);
        assert_eq!(got, [(NoData, 0), (Ok, 0)]);
    }

    #[test]
    fn eager_only_moves_towards_firing() {
        let z = Timing {
            for_ms: 0,
            keep_firing_for_ms: 60_000,
        };
        let ok = Instance::new(1, "r", "s");
        let fired = step_eager(&ok, &lvl(1), 90_000, z).unwrap();
        assert_eq!((fired.state, fired.since_ms), (Firing, 90_000));
        assert!(step_eager(&fired, &lvl(0), 95_000, z).is_none());
        assert!(step_eager(&fired, &lvl(1), 95_000, z).is_none());
        assert!(step_eager(&ok, &Verdict::NoData, 95_000, z).is_none());
    }
}
