//! What names a series and what it holds: the dense [`SeriesId`] the index assigns and the
//! [`Kind`] of its samples. A leaf: every layer of the store (batch, WAL, index, blocks, head,
//! reads) speaks of series by these, so they depend on nothing.

/// A dense series id, assigned in order from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesId(pub u32);

/// What a series holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Numeric = 1,
    Text = 2,
    Histogram = 3,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Numeric, Kind::Text, Kind::Histogram];

    pub fn from_u8(byte: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == byte)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Numeric => "numeric",
            Kind::Text => "text",
            Kind::Histogram => "histogram",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize - 1
    }
}
