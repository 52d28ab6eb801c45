//! Parser: precedence, pipes, literals, directives, positioned errors, and two properties
//! (arbitrary text never panics; a printed tree re-parses equal).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use query::ast::{BinOp, Call, Constant, Directive, Expr, Query, UnOp};
use query::parse;

fn expr(text: &str) -> Expr {
    parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}")).expr
}

fn printed(text: &str) -> String {
    expr(text).to_string()
}

/// `text` parses to the same tree as `grouped` (written with explicit parentheses) and prints as
/// `printed` (the fewest parentheses).
fn same(text: &str, grouped: &str, printed_as: &str) {
    assert_eq!(expr(text), expr(grouped), "{text} vs {grouped}");
    assert_eq!(printed(text), printed_as, "{text}");
}

#[test]
fn precedence_follows_caql() {
    same("1 + 2 * 3", "1 + (2 * 3)", "1 + 2 * 3");
    same("(1 + 2) * 3", "(1 + 2) * 3", "(1 + 2) * 3");
    same("1 - 2 - 3", "(1 - 2) - 3", "1 - 2 - 3");
    same("1 - (2 - 3)", "1 - (2 - 3)", "1 - (2 - 3)");
    same("2 ^ 3 ^ 2", "2 ^ (3 ^ 2)", "2 ^ 3 ^ 2");
    same("(2 ^ 3) ^ 2", "(2 ^ 3) ^ 2", "(2 ^ 3) ^ 2");
    same("-2 ^ 2", "-(2 ^ 2)", "-2 ^ 2");
    same("(-2) ^ 2", "(-2) ^ 2", "(-2) ^ 2");
    same("-2 * 3", "(-2) * 3", "-2 * 3");
    same("2 * -3", "2 * (-3)", "2 * -3");
    same(
        "1 + 2 > 3 and 4 < 5 or 0",
        "(((1 + 2) > 3) and (4 < 5)) or 0",
        "1 + 2 > 3 and 4 < 5 or 0",
    );
    same(
        "not 1 == 2 and 3",
        "(not (1 == 2)) and 3",
        "not 1 == 2 and 3",
    );
    same("(not 1) + 2", "(not 1) + 2", "(not 1) + 2");
    same("1 + not 2", "1 + (not 2)", "1 + not 2");
    same("(1 + not 2) > 3", "(1 + (not 2)) > 3", "1 + (not 2) > 3");
    same("7 % 4 / 2", "(7 % 4) / 2", "7 % 4 / 2");
    same("1 >= 2 != 0", "(1 >= 2) != 0", "1 >= 2 != 0");
    assert_ne!(expr("1 + 2 * 3"), expr("(1 + 2) * 3"));
    assert_ne!(expr("-2 ^ 2"), expr("(-2) ^ 2"));
    // A long chain prints without nesting, so it re-parses within the depth bound.
    let chain = vec!["1"; 300].join(" + ");
    assert_eq!(printed(&chain), chain);
}

#[test]
fn pipes_are_sources() {
    let a = expr("find:histogram(\"x\") | histogram:percentile(99) | integrate");
    let b = expr("integrate{histogram:percentile(99){find:histogram(\"x\")}}");
    assert_eq!(a, b);
    // A pipe appends to the sources already given.
    assert_eq!(
        printed("find(\"a\") | stats:sum{find(\"b\")}"),
        "stats:sum{find(\"b\"), find(\"a\")}"
    );
    // The pipe binds loosest: the whole sum is piped.
    assert_eq!(
        printed("1 + find(\"a\") | fill(0)"),
        "fill(0){1 + find(\"a\")}"
    );
}

#[test]
fn calls_take_args_kwargs_and_sources() {
    let Expr::Call(c) = expr("forecasting:holt_winters(0.5, 0.1, 0.2, period=1d){find('db')}")
    else {
        panic!("not a call");
    };
    assert_eq!(c.name, "forecasting:holt_winters");
    assert_eq!(
        c.args,
        vec![Expr::Number(0.5), Expr::Number(0.1), Expr::Number(0.2)]
    );
    assert_eq!(
        c.kwargs,
        vec![("period".to_string(), Expr::Duration(86_400.0))]
    );
    assert_eq!(c.sources.len(), 1);
    assert_eq!(expr("fill:forward"), expr("fill:forward()"));
}

#[test]
fn literals() {
    assert_eq!(expr("5m"), Expr::Duration(300.0));
    assert_eq!(expr("1d 6h"), Expr::Duration(86_400.0 + 6.0 * 3600.0));
    assert_eq!(expr("1h 30m 15s"), Expr::Duration(5415.0));
    assert_eq!(expr("250ms"), Expr::Duration(0.25));
    assert_eq!(expr("1.5e3"), Expr::Number(1500.0));
    assert_eq!(expr(".25"), Expr::Number(0.25));
    assert_eq!(expr("'a\\'b'"), Expr::Str("a'b".into()));
    assert_eq!(expr("\"tab\\there\""), Expr::Str("tab\there".into()));
    assert_eq!(expr("VIEW_RANGE"), Expr::Constant(Constant::ViewRange));
    assert_eq!(expr("VIEW_PERIOD"), Expr::Constant(Constant::ViewPeriod));
    // A duration followed by a number without a unit: the number is the next token.
    assert!(parse("1d 6").is_err());
}

