//! A skill's parameters in text: the prompt's declarations (`{{name}}`, `{{name=example}}`)
//! and the script's slots (`{{name}}`, `{{name|url}}`, `{{name|form}}`), and finding a value
//! inside recorded text.
//!
//! Declarations: `{{` opens one only when, after optional spaces, a name character (`A-Za-z_`),
//! `=` or `}` follows; any other `{{` (JSON such as `{{"a": 1}}`, or `{{{`) is plain text.
//! Once opened, the declaration must close with `}}` and its name must be
//! `[A-Za-z_][A-Za-z0-9_]*` (spaces around the name and the example are ignored); otherwise
//! the prompt is rejected, naming the place.
//!
//! Slots: `{{name}}` stands for the value as is, `{{name|url}}` for it percent-encoded (it sat
//! encoded inside a URL, `%20` for spaces) and `{{name|form}}` for it form-encoded (`+` for
//! spaces). Filling only touches slots of known names; other `{{…}}` text stays.
//!
//! Matching a value in recorded text is whole-value: the value must not continue a word (a
//! letter or digit right before or after an occurrence that starts or ends with one is not
//! a match: `42` is not in `1042`), case-sensitive first, then case-insensitive when there is
//! no exact occurrence. Longer values are matched first, and text already made a slot is
//! never matched again.

use std::collections::BTreeMap;

use super::{ParameterKind, SkillError, SkillParameter, SkillPrompt};

/// One declaration found in a prompt: its byte range, name and example.
struct Declaration<'a> {
    start: usize,
    end: usize,
    name: &'a str,
    example: Option<&'a str>,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// Whether `name` is a valid parameter name.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(is_name_start) && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every declaration of `prompt`, in order.
fn declarations(prompt: &str) -> Result<Vec<Declaration<'_>>, SkillError> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = prompt[at..].find("{{") {
        let start = at + offset;
        let inner_start = start + 2;
        let next = prompt[inner_start..]
            .trim_start_matches([' ', '\t'])
            .chars()
            .next();
        let opens = next.is_some_and(|c| is_name_start(c) || c == '=' || c == '}');
        if !opens {
            at = start + 1;
            continue;
        }
        let Some(close) = prompt[inner_start..].find("}}") else {
            return Err(SkillError::Prompt(format!(
                "the parameter declaration at character {} is not closed with `}}}}`",
                prompt[..start].chars().count()
            )));
        };
        let inner = &prompt[inner_start..inner_start + close];
        let (name, example) = match inner.split_once('=') {
            Some((name, example)) => (name.trim(), Some(example.trim())),
            None => (inner.trim(), None),
        };
        if name.is_empty() {
            return Err(SkillError::Prompt(format!(
                "the parameter declaration `{{{{{inner}}}}}` has no name"
            )));
        }
        if !valid_name(name) {
            return Err(SkillError::Prompt(format!(
                "`{name}` is not a valid parameter name (letters, digits and `_`, not starting with a digit)"
            )));
        }
        let end = inner_start + close + 2;
        found.push(Declaration {
            start,
            end,
            name,
            example,
        });
        at = end;
    }
    Ok(found)
}

