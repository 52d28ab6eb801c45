//! Memory budgets: request bodies and queries.
//!
//! The request body memory budget: bytes of bodies held at once, taken as they arrive (and as
//! gzip produces them), not on what a request declares.
//!
//! Two pools, so a few large bodies cannot starve every small one: each request's first
//! `SMALL_BODY_BYTES` come from the small pool (a quarter of the budget), the rest from the
//! large pool. A request that cannot get its next share within `BODY_BUDGET_WAIT_MS` is
//! answered 503 naming the budget and releases what it held; waiting longer while holding a
//! share could deadlock requests that each hold part of the budget.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::reply::ServeError;

/// How many maximum-size bodies the whole budget holds.
pub const BODY_BUDGET_BODIES: u64 = 4;
/// Bytes of each request counted against the small pool before the large one.
pub const SMALL_BODY_BYTES: u64 = 1 << 20;
/// How long a request waits for its next share of the budget before it is answered 503.
pub const BODY_BUDGET_WAIT_MS: u64 = 1_000;

pub struct BodyBudget {
    small_kib: Semaphore,
    large_kib: Semaphore,
    small_kib_max: u32,
    large_kib_max: u32,
    /// The whole budget in bytes, for messages.
    total_bytes: u64,
}

impl BodyBudget {
    /// `BODY_BUDGET_BODIES` × the body limit, a quarter of it for every request's first bytes.
    pub fn new(body_size_bytes_max: u64) -> BodyBudget {
        let total_bytes = body_size_bytes_max.saturating_mul(BODY_BUDGET_BODIES);
        let kib = |bytes: u64| {
            u32::try_from((bytes / 1024).max(1))
                .unwrap_or(u32::MAX)
                .min(Semaphore::MAX_PERMITS as u32)
        };
        let small_kib_max = kib(total_bytes / 4);
        let large_kib_max = kib(total_bytes - total_bytes / 4);
        BodyBudget {
            small_kib: Semaphore::new(small_kib_max as usize),
            large_kib: Semaphore::new(large_kib_max as usize),
            small_kib_max,
            large_kib_max,
            total_bytes,
        }
    }

    /// A share holding nothing yet.
    pub fn share(self: &Arc<Self>) -> Share {
        Share {
            budget: self.clone(),
            small_kib: 0,
            large_kib: 0,
        }
    }

    fn exhausted(&self) -> ServeError {
        ServeError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request body memory budget ({} MiB = {BODY_BUDGET_BODIES} × \
                 limits.body_size_bytes_max, counting decompressed bytes) is held by other \
                 requests; retry later",
                self.total_bytes >> 20
            ),
        )
    }
}

/// One request's part of the budget, given back when dropped.
pub struct Share {
    budget: Arc<BodyBudget>,
    small_kib: u32,
    large_kib: u32,
}

impl Share {
    /// Holds enough of the budget for `bytes` in all (never less than already held).
    pub async fn grow_to(&mut self, bytes: u64) -> Result<(), ServeError> {
        let want_kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        let small_cap = u32::try_from(SMALL_BODY_BYTES / 1024)
            .unwrap_or(u32::MAX)
            .min(self.budget.small_kib_max);
        let small_want = want_kib.min(small_cap);
        let large_want = want_kib.saturating_sub(small_cap);
        if large_want > self.budget.large_kib_max {
            return Err(self.budget.exhausted());
        }
        let wait = Duration::from_millis(BODY_BUDGET_WAIT_MS);
        if small_want > self.small_kib {
            let more = small_want - self.small_kib;
            let got = tokio::time::timeout(wait, self.budget.small_kib.acquire_many(more)).await;
            match got {
                Ok(Ok(permit)) => permit.forget(),
                Ok(Err(_)) => return Err(ServeError::shutting_down()),
                Err(_) => return Err(self.budget.exhausted()),
            }
            self.small_kib = small_want;
        }
        if large_want > self.large_kib {
            let more = large_want - self.large_kib;
            let got = tokio::time::timeout(wait, self.budget.large_kib.acquire_many(more)).await;
            match got {
                Ok(Ok(permit)) => permit.forget(),
                Ok(Err(_)) => return Err(ServeError::shutting_down()),
                Err(_) => return Err(self.budget.exhausted()),
            }
            self.large_kib = large_want;
        }
        Ok(())
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.budget.small_kib.add_permits(self.small_kib as usize);
        self.budget.large_kib.add_permits(self.large_kib as usize);
    }
}

