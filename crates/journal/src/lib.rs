//! `journal`: a durable, segmented log with named subscribers, checkpoints and group commit.
//!
//! One writer process appends records (each gets a global `u64` offset) into preallocated segment
//! files; records are grouped into CRC32C-checked frames, optionally LZ4-compressed. Readers —
//! threads or other processes — never write to the log and see only committed records. Named
//! subscribers keep a durable checkpoint (the next offset to read) and read at least once.
//!
//! Durability is explicit at acknowledgement: see [`Durability`]. `FORMAT.md` describes every byte.
//! The journal knows nothing about what the records mean.
//!
//! ```
//! use journal::{Batch, Journal, Options, Start};
//!
//! # fn main() -> journal::Result<()> {
//! # let tmp = std::env::temp_dir().join(format!("journal-doc-{}", std::process::id()));
//! let j = Journal::open(&tmp, Options::default())?; // GroupCommit 128 KiB / 2 ms
//! j.add_subscriber("core", Start::Begin)?;
//! let offsets = j.append_batch(&[b"a".as_slice(), b"b"])?; // returns after fdatasync
//! assert_eq!(offsets, 0..2);
//! let ticket = j.submit(&[b"c"])?; // or `ticket.await` in async code
//! ticket.wait()?;
//!
//! let mut sub = j.subscriber("core")?;
//! let mut batch = Batch::new();
//! while sub.next_batch(&mut batch)? > 0 {
//!     for (offset, payload) in batch.iter() {
//!         println!("{offset}: {payload:?}");
//!     }
//!     sub.commit()?; // at-least-once: commit after processing
//! }
//! assert_eq!(sub.checkpoint(), 3);
//! # drop(sub); drop(j); let _ = std::fs::remove_dir_all(&tmp);
//! # Ok(())
//! # }
//! ```

mod error;
pub mod format;
pub mod fuzzing;
mod reader;
mod segment;
pub mod sim;
mod subscribers;
pub mod tools;
pub mod vfs;
mod writer;

pub use error::{Error, Result};
pub use reader::{Batch, Reader};
pub use subscribers::{Start, Subscriber, SubscriberInfo};
pub use writer::{Durability, Journal, Options, PurgeReport, RecoveryReport, Retention, Ticket};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
