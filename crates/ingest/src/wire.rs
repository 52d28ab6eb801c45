//! A minimal protobuf wire walker: enough to count repeated fields before prost decodes a
//! message, so a body of empty sub-messages (2 bytes each on the wire, a struct of tens of bytes
//! each once decoded) is refused before it is allocated.

use crate::batch::Reason;

/// Calls `f` with the number and payload of every length-delimited field of one protobuf
/// message, skipping the other wire types.
/// A malformed message is a `Reason::Decode` naming `what`.
pub(crate) fn walk<'a>(
    mut buf: &'a [u8],
    what: &'static str,
    f: &mut dyn FnMut(u64, &'a [u8]) -> Result<(), Reason>,
) -> Result<(), Reason> {
    let malformed = |detail: String| Reason::Decode { what, detail };
    let truncated = || malformed("truncated field".to_owned());
    while !buf.is_empty() {
        let key = varint(&mut buf).ok_or_else(truncated)?;
        let skip = match key & 7 {
            0 => {
                varint(&mut buf).ok_or_else(truncated)?;
                0
            }
            1 => 8,
            2 => {
                let len = varint(&mut buf).ok_or_else(truncated)?;
                let len = usize::try_from(len).map_err(|_| truncated())?;
                let payload = buf.get(..len).ok_or_else(truncated)?;
                f(key >> 3, payload)?;
                len
            }
            5 => 4,
            wire => return Err(malformed(format!("unsupported wire type {wire}"))),
        };
        buf = buf.get(skip..).ok_or_else(truncated)?;
    }
    Ok(())
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