/// The memory all queries at once may hold (`limits.query_memory_bytes_max`), in KiB. A query
/// estimates what it will hold (points × series × bytes per point) before it reads or
/// allocates anything, and takes that much: past the whole budget it is refused with a 422, and
/// while other queries hold too much of it with a 503.
pub struct QueryBudget {
    kib: Semaphore,
    kib_max: u32,
}

impl QueryBudget {
    pub fn new(query_memory_bytes_max: u64) -> QueryBudget {
        let kib_max = u32::try_from((query_memory_bytes_max / 1024).max(1))
            .unwrap_or(u32::MAX)
            .min(Semaphore::MAX_PERMITS as u32);
        QueryBudget {
            kib: Semaphore::new(kib_max as usize),
            kib_max,
        }
    }

    /// Takes `bytes` of the budget for one query; `what` says what the estimate counts (for
    /// the refusal). Held until the permit is dropped.
    pub fn take(&self, bytes: u64, what: &str) -> Result<SemaphorePermit<'_>, ServeError> {
        let kib = bytes.div_ceil(1024).max(1);
        let max_mib = u64::from(self.kib_max) >> 10;
        if kib > u64::from(self.kib_max) {
            return Err(ServeError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "this query would hold about {} MiB ({what}), over \
                     limits.query_memory_bytes_max = {max_mib} MiB: ask for fewer series, a \
                     shorter range or a longer period",
                    kib >> 10
                ),
            ));
        }
        // Checked above: kib fits in u32.
        self.kib.try_acquire_many(kib as u32).map_err(|_| {
            ServeError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "queries in progress hold the query memory budget \
                     (limits.query_memory_bytes_max = {max_mib} MiB) and this one needs about \
                     {} MiB; retry later",
                    kib >> 10
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Shares take from the small pool first, then the large one; past the budget a request
    /// gets a 503 naming it; dropping a share gives everything back.
    #[tokio::test]
    async fn shares_grow_and_are_given_back() {
        let budget = Arc::new(BodyBudget::new(4 << 20)); // 16 MiB: 4 small, 12 large
        let mut a = budget.share();
        a.grow_to(10 << 20).await.unwrap();
        assert_eq!((a.small_kib, a.large_kib), (1024, 9 * 1024));
        let mut b = budget.share();
        b.grow_to(4 << 20).await.unwrap();
        let mut c = budget.share();
        // The large pool has 0 KiB left; the small one still serves c's first MiB.
        c.grow_to(1 << 20).await.unwrap();
        let refused = c.grow_to(2 << 20).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("limits.body_size_bytes_max"));
        drop((a, b, c));
        assert_eq!(budget.small_kib.available_permits(), 4 * 1024);
        assert_eq!(budget.large_kib.available_permits(), 12 * 1024);
        let mut d = budget.share();
        assert!(d.grow_to(17 << 20).await.is_err(), "past the whole budget");
    }

    /// A query over the whole budget is a 422, one that does not fit beside others a 503, and
    /// the budget comes back when a query is done.
    #[test]
    fn queries_share_one_budget() {
        let budget = QueryBudget::new(100 << 20);
        let over = budget.take(101 << 20, "1 series × 2 slices").unwrap_err();
        assert_eq!(over.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(over
            .message
            .contains("limits.query_memory_bytes_max = 100 MiB"));
        assert!(over.message.contains("1 series × 2 slices"));
        let first = budget.take(60 << 20, "").unwrap();
        let busy = budget.take(60 << 20, "").unwrap_err();
        assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
        drop(first);
        assert!(budget.take(60 << 20, "").is_ok());
    }
}
