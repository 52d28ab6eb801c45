//! The tag query language (IRONdb syntax) and its evaluation against the series index.
//!
//! ```text
//! query   := node
//! node    := "and(" node ("," node)* ")" | "or(" node ("," node)* ")" | "not(" node ")" | term
//! term    := pattern ":" pattern
//! pattern := b"<base64>"            exact bytes
//!          | /<regex>/              unanchored regex (`\/` for a slash inside)
//!          | literal with `*`       glob: `*` matches any bytes
//!          | literal                exact
//! ```
//! Literals use the stream-tag charset (values also `:` `=`); a value that starts with `/` or
//! holds bytes outside the charset must be written `b"<base64>"`. Special categories (exact,
//! literal only): `__name:<pattern>` (the metric name), `__type:numeric|text|histogram`, and
//! `__activity:<start_ms>-<end_ms>` (series with a sample in `[start, end)` by their activity
//! range). Globs and regexes on the category match stream-tag categories only, never `__name`.
//! Those three category names are reserved in queries (also when written in base64), so a stream
//! tag that uses one cannot be searched by it. Timestamps are milliseconds, as everywhere in
//! Strata.
//!
//! Evaluation uses posting lists for exact terms, scans categories/values/names only where a
//! glob or regex forces it (a glob's literal prefix narrows the scan), keeps `not` as a
//! complement instead of materialising it, and charges every visited entry and id against a
//! `work_max` budget, failing with [`QueryError::WorkLimit`] rather than running unbounded.
//! Evaluation holds the index's read lock, so the budget also bounds how long it delays the
//! addition of new series.

use std::collections::BTreeMap;
use std::fmt;

use regex::bytes::Regex;

use crate::error::QueryError;
use crate::index::{Snapshot, View};
use crate::key::{is_literal, is_literal_byte, Part};
use crate::series::{Kind, SeriesId};

pub use crate::error::{QUERY_DEPTH_MAX, QUERY_NODES_MAX, QUERY_SIZE_MAX};
/// Largest compiled regex, in bytes (the `regex` crate's size limit).
pub const REGEX_SIZE_MAX: usize = 1 << 20;
/// Default evaluation budget: visited index entries plus series ids.
pub const WORK_MAX_DEFAULT: u64 = 10_000_000;

/// How one side of a term matches bytes.
#[derive(Clone, Debug)]
pub enum Pattern {
    Exact(Vec<u8>),
    /// Bytes with `*` wildcards.
    Glob(Vec<u8>),
    Regex(Regex),
}

impl Pattern {
    pub fn matches(&self, bytes: &[u8]) -> bool {
        match self {
            Pattern::Exact(e) => e == bytes,
            Pattern::Glob(g) => glob_match(g, bytes),
            Pattern::Regex(r) => r.is_match(bytes),
        }
    }

    fn write(&self, out: &mut String, part: Part) {
        match self {
            Pattern::Exact(e) if is_literal(e, part) && !e.starts_with(b"/") => {
                out.extend(e.iter().map(|&b| char::from(b)));
            }
            Pattern::Exact(e) => {
                out.push_str("b\"");
                out.push_str(&base64_simd::STANDARD.encode_to_string(e));
                out.push('"');
            }
            Pattern::Glob(g) => out.extend(g.iter().map(|&b| char::from(b))),
            Pattern::Regex(r) => {
                out.push('/');
                out.push_str(&r.as_str().replace('/', "\\/"));
                out.push('/');
            }
        }
    }
}

