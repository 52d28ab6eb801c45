//! Inhibit rules in Alertmanager's shape: while an alert matching `source_matchers` fires, alerts
//! matching `target_matchers` that carry the same values of every `equal` label (a label
//! missing on both sides counts as equal, as in Alertmanager) are not notified. An alert does
//! not inhibit itself when it matches both sides.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::matcher::{Matcher, MATCHERS_MAX};

/// Inhibit rules in one configuration.
pub const INHIBIT_RULES_MAX: usize = 256;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InhibitFile {
    #[serde(default)]
    pub source_matchers: Vec<String>,
    #[serde(default)]
    pub target_matchers: Vec<String>,
    #[serde(default)]
    pub equal: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct InhibitRule {
    pub source: Vec<Matcher>,
    pub target: Vec<Matcher>,
    pub equal: Vec<String>,
}

fn all(ms: &[Matcher], labels: &BTreeMap<String, String>) -> bool {
    ms.iter().all(|m| m.matches(labels))
}

impl InhibitRule {
    pub fn parse(n: usize, f: &InhibitFile) -> Result<InhibitRule, String> {
        let what = format!("inhibit rule {n}");
        let parse = |list: &[String]| {
            if list.len() > MATCHERS_MAX {
                return Err(format!("{what}: too many matchers"));
            }
            list.iter()
                .map(|m| Matcher::parse(m).map_err(|e| format!("{what}: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        let source = parse(&f.source_matchers)?;
        let target = parse(&f.target_matchers)?;
        if source.is_empty() || target.is_empty() {
            // Alertmanager accepts an empty side, which then matches every alert: almost never
            // what was meant, and it silences everything.
            return Err(format!(
                "{what}: needs source_matchers and target_matchers (an empty side matches every alert)"
            ));
        }
        Ok(InhibitRule {
            source,
            target,
            equal: f.equal.clone(),
        })
    }

    fn inhibits(
        &self,
        source: &BTreeMap<String, String>,
        target: &BTreeMap<String, String>,
    ) -> bool {
        all(&self.target, target)
            && all(&self.source, source)
            && self.equal.iter().all(|l| source.get(l) == target.get(l))
    }
}

/// The rule and source alert inhibiting `target` (fingerprint `fp`), if any; `firing` holds the
/// labels of every firing alert.
pub fn inhibited_by(
    rules: &[InhibitRule],
    firing: &BTreeMap<u64, BTreeMap<String, String>>,
    fp: u64,
    target: &BTreeMap<String, String>,
) -> Option<(usize, u64)> {
    rules.iter().enumerate().find_map(|(n, r)| {
        if !all(&r.target, target) {
            return None;
        }
        firing
            .iter()
            .find(|(src, labels)| **src != fp && r.inhibits(labels, target))
            .map(|(src, _)| (n, *src))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_firing_source_inhibits_targets_with_equal_labels() {
        let r = InhibitRule::parse(
            0,
            &InhibitFile {
                source_matchers: vec!["severity=\"1\"".into()],
                target_matchers: vec!["severity=~\"[2-5]\"".into()],
                equal: vec!["cluster".into(), "zone".into()],
            },
        )
        .unwrap();
        let rules = [r];
        let mut firing = BTreeMap::new();
        firing.insert(1, l(&[("severity", "1"), ("cluster", "a")]));
        let target = l(&[("severity", "3"), ("cluster", "a")]);
        assert_eq!(inhibited_by(&rules, &firing, 2, &target), Some((0, 1)));
        // `zone` is missing on both sides: equal.
        let other = l(&[("severity", "3"), ("cluster", "b")]);
        assert_eq!(inhibited_by(&rules, &firing, 3, &other), None);
        let zoned = l(&[("severity", "3"), ("cluster", "a"), ("zone", "z")]);
        assert_eq!(inhibited_by(&rules, &firing, 4, &zoned), None);
        // Not itself.
        let both = InhibitRule::parse(
            0,
            &InhibitFile {
                source_matchers: vec!["a=\"1\"".into()],
                target_matchers: vec!["a=\"1\"".into()],
                equal: vec![],
            },
        )
        .unwrap();
        let mut one = BTreeMap::new();
        one.insert(9, l(&[("a", "1")]));
        assert_eq!(inhibited_by(&[both], &one, 9, &l(&[("a", "1")])), None);
    }

    #[test]
    fn an_empty_side_is_refused() {
        let e = InhibitRule::parse(
            2,
            &InhibitFile {
                source_matchers: vec![],
                target_matchers: vec!["a=\"1\"".into()],
                equal: vec![],
            },
        )
        .unwrap_err();
        assert!(
            e.starts_with("inhibit rule 2: needs source_matchers"),
            "{e}"
        );
    }
}
