//! The task statuses the SQL of this crate and of `migrations/` spells out as literals
//! (`status = 'queued'`, `status in ('finished', 'failed', 'stopped')`), checked against
//! [`TaskStatus`](browserd_types::TaskStatus) by a test: a status renamed or added in the enum
//! fails here until every query agrees.

#[cfg(test)]
mod tests {
    use std::path::Path;

    use browserd_types::TaskStatus;

    /// Statuses of the other tables with a `status` column, allowed only in statements that
    /// name that table.
    const OTHER_TABLES: [(&str, &[&str]); 3] = [
        (
            "skills",
            &[
                "recording",
                "generating",
                "failed",
                "finished",
                "cancelled",
                "timed_out",
            ],
        ),
        ("webhook_deliveries", &["pending", "delivered", "failed"]),
        ("browser_sessions", &["active", "stopped"]),
    ];

    /// The statements of a Rust file (its string literals) or of a SQL file (split at `;`).
    fn statements(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        if path.extension().is_some_and(|e| e == "sql") {
            return text.split(';').map(str::to_owned).collect();
        }
        let mut out = Vec::new();
        let mut chars = text.chars().peekable();
        let mut current: Option<String> = None;
        while let Some(c) = chars.next() {
            match (&mut current, c) {
                (None, '"') => current = Some(String::new()),
                (None, '/') if chars.peek() == Some(&'/') => {
                    // A comment runs to the end of its line.
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                (None, '\'') => {
                    // A char literal ('"' would open a string otherwise).
                    let mut literal = String::new();
                    while let Some(c) = chars.next() {
                        if c == '\\' {
                            chars.next();
                        } else if c == '\'' {
                            break;
                        }
                        literal.push(c);
                        if literal.len() > 2 {
                            // A lifetime, not a char literal.
                            break;
                        }
                    }
                }
                (Some(text), '\\') => {
                    if let Some(next) = chars.next() {
                        text.push(next);
                    }
                }
                (Some(text), '"') => {
                    out.push(std::mem::take(text));
                    current = None;
                }
                (Some(text), c) => text.push(c),
                (None, _) => {}
            }
        }
        out
    }

    /// The quoted words of the `status` comparisons of one statement.
    fn status_literals(statement: &str) -> Vec<String> {
        let lower = statement.to_ascii_lowercase();
        let mut out = Vec::new();
        for (at, _) in lower.match_indices("status") {
            let rest = &lower[at + "status".len()..];
            let rest = rest.trim_start();
            let clause = if let Some(list) = rest
                .strip_prefix("not in")
                .or_else(|| rest.strip_prefix("in"))
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix('('))
            {
                list.split(')').next().unwrap_or_default()
            } else if let Some(value) = rest.strip_prefix('=').or_else(|| rest.strip_prefix("<>")) {
                value.split_whitespace().next().unwrap_or_default()
            } else if rest.starts_with("then") || rest.starts_with("when") {
                rest.split_whitespace().nth(1).unwrap_or_default()
            } else {
                continue;
            };
            for word in clause.split(',') {
                let word = word.trim().trim_end_matches(',');
                if let Some(inner) = word.strip_prefix('\'').and_then(|w| w.strip_suffix('\'')) {
                    out.push(inner.to_owned());
                }
            }
        }
        out
    }

    #[test]
    fn every_status_literal_is_a_task_status() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<_> = std::fs::read_dir(root.join("src"))
            .unwrap()
            .chain(std::fs::read_dir(root.join("../../migrations")).unwrap())
            .map(|entry| entry.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs" || e == "sql"))
            .collect();
        files.sort();
        let names: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
        let mut checked = 0;
        for file in &files {
            for statement in statements(file) {
                for literal in status_literals(&statement) {
                    checked += 1;
                    let other = OTHER_TABLES.iter().any(|(table, statuses)| {
                        statement.contains(table) && statuses.contains(&literal.as_str())
                    });
                    assert!(
                        names.contains(&literal.as_str()) || other,
                        "{}: `{literal}` is not a task status ({names:?}) in:\n{statement}",
                        file.display()
                    );
                }
            }
        }
        // The scan found the queries (a parser that finds nothing proves nothing).
        assert!(checked >= 30, "only {checked} status literals found");
    }

    #[test]
    fn the_scanner_reads_comparisons_lists_and_cases() {
        assert_eq!(status_literals("where status = 'queued' and x"), ["queued"]);
        assert_eq!(
            status_literals("status not in ('finished', 'failed', 'stopped')"),
            ["finished", "failed", "stopped"]
        );
        assert_eq!(
            status_literals("status = case when status = 'running' then 'queued' else status end"),
            ["running"]
        );
        assert_eq!(
            status_literals("a_status_column = $1"),
            Vec::<String>::new()
        );
    }
}