/// `*` matches any run of bytes; everything else matches itself. Greedy with one backtrack
/// point, so linear in practice and O(n·m) at worst.
pub fn glob_match(glob: &[u8], text: &[u8]) -> bool {
    let (mut g, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if g < glob.len() && glob[g] == b'*' {
            star = Some((g, t));
            g += 1;
        } else if g < glob.len() && glob[g] == text[t] {
            g += 1;
            t += 1;
        } else if let Some((sg, st)) = star {
            g = sg + 1;
            t = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    glob[g..].iter().all(|&b| b == b'*')
}

/// One leaf of a query.
#[derive(Clone, Debug)]
pub enum Term {
    Tag {
        category: Pattern,
        value: Pattern,
    },
    Name(Pattern),
    Type(Kind),
    /// Series whose activity range meets `[start_ms, end_ms)`.
    Activity {
        start_ms: i64,
        end_ms: i64,
    },
}

/// A parsed tag query.
#[derive(Clone, Debug)]
pub enum TagQuery {
    And(Vec<TagQuery>),
    Or(Vec<TagQuery>),
    Not(Box<TagQuery>),
    Term(Term),
}

impl TagQuery {
    pub fn parse(text: &str) -> Result<TagQuery, QueryError> {
        if text.len() > QUERY_SIZE_MAX {
            return Err(QueryError::TooLong {
                size_bytes: text.len(),
            });
        }
        let mut parser = Parser {
            text: text.as_bytes(),
            pos: 0,
            nodes: 0,
        };
        let query = parser.node(0)?;
        if parser.pos != text.len() {
            return Err(parser.expected("end of query"));
        }
        Ok(query)
    }
}

impl fmt::Display for TagQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_query(self, &mut out);
        f.write_str(&out)
    }
}

fn write_query(q: &TagQuery, out: &mut String) {
    let (op, children): (&str, &[TagQuery]) = match q {
        TagQuery::And(c) => ("and", c),
        TagQuery::Or(c) => ("or", c),
        TagQuery::Not(c) => ("not", std::slice::from_ref(c.as_ref())),
        TagQuery::Term(t) => return write_term(t, out),
    };
    out.push_str(op);
    out.push('(');
    for (i, c) in children.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_query(c, out);
    }
    out.push(')');
}

fn write_term(t: &Term, out: &mut String) {
    match t {
        Term::Tag { category, value } => {
            category.write(out, Part::Category);
            out.push(':');
            value.write(out, Part::Value);
        }
        Term::Name(p) => {
            out.push_str("__name:");
            p.write(out, Part::Value);
        }
        Term::Type(k) => {
            out.push_str("__type:");
            out.push_str(k.name());
        }
        Term::Activity { start_ms, end_ms } => {
            out.push_str(&format!("__activity:{start_ms}-{end_ms}"));
        }
    }
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    nodes: usize,
}

