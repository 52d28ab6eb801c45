//! `modgraph`: within every module of a crate, the child modules (siblings) must form an acyclic
//! graph, so that each directory of code reads bottom-up: a module can be understood from the
//! ones it uses, never from one that uses it back.
//!
//! The rule: a reference from anywhere inside sibling `A`'s subtree to an item defined in
//! sibling `B`'s subtree is an edge `A → B` among the children of their lowest common ancestor.
//! References to items defined in that ancestor's own file are not sibling edges, and neither
//! are references from the ancestor into its children.
//!
//! References are every `use` and every path of two segments or more in code (including inside
//! macro invocations), resolved through the crate's module tree and its `use` bindings (so a
//! re-export at the crate root does not hide which module an item lives in). Paths into other
//! crates are ignored. The check is syntactic: names reached only through a glob import or
//! made by a macro count as defined where the path stops resolving.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One crate to check: a label for the report and its root file (`lib.rs`, `main.rs`, …).
#[derive(Clone, Debug)]
pub struct CrateRoot {
    pub label: String,
    pub root: PathBuf,
}

/// Why a crate could not be read.
#[derive(Debug)]
pub enum Error {
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    MissingModule {
        declared_in: PathBuf,
        line: usize,
        name: String,
    },
    Allowlist {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, error } => write!(f, "{}: {error}", path.display()),
            Error::Parse {
                path,
                line,
                message,
            } => write!(f, "{}:{line}: does not parse: {message}", path.display()),
            Error::MissingModule {
                declared_in,
                line,
                name,
            } => write!(
                f,
                "{}:{line}: module `{name}` is declared but neither {name}.rs nor {name}/mod.rs \
                 exists",
                declared_in.display()
            ),
            Error::Allowlist {
                path,
                line,
                message,
            } => write!(f, "{}:{line}: {message}", path.display()),
        }
    }
}

impl std::error::Error for Error {}

/// Where a reference is written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    /// The path as written (`crate::block::Block`).
    pub text: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}  {}", self.file.display(), self.line, self.text)
    }
}

/// A module of the crate being read.
#[derive(Debug, Default)]
struct Module {
    /// Segments below the crate root (`["encode", "rice_hist"]`; empty for the root).
    path: Vec<String>,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names of the items defined in the module itself (not its children).
    items: BTreeSet<String>,
    /// `use` bindings: the name they bind and the path they bind it to.
    uses: Vec<(String, Vec<String>)>,
    /// `use path::*`: the paths of the glob imports.
    globs: Vec<Vec<String>>,
    /// Paths referred to from inside the module (not its children).
    refs: Vec<(Vec<String>, Location)>,
}

/// What a name resolves to while walking a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binding {
    Module(usize),
    /// An item defined in this module's own file.
    ItemIn(usize),
}

/// A crate's module tree with every reference.
#[derive(Debug)]
pub struct Crate {
    pub label: String,
    modules: Vec<Module>,
}

/// An edge between two siblings, with the first reference (in file and line order) that makes
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub at: Location,
}

/// The sibling graph among the children of one module.
#[derive(Debug)]
pub struct SiblingGraph {
    /// `crate::encode`: the module whose children these are.
    pub parent: String,
    /// By `(from, to)`.
    pub edges: BTreeMap<(String, String), Location>,
}

/// An edge the allowlist lets stand: `<crate> <parent>: <from> -> <to>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllowedEdge {
    pub krate: String,
    pub parent: String,
    pub from: String,
    pub to: String,
    /// Where the allowlist says so (file:line), for the report.
    pub source: String,
}

/// A cycle found: the crate, the parent module, and each edge of the cycle in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub krate: String,
    pub parent: String,
    pub edges: Vec<Edge>,
    /// Every module on some cycle with these (the strongly connected component), when there
    /// are more than the cycle's: breaking this cycle leaves others among them.
    pub component: Vec<String>,
    /// Every edge among `component`, for `--verbose`.
    pub component_edges: Vec<Edge>,
}

