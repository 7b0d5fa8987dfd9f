//! Pattern lists and browser-use's precedence between `allowed_domains` and
//! `prohibited_domains`.

use std::collections::HashMap;

use crate::is_web_scheme;
use crate::pattern::{DomainPattern, OriginMatch, PatternError, UrlTarget};

/// An invalid entry of a list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[{index}]: {error}")]
pub struct ListError {
    /// Position of the entry in the list.
    pub index: usize,
    /// What is wrong with it.
    pub error: PatternError,
}

/// A validated list of patterns: exact hosts indexed (lists of thousands stay fast), other
/// patterns scanned in order.
#[derive(Debug, Clone, Default)]
pub struct DomainList {
    patterns: Vec<DomainPattern>,
    /// Exact host → index of its first pattern.
    exact: HashMap<String, usize>,
    /// Root domain whose `www.` variant also matches → index of its first pattern.
    exact_www: HashMap<String, usize>,
    /// Indices of the patterns that are not exact hosts.
    others: Vec<usize>,
}

impl DomainList {
    /// Parses every entry; the first invalid one is the error.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, ListError> {
        let mut out = DomainList::default();
        for (index, item) in items.iter().enumerate() {
            let pattern =
                DomainPattern::parse(item.as_ref()).map_err(|error| ListError { index, error })?;
            let at = out.patterns.len();
            if let Some((host, www)) = pattern.exact_host() {
                out.exact.entry(host.to_string()).or_insert(at);
                if www {
                    out.exact_www.entry(host.to_string()).or_insert(at);
                }
            } else {
                out.others.push(at);
            }
            out.patterns.push(pattern);
        }
        Ok(out)
    }

    /// No patterns.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns, in list order.
    pub fn patterns(&self) -> &[DomainPattern] {
        &self.patterns
    }

    /// A pattern matching the URL, if any (exact hosts are looked up first).
    pub fn find(&self, target: &UrlTarget<'_>) -> Option<&DomainPattern> {
        if is_web_scheme(target.scheme()) {
            let host = target.host();
            if let Some(&i) = self.exact.get(host) {
                return Some(&self.patterns[i]);
            }
            if let Some(bare) = host.strip_prefix("www.")
                && let Some(&i) = self.exact_www.get(bare)
            {
                return Some(&self.patterns[i]);
            }
        }
        self.others
            .iter()
            .map(|&i| &self.patterns[i])
            .find(|p| p.matches(target))
    }
}

/// Why [`DomainRules`] forbid a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forbidden<'a> {
    /// `allowed_domains` is set and no pattern in it matches.
    NotInAllowedDomains,
    /// `allowed_domains` is empty and this `prohibited_domains` pattern matches.
    ProhibitedDomain {
        /// The matching pattern.
        pattern: &'a DomainPattern,
    },
}

/// A task's `allowed_domains` and `prohibited_domains` with browser-use's precedence: if the
/// allow list is non-empty it alone decides (the prohibit list is ignored); otherwise a URL
/// matching the prohibit list is forbidden.
#[derive(Debug, Clone, Default)]
pub struct DomainRules {
    allowed: DomainList,
    prohibited: DomainList,
}

impl DomainRules {
    /// The rules of two validated lists.
    pub fn new(allowed: DomainList, prohibited: DomainList) -> Self {
        Self {
            allowed,
            prohibited,
        }
    }