impl Parser<'_> {
    fn expected(&self, expected: &'static str) -> QueryError {
        QueryError::Syntax {
            position: self.pos,
            expected,
        }
    }

    fn rest(&self) -> &[u8] {
        &self.text[self.pos..]
    }

    fn node(&mut self, depth: usize) -> Result<TagQuery, QueryError> {
        if depth > QUERY_DEPTH_MAX {
            return Err(QueryError::TooDeep { position: self.pos });
        }
        self.nodes += 1;
        if self.nodes > QUERY_NODES_MAX {
            return Err(QueryError::TooManyNodes { position: self.pos });
        }
        for op in ["and(", "or(", "not("] {
            if self.rest().starts_with(op.as_bytes()) {
                self.pos += op.len();
                return self.operator(op, depth);
            }
        }
        Ok(TagQuery::Term(self.term()?))
    }

    fn operator(&mut self, op: &str, depth: usize) -> Result<TagQuery, QueryError> {
        let mut children = vec![self.node(depth + 1)?];
        while op != "not(" && self.rest().first() == Some(&b',') {
            self.pos += 1;
            children.push(self.node(depth + 1)?);
        }
        if self.rest().first() != Some(&b')') {
            let expected = if op == "not(" { "')'" } else { "',' or ')'" };
            return Err(self.expected(expected));
        }
        self.pos += 1;
        Ok(match op {
            "and(" => TagQuery::And(children),
            "or(" => TagQuery::Or(children),
            _ => TagQuery::Not(Box::new(children.remove(0))),
        })
    }

    fn term(&mut self) -> Result<Term, QueryError> {
        let category = self.pattern(Part::Category)?;
        if self.rest().first() != Some(&b':') {
            return Err(self.expected("':' between category and value"));
        }
        self.pos += 1;
        let value_start = self.pos;
        let value = self.pattern(Part::Value)?;
        let Pattern::Exact(special) = &category else {
            return Ok(Term::Tag { category, value });
        };
        match special.as_slice() {
            b"__name" => Ok(Term::Name(value)),
            b"__type" => special_type(&value, value_start),
            b"__activity" => special_activity(&value, value_start),
            _ => Ok(Term::Tag { category, value }),
        }
    }

    fn pattern(&mut self, part: Part) -> Result<Pattern, QueryError> {
        let start = self.pos;
        let rest = self.rest();
        if rest.starts_with(b"b\"") {
            let body = &rest[2..];
            let close = body
                .iter()
                .position(|&b| b == b'"')
                .ok_or(QueryError::Syntax {
                    position: self.text.len(),
                    expected: "'\"' closing a base64 literal",
                })?;
            let bytes = base64_simd::STANDARD
                .decode_to_vec(&body[..close])
                .map_err(|_| QueryError::Base64 { position: start })?;
            self.pos += 2 + close + 1;
            return Ok(Pattern::Exact(bytes));
        }
        if rest.first() == Some(&b'/') {
            return self.regex();
        }
        let run = rest
            .iter()
            .take_while(|&&b| b == b'*' || is_literal_byte(b, part))
            .count();
        if run == 0 {
            return Err(self.expected(match part {
                Part::Category => "a category (literal, glob, /regex/ or b\"base64\")",
                Part::Value => "a value (literal, glob, /regex/ or b\"base64\")",
            }));
        }
        let bytes = rest[..run].to_vec();
        self.pos += run;
        Ok(if bytes.contains(&b'*') {
            Pattern::Glob(bytes)
        } else {
            Pattern::Exact(bytes)
        })
    }

    fn regex(&mut self) -> Result<Pattern, QueryError> {
        let start = self.pos;
        let body = &self.text[start + 1..];
        let mut i = 0;
        while i < body.len() && body[i] != b'/' {
            i += if body[i] == b'\\' { 2 } else { 1 };
        }
        if i >= body.len() {
            return Err(QueryError::Syntax {
                position: self.text.len(),
                expected: "'/' closing a regex",
            });
        }
        let source = String::from_utf8_lossy(&body[..i]).replace("\\/", "/");
        let regex = regex::bytes::RegexBuilder::new(&source)
            .size_limit(REGEX_SIZE_MAX)
            .build()
            .map_err(|e| QueryError::Regex {
                position: start,
                message: e.to_string(),
            })?;
        self.pos = start + 1 + i + 1;
        Ok(Pattern::Regex(regex))
    }
}

fn special_type(value: &Pattern, position: usize) -> Result<Term, QueryError> {
    let kind = match value {
        Pattern::Exact(v) => Kind::ALL.into_iter().find(|k| k.name().as_bytes() == v),
        _ => None,
    };
    kind.map(Term::Type).ok_or(QueryError::Syntax {
        position,
        expected: "numeric, text or histogram after __type:",
    })
}

fn special_activity(value: &Pattern, position: usize) -> Result<Term, QueryError> {
    let expected = QueryError::Syntax {
        position,
        expected: "<start_ms>-<end_ms> after __activity:",
    };
    let Pattern::Exact(v) = value else {
        return Err(expected);
    };
    let text = std::str::from_utf8(v).map_err(|_| expected.clone())?;
    let (start, end) = text.split_once('-').ok_or(expected.clone())?;
    let parse = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    match (parse(start), parse(end)) {
        (Some(start_ms), Some(end_ms)) => Ok(Term::Activity { start_ms, end_ms }),
        _ => Err(expected),
    }
}