impl Cycle {
    /// `a -> b -> a`.
    pub fn names(&self) -> String {
        let mut out = String::new();
        for e in &self.edges {
            out.push_str(&e.from);
            out.push_str(" -> ");
        }
        if let Some(first) = self.edges.first() {
            out.push_str(&first.from);
        }
        out
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "module cycle in {} among the children of `{}`: {}",
            self.krate,
            self.parent,
            self.names()
        )?;
        for e in &self.edges {
            writeln!(f, "    {} -> {}: {}", e.from, e.to, e.at)?;
        }
        if self.component.len() > self.edges.len() {
            writeln!(
                f,
                "    (one of the cycles among {})",
                self.component.join(", ")
            )?;
        }
        Ok(())
    }
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    pub crates: usize,
    pub modules: usize,
    pub cycles: Vec<Cycle>,
    /// Cycles the allowlist let stand, each with the allowlist entry.
    pub allowed: Vec<(AllowedEdge, Cycle)>,
    /// Allowlist entries that no longer close a cycle (delete them).
    pub stale: Vec<AllowedEdge>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.cycles.is_empty() && self.stale.is_empty()
    }
}

fn line_of(span: proc_macro2::Span) -> usize {
    span.start().line
}

fn read(path: &Path) -> Result<syn::File, Error> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::Io {
        path: path.to_path_buf(),
        error,
    })?;
    syn::parse_file(&text).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        line: line_of(e.span()),
        message: e.to_string(),
    })
}

/// The `#[path = "…"]` of a `mod` item, if any.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        let syn::Meta::NameValue(nv) = &a.meta else {
            return None;
        };
        if !nv.path.is_ident("path") {
            return None;
        }
        match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        }
    })
}

/// The name of the item, for the items that bind one in the module's namespace.
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Collects the references in one module's items (not in its child modules).
struct RefCollector<'a> {
    file: &'a Path,
    refs: Vec<(Vec<String>, Location)>,
}

impl RefCollector<'_> {
    fn push(&mut self, segments: Vec<String>, line: usize) {
        let text = segments.join("::");
        self.refs.push((
            segments,
            Location {
                file: self.file.to_path_buf(),
                line,
                text,
            },
        ));
    }

    /// Paths in a macro's tokens: `a::b::c` runs of identifiers joined by `::`.
    fn scan_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::{Spacing, TokenTree};
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => {
                    self.scan_tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    // A leading `::` names another crate.
                    let global = i >= 2
                        && matches!(&trees[i - 1], TokenTree::Punct(p) if p.as_char() == ':')
                        && matches!(&trees[i - 2], TokenTree::Punct(p) if p.as_char() == ':');
                    let mut segments = vec![first.to_string()];
                    let line = line_of(first.span());
                    let mut j = i + 1;
                    while j + 2 < trees.len() {
                        let colons = matches!(&trees[j], TokenTree::Punct(p)
                                if p.as_char() == ':' && p.spacing() == Spacing::Joint)
                            && matches!(&trees[j + 1], TokenTree::Punct(p) if p.as_char() == ':');
                        let TokenTree::Ident(next) = &trees[j + 2] else {
                            break;
                        };
                        if !colons {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() >= 2 && !global {
                        self.push(segments, line);
                    }
                    i = j;
                }
                _ => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for RefCollector<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() >= 2 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(segments, line_of(path.segments[0].ident.span()));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.scan_tokens(mac.tokens.clone());
    }

    /// `pub(in crate::x)` restricts who sees an item; it is not a use of `x`.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    /// Child modules are read as modules of their own.
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    /// A `use` inside a function body refers like any other (a module's own `use` items are
    /// read by the module reader, which also keeps the names they bind).
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_some() {
            return;
        }
        let mut flat = Vec::new();
        flatten_use(&u.tree, &mut Vec::new(), &mut flat);
        for (_, path, line) in flat {
            self.push(path, line);
        }
    }
}

