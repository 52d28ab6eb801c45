//! `agent`: the host agent behind `strata agent`. Every second it reads the host's counters
//! from `/proc` and `/sys` (`kernel`, `collect`), keeps per-period histograms of the one-second
//! rates, runs NAD plugins (`plugins`), takes statsd and httptrap from local applications, and
//! either pushes each period into a local journal forwarded exactly once to a core (the
//! broker's spool and forwarder) or serves it for pulling as NAD JSON and Prometheus text
//! (`expose`). Config: `config`; runtime: `agent`. Series: `METRICS.md`.

pub mod agent;
pub mod collect;
pub mod config;
pub mod expose;
pub mod kernel;
pub mod plugins;

pub use agent::{run, Bound, PERIOD_S_DEFAULT};
pub use config::Config;