/// A set of series ids: the listed ones, or (complement) all visible ones except those listed.
/// Both lists ascending and unique.
enum Set {
    Pos(Vec<u32>),
    Neg(Vec<u32>),
}

struct Budget {
    used: u64,
    work_max: u64,
}

impl Budget {
    fn charge(&mut self, units: usize) -> Result<(), QueryError> {
        self.used = self.used.saturating_add(units as u64);
        if self.used > self.work_max {
            return Err(QueryError::WorkLimit {
                work_max: self.work_max,
            });
        }
        Ok(())
    }
}

impl Snapshot<'_> {
    /// The series matching `query`, ascending, or `WorkLimit` past `work_max` units of work.
    pub fn find(&self, query: &TagQuery, work_max: u64) -> Result<Vec<SeriesId>, QueryError> {
        let ids = self.with_view(|view| {
            let mut budget = Budget { used: 0, work_max };
            let set = eval(query, view, &mut budget)?;
            let ids = match set {
                Set::Pos(ids) => ids,
                Set::Neg(excluded) => {
                    budget.charge(view.series_count as usize)?;
                    difference(&(0..view.series_count).collect::<Vec<_>>(), &excluded)
                }
            };
            debug_assert!(ids.windows(2).all(|w| w[0] < w[1]));
            debug_assert!(ids.last().is_none_or(|&id| id < view.series_count));
            Ok::<_, QueryError>(ids)
        })??;
        Ok(ids.into_iter().map(SeriesId).collect())
    }
}

fn eval(q: &TagQuery, view: &View<'_>, budget: &mut Budget) -> Result<Set, QueryError> {
    match q {
        TagQuery::Term(t) => Ok(Set::Pos(eval_term(t, view, budget)?)),
        TagQuery::Not(c) => Ok(match eval(c, view, budget)? {
            Set::Pos(a) => Set::Neg(a),
            Set::Neg(a) => Set::Pos(a),
        }),
        TagQuery::And(children) | TagQuery::Or(children) => {
            let is_and = matches!(q, TagQuery::And(_));
            let mut acc: Option<Set> = None;
            for c in children {
                let s = eval(c, view, budget)?;
                acc = Some(match acc {
                    None => s,
                    Some(a) => combine(a, s, is_and, budget)?,
                });
            }
            Ok(acc.unwrap_or(Set::Pos(Vec::new())))
        }
    }
}

/// `and`/`or` of two sets without materialising complements (De Morgan on the lists).
fn combine(a: Set, b: Set, is_and: bool, budget: &mut Budget) -> Result<Set, QueryError> {
    let len = |s: &Set| match s {
        Set::Pos(v) | Set::Neg(v) => v.len(),
    };
    budget.charge(len(&a) + len(&b))?;
    Ok(match (a, b, is_and) {
        (Set::Pos(x), Set::Pos(y), true) => Set::Pos(intersect(&x, &y)),
        (Set::Pos(x), Set::Neg(y), true) | (Set::Neg(y), Set::Pos(x), true) => {
            Set::Pos(difference(&x, &y))
        }
        (Set::Neg(x), Set::Neg(y), true) => Set::Neg(union(&x, &y)),
        (Set::Pos(x), Set::Pos(y), false) => Set::Pos(union(&x, &y)),
        (Set::Pos(x), Set::Neg(y), false) | (Set::Neg(y), Set::Pos(x), false) => {
            Set::Neg(difference(&y, &x))
        }
        (Set::Neg(x), Set::Neg(y), false) => Set::Neg(intersect(&x, &y)),
    })
}