/// The kind an example's text suggests: a number, `true`/`false`, else a string.
pub fn infer_kind(example: &str) -> ParameterKind {
    let text = example.trim();
    if text == "true" || text == "false" {
        return ParameterKind::Boolean;
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    let numeric = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.chars().filter(|c| *c == '.').count() <= 1
        && !digits.starts_with('.')
        && !digits.ends_with('.');
    if numeric && text.parse::<f64>().is_ok_and(f64::is_finite) {
        ParameterKind::Number
    } else {
        ParameterKind::String
    }
}

pub(super) fn parse_prompt(prompt: &str) -> Result<SkillPrompt, SkillError> {
    let mut parsed = SkillPrompt::default();
    for declaration in declarations(prompt)? {
        let name = declaration.name;
        if let Some(example) = declaration.example {
            match parsed.examples.get(name) {
                Some(known) if known != example => {
                    return Err(SkillError::Prompt(format!(
                        "parameter `{name}` is declared twice with different examples (`{known}` and `{example}`)"
                    )));
                }
                _ => {
                    parsed.examples.insert(name.to_owned(), example.to_owned());
                }
            }
        }
        if !parsed.parameters.iter().any(|p| p.name == name) {
            parsed.parameters.push(SkillParameter {
                name: name.to_owned(),
                kind: ParameterKind::String,
                required: true,
                default: None,
                description: None,
            });
        }
    }
    for parameter in &mut parsed.parameters {
        if let Some(example) = parsed.examples.get(&parameter.name) {
            parameter.kind = infer_kind(example);
        }
    }
    Ok(parsed)
}

pub(super) fn fill_prompt(
    prompt: &str,
    values: &BTreeMap<String, String>,
) -> Result<String, SkillError> {
    let mut filled = String::with_capacity(prompt.len());
    let mut at = 0;
    let mut examples = BTreeMap::new();
    let found = declarations(prompt)?;
    for declaration in &found {
        if let Some(example) = declaration.example {
            examples.entry(declaration.name).or_insert(example);
        }
    }
    for declaration in found {
        filled.push_str(&prompt[at..declaration.start]);
        let value = values
            .get(declaration.name)
            .map(String::as_str)
            .or_else(|| examples.get(declaration.name).copied())
            .ok_or_else(|| {
                SkillError::Parameters(format!(
                    "parameter `{}` has no value and no example",
                    declaration.name
                ))
            })?;
        filled.push_str(value);
        at = declaration.end;
    }
    filled.push_str(&prompt[at..]);
    Ok(filled)
}

/// How a slot writes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As is.
    Raw,
    /// Percent-encoded (RFC 3986 unreserved characters kept, `%20` for spaces).
    Url,
    /// Form-encoded (`+` for spaces).
    Form,
}

impl Encoding {
    fn suffix(self) -> &'static str {
        match self {
            Encoding::Raw => "",
            Encoding::Url => "|url",
            Encoding::Form => "|form",
        }
    }

    /// `value` written this way.
    pub fn encode(self, value: &str) -> String {
        match self {
            Encoding::Raw => value.to_owned(),
            Encoding::Url => percent_encode(value, false),
            Encoding::Form => percent_encode(value, true),
        }
    }
}

fn percent_encode(value: &str, form: bool) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' if form => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The slot text of parameter `name`.
pub fn slot(name: &str, encoding: Encoding) -> String {
    format!("{{{{{name}{}}}}}", encoding.suffix())
}

/// `text` with every slot of a name in `values` filled (other `{{…}}` text stays).
pub fn fill_slots(text: &str, values: &BTreeMap<String, String>) -> String {
    if !text.contains("{{") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(offset) = text[at..].find("{{") {
        let start = at + offset;
        let Some(close) = text[start + 2..].find("}}") else {
            break;
        };
        let inner = &text[start + 2..start + 2 + close];
        let (name, encoding) = match inner.split_once('|') {
            Some((name, "url")) => (name, Encoding::Url),
            Some((name, "form")) => (name, Encoding::Form),
            Some(_) => (inner, Encoding::Raw),
            None => (inner, Encoding::Raw),
        };
        match values.get(name) {
            Some(value) => {
                out.push_str(&text[at..start]);
                out.push_str(&encoding.encode(value));
                at = start + 2 + close + 2;
            }
            None => {
                out.push_str(&text[at..start + 1]);
                at = start + 1;
            }
        }
    }
    out.push_str(&text[at..]);
    out
}

/// Byte ranges of slots already in `text`, and of `<secret>…</secret>` placeholders (never
/// matched: a secret's name is no value).
fn protected_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut ranges = slot_ranges(text);
    let mut at = 0;
    while let Some(offset) = text[at..].find("<secret>") {
        let start = at + offset;
        let end = text[start..]
            .find("</secret>")
            .map_or(text.len(), |e| start + e + "</secret>".len());
        ranges.push((start, end));
        at = end;
    }
    ranges
}