/// Flattens a `use` tree into bindings (name, path), globs and references.
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>, usize)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let line = line_of(n.ident.span());
            if n.ident == "self" {
                let name = prefix.last().cloned();
                out.push((name, prefix.clone(), line));
            } else {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                out.push((Some(n.ident.to_string()), path, line));
            }
        }
        syn::UseTree::Rename(r) => {
            let line = line_of(r.ident.span());
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            let name = (r.rename != "_").then(|| r.rename.to_string());
            // `use x as _` binds nothing but still refers to `x`.
            out.push((name.or_else(|| Some(String::new())), path, line));
        }
        syn::UseTree::Glob(g) => {
            out.push((None, prefix.clone(), line_of(g.star_token.spans[0])));
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

/// Reads a crate from its root file, following `mod` declarations.
pub fn read_crate(root: &CrateRoot) -> Result<Crate, Error> {
    let mut krate = Crate {
        label: root.label.clone(),
        modules: vec![Module::default()],
    };
    let file = read(&root.root)?;
    let dir = root
        .root
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    read_items(&mut krate, 0, &file.items, &root.root, &dir)?;
    Ok(krate)
}

/// Reads the items of module `m`, written in `file`, whose child module files live in
/// `child_dir`.
fn read_items(
    krate: &mut Crate,
    m: usize,
    items: &[syn::Item],
    file: &Path,
    child_dir: &Path,
) -> Result<(), Error> {
    let mut collector = RefCollector {
        file,
        refs: Vec::new(),
    };
    for item in items {
        match item {
            syn::Item::Mod(md) => {
                let name = md.ident.to_string();
                let child = krate.modules.len();
                let mut path = krate.modules[m].path.clone();
                path.push(name.clone());
                krate.modules.push(Module {
                    path,
                    parent: Some(m),
                    ..Module::default()
                });
                krate.modules[m].children.insert(name.clone(), child);
                // Attributes and the like on the declaration belong to the parent's file.
                for attr in &md.attrs {
                    collector.visit_attribute(attr);
                }
                if let Some((_, content)) = &md.content {
                    let dir = child_dir.join(&name);
                    read_items(krate, child, content, file, &dir)?;
                } else {
                    let line = line_of(md.ident.span());
                    let (child_file, dir) = if let Some(p) = path_attr(&md.attrs) {
                        let f = file.parent().unwrap_or(Path::new("")).join(p);
                        let d = f.parent().unwrap_or(Path::new("")).to_path_buf();
                        (f, d)
                    } else {
                        let flat = child_dir.join(format!("{name}.rs"));
                        let nested = child_dir.join(&name).join("mod.rs");
                        if flat.exists() {
                            (flat, child_dir.join(&name))
                        } else if nested.exists() {
                            (nested, child_dir.join(&name))
                        } else {
                            return Err(Error::MissingModule {
                                declared_in: file.to_path_buf(),
                                line,
                                name,
                            });
                        }
                    };
                    let parsed = read(&child_file)?;
                    read_items(krate, child, &parsed.items, &child_file, &dir)?;
                }
            }
            syn::Item::Use(u) => {
                let mut flat = Vec::new();
                flatten_use(&u.tree, &mut Vec::new(), &mut flat);
                for (name, path, line) in flat {
                    if u.leading_colon.is_some() {
                        continue;
                    }
                    collector.push(path.clone(), line);
                    match name {
                        Some(n) if !n.is_empty() => krate.modules[m].uses.push((n, path)),
                        Some(_) => {}
                        None => krate.modules[m].globs.push(path),
                    }
                }
            }
            syn::Item::Macro(mac) if mac.mac.path.is_ident("include") => {
                // `include!("file.rs")`: the file's items are this module's.
                let included = syn::parse2::<syn::LitStr>(mac.mac.tokens.clone())
                    .ok()
                    .map(|s| file.parent().unwrap_or(Path::new("")).join(s.value()));
                if let Some(path) = included.filter(|p| p.exists()) {
                    let parsed = read(&path)?;
                    read_items(krate, m, &parsed.items, &path, child_dir)?;
                }
            }
            other => {
                if let Some(name) = item_name(other) {
                    krate.modules[m].items.insert(name);
                }
                collector.visit_item(other);
            }
        }
    }
    krate.modules[m].refs.extend(collector.refs);
    Ok(())
}

/// Bounds the resolution of `use` chains (a cycle of re-exports would not end).
const RESOLVE_DEPTH_MAX: usize = 32;

impl Crate {
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    fn name_of(&self, m: usize) -> String {
        let mut s = String::from("crate");
        for p in &self.modules[m].path {
            s.push_str("::");
            s.push_str(p);
        }
        s
    }

    /// What `name` means inside module `m`.
    fn lookup(&self, m: usize, name: &str, depth: usize) -> Option<Binding> {
        if depth > RESOLVE_DEPTH_MAX {
            return None;
        }
        let module = &self.modules[m];
        if let Some(&c) = module.children.get(name) {
            return Some(Binding::Module(c));
        }
        if module.items.contains(name) {
            return Some(Binding::ItemIn(m));
        }
        if let Some((_, path)) = module.uses.iter().find(|(n, _)| n == name) {
            return self.resolve_binding(m, path, depth + 1);
        }
        for glob in &module.globs {
            if let Some(Binding::Module(g)) = self.resolve_binding(m, glob, depth + 1) {
                if g != m {
                    if let Some(b) = self.lookup(g, name, depth + 1) {
                        return Some(b);
                    }
                }
            }
        }
        None
    }

    /// What `segments`, written in module `m`, names: `None` for another crate's item.
    fn resolve_binding(&self, m: usize, segments: &[String], depth: usize) -> Option<Binding> {
        if depth > RESOLVE_DEPTH_MAX {
            return None;
        }
        let first = segments.first()?;
        let mut at = match first.as_str() {
            "crate" => Binding::Module(0),
            "self" => Binding::Module(m),
            "super" => Binding::Module(self.modules[m].parent?),
            "Self" => return None,
            name => self.lookup(m, name, depth)?,
        };
        for seg in &segments[1..] {
            let Binding::Module(cur) = at else {
                return Some(at);
            };
            at = match seg.as_str() {
                "super" => Binding::Module(self.modules[cur].parent?),
                "self" => at,
                // A name the module does not define: made by a macro or a glob this check does
                // not follow; taken as the module's own.
                name => self
                    .lookup(cur, name, depth + 1)
                    .unwrap_or(Binding::ItemIn(cur)),
            };
        }
        Some(at)
    }

    /// The module in whose subtree the target of `segments` (written in `m`) lives.
    fn resolve(&self, m: usize, segments: &[String]) -> Option<usize> {
        match self.resolve_binding(m, segments, 0)? {
            Binding::Module(t) | Binding::ItemIn(t) => Some(t),
        }
    }

    /// `m` and its ancestors, root last.
    fn ancestors(&self, m: usize) -> Vec<usize> {
        let mut out = vec![m];
        let mut cur = m;
        while let Some(p) = self.modules[cur].parent {
            out.push(p);
            cur = p;
        }
        out
    }

    /// The sibling graph of every module with children, by parent module index.
    pub fn sibling_graphs(&self) -> Vec<SiblingGraph> {
        let mut graphs: BTreeMap<usize, SiblingGraph> = BTreeMap::new();
        for (m, module) in self.modules.iter().enumerate() {
            let from_chain = self.ancestors(m);
            for (segments, at) in &module.refs {
                let Some(target) = self.resolve(m, segments) else {
                    continue;
                };
                let to_chain = self.ancestors(target);
                // The lowest common ancestor, and the children of it on each side.
                let Some(lca_pos) = from_chain.iter().position(|a| to_chain.contains(a)) else {
                    continue;
                };
                let lca = from_chain[lca_pos];
                let to_pos = to_chain.iter().position(|&a| a == lca).unwrap_or(0);
                if lca_pos == 0 || to_pos == 0 {
                    // From the ancestor itself into its subtree, or to its own items.
                    continue;
                }
                let a = from_chain[lca_pos - 1];
                let b = to_chain[to_pos - 1];
                let name = |i: usize| self.modules[i].path.last().cloned().unwrap_or_default();
                let graph = graphs.entry(lca).or_insert_with(|| SiblingGraph {
                    parent: self.name_of(lca),
                    edges: BTreeMap::new(),
                });
                let slot = graph.edges.entry((name(a), name(b))).or_insert(at.clone());
                if at < slot {
                    *slot = at.clone();
                }
            }
        }
        graphs.into_values().collect()
    }
}

/// Strongly connected components of a graph over `nodes` (Tarjan), each sorted.
fn components(nodes: &[String], edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        if let (Some(&i), Some(&j)) = (index.get(a.as_str()), index.get(b.as_str())) {
            adj[i].push(j);
        }
    }
    struct Tarjan<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for i in 0..self.adj[v].len() {
                let w = self.adj[v][i];
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                self.out.push(comp);
            }
        }
    }
    let n = nodes.len();
    let mut t = Tarjan {
        adj: &adj,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let mut out: Vec<Vec<String>> = t
        .out
        .into_iter()
        .map(|c| {
            let mut names: Vec<String> = c.into_iter().map(|i| nodes[i].clone()).collect();
            names.sort();
            names
        })
        .collect();
    out.sort();
    out
}