fn eval_term(t: &Term, view: &View<'_>, budget: &mut Budget) -> Result<Vec<u32>, QueryError> {
    match t {
        Term::Tag { category, value } => {
            let mut lists: Vec<&[u32]> = Vec::new();
            for_matching(&view.inner.tags, category, budget, |values, budget| {
                for_matching(values, value, budget, |postings, budget| {
                    let visible = view.visible(postings);
                    budget.charge(visible.len())?;
                    lists.push(visible);
                    Ok(())
                })
            })?;
            merge_lists(lists, budget)
        }
        Term::Name(p) => {
            let mut lists: Vec<&[u32]> = Vec::new();
            let names = &view.inner.names;
            for_matching_str(names, p, budget, |postings, budget| {
                let visible = view.visible(postings);
                budget.charge(visible.len())?;
                lists.push(visible);
                Ok(())
            })?;
            merge_lists(lists, budget)
        }
        Term::Type(kind) => {
            let ids = view.kind_postings(*kind);
            budget.charge(ids.len())?;
            Ok(ids.to_vec())
        }
        Term::Activity { start_ms, end_ms } => {
            budget.charge(view.series_count as usize)?;
            Ok((0..view.series_count)
                .filter(|&id| {
                    view.activity(id)
                        .is_some_and(|(first, last)| first < *end_ms && last >= *start_ms)
                })
                .collect())
        }
    }
}

/// Calls `f` on each entry of `map` whose key matches `p`: one lookup for an exact pattern,
/// a prefix range for a glob, a full scan for a regex. Each visited key costs one unit.
fn for_matching<'m, V>(
    map: &'m BTreeMap<Vec<u8>, V>,
    p: &Pattern,
    budget: &mut Budget,
    mut f: impl FnMut(&'m V, &mut Budget) -> Result<(), QueryError>,
) -> Result<(), QueryError> {
    let prefix: &[u8] = match p {
        Pattern::Exact(e) => {
            budget.charge(1)?;
            return map.get(e).map_or(Ok(()), |v| f(v, budget));
        }
        Pattern::Glob(g) => &g[..g.iter().position(|&b| b == b'*').unwrap_or(g.len())],
        Pattern::Regex(_) => &[],
    };
    for (k, v) in map.range(prefix.to_vec()..) {
        if !k.starts_with(prefix) {
            break;
        }
        budget.charge(1)?;
        if p.matches(k) {
            f(v, budget)?;
        }
    }
    Ok(())
}

fn for_matching_str<'m, V>(
    map: &'m BTreeMap<String, V>,
    p: &Pattern,
    budget: &mut Budget,
    mut f: impl FnMut(&'m V, &mut Budget) -> Result<(), QueryError>,
) -> Result<(), QueryError> {
    if let Pattern::Exact(e) = p {
        budget.charge(1)?;
        let v = std::str::from_utf8(e).ok().and_then(|name| map.get(name));
        return v.map_or(Ok(()), |v| f(v, budget));
    }
    for (k, v) in map {
        budget.charge(1)?;
        if p.matches(k.as_bytes()) {
            f(v, budget)?;
        }
    }
    Ok(())
}

/// The union of ascending lists.
fn merge_lists(lists: Vec<&[u32]>, budget: &mut Budget) -> Result<Vec<u32>, QueryError> {
    if let [one] = lists.as_slice() {
        return Ok(one.to_vec());
    }
    let mut all: Vec<u32> = lists.concat();
    budget.charge(all.len())?;
    all.sort_unstable();
    all.dedup();
    Ok(all)
}

fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::with_capacity(a.len() + b.len()));
    while i < a.len() || j < b.len() {
        if j == b.len() || (i < a.len() && a[i] < b[j]) {
            out.push(a[i]);
            i += 1;
        } else if i == a.len() || b[j] < a[i] {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
            j += 1;
        }
    }
    out
}

