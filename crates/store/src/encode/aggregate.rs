//! Aggregate chunks (kind 4): one numeric series' per-slice rollup, as ten columns at the same
//! slice timestamps. Each column is a whole numeric chunk (`numeric.rs`, with its own frame), so
//! the integer columns (count, time offsets) take the integer mode and the float ones the XOR
//! mode; slice timestamps are usually regular and cost a few bytes per column.

use super::bits::{get_varint, put_varint};
use super::{frame_body, frame_finish, frame_start, numeric, ChunkKind, DecodeError, EncodeError};
use crate::read::{NumericAggregate, SliceAggregate};

/// Columns, in order: count, sum, Σ value², min, max, first, last, first − slice start (ms),
/// last − slice start (ms), counter increase.
pub const AGGREGATE_COLUMNS: u8 = 10;

/// Encodes `(slice start, aggregate)` pairs, slice starts strictly increasing.
pub fn encode(slices: &[(i64, SliceAggregate)]) -> Result<Vec<u8>, EncodeError> {
    let mut out = frame_start(ChunkKind::Aggregate);
    out.push(AGGREGATE_COLUMNS);
    for column in 0..AGGREGATE_COLUMNS {
        let values: Vec<(i64, f64)> = slices
            .iter()
            .map(|(t, s)| (*t, column_value(*t, s, column)))
            .collect();
        let bytes = numeric::encode(&values)?;
        put_varint(&mut out, bytes.len() as u64);
        out.extend_from_slice(&bytes);
    }
    Ok(frame_finish(out))
}

fn column_value(slice_start_ms: i64, s: &SliceAggregate, column: u8) -> f64 {
    let a = &s.agg;
    match column {
        0 => a.count as f64,
        1 => a.sum,
        2 => a.sum_squares,
        3 => a.min,
        4 => a.max,
        5 => a.first,
        6 => a.last,
        7 => a.first_ts_ms.wrapping_sub(slice_start_ms) as f64,
        8 => a.last_ts_ms.wrapping_sub(slice_start_ms) as f64,
        _ => s.increase,
    }
}

fn invalid(pos: usize, what: &'static str) -> DecodeError {
    DecodeError::Invalid {
        bit_offset: pos as u64 * 8,
        what,
    }
}

/// Decodes an aggregate chunk; never panics, allocation bounded by the input length.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, SliceAggregate)>, DecodeError> {
    let body = frame_body(bytes, ChunkKind::Aggregate)?;
    if body.first() != Some(&AGGREGATE_COLUMNS) {
        return Err(invalid(0, "column count"));
    }
    let mut pos = 1;
    let mut columns: Vec<Vec<(i64, f64)>> = Vec::with_capacity(AGGREGATE_COLUMNS as usize);
    for _ in 0..AGGREGATE_COLUMNS {
        let len = get_varint(body, &mut pos)?;
        let end = (pos as u64)
            .checked_add(len)
            .filter(|&e| e <= body.len() as u64)
            .ok_or(DecodeError::Truncated {
                bit_offset: pos as u64 * 8,
            })? as usize;
        let column = numeric::decode(&body[pos..end])?;
        if columns
            .first()
            .is_some_and(|c: &Vec<(i64, f64)>| c.len() != column.len())
        {
            return Err(invalid(pos, "columns of different lengths"));
        }
        columns.push(column);
        pos = end;
    }
    if pos != body.len() {
        return Err(invalid(pos, "bytes after the last column"));
    }
    let mut out = Vec::with_capacity(columns[0].len());
    for i in 0..columns[0].len() {
        let t = columns[0][i].0;
        if columns.iter().any(|c| c[i].0 != t) {
            return Err(invalid(0, "columns at different timestamps"));
        }
        let v = |c: usize| columns[c][i].1;
        let count = v(0);
        let (first_off, last_off) = (v(7), v(8));
        let offsets_ok = (0.0..=i64::MAX as f64).contains(&first_off)
            && first_off <= last_off
            && last_off <= i64::MAX as f64
            && first_off.fract() == 0.0
            && last_off.fract() == 0.0;
        let count_ok = count >= 1.0 && count.fract() == 0.0 && count < u64::MAX as f64;
        if !(count_ok && offsets_ok) {
            return Err(invalid(0, "slice count or time offsets out of range"));
        }
        let agg = NumericAggregate {
            count: count as u64,
            sum: v(1),
            sum_squares: v(2),
            min: v(3),
            max: v(4),
            first: v(5),
            last: v(6),
            first_ts_ms: t.wrapping_add(first_off as i64),
            last_ts_ms: t.wrapping_add(last_off as i64),
        };
        out.push((
            t,
            SliceAggregate {
                agg,
                increase: v(9),
            },
        ));
    }
    Ok(out)
}
