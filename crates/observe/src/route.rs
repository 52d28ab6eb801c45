//! HTTP routes: a request target → the name of the first configured pattern it matches.
//!
//! A pattern is a path of segments: a literal, `*` or `:name` (any one segment), or a final
//! `**` (the rest of the path, possibly nothing). The query string is ignored. With no patterns
//! configured the route is the path's first segment (`/login/x` → `login`, `/` → `/`); a target
//! no pattern matches is `other`. Either way the aggregator caps the values per period.

use std::sync::Arc;

/// Most patterns (each request is tried against them in order).
pub const ROUTES_MAX: usize = 256;

enum Seg {
    Lit(String),
    One,
    Rest,
}

pub struct Routes {
    list: Vec<(Arc<str>, Vec<Seg>)>,
    other: Arc<str>,
    root: Arc<str>,
}

impl Routes {
    /// Routes from `NAME=PATTERN` entries (a bare `PATTERN` names itself).
    pub fn new(entries: &[String]) -> Result<Routes, String> {
        if entries.len() > ROUTES_MAX {
            return Err(format!("at most {ROUTES_MAX} routes"));
        }
        let mut list = Vec::new();
        for e in entries {
            let (name, pattern) = e.split_once('=').unwrap_or((e, e));
            if !pattern.starts_with('/') {
                return Err(format!("route pattern `{pattern}` must start with `/`"));
            }
            let segs: Vec<Seg> = split(pattern.as_bytes())
                .map(|s| match s {
                    b"*" => Seg::One,
                    b"**" => Seg::Rest,
                    s if s.starts_with(b":") => Seg::One,
                    s => Seg::Lit(String::from_utf8_lossy(s).into_owned()),
                })
                .collect();
            list.push((Arc::from(name), segs));
        }
        Ok(Routes {
            list,
            other: Arc::from("other"),
            root: Arc::from("/"),
        })
    }

    /// The route of a request target (`/a/b?q`, or absolute `http://host/a/b`).
    pub fn route(&self, target: &[u8]) -> Arc<str> {
        let path = path_of(target);
        if self.list.is_empty() {
            return match split(path).next() {
                Some(first) => Arc::from(String::from_utf8_lossy(first).as_ref()),
                None => self.root.clone(),
            };
        }
        for (name, segs) in &self.list {
            if matches(segs, path) {
                return name.clone();
            }
        }
        self.other.clone()
    }
}

fn path_of(target: &[u8]) -> &[u8] {
    let mut p = target;
    if let Some(i) = p.windows(3).position(|w| w == b"://") {
        let rest = &p[i + 3..];
        p = &rest[rest.iter().position(|&b| b == b'/').unwrap_or(rest.len())..];
    }
    let end = p
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(p.len());
    &p[..end]
}

fn split(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|s| !s.is_empty())
}

fn matches(segs: &[Seg], path: &[u8]) -> bool {
    let mut parts = split(path);
    for seg in segs {
        match seg {
            Seg::Rest => return true,
            Seg::One => {
                if parts.next().is_none() {
                    return false;
                }
            }
            Seg::Lit(l) => {
                if parts.next() != Some(l.as_bytes()) {
                    return false;
                }
            }
        }
    }
    parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = Routes::new(&[
            "login=/login".into(),
            "user=/users/:id".into(),
            "/static/**".into(),
        ])
        .unwrap();
        assert_eq!(&*r.route(b"/login?next=/"), "login");
        assert_eq!(&*r.route(b"/users/42"), "user");
        assert_eq!(&*r.route(b"/users/42/x"), "other");
        assert_eq!(&*r.route(b"/static/a/b.css"), "/static/**");
        assert_eq!(&*r.route(b"http://h:1/login"), "login");
        let none = Routes::new(&[]).unwrap();
        assert_eq!(&*none.route(b"/echo/7?OBSID7"), "echo");
        assert_eq!(&*none.route(b"/"), "/");
        assert!(Routes::new(&["x=nope".into()]).is_err());
    }
}
