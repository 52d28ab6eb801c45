//! One parser and pairing per protocol, and what they share.

pub mod cassandra;
pub mod http;
pub mod kafka;
pub mod mysql;
pub mod postgres;
pub mod redis;

/// Bytes of a message's start a parser reads (the rest of a long message is skipped).
pub const PEEK: usize = 512;

/// The first SQL keyword of a statement, upper case, from a fixed list (`OTHER` otherwise), so
/// that the statement kind never adds a tag value of its own.
pub fn sql_kind(text: &[u8]) -> &'static str {
    const KINDS: &[&str] = &[
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
        "WITH",
        "BEGIN",
        "START",
        "COMMIT",
        "ROLLBACK",
        "CREATE",
        "DROP",
        "ALTER",
        "TRUNCATE",
        "SET",
        "SHOW",
        "EXPLAIN",
        "COPY",
        "CALL",
        "DO",
        "PREPARE",
        "EXECUTE",
        "DEALLOCATE",
        "LISTEN",
        "NOTIFY",
        "VACUUM",
        "ANALYZE",
        "GRANT",
        "REVOKE",
        "SAVEPOINT",
        "RELEASE",
        "LOCK",
        "REPLACE",
        "MERGE",
        "FETCH",
        "DECLARE",
        "CLOSE",
        "DISCARD",
        "RESET",
        "USE",
        "DESCRIBE",
        "DESC",
        "VALUES",
        "TABLE",
        "UNLISTEN",
        "REFRESH",
        "COMMENT",
        "CLUSTER",
        "REINDEX",
        "CHECKPOINT",
        "LOAD",
        "HANDLER",
        "XA",
        "FLUSH",
        "KILL",
        "OPTIMIZE",
        "REPAIR",
        "CHECKSUM",
        "INSTALL",
        "UNINSTALL",
        "RENAME",
    ];
    let word = first_word(text);
    let mut up = [0u8; 12];
    if word.is_empty() || word.len() > up.len() {
        return "OTHER";
    }
    for (d, s) in up.iter_mut().zip(word) {
        *d = s.to_ascii_uppercase();
    }
    let up = &up[..word.len()];
    KINDS
        .iter()
        .find(|k| k.as_bytes() == up)
        .copied()
        .unwrap_or("OTHER")
}

/// The first run of letters after blanks, `(`, `--` line comments and `/* */` comments.
fn first_word(mut t: &[u8]) -> &[u8] {
    loop {
        match t {
            [b' ' | b'\t' | b'\r' | b'\n' | b'(', rest @ ..] => t = rest,
            [b'-', b'-', rest @ ..] => {
                let nl = rest
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(rest.len(), |p| p + 1);
                t = &rest[nl..];
            }
            [b'/', b'*', rest @ ..] => {
                let end = rest
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(rest.len(), |p| p + 2);
                t = &rest[end..];
            }
            _ => break,
        }
    }
    let n = t.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    &t[..n]
}

/// Position of the first `\r\n` in `buf`.
pub fn crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// Positions where a line starts: 0 and after every `\n`.
pub fn line_starts(buf: &[u8]) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(
        buf.iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .map(|(i, _)| i + 1),
    )
}

pub fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_kinds() {
        assert_eq!(sql_kind(b"  select 1"), "SELECT");
        assert_eq!(sql_kind(b"/* hi */ -- x\n(SELECT 1)"), "SELECT");
        assert_eq!(sql_kind(b"insert into t values (1)"), "INSERT");
        assert_eq!(sql_kind(b"frobnicate"), "OTHER");
        assert_eq!(sql_kind(b""), "OTHER");
        assert_eq!(sql_kind(b"/* unterminated"), "OTHER");
    }
}
