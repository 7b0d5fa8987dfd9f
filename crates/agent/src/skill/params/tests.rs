//! Declarations, slots and whole-value matching.

use super::*;

fn names(prompt: &SkillPrompt) -> Vec<(&str, ParameterKind, bool)> {
    prompt
        .parameters
        .iter()
        .map(|p| (p.name.as_str(), p.kind, p.required))
        .collect()
}

#[test]
fn declarations_with_and_without_examples_infer_their_kind() {
    let parsed = parse_prompt(
        "Check order {{order=1042}} for {{ customer = Ada Lovelace }}, gift {{gift=true}}, \
         price {{price=-12.5}}, note {{note}}, again {{order}}.",
    )
    .unwrap();
    assert_eq!(
        names(&parsed),
        [
            ("order", ParameterKind::Number, true),
            ("customer", ParameterKind::String, true),
            ("gift", ParameterKind::Boolean, true),
            ("price", ParameterKind::Number, true),
            ("note", ParameterKind::String, true),
        ]
    );
    assert_eq!(parsed.examples["customer"], "Ada Lovelace");
    assert_eq!(parsed.examples["order"], "1042");
    assert!(!parsed.examples.contains_key("note"));
}

#[test]
fn kinds_are_inferred_strictly() {
    assert_eq!(infer_kind("1042"), ParameterKind::Number);
    assert_eq!(infer_kind("3.14"), ParameterKind::Number);
    assert_eq!(infer_kind("1e5"), ParameterKind::String);
    assert_eq!(infer_kind("007a"), ParameterKind::String);
    assert_eq!(infer_kind("1."), ParameterKind::String);
    assert_eq!(infer_kind("True"), ParameterKind::String);
    assert_eq!(infer_kind("false"), ParameterKind::Boolean);
    assert_eq!(infer_kind(""), ParameterKind::String);
}

#[test]
fn duplicates_agree_or_are_rejected() {
    let same = parse_prompt("{{a=1}} and {{a=1}} and {{a}}").unwrap();
    assert_eq!(same.parameters.len(), 1);
    let late_example = parse_prompt("{{a}} then {{a=x}}").unwrap();
    assert_eq!(late_example.examples["a"], "x");
    let error = parse_prompt("{{a=1}} and {{a=2}}").unwrap_err();
    assert!(matches!(&error, SkillError::Prompt(m) if m.contains("`a`") && m.contains("twice")));
}

#[test]
fn malformed_declarations_are_rejected_and_json_braces_are_text() {
    let unclosed = parse_prompt("Find {{order=1042 and stop").unwrap_err();
    assert!(matches!(&unclosed, SkillError::Prompt(m) if m.contains("character 5")));
    assert!(
        matches!(parse_prompt("a {{}} b"), Err(SkillError::Prompt(m)) if m.contains("no name"))
    );
    assert!(matches!(
        parse_prompt("a {{ =x}} b"),
        Err(SkillError::Prompt(_))
    ));
    assert!(
        matches!(parse_prompt("{{first-name}}"), Err(SkillError::Prompt(m)) if m.contains("first-name"))
    );
    // JSON in the prompt is not a declaration.
    let json = parse_prompt(r#"Answer as {{"status": "x"}} or {"a": {"b": 1}} or {{{item=pen}}}"#)
        .unwrap();
    assert_eq!(names(&json), [("item", ParameterKind::String, true)]);
    assert!(parse_prompt("{{1abc}}").unwrap().parameters.is_empty());
}

#[test]
fn fill_prompt_uses_values_then_examples() {
    let values = BTreeMap::from([("order".to_owned(), "77".to_owned())]);
    let filled = fill_prompt(
        "Order {{ order = 1042 }} of {{who=Ada}}; keep {{\"json\": 1}}",
        &values,
    )
    .unwrap();
    assert_eq!(filled, "Order 77 of Ada; keep {{\"json\": 1}}");
    let missing = fill_prompt("for {{who}}", &BTreeMap::new()).unwrap_err();
    assert!(matches!(missing, SkillError::Parameters(m) if m.contains("`who`")));
}

#[test]
fn whole_values_match_exactly_first_then_ignoring_case() {
    assert_eq!(occurrences("Order 1042 and 21042", "1042"), [(6, 10)]);
    assert!(occurrences("x1042", "1042").is_empty());
    assert_eq!(occurrences("/orders/1042?x=1", "1042"), [(8, 12)]);
    // An exact occurrence wins over case-insensitive ones.
    assert_eq!(occurrences("PARIS and Paris", "Paris"), [(10, 15)]);
    assert_eq!(occurrences("PARIS only", "Paris"), [(0, 5)]);
    assert!(shows("Row: Blue Shirt — 12 €", "blue shirt"));
    assert!(!shows("anything", "  "));
    // Values with non-word edges match anywhere.
    assert_eq!(occurrences("a(b)c", "(b)"), [(1, 4)]);
}

#[test]
fn longer_values_go_first_and_slots_are_not_matched_again() {
    let values = [
        ("city".to_owned(), "York".to_owned()),
        ("place".to_owned(), "New York".to_owned()),
    ];
    assert_eq!(
        make_slots("From New York to York", &values),
        "From {{place}} to {{city}}"
    );
}

#[test]
fn urls_get_encoded_slots() {
    let values = [("q".to_owned(), "blue shirt".to_owned())];
    assert_eq!(
        make_slots(
            "https://shop.test/search?q=blue+shirt&x=blue%20shirt",
            &values
        ),
        "https://shop.test/search?q={{q|form}}&x={{q|url}}"
    );
    let filled = fill_slots(
        "https://shop.test/search?q={{q|form}}&x={{q|url}}&raw={{q}}&other={{zz}}",
        &BTreeMap::from([("q".to_owned(), "red & blue".to_owned())]),
    );
    assert_eq!(
        filled,
        "https://shop.test/search?q=red+%26+blue&x=red%20%26%20blue&raw=red & blue&other={{zz}}"
    );
    // Not a URL: no encoded forms.
    assert_eq!(make_slots("blue+shirt", &values), "blue+shirt");
}