/// `a` without the ids in `b`.
fn difference(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut j = 0;
    a.iter()
        .copied()
        .filter(|&x| {
            while j < b.len() && b[j] < x {
                j += 1;
            }
            j == b.len() || b[j] != x
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::index::SeriesIndex;
    use crate::key::{StreamKey, Tag};
    use proptest::prelude::*;

    fn key(text: &str) -> StreamKey {
        StreamKey::parse(text).unwrap()
    }

    fn sample_index() -> SeriesIndex {
        let index = SeriesIndex::in_memory();
        let rows = [
            ("cpu|ST[host:web1,dc:east,role:web]", Kind::Numeric, 1000),
            ("cpu|ST[host:web2,dc:west,role:web]", Kind::Numeric, 5000),
            ("lat|ST[host:db1,dc:east,role:db]", Kind::Histogram, 9000),
            ("status|ST[host:db1,path:/var/x]", Kind::Text, 20_000),
        ];
        for (k, kind, ts) in rows {
            let id = index.get_or_create(&key(k), kind).unwrap();
            index.note_activity(&[(id, ts), (id, ts + 100)]).unwrap();
        }
        index
    }

    fn find(index: &SeriesIndex, q: &str) -> Vec<u32> {
        let query = TagQuery::parse(q).unwrap();
        let snap = index.snapshot().unwrap();
        snap.find(&query, WORK_MAX_DEFAULT)
            .unwrap()
            .into_iter()
            .map(|s| s.0)
            .collect()
    }

    /// Queries see exactly a snapshot's series, even as writers add more.
    #[test]
    fn concurrent_writers_and_readers_agree() {
        let index = Arc::new(SeriesIndex::in_memory());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let index = index.clone();
                std::thread::spawn(move || {
                    for i in 0..300 {
                        // Writers overlap on half the keys; each key gets one id.
                        let k = key(&format!("m|ST[i:{}]", (i + t * 150) % 600));
                        let id = index.get_or_create(&k, Kind::Numeric).unwrap();
                        assert_eq!(index.lookup(&k).unwrap(), Some((id, Kind::Numeric)));
                        let snap = index.snapshot().unwrap();
                        let n = snap.series_count();
                        assert_eq!(snap.cardinality().total, u64::from(n));
                        let listed: u64 = snap
                            .values(b"i", usize::MAX)
                            .unwrap()
                            .iter()
                            .map(|v| v.1)
                            .sum();
                        assert_eq!(listed, u64::from(n));
                        // Queries see exactly the snapshot's series, even as writers add more.
                        let all = TagQuery::parse("or(i:*,not(m:x))").unwrap();
                        let found = snap.find(&all, u64::MAX).unwrap();
                        assert_eq!(found.len(), n as usize);
                        assert!(found.iter().all(|id| id.0 < n));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(index.snapshot().unwrap().series_count(), 600);
    }

    #[test]
    fn examples() {
        let index = sample_index();
        assert_eq!(find(&index, "dc:east"), vec![0, 2]);
        assert_eq!(find(&index, "and(dc:east,role:web)"), vec![0]);
        assert_eq!(find(&index, "or(role:db,not(dc:*))"), vec![2, 3]);
        assert_eq!(find(&index, "and(host:web*,not(dc:west))"), vec![0]);
        assert_eq!(find(&index, "h*t:*1"), vec![0, 2, 3]);
        assert_eq!(find(&index, "/^ro/:/^(db|x)$/"), vec![2]);
        assert_eq!(find(&index, "path:b\"L3Zhci94\""), vec![3]);
        assert_eq!(find(&index, "path:/var\\/x/"), vec![3]);
        assert_eq!(find(&index, "__name:cpu"), vec![0, 1]);
        assert_eq!(find(&index, "__name:/^(lat|status)$/"), vec![2, 3]);
        assert_eq!(find(&index, "__type:histogram"), vec![2]);
        assert_eq!(find(&index, "not(__type:numeric)"), vec![2, 3]);
        assert_eq!(find(&index, "__activity:5050-9001"), vec![1, 2]);
        assert_eq!(find(&index, "__activity:0-1000"), Vec::<u32>::new());
        assert_eq!(find(&index, "*:*"), vec![0, 1, 2, 3]);
        assert_eq!(find(&index, "nope:nope"), Vec::<u32>::new());
    }

    #[test]
    fn errors_name_position_and_expectation() {
        let err = |q: &str| TagQuery::parse(q).unwrap_err();
        assert_eq!(
            err("and(a:b"),
            QueryError::Syntax {
                position: 7,
                expected: "',' or ')'"
            }
        );
        assert_eq!(
            err("not(a:b,c:d)"),
            QueryError::Syntax {
                position: 7,
                expected: "')'"
            }
        );
        assert_eq!(
            err("a"),
            QueryError::Syntax {
                position: 1,
                expected: "':' between category and value"
            }
        );
        assert!(matches!(err("a:"), QueryError::Syntax { position: 2, .. }));
        assert!(matches!(
            err("and()"),
            QueryError::Syntax { position: 4, .. }
        ));
        assert_eq!(
            err("a:b)"),
            QueryError::Syntax {
                position: 3,
                expected: "end of query"
            }
        );
        assert!(matches!(
            err("a:/(/"),
            QueryError::Regex { position: 2, .. }
        ));
        assert_eq!(
            err("a:/x"),
            QueryError::Syntax {
                position: 4,
                expected: "'/' closing a regex"
            }
        );
        assert_eq!(err("b\"!!\":x"), QueryError::Base64 { position: 0 });
        assert!(matches!(
            err("__type:gauge"),
            QueryError::Syntax { position: 7, .. }
        ));
        assert!(matches!(
            err("__activity:5-"),
            QueryError::Syntax { position: 11, .. }
        ));
        let deep = "not(".repeat(QUERY_DEPTH_MAX + 2) + "a:b" + &")".repeat(QUERY_DEPTH_MAX + 2);
        assert!(matches!(err(&deep), QueryError::TooDeep { .. }));
    }

    #[test]
    fn work_is_bounded() {
        let index = SeriesIndex::in_memory();
        for i in 0..200 {
            index
                .get_or_create(&key(&format!("m|ST[i:{i}]")), Kind::Numeric)
                .unwrap();
        }
        let snap = index.snapshot().unwrap();
        let q = TagQuery::parse("i:*").unwrap();
        assert_eq!(
            snap.find(&q, 100),
            Err(QueryError::WorkLimit { work_max: 100 })
        );
        assert_eq!(snap.find(&q, 1000).unwrap().len(), 200);
        let exact = TagQuery::parse("i:7").unwrap();
        assert_eq!(snap.find(&exact, 3).unwrap(), vec![SeriesId(7)]);
    }

    #[test]
    fn glob_matching() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"a*b*c", b"aXXbYYc"));
        assert!(!glob_match(b"a*b*c", b"aXXbYY"));
        assert!(glob_match(b"*ab", b"aab"));
        assert!(!glob_match(b"ab", b"abc"));
    }

    // The naive model: check each series' own tags, with globs through an independent regex.
    fn model_pattern(p: &Pattern, bytes: &[u8]) -> bool {
        match p {
            Pattern::Glob(g) => {
                let parts: Vec<String> = g
                    .split(|&b| b == b'*')
                    .map(|s| regex::escape(&String::from_utf8_lossy(s)))
                    .collect();
                Regex::new(&format!("^{}$", parts.join(".*")))
                    .unwrap()
                    .is_match(bytes)
            }
            other => other.matches(bytes),
        }
    }

    struct Row {
        key: StreamKey,
        kind: Kind,
        activity: Option<(i64, i64)>,
    }

    fn model(q: &TagQuery, row: &Row) -> bool {
        match q {
            TagQuery::And(c) => c.iter().all(|c| model(c, row)),
            TagQuery::Or(c) => c.iter().any(|c| model(c, row)),
            TagQuery::Not(c) => !model(c, row),
            TagQuery::Term(Term::Tag { category, value }) => {
                row.key.tags().iter().any(|t| {
                    model_pattern(category, t.category()) && model_pattern(value, t.value())
                })
            }
            TagQuery::Term(Term::Name(p)) => model_pattern(p, row.key.name().as_bytes()),
            TagQuery::Term(Term::Type(k)) => row.kind == *k,
            TagQuery::Term(Term::Activity { start_ms, end_ms }) => row
                .activity
                .is_some_and(|(f, l)| f < *end_ms && l >= *start_ms),
        }
    }

    fn pattern(alphabet: &'static [&'static str]) -> impl Strategy<Value = Pattern> {
        prop_oneof![
            4 => proptest::sample::select(alphabet).prop_map(|s| Pattern::Exact(s.as_bytes().to_vec())),
            1 => Just(Pattern::Exact(b"/x y".to_vec())),
            1 => proptest::sample::select(&["*", "x*", "*1", "a*", "*"][..]).prop_map(|s| Pattern::Glob(s.as_bytes().to_vec())),
            1 => proptest::sample::select(&["^[xy]", "2", "^a$", "/"][..]).prop_map(|s| Pattern::Regex(Regex::new(s).unwrap())),
        ]
    }

    fn query() -> impl Strategy<Value = TagQuery> {
        let leaf = prop_oneof![
            4 => (pattern(&["x", "y", "z"]), pattern(&["1", "2", "3"])).prop_map(|(category, value)| TagQuery::Term(Term::Tag { category, value })),
            1 => pattern(&["a", "b"]).prop_map(|p| TagQuery::Term(Term::Name(p))),
            1 => proptest::sample::select(&Kind::ALL[..]).prop_map(|k| TagQuery::Term(Term::Type(k))),
            1 => (0i64..100, 0i64..100).prop_map(|(start_ms, end_ms)| TagQuery::Term(Term::Activity { start_ms, end_ms })),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 1..4).prop_map(TagQuery::And),
                proptest::collection::vec(inner.clone(), 1..4).prop_map(TagQuery::Or),
                inner.prop_map(|q| TagQuery::Not(Box::new(q))),
            ]
        })
    }

    /// (name, tags, kind index, (first activity, span)).
    type RowSpec = (String, Vec<(String, String)>, usize, Option<(i64, i64)>);

    fn row() -> impl Strategy<Value = RowSpec> {
        (
            "[ab]",
            proptest::collection::vec(
                ("[xyz]", prop_oneof!["[123]", Just("/x y".to_string())]),
                0..4,
            ),
            0usize..3,
            proptest::option::of((0i64..100, 0i64..50)),
        )
    }

    proptest! {
        #[test]
        fn evaluation_agrees_with_the_naive_model(rows in proptest::collection::vec(row(), 0..40), q in query()) {
            let index = SeriesIndex::in_memory();
            let mut model_rows: Vec<Row> = Vec::new();
            for (name, tags, kind, activity) in rows {
                let key = StreamKey::new(name, tags.into_iter().map(|(c, v)| Tag::new(c, v).unwrap())).unwrap();
                let kind = Kind::ALL[kind];
                let Ok(id) = index.get_or_create(&key, kind) else { continue };
                if id.0 as usize == model_rows.len() {
                    let activity = activity.map(|(first, span)| (first, first + span));
                    if let Some((first, last)) = activity {
                        index.note_activity(&[(id, first), (id, last)]).unwrap();
                    }
                    model_rows.push(Row { key, kind, activity });
                }
            }
            // Round trip through the text form, so the parser is checked on every query too.
            let text = q.to_string();
            let parsed = TagQuery::parse(&text).unwrap();
            let got: Vec<u32> = index.snapshot().unwrap().find(&parsed, u64::MAX).unwrap().into_iter().map(|s| s.0).collect();
            let want: Vec<u32> = (0..model_rows.len() as u32).filter(|&i| model(&q, &model_rows[i as usize])).collect();
            prop_assert_eq!(got, want, "query {}", text);
        }

        #[test]
        fn parse_arbitrary_text_never_panics(text in "[a-z():,*/b\"_]{0,40}|\\PC{0,30}") {
            if let Ok(q) = TagQuery::parse(&text) {
                let again = q.to_string();
                prop_assert!(TagQuery::parse(&again).is_ok(), "{} -> {}", text, again);
            }
        }
    }
}