/// A shortest path from `from` to `to` over `edges` (breadth first, neighbours in name order).
fn shortest_path(
    from: &str,
    to: &str,
    edges: &BTreeSet<(String, String)>,
    within: Option<&BTreeSet<String>>,
) -> Option<Vec<String>> {
    let mut prev: HashMap<String, String> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([from.to_owned()]);
    let mut seen = BTreeSet::from([from.to_owned()]);
    while let Some(v) = queue.pop_front() {
        for w in edges.iter().filter(|(a, _)| *a == v).map(|(_, b)| b) {
            if within.is_some_and(|set| !set.contains(w)) {
                continue;
            }
            if w == to {
                let mut path = vec![to.to_owned(), v.clone()];
                let mut cur = v.clone();
                while let Some(p) = prev.get(&cur) {
                    path.push(p.clone());
                    cur = p.clone();
                }
                path.reverse();
                // `path` runs from `from` to `to`.
                return Some(path);
            }
            if seen.insert(w.clone()) {
                prev.insert(w.clone(), v.clone());
                queue.push_back(w.clone());
            }
        }
    }
    None
}

/// The cycle through `nodes` (a path whose last node has an edge back to its first), as edges.
fn cycle_edges(nodes: &[String], graph: &SiblingGraph) -> Vec<Edge> {
    let mut out = Vec::new();
    for (i, from) in nodes.iter().enumerate() {
        let to = &nodes[(i + 1) % nodes.len()];
        if let Some(at) = graph.edges.get(&(from.clone(), to.clone())) {
            out.push(Edge {
                from: from.clone(),
                to: to.clone(),
                at: at.clone(),
            });
        }
    }
    out
}

