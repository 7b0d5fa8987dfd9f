//! fnmatch-style glob with `*` only.

/// Whether `text` matches `glob`, where `*` is any run of characters and everything else is
/// literal. Linear-time greedy matching with a single backtrack point; the caller lowercases.
pub(crate) fn glob_match(glob: &str, text: &str) -> bool {
    let (g, t) = (glob.as_bytes(), text.as_bytes());
    let (mut gi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ti));
            gi += 1;
        } else if gi < g.len() && g[gi] == t[ti] {
            gi += 1;
            ti += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    while gi < g.len() && g[gi] == b'*' {
        gi += 1;
    }
    gi == g.len()
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn glob_matcher() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*c", "abbbc"));
        assert!(glob_match("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!glob_match("a*c", "abd"));
        assert!(glob_match("http*", "https"));
        assert!(!glob_match("abc", "abcd"));
        // Pathological input stays fast.
        let text = "a".repeat(10_000);
        assert!(!glob_match("*a*a*a*a*a*a*b", &text));
    }
}
