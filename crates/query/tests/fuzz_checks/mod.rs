//! The fuzz target's check, shared by `fuzz/fuzz_targets/parse.rs` (nightly, libFuzzer) and
//! `tests/fuzz_corpus.rs` (stable, replaying the checked-in corpus).

/// Any bytes: the parser must not panic; an accepted query must print and re-parse to the same
/// tree, and a rejected one must name a position inside the text (or just past its end).
pub fn parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match query::parse(text) {
        Ok(q) => {
            let printed = q.to_string();
            let again = query::parse(&printed)
                .unwrap_or_else(|e| panic!("printed form {printed:?} does not parse: {e}"));
            assert_eq!(q, again, "printed form {printed:?} parses to another tree");
        }
        Err(e) => {
            assert!(
                e.pos <= text.len(),
                "error position {} past the end {}",
                e.pos,
                text.len()
            );
            assert!(
                !e.expected.is_empty(),
                "an error must say what was expected"
            );
        }
    }
}