    /// Neither list has a pattern.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty() && self.prohibited.is_empty()
    }

    /// The allow list.
    pub fn allowed(&self) -> &DomainList {
        &self.allowed
    }

    /// The prohibit list.
    pub fn prohibited(&self) -> &DomainList {
        &self.prohibited
    }

    /// The lists applied to a connection of which only the origin is known (host and port, and
    /// the schemes it may carry): allowed when an allow pattern matches some URL of one of the
    /// `targets`; forbidden by a prohibit pattern that matches every URL of one of them (a
    /// pattern with a path cannot be judged without the path; the URL-level check does that).
    pub fn check_origin(&self, targets: &[UrlTarget<'_>]) -> Result<(), Forbidden<'_>> {
        if !self.allowed.is_empty() {
            let hit = targets.iter().any(|t| {
                self.allowed.find(t).is_some()
                    || self
                        .allowed
                        .patterns()
                        .iter()
                        .any(|p| p.matches_origin(t) != OriginMatch::None)
            });
            return if hit {
                Ok(())
            } else {
                Err(Forbidden::NotInAllowedDomains)
            };
        }
        for t in targets {
            if let Some(pattern) = self
                .prohibited
                .patterns()
                .iter()
                .find(|p| p.matches_origin(t) == OriginMatch::All)
            {
                return Err(Forbidden::ProhibitedDomain { pattern });
            }
        }
        Ok(())
    }

    /// Whether the lists let the URL through.
    pub fn check(&self, target: &UrlTarget<'_>) -> Result<(), Forbidden<'_>> {
        if !self.allowed.is_empty() {
            return match self.allowed.find(target) {
                Some(_) => Ok(()),
                None => Err(Forbidden::NotInAllowedDomains),
            };
        }
        match self.prohibited.find(target) {
            Some(pattern) => Err(Forbidden::ProhibitedDomain { pattern }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use url::Url;

    use super::*;

    fn list(items: &[&str]) -> DomainList {
        DomainList::parse(items).expect("valid list")
    }

    fn check<'a>(rules: &'a DomainRules, url: &str) -> Result<(), Forbidden<'a>> {
        let url = Url::parse(url).unwrap();
        rules.check(&UrlTarget::new(&url).unwrap())
    }

    #[test]
    fn allowed_alone_decides_and_prohibited_reports_the_pattern() {
        let rules = DomainRules::new(list(&["example.com"]), list(&["example.com"]));
        assert_eq!(check(&rules, "https://www.example.com/"), Ok(()));
        assert_eq!(
            check(&rules, "https://evil.com/"),
            Err(Forbidden::NotInAllowedDomains)
        );
        let rules = DomainRules::new(
            DomainList::default(),
            list(&["a.org", "Evil.com", "evil.com"]),
        );
        assert_eq!(check(&rules, "https://example.com/"), Ok(()));
        match check(&rules, "https://www.evil.com/x") {
            Err(Forbidden::ProhibitedDomain { pattern }) => {
                assert_eq!(pattern.as_str(), "Evil.com")
            }
            other => panic!("{other:?}"),
        }
        assert!(DomainRules::default().is_empty());
    }

    #[test]
    fn list_errors_name_the_entry() {
        let e = DomainList::parse(&["ok.com", "fine.org", "example.*"]).unwrap_err();
        assert_eq!(e.index, 2);
        assert!(
            e.to_string()
                .starts_with("[2]: invalid domain pattern \"example.*\""),
            "{e}"
        );
    }

    #[test]
    fn large_exact_lists_keep_pattern_semantics() {
        let mut items: Vec<String> = (0..500).map(|i| format!("site{i}.com")).collect();
        items.push("*.wild.org".into());
        items.push("app.site9.com".into());
        let rules = DomainRules::new(DomainList::parse(&items).unwrap(), DomainList::default());
        assert_eq!(check(&rules, "https://site499.com/"), Ok(()));
        assert_eq!(check(&rules, "https://www.site7.com/"), Ok(()));
        assert_eq!(check(&rules, "https://a.wild.org/"), Ok(()));
        assert_eq!(check(&rules, "https://app.site9.com/"), Ok(()));
        assert!(check(&rules, "https://www.app.site9.com/").is_err());
        assert!(check(&rules, "https://site500.com/").is_err());
        assert!(check(&rules, "https://a.site7.com/").is_err());
        assert!(check(&rules, "ftp://site7.com/").is_err());
    }
}
