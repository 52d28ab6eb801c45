//! A minimal protobuf wire walker: enough to count repeated fields before prost decodes a
//! message, so a body of empty sub-messages (2 bytes each on the wire, a struct of tens of bytes
//! each once decoded) is refused before it is allocated.

use crate::batch::Reason;

/// One field of a message as `walk_fields` hands it over.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Field<'a> {
    /// Wire type 0 (int32/64, uint32/64, sint32/64, bool, enum).
    Varint,
    /// Wire types 1 and 5 (fixed64, sfixed64, double; fixed32, sfixed32, float).
    Fixed,
    /// Wire type 2: a string, bytes, a sub-message or a packed repeated field.
    Bytes(&'a [u8]),
}

/// Calls `f` with the number and payload of every length-delimited field of one protobuf
/// message, skipping the other wire types.
/// A malformed message is a `Reason::Decode` naming `what`.
pub(crate) fn walk<'a>(
    buf: &'a [u8],
    what: &'static str,
    f: &mut dyn FnMut(u64, &'a [u8]) -> Result<(), Reason>,
) -> Result<(), Reason> {
    walk_fields(buf, what, &mut |number, field| match field {
        Field::Bytes(payload) => f(number, payload),
        Field::Varint | Field::Fixed => Ok(()),
    })
}

/// Calls `f` with the number and wire form of every field of one protobuf message.
pub(crate) fn walk_fields<'a>(
    buf: &'a [u8],
    what: &'static str,
    f: &mut dyn FnMut(u64, Field<'a>) -> Result<(), Reason>,
) -> Result<(), Reason> {
    walk_wire(buf, what, &mut |number, wire| {
        f(
            number,
            match wire {
                Wire::Varint(_) => Field::Varint,
                Wire::Fixed64(_) | Wire::Fixed32 => Field::Fixed,
                Wire::Bytes(payload) => Field::Bytes(payload),
            },
        )
    })
}

/// One field of a message with its value, as `walk_wire` hands it over (the decoders read
/// values straight from the body, borrowing strings and bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wire<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1 (fixed64, sfixed64, double: the little-endian bits).
    Fixed64(u64),
    /// Wire type 5 (fixed32, sfixed32, float; no decoder here reads one).
    Fixed32,
    /// Wire type 2.
    Bytes(&'a [u8]),
}

/// Calls `f` with the number and value of every field of one protobuf message.
/// A malformed message (truncated, or a group: wire types 3 and 4) is a `Reason::Decode`
/// naming `what`.
/// Generic over `f` so each decoder's field handling is inlined into the loop (remote write
/// walks every label and sample through it).
pub(crate) fn walk_wire<'a, F>(
    mut buf: &'a [u8],
    what: &'static str,
    f: &mut F,
) -> Result<(), Reason>
where
    F: FnMut(u64, Wire<'a>) -> Result<(), Reason> + ?Sized,
{
    let malformed = |detail: String| Reason::Decode { what, detail };
    let truncated = || malformed("truncated field".to_owned());
    while !buf.is_empty() {
        let key = varint(&mut buf).ok_or_else(truncated)?;
        let wire = match key & 7 {
            0 => Wire::Varint(varint(&mut buf).ok_or_else(truncated)?),
            1 => {
                let (bytes, rest) = buf.split_first_chunk::<8>().ok_or_else(truncated)?;
                buf = rest;
                Wire::Fixed64(u64::from_le_bytes(*bytes))
            }
            2 => {
                let len = varint(&mut buf).ok_or_else(truncated)?;
                let len = usize::try_from(len).map_err(|_| truncated())?;
                if len > buf.len() {
                    return Err(truncated());
                }
                let (payload, rest) = buf.split_at(len);
                buf = rest;
                Wire::Bytes(payload)
            }
            5 => {
                buf = buf.get(4..).ok_or_else(truncated)?;
                Wire::Fixed32
            }
            wire => return Err(malformed(format!("unsupported wire type {wire}"))),
        };
        f(key >> 3, wire)?;
    }
    Ok(())
}

/// The varints of a packed repeated field, in order; `None` when one is truncated.
pub(crate) fn packed_varints(mut packed: &[u8], f: &mut dyn FnMut(u64)) -> Option<()> {
    while !packed.is_empty() {
        f(varint(&mut packed)?);
    }
    Some(())
}

/// Elements of a repeated varint field as prost will decode them: one per unpacked occurrence,
/// and one per varint of a packed occurrence (a varint ends at a byte below 0x80). A one-byte
/// varint decodes to an 8-byte integer, so this is what bounds a packed field's decoded size.
pub(crate) fn varint_elements(field: Field<'_>) -> usize {
    match field {
        Field::Varint => 1,
        Field::Bytes(packed) => packed.iter().filter(|&&b| b < 0x80).count(),
        Field::Fixed => 0,
    }
}

/// A base-128 varint (at most 10 bytes), advancing `buf` past it.
#[inline]
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        // The 10th byte holds only bit 63: anything more overflows 64 bits, which prost
        // refuses ("invalid varint") rather than truncating.
        if shift == 63 && byte > 1 {
            return None;
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_varint_past_64_bits_is_refused_as_prost_refuses_it() {
        // u64::MAX: nine 0xff bytes and a 10th byte of 1.
        let mut max: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(varint(&mut max), Some(u64::MAX));
        assert!(max.is_empty());
        for tenth in [0x02u8, 0x7f] {
            let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, tenth];
            assert_eq!(varint(&mut &bytes[..]), None, "10th byte {tenth:#x}");
        }
        // Eleven bytes never end a varint.
        assert_eq!(varint(&mut &[0x80u8; 11][..]), None);
    }
}
