//! `broker`: the collection tier. A broker runs checks on a schedule, accepts pushed data, and
//! keeps everything in its own journal until each core it serves has written it, over the
//! core's HTTP ingest or over a TLS link either side dials (design: `link/mod.rs`); the core's
//! side of the links (registry, listener, dialers) is [`core`]. Byte formats: `FORMAT.md`.
//!
//! Inside, bottom-up: the record format (`record`), small durable files (`state`), check
//! placement (`phases`), the journal with its subscribers and disk budget (`spool`), the
//! scheduler thread (`sched`) and runs (`runs`), push inputs (`push`), forwarding to a core's
//! HTTP ingest or the link exactly once (`forward`), identities and pinned TLS (`tls`), dialling
//! through a CONNECT proxy (`dial`), the link (`link`), the broker runtime (`broker`), the
//! core's side (`core`) and the broker's side of agents' links (`agents`), which reuses it.

mod accept;
mod agents;
mod assigned;
mod broker;
pub mod core;
mod dial;
pub mod forward;
pub mod link;
pub mod phases;
mod push;
pub mod record;
mod runs;
pub mod sched;
pub mod spool;
mod state;
pub mod tls;

pub use broker::{load_local_checks, Bound, Broker, BrokerConfig, CHECKS_MAX};
pub use forward::Transport;
pub use forward::{ForwardConfig, ForwardStats};
pub use push::{PUSH_BODY_BYTES_MAX, STATSD_FLUSH_MS};
pub use runs::RUNS_MAX_DEFAULT;
pub use spool::{SpoolOptions, DISK_AGE_MS_MAX_DEFAULT, DISK_BYTES_MAX_DEFAULT};
