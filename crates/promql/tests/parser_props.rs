//! Parser properties: arbitrary text (and soups of PromQL tokens) never panic; a random
//! well-typed tree prints to text that parses back to the same tree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuzz_checks;

use promql::ast::{
    AggOp, At, BinOp, Card, Expr, Func, Grouping, MatchOp, Matcher, Matching, Selector,
};
use proptest::prelude::*;

const NAMES: &[&str] = &[
    "up",
    "http_requests_total",
    "a:b",
    "disk.used",
    "sum",
    "by",
    "nan",
];
const LABELS: &[&str] = &[
    "job",
    "le",
    "U__host_2e_name",
    "on",
    "bool",
    "_x",
    "host.name",
    "a b",
    "é",
];
const REGEXES: &[&str] = &["a.*", "(x|y)+", "", "[0-9]{2}", "\\.", "é+"];

fn selector() -> impl Strategy<Value = Selector> {
    let matcher = (
        prop::sample::select(LABELS),
        0..4u8,
        any::<String>(),
        prop::sample::select(REGEXES),
    )
        .prop_map(|(label, op, text, re)| {
            let (op, value) = match op {
                0 => (MatchOp::Equal, text),
                1 => (MatchOp::NotEqual, text),
                2 => (MatchOp::Regex, re.to_string()),
                _ => (MatchOp::NotRegex, re.to_string()),
            };
            Matcher {
                label: label.to_string(),
                op,
                value,
            }
        });
    let at = prop_oneof![
        Just(None),
        Just(Some(At::Start)),
        Just(Some(At::End)),
        (-1_000_000_000_000i64..1_000_000_000_000).prop_map(|ms| Some(At::TimeMs(ms))),
    ];
    (
        prop::sample::select(NAMES),
        prop::collection::vec(matcher, 0..3),
        prop_oneof![Just(0i64), -100_000_000i64..100_000_000],
        at,
    )
        .prop_map(|(name, matchers, offset_ms, at)| Selector {
            name: Some(name.to_string()),
            matchers,
            offset_ms,
            at,
        })
}

fn labels() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop::sample::select(LABELS).prop_map(String::from), 0..3)
}

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("NaN never compares equal", |v| !v.is_nan()),
        Just(0.5),
        Just(-3.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
    ]
}

fn range_selector() -> impl Strategy<Value = Expr> {
    (selector(), 1i64..1_000_000_000)
        .prop_map(|(selector, range_ms)| Expr::Range { selector, range_ms })
}

/// Scalar-typed trees.
fn scalar(depth: u32) -> BoxedStrategy<Expr> {
    let leaf = prop_oneof![
        number().prop_map(Expr::Number),
        Just(Expr::Call {
            func: Func::Time,
            args: vec![]
        }),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        2 => leaf,
        1 => (scalar(depth - 1), scalar(depth - 1), 0..11u8, any::<bool>()).prop_map(
            |(l, r, op, flag)| {
                let op = [
                    BinOp::Add,
                    BinOp::Sub,
                    BinOp::Mul,
                    BinOp::Div,
                    BinOp::Mod,
                    BinOp::Pow,
                    BinOp::Eq,
                    BinOp::Gt,
                    BinOp::Le,
                    BinOp::Ne,
                    BinOp::Atan2,
                ][op as usize];
                Expr::Binary {
                    op,
                    lhs: Box::new(l),
                    rhs: Box::new(r),
                    // Scalar comparisons need bool.
                    return_bool: op.is_comparison() || (flag && op.is_comparison()),
                    matching: None,
                }
            }
        ),
        1 => vector(depth - 1).prop_map(|v| Expr::Call {
            func: Func::Scalar,
            args: vec![v]
        }),
        1 => scalar(depth - 1).prop_filter_map("the parser folds -number", |e| match e {
            Expr::Number(_) => None,
            e => Some(Expr::Neg(Box::new(e))),
        }),
    ]
    .boxed()
}

