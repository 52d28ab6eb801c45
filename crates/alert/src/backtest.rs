//! Backtests: the records rulesets would have made over a past range, from stored data, through
//! the same cycle as live evaluation (on a virtual clock: every period evaluated on time).

use std::sync::Arc;

use store::Store;

use crate::core::Core;
use crate::record::Record;
use crate::rule::{self, Ruleset};
use crate::state::Instance;
use crate::util::align_down;

/// Periods one backtest evaluates at most.
pub const BACKTEST_PERIODS_MAX: i64 = 100_000;

/// A backtest in progress: step it period by period, or run it to the end.
pub struct Backtest<'s> {
    store: &'s Store,
    pub core: Core,
    step_ms: i64,
    next_ms: i64,
}

impl<'s> Backtest<'s> {
    /// Rulesets are ordered parents first; evaluation starts with the first period ending after
    /// `start_ms`.
    pub fn new(
        store: &'s Store,
        rulesets: Vec<Arc<Ruleset>>,
        start_ms: i64,
    ) -> Result<Backtest<'s>, String> {
        let ordered = rule::order(rulesets).map_err(|e| e.to_string())?;
        let step_ms = store.options().base_period_ms;
        Ok(Backtest {
            store,
            core: Core::new(ordered),
            step_ms,
            next_ms: align_down(start_ms, step_ms) + step_ms,
        })
    }

    /// Evaluates every period end up to and including `t_ms`; returns the records made.
    pub fn run_until(&mut self, t_ms: i64) -> Vec<Record> {
        let mut out = Vec::new();
        while self.next_ms <= t_ms {
            let t = self.next_ms;
            let p = self.core.propose(self.store, t, 0, t, None);
            out.extend(p.records.iter().cloned());
            self.core.apply(p);
            self.next_ms += self.step_ms;
        }
        out
    }

    /// Instances now, by ruleset then stream.
    pub fn instances(&self) -> Vec<&Instance> {
        self.core.sorted_instances()
    }
}

/// The records of `rulesets` over `[start_ms, end_ms)` (period ends in `(start_ms, end_ms]`).
pub fn backtest(
    store: &Store,
    rulesets: Vec<Arc<Ruleset>>,
    start_ms: i64,
    end_ms: i64,
) -> Result<Vec<Record>, String> {
    if end_ms <= start_ms {
        return Err("end must be after start".into());
    }
    let periods = (end_ms - start_ms) / store.options().base_period_ms;
    if periods > BACKTEST_PERIODS_MAX {
        return Err(format!(
            "{periods} periods, more than {BACKTEST_PERIODS_MAX}; shorten the range"
        ));
    }
    let mut b = Backtest::new(store, rulesets, start_ms)?;
    Ok(b.run_until(end_ms))
}
