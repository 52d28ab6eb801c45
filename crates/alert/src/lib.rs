//! `alert`: rulesets over the store, alert instance states kept in a durable journal, and their
//! history written back into the store as streams.
//!
//! - [`rule`]: ruleset files (TOML) compiled into [`rule::Ruleset`]s; [`cond`] the `when` /
//!   `clear` conditions, [`template`] the annotations.
//! - [`observe`]: what one ruleset sees at one period end (one observation per stream).
//! - [`state`]: the instance state machine, a pure function; [`flap`] Nagios's flap detection.
//! - [`core`]: one evaluation cycle over every due ruleset, as proposals; also applying records.
//! - [`record`] / [`snapshot`]: the journal record and snapshot formats (`FORMAT.md`).
//! - [`engine`]: the live engine (journal, restore, schedule, catch-up, eager, long-poll).
//! - [`history`]: the journal subscriber that writes transitions into the store exactly once.
//! - [`backtest`] and [`testfile`]: the same evaluation over a past range and over test files.
//! - [`http`]: the axum router the server mounts; [`prom`]: the Prometheus-shaped views;
//!   [`inbound`]: test notifications and acknowledgements from PagerDuty and Slack.
//! - [`sources`]: push sources and the built-in absence rule.
//! - [`notify`]: notifications — routing, maintenance, acknowledgement, reminders, escalation,
//!   delivery through journal subscribers that advance only after a receiver accepted.
//!
//! `README.md` is the design; `STATUS.md` what is done.
#![forbid(unsafe_code)]

pub mod backtest;
pub mod cond;
pub mod core;
pub mod engine;
pub mod flap;
pub mod history;
pub mod http;
pub mod inbound;
pub mod notify;
pub mod observe;
pub mod prom;
pub mod record;
pub mod rule;
pub mod snapshot;
pub mod sources;
pub mod state;
pub mod template;
pub mod testfile;
pub mod util;

pub use engine::{Engine, EngineOptions};
pub use rule::{Ruleset, RulesetError};
pub use state::{Instance, State};