/// Checks one crate's sibling graphs, the `allowed` edges left out.
pub fn check_crate(krate: &Crate, allowed: &[AllowedEdge], report: &mut Report) {
    report.crates += 1;
    report.modules += krate.module_count();
    let graphs = krate.sibling_graphs();
    for entry in allowed.iter().filter(|a| a.krate == krate.label) {
        let graph = graphs.iter().find(|g| g.parent == entry.parent);
        let all: BTreeSet<(String, String)> = graph
            .map(|g| g.edges.keys().cloned().collect())
            .unwrap_or_default();
        let closes = graph.filter(|_| all.contains(&(entry.from.clone(), entry.to.clone())));
        // The edge must still exist and still close a cycle: otherwise the entry is stale.
        match closes.and_then(|g| {
            shortest_path(&entry.to, &entry.from, &all, None).map(|back| {
                let mut nodes = vec![entry.from.clone()];
                nodes.extend(back.into_iter().take_while(|n| *n != entry.from));
                cycle_edges(&nodes, g)
            })
        }) {
            Some(edges) => report.allowed.push((
                entry.clone(),
                Cycle {
                    krate: krate.label.clone(),
                    parent: entry.parent.clone(),
                    edges,
                    component: Vec::new(),
                    component_edges: Vec::new(),
                },
            )),
            None => report.stale.push(entry.clone()),
        }
    }
    for graph in &graphs {
        let edges: BTreeSet<(String, String)> = graph
            .edges
            .keys()
            .filter(|(a, b)| {
                !allowed.iter().any(|e| {
                    e.krate == krate.label && e.parent == graph.parent && e.from == *a && e.to == *b
                })
            })
            .cloned()
            .collect();
        let nodes: Vec<String> = edges
            .iter()
            .flat_map(|(a, b)| [a.clone(), b.clone()])
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for comp in components(&nodes, &edges) {
            if comp.len() < 2 {
                continue;
            }
            let set: BTreeSet<String> = comp.iter().cloned().collect();
            // The shortest cycle through the component's first node (by name).
            let start = &comp[0];
            let Some(back) = edges
                .iter()
                .filter(|(a, b)| a == start && set.contains(b))
                .filter_map(|(_, b)| {
                    shortest_path(b, start, &edges, Some(&set)).map(|p| {
                        let mut nodes = vec![start.clone()];
                        nodes.extend(p.into_iter().take_while(|n| n != start));
                        nodes
                    })
                })
                .min_by_key(Vec::len)
            else {
                continue;
            };
            report.cycles.push(Cycle {
                krate: krate.label.clone(),
                parent: graph.parent.clone(),
                edges: cycle_edges(&back, graph),
                component: comp.clone(),
                component_edges: edges
                    .iter()
                    .filter(|(a, b)| set.contains(a) && set.contains(b))
                    .filter_map(|(a, b)| {
                        let at = graph.edges.get(&(a.clone(), b.clone()))?;
                        Some(Edge {
                            from: a.clone(),
                            to: b.clone(),
                            at: at.clone(),
                        })
                    })
                    .collect(),
            });
        }
    }
}

