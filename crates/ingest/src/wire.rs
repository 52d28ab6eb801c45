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
    mut buf: &'a [u8],
    what: &'static str,
    f: &mut dyn FnMut(u64, Field<'a>) -> Result<(), Reason>,
) -> Result<(), Reason> {
    let malformed = |detail: String| Reason::Decode { what, detail };
    let truncated = || malformed("truncated field".to_owned());
    while !buf.is_empty() {
        let key = varint(&mut buf).ok_or_else(truncated)?;
        let (field, skip) = match key & 7 {
            0 => {
                varint(&mut buf).ok_or_else(truncated)?;
                (Field::Varint, 0)
            }
            1 => (Field::Fixed, 8),
            2 => {
                let len = varint(&mut buf).ok_or_else(truncated)?;
                let len = usize::try_from(len).map_err(|_| truncated())?;
                (Field::Bytes(buf.get(..len).ok_or_else(truncated)?), len)
            }
            5 => (Field::Fixed, 4),
            wire => return Err(malformed(format!("unsupported wire type {wire}"))),
        };
        buf = buf.get(skip..).ok_or_else(truncated)?;
        f(key >> 3, field)?;
    }
    Ok(())
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
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}