/// A subquery of a vector tree, with or without a step, offset and `@`.
fn subquery(depth: u32) -> BoxedStrategy<Expr> {
    let at = prop_oneof![
        Just(None),
        Just(Some(At::End)),
        (-1_000_000_000i64..1_000_000_000).prop_map(|ms| Some(At::TimeMs(ms))),
    ];
    (
        vector(depth),
        1i64..100_000_000,
        prop_oneof![Just(0i64), 1i64..10_000_000],
        prop_oneof![Just(0i64), -100_000_000i64..100_000_000],
        at,
    )
        .prop_map(|(e, range_ms, step_ms, offset_ms, at)| Expr::Subquery {
            expr: Box::new(e),
            range_ms,
            step_ms,
            offset_ms,
            at,
        })
        .boxed()
}

/// Instant-vector-typed trees.
fn vector(depth: u32) -> BoxedStrategy<Expr> {
    let leaf = selector().prop_map(Expr::Selector);
    if depth == 0 {
        return leaf.boxed();
    }
    let range_funcs = prop::sample::select(vec![
        Func::Rate,
        Func::Increase,
        Func::Irate,
        Func::Delta,
        Func::Idelta,
        Func::AvgOverTime,
        Func::MinOverTime,
        Func::MaxOverTime,
        Func::SumOverTime,
        Func::CountOverTime,
        Func::LastOverTime,
        Func::StddevOverTime,
        Func::StdvarOverTime,
        Func::Changes,
        Func::Resets,
        Func::Deriv,
    ]);
    let vector_funcs = prop::sample::select(vec![
        Func::Sqrt,
        Func::Atanh,
        Func::Sgn,
        Func::Sort,
        Func::Hour,
        Func::HistogramStddev,
        Func::Abs,
        Func::Ceil,
        Func::Floor,
        Func::Timestamp,
        Func::HistogramCount,
        Func::HistogramSum,
        Func::HistogramAvg,
        Func::Absent,
    ]);
    let d = depth - 1;
    prop_oneof![
        3 => leaf,
        1 => (range_funcs.clone(), range_selector()).prop_map(|(func, m)| Expr::Call { func, args: vec![m] }),
        1 => (range_funcs, subquery(d)).prop_map(|(func, m)| Expr::Call { func, args: vec![m] }),
        1 => (scalar(d), range_selector()).prop_map(|(q, m)| Expr::Call {
            func: Func::QuantileOverTime,
            args: vec![q, m]
        }),
        1 => (vector_funcs, vector(d)).prop_map(|(func, v)| Expr::Call { func, args: vec![v] }),
        1 => (scalar(d), vector(d)).prop_map(|(q, v)| Expr::Call {
            func: Func::HistogramQuantile,
            args: vec![q, v]
        }),
        1 => (scalar(d), scalar(d), vector(d)).prop_map(|(a, b, v)| Expr::Call {
            func: Func::HistogramFraction,
            args: vec![a, b, v]
        }),
        1 => (vector(d), scalar(d), scalar(d)).prop_map(|(v, a, b)| Expr::Call {
            func: Func::Clamp,
            args: vec![v, a, b]
        }),
        1 => (vector(d), prop::option::of(scalar(d))).prop_map(|(v, to)| Expr::Call {
            func: Func::Round,
            args: std::iter::once(v).chain(to).collect()
        }),
        1 => scalar(d).prop_map(|s| Expr::Call { func: Func::Vector, args: vec![s] }),
        1 => (vector(d), any::<String>()).prop_map(|(v, repl)| Expr::Call {
            func: Func::LabelReplace,
            args: vec![
                v,
                Expr::String("dst".into()),
                Expr::String(repl),
                Expr::String("src".into()),
                Expr::String("(.*)".into()),
            ]
        }),
        2 => (
            // The experimental aggregations are refused by default (as in Prometheus).
            prop::sample::select(
                AggOp::ALL.into_iter().filter(|op| !op.is_experimental()).collect::<Vec<_>>()
            ),
            prop::option::of((any::<bool>(), labels())),
            scalar(d),
            vector(d)
        )
            .prop_map(|(op, grouping, param, v)| Expr::Aggregate {
                op,
                grouping: grouping.map(|(without, labels)| Grouping { without, labels }),
                param: op.has_param().then(|| match op {
                    AggOp::CountValues => Box::new(Expr::String("value.label".into())),
                    _ => Box::new(param),
                }),
                expr: Box::new(v),
            }),
        2 => (vector(d), vector(d), 0..16u8, any::<bool>(), prop::option::of((any::<bool>(), labels(), 0..3u8, labels())))
            .prop_map(|(l, r, op, flag, matching)| {
                let op = [
                    BinOp::Add,
                    BinOp::Sub,
                    BinOp::Mul,
                    BinOp::Div,
                    BinOp::Mod,
                    BinOp::Pow,
                    BinOp::Eq,
                    BinOp::Ne,
                    BinOp::Gt,
                    BinOp::Lt,
                    BinOp::Ge,
                    BinOp::Le,
                    BinOp::And,
                    BinOp::Or,
                    BinOp::Unless,
                    BinOp::Atan2,
                ][op as usize];
                Expr::Binary {
                    op,
                    lhs: Box::new(l),
                    rhs: Box::new(r),
                    return_bool: flag && op.is_comparison(),
                    matching: matching.map(|(on, labels, card, include)| Matching {
                        on,
                        labels,
                        card: match card {
                            _ if op.is_set() => Card::OneToOne,
                            0 => Card::OneToOne,
                            1 => Card::ManyToOne(include),
                            _ => Card::OneToMany(include),
                        },
                    }),
                }
            }),
        1 => (vector(d), scalar(d), any::<bool>(), 0..6u8).prop_map(|(v, s, swap, op)| {
            let op = [BinOp::Add, BinOp::Mul, BinOp::Pow, BinOp::Gt, BinOp::Eq, BinOp::Sub][op as usize];
            let (lhs, rhs) = if swap { (s, v) } else { (v, s) };
            Expr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
                return_bool: swap && op.is_comparison(),
                matching: None,
            }
        }),
        1 => vector(d).prop_map(|v| Expr::Neg(Box::new(v))),
    ]
    .boxed()
}