#[test]
fn directives_and_comments() {
    let q = parse("#min_period=300\n  #lang=\"caql\"\nfind(\"a\") // trailing\n// whole line\n")
        .unwrap();
    assert_eq!(
        q.directives,
        vec![
            Directive {
                name: "min_period".into(),
                value: Expr::Number(300.0)
            },
            Directive {
                name: "lang".into(),
                value: Expr::Str("caql".into())
            },
        ]
    );
    let e = parse("find(\"a\") #min_period=3").unwrap_err();
    assert_eq!(e.pos, 10);
    assert!(e.expected.contains("start of a line"), "{e}");
    assert!(parse("#novalue\n1")
        .unwrap_err()
        .expected
        .contains("#name=value"));
}

#[test]
fn errors_name_position_and_expectation() {
    let e = parse("find(\"a\" | ").unwrap_err();
    assert_eq!((e.pos, e.line, e.column), (11, 1, 12));
    assert!(e.expected.contains("function name"), "{e}");
    let e = parse("histogram:percentile(99").unwrap_err();
    assert_eq!(e.pos, 23);
    assert!(e.expected.contains("`)`"), "{e}");
    assert_eq!(e.found, "end of query");
    let e = parse("find(\"a\")\n  * ) ").unwrap_err();
    assert_eq!((e.line, e.column), (2, 5));
    let e = parse("5mx").unwrap_err();
    assert_eq!(e.pos, 1);
    assert!(e.expected.contains("duration unit"), "{e}");
    let e = parse("1e400").unwrap_err();
    assert!(e.expected.contains("finite"), "{e}");
    let e = parse("\"open").unwrap_err();
    assert!(e.expected.contains("closing quote"), "{e}");
    let e = parse("f(a=1, 2)").unwrap_err();
    assert!(e.expected.contains("positional"), "{e}");
    let e = parse("1 2").unwrap_err();
    assert_eq!(e.pos, 2);
    assert!(parse("").unwrap_err().expected.contains("expression"));
    assert!(parse("a @ b").unwrap_err().found.contains('@'));
}

#[test]
fn depth_and_size_are_bounded() {
    let deep = format!("{}1{}", "(".repeat(1_000), ")".repeat(1_000));
    let e = parse(&deep).unwrap_err();
    assert!(e.expected.contains("nesting"), "{e}");
    let big = "1+".repeat(40_000);
    assert!(parse(&big).is_err());
    let minus = "-".repeat(5_000) + "1";
    assert!(parse(&minus).is_err());
}

fn name() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,6}(:[a-z_][a-z0-9_]{0,6}){0,2}".prop_filter("keywords are operators", |s| {
        !matches!(s.as_str(), "and" | "or" | "not")
    })
}

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        0.0..1e6f64,
        (0u32..1000).prop_map(f64::from),
        prop::num::f64::POSITIVE
    ]
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        number().prop_map(Expr::Number),
        number().prop_map(Expr::Duration),
        ".{0,8}".prop_map(Expr::Str),
        Just(Expr::Constant(Constant::ViewRange)),
        Just(Expr::Constant(Constant::ViewPeriod)),
        name().prop_map(|n| Expr::Call(Call {
            name: n,
            args: vec![],
            kwargs: vec![],
            sources: vec![]
        })),
    ];
    leaf.prop_recursive(5, 48, 4, |inner| {
        let ops = prop_oneof![
            Just(BinOp::Add),
            Just(BinOp::Sub),
            Just(BinOp::Mul),
            Just(BinOp::Div),
            Just(BinOp::Mod),
            Just(BinOp::Pow),
            Just(BinOp::Eq),
            Just(BinOp::Ne),
            Just(BinOp::Gt),
            Just(BinOp::Ge),
            Just(BinOp::Lt),
            Just(BinOp::Le),
            Just(BinOp::And),
            Just(BinOp::Or),
        ];
        prop_oneof![
            (ops, inner.clone(), inner.clone()).prop_map(|(op, a, b)| Expr::Binary {
                op,
                lhs: Box::new(a),
                rhs: Box::new(b)
            }),
            (prop_oneof![Just(UnOp::Neg), Just(UnOp::Not)], inner.clone()).prop_map(|(op, e)| {
                Expr::Unary {
                    op,
                    expr: Box::new(e),
                }
            }),
            (
                name(),
                prop::collection::vec(inner.clone(), 0..3),
                prop::collection::vec((name(), inner.clone()), 0..2),
                prop::collection::vec(inner, 0..3),
            )
                .prop_map(|(name, args, kwargs, sources)| Expr::Call(Call {
                    name,
                    args,
                    kwargs,
                    sources
                })),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,80}") {
        let _ = parse(&text);
    }

    #[test]
    fn arbitrary_caql_like_text_never_panics(
        parts in prop::collection::vec(
            prop_oneof![
                Just("find"), Just("("), Just(")"), Just("{"), Just("}"), Just("|"), Just(","),
                Just("="), Just("5m"), Just("1d 6h"), Just("\"x\""), Just("+"), Just("-"),
                Just("^"), Just("not"), Just("and"), Just("#a=1\n"), Just("\n"), Just(" "),
                Just("histogram:count"), Just("1.5"), Just("'"), Just("//"), Just("VIEW_RANGE"),
            ],
            0..40,
        )
    ) {
        let text: String = parts.concat();
        let _ = parse(&text);
    }

    #[test]
    fn printed_tree_reparses_equal(e in arb_expr(), dname in "[a-z_]{1,8}", dval in number()) {
        let q = Query {
            directives: vec![Directive { name: dname, value: Expr::Number(dval) }],
            expr: e,
        };
        let text = q.to_string();
        let again = parse(&text).map_err(|err| TestCaseError::fail(format!("{text:?}: {err}")))?;
        prop_assert_eq!(q, again, "{}", text);
    }
}