/// Byte ranges of slots already in `text`.
fn slot_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut at = 0;
    while let Some(offset) = text[at..].find("{{") {
        let start = at + offset;
        let Some(close) = text[start + 2..].find("}}") else {
            break;
        };
        let inner = &text[start + 2..start + 2 + close];
        let name = inner.split_once('|').map_or(inner, |(n, _)| n);
        if valid_name(name) {
            ranges.push((start, start + 2 + close + 2));
            at = start + 2 + close + 2;
        } else {
            at = start + 1;
        }
    }
    ranges
}

fn word_char(c: Option<char>) -> bool {
    c.is_some_and(char::is_alphanumeric)
}

/// Byte ranges where `needle` occurs in `text` as a whole value, outside slots; exact
/// occurrences, or case-insensitive ones when there is no exact one.
pub fn occurrences(text: &str, needle: &str) -> Vec<(usize, usize)> {
    if needle.is_empty() || text.len() < needle.len() {
        return Vec::new();
    }
    let slots = protected_ranges(text);
    let exact = find_all(text, needle, &slots, false);
    if !exact.is_empty() {
        return exact;
    }
    find_all(text, needle, &slots, true)
}

fn find_all(text: &str, needle: &str, slots: &[(usize, usize)], fold: bool) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let starts_word = word_char(needle.chars().next());
    let ends_word = word_char(needle.chars().next_back());
    let mut start = 0;
    while start < text.len() {
        if !text.is_char_boundary(start) {
            start += 1;
            continue;
        }
        let end = match_at(text, start, needle, fold);
        if let Some(end) = end {
            let before = text[..start].chars().next_back();
            let after = text[end..].chars().next();
            let joined = (starts_word && word_char(before)) || (ends_word && word_char(after));
            let whole = !joined;
            let in_slot = slots.iter().any(|(s, e)| start < *e && end > *s);
            if whole && !in_slot {
                found.push((start, end));
                start = end;
                continue;
            }
        }
        start += 1;
    }
    found
}

/// End of `needle` if it occurs at byte `start` of `text`.
fn match_at(text: &str, start: usize, needle: &str, fold: bool) -> Option<usize> {
    if !fold {
        return text[start..]
            .starts_with(needle)
            .then(|| start + needle.len());
    }
    let mut rest = text[start..].char_indices();
    for wanted in needle.chars() {
        let (_, got) = rest.next()?;
        if !got.to_lowercase().eq(wanted.to_lowercase()) {
            return None;
        }
    }
    Some(rest.next().map_or(text.len(), |(i, _)| start + i))
}

/// Whether `text` shows `value` as a whole value.
pub fn shows(text: &str, value: &str) -> bool {
    !value.trim().is_empty() && !occurrences(text, value.trim()).is_empty()
}

/// Whether `text` shows `value` as a whole value with the same case.
pub fn shows_exactly(text: &str, value: &str) -> bool {
    let value = value.trim();
    !value.is_empty() && !find_all(text, value, &protected_ranges(text), false).is_empty()
}

/// `text` with every whole-value occurrence of each value replaced by its slot; `values` is
/// (name, value), and longer values go first. In text that looks like a URL, the value's
/// percent- and form-encoded forms are made `|url` / `|form` slots too.
pub fn make_slots(text: &str, values: &[(String, String)]) -> String {
    let mut ordered: Vec<&(String, String)> = values
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .collect();
    ordered.sort_by_key(|(_, v)| std::cmp::Reverse(v.chars().count()));
    let url_like = text.contains("://") || text.starts_with('/') || text.starts_with('?');
    let mut out = text.to_owned();
    for (name, value) in ordered {
        out = replace_whole(&out, value, &slot(name, Encoding::Raw));
        if url_like {
            for encoding in [Encoding::Url, Encoding::Form] {
                let encoded = encoding.encode(value);
                if encoded != *value {
                    out = replace_whole(&out, &encoded, &slot(name, encoding));
                }
            }
        }
    }
    out
}

fn replace_whole(text: &str, needle: &str, with: &str) -> String {
    let found = occurrences(text, needle);
    if found.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in found {
        out.push_str(&text[at..start]);
        out.push_str(with);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// Whether `text` holds a slot of one of the names.
pub fn has_slot(text: &str) -> bool {
    !slot_ranges(text).is_empty()
}

#[cfg(test)]
mod tests;