/// Reads an allowlist: one edge per line, `<crate> <parent module>: <from> -> <to>`, `#` starts
/// a comment.
pub fn read_allowlist(path: &Path) -> Result<Vec<AllowedEdge>, Error> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || Error::Allowlist {
            path: path.to_path_buf(),
            line: i + 1,
            message: format!(
                "expected `<crate> <parent module>: <from> -> <to>`, found `{}`",
                raw.trim()
            ),
        };
        // Module paths hold `::`, never `: `.
        let (head, edge) = line.split_once(": ").ok_or_else(bad)?;
        let (krate, parent) = head.trim().split_once(' ').ok_or_else(bad)?;
        let (from, to) = edge.split_once("->").ok_or_else(bad)?;
        out.push(AllowedEdge {
            krate: krate.trim().to_owned(),
            parent: parent.trim().to_owned(),
            from: from.trim().to_owned(),
            to: to.trim().to_owned(),
            source: format!("{}:{}", path.display(), i + 1),
        });
    }
    Ok(out)
}

/// Directories never searched for crates: build output, dependencies, and test fixtures.
const SKIPPED_DIRS: [&str; 5] = ["target", "node_modules", ".git", "tests", "fuzz"];

/// The package name in a `Cargo.toml` (`name = "…"` under `[package]`).
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(rest) = line.strip_prefix("name") {
                let value = rest.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_owned());
            }
        }
    }
    None
}

/// Every crate root under `dir`: each package's `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`.
pub fn find_crates(dir: &Path) -> Result<Vec<CrateRoot>, Error> {
    let mut out = Vec::new();
    find_crates_in(dir, &mut out)?;
    out.sort_by(|a, b| a.root.cmp(&b.root));
    Ok(out)
}

fn find_crates_in(dir: &Path, out: &mut Vec<CrateRoot>) -> Result<(), Error> {
    let io = |error| Error::Io {
        path: dir.to_path_buf(),
        error,
    };
    let manifest = dir.join("Cargo.toml");
    if manifest.is_file() {
        let text = std::fs::read_to_string(&manifest).map_err(|error| Error::Io {
            path: manifest.clone(),
            error,
        })?;
        if let Some(name) = package_name(&text) {
            let src = dir.join("src");
            let lib = src.join("lib.rs");
            let has_lib = lib.is_file();
            if has_lib {
                out.push(CrateRoot {
                    label: name.clone(),
                    root: lib,
                });
            }
            let main = src.join("main.rs");
            if main.is_file() {
                out.push(CrateRoot {
                    label: if has_lib {
                        format!("{name}(bin)")
                    } else {
                        name.clone()
                    },
                    root: main,
                });
            }
            if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
                for entry in bins {
                    let path = entry.map_err(io)?.path();
                    if path.extension().is_some_and(|e| e == "rs") {
                        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
                        out.push(CrateRoot {
                            label: format!("{name}(bin {stem})"),
                            root: path,
                        });
                    }
                }
            }
        }
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() && !SKIPPED_DIRS.contains(&name.as_ref()) && name != "src" {
            find_crates_in(&path, out)?;
        }
    }
    Ok(())
}

/// Reads and checks `roots`, the `allowed` edges left out.
pub fn check(roots: &[CrateRoot], allowed: &[AllowedEdge]) -> Result<Report, Error> {
    let mut report = Report::default();
    for root in roots {
        let krate = read_crate(root)?;
        check_crate(&krate, allowed, &mut report);
    }
    // Entries naming a crate that was not checked are stale too.
    for entry in allowed {
        if !roots.iter().any(|r| r.label == entry.krate) {
            report.stale.push(entry.clone());
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The references a module's items make, as written.
    fn refs_of(source: &str) -> Vec<String> {
        let file = syn::parse_file(source).unwrap();
        let mut c = RefCollector {
            file: Path::new("x.rs"),
            refs: Vec::new(),
        };
        for item in &file.items {
            c.visit_item(item);
        }
        c.refs.into_iter().map(|(_, at)| at.text).collect()
    }

    #[test]
    fn references_in_code_macros_and_local_uses_are_found() {
        let refs = refs_of(
            "pub(in crate::hidden) fn f() -> crate::a::T {
                use super::b::{c, d as e};
                assert_eq!(crate::g::h(), ::std::mem::size_of::<u8>());
                single()
            }",
        );
        assert_eq!(
            refs,
            ["crate::a::T", "super::b::c", "super::b::d", "crate::g::h"]
        );
    }
}