/// Text built from PromQL's own tokens, to reach deep into the parser.
fn token_soup() -> impl Strategy<Value = String> {
    let tokens = prop::sample::select(vec![
        "sum",
        "rate",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        "5m",
        "1h30m",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "bool",
        "offset",
        "@",
        "start()",
        ",",
        "up",
        "job",
        "=",
        "!=",
        "=~",
        "!~",
        "\"a\"",
        "'b'",
        "`c`",
        "+",
        "-",
        "*",
        "/",
        "%",
        "^",
        "==",
        ">",
        "<=",
        "and",
        "or",
        "unless",
        "1",
        "2.5e3",
        "0x1f",
        "Inf",
        "NaN",
        "histogram_quantile",
        "topk",
        "label_replace",
        ":",
        "#",
        "\n",
        "é",
        "\"\\u00e9\"",
        "_",
        "-1",
    ]);
    prop::collection::vec(tokens, 0..40).prop_map(|t| t.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        fuzz_checks::parse(text.as_bytes());
    }

    #[test]
    fn token_soups_never_panic(text in token_soup()) {
        fuzz_checks::parse(text.as_bytes());
    }

    #[test]
    fn printed_trees_parse_back_equal(e in vector(3)) {
        let printed = e.to_string();
        let parsed = promql::parse(&printed);
        prop_assert!(parsed.is_ok(), "{printed:?}: {:?}", parsed.err());
        prop_assert_eq!(parsed.unwrap(), e, "{}", printed);
    }

    #[test]
    fn printed_scalar_trees_parse_back_equal(e in scalar(3)) {
        let printed = e.to_string();
        let parsed = promql::parse(&printed);
        prop_assert!(parsed.is_ok(), "{printed:?}: {:?}", parsed.err());
        prop_assert_eq!(parsed.unwrap(), e, "{}", printed);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!("{}x{}", "(".repeat(1_000), ")".repeat(1_000));
    let e = promql::parse(&text).unwrap_err();
    assert!(e.message.contains("nesting deeper"), "{e}");
    let text = "-".repeat(100_000) + "x";
    assert!(promql::parse(&text).is_err());
}
