//! The parser's fuzz check, shared by the cargo-fuzz target (`fuzz/fuzz_targets/parse.rs`) and
//! the corpus replay in `tests/fuzz_corpus.rs`.

/// Any bytes: as text (lossy UTF-8) the parser must return without panicking; an accepted
/// query must print to text that parses back to the same tree (compared through its printed
/// form, so NaN literals compare equal), an error must point inside the input.
pub fn parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match promql::parse(&text) {
        Ok(expr) => {
            let printed = expr.to_string();
            let again = promql::parse(&printed)
                .unwrap_or_else(|e| panic!("printed {printed:?} of {text:?} fails: {e}"));
            assert_eq!(
                again.to_string(),
                printed,
                "re-parse of {text:?} changed the tree"
            );
            if !printed.contains("NaN") {
                assert_eq!(again, expr, "re-parse of {printed:?} changed the tree");
            }
        }
        Err(e) => {
            assert!(
                e.pos <= text.len(),
                "error position {} past the input {text:?}",
                e.pos
            );
            assert!(!e.message.is_empty());
        }
    }
}
