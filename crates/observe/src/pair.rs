//! Requests waiting for their responses, in order, bounded.

use std::collections::VecDeque;

use crate::stream::Span;

/// Most requests in flight on one connection; more are dropped (and counted as unpaired).
pub const IN_FLIGHT_MAX: usize = 256;

/// Requests in flight, answered in the order sent (HTTP/1.x, PostgreSQL, Redis, MySQL).
pub struct Fifo<T> {
    q: VecDeque<(Span, T)>,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo { q: VecDeque::new() }
    }
}

impl<T> Fifo<T> {
    /// Queues a request; `false` (and not queued) when the connection has too many in flight.
    pub fn push(&mut self, span: Span, req: T) -> bool {
        if self.q.len() >= IN_FLIGHT_MAX {
            return false;
        }
        self.q.push_back((span, req));
        true
    }

    /// The oldest request in flight.
    pub fn front(&self) -> Option<&T> {
        self.q.front().map(|(_, r)| r)
    }

    /// The request a response starting at `first_ns` answers: the oldest in flight, unless that
    /// one was sent after the response began (then the response answers a request this observer
    /// never saw, lost in a gap, and pairs with nothing).
    pub fn answer(&mut self, first_ns: u64) -> Option<(Span, T)> {
        if self.q.front()?.0.first_ns > first_ns {
            return None;
        }
        self.q.pop_front()
    }

    /// Drops every request in flight; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.q.len();
        self.q.clear();
        n
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}
