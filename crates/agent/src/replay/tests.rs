//! Retry waits and finding a recorded element again.

use super::*;

/// The waits a replay makes for an action that fails every attempt.
fn waits(first: Duration, max_retries: u32) -> Vec<Duration> {
    let mut waited = Duration::ZERO;
    let mut waits = Vec::new();
    for retry in 0..max_retries {
        let Some(wait) = retry_wait(first, retry, waited) else {
            break;
        };
        waited += wait;
        waits.push(wait);
    }
    waits
}

#[test]
fn retry_waits_double_up_to_their_caps() {
    // The default doubles as before while it is far from the caps.
    assert_eq!(
        waits(Duration::from_millis(500), 2),
        [Duration::from_millis(500), Duration::from_secs(1)]
    );
    // Each wait is capped at 60 s and all of them at 120 s: 10 retries doubling from
    // 60 s (about 17 hours uncapped) wait 2 minutes.
    assert_eq!(
        waits(Duration::from_secs(60), 10),
        [MAX_RETRY_WAIT, MAX_RETRY_WAIT]
    );
    let long = waits(Duration::from_millis(500), 10);
    assert_eq!(
        long[..7],
        [500, 1000, 2000, 4000, 8000, 16_000, 32_000].map(Duration::from_millis)
    );
    assert_eq!(long.iter().sum::<Duration>(), MAX_RETRY_WAITS);
    for first_ms in [0, 1, 250, 500, 7_000, 30_000, 59_999, 60_000] {
        for max_retries in 0..=10 {
            let first = Duration::from_millis(first_ms);
            let waits = waits(first, max_retries);
            assert!(
                waits.iter().all(|w| *w <= MAX_RETRY_WAIT),
                "{first_ms}: {waits:?}"
            );
            assert!(
                waits.iter().sum::<Duration>() <= MAX_RETRY_WAITS,
                "{first_ms} ms × {max_retries}: {waits:?}"
            );
        }
    }
    // No delay asked: every retry is made, at once.
    assert_eq!(waits(Duration::ZERO, 10), [Duration::ZERO; 10]);
    // Far retries do not overflow.
    assert_eq!(
        retry_wait(Duration::from_secs(1), 200, Duration::ZERO),
        Some(MAX_RETRY_WAIT)
    );
    assert_eq!(retry_wait(Duration::from_secs(1), 0, MAX_RETRY_WAITS), None);
}

fn element(index: u64, tag: &str, name: &str, x_path: &str, hash: &str) -> InteractedElement {
    InteractedElement {
        index,
        node_name: tag.into(),
        ax_name: (!name.is_empty()).then(|| name.into()),
        x_path: Some(x_path.into()),
        element_hash: Some(hash.into()),
        ..InteractedElement::default()
    }
}

#[test]
fn the_same_index_wins_when_the_identity_is_unchanged() {
    let recorded = element(7, "button", "Buy", "html/body/button", "h1");
    let now = [element(7, "button", "Buy", "html/body/button", "h1")];
    assert_eq!(find_element(&recorded, &now), Some((7, MatchedBy::Index)));
}

#[test]
fn a_moved_element_is_found_by_its_hash_then_its_xpath_then_its_name() {
    let recorded = element(7, "button", "Buy", "html/body/ul/li[1]/button", "h1");
    let moved = [
        element(7, "button", "Other", "html/body/ul/li[1]/button", "h2"),
        element(9, "button", "Buy", "html/body/ul/li[2]/button", "h1"),
    ];
    assert_eq!(find_element(&recorded, &moved), Some((9, MatchedBy::Hash)));
    let renamed_attrs = [element(
        12,
        "button",
        "Buy",
        "html/body/ul/li[1]/button",
        "h3",
    )];
    assert_eq!(
        find_element(&recorded, &renamed_attrs),
        Some((12, MatchedBy::XPath))
    );
    let elsewhere = [element(15, "button", "Buy", "html/body/div/button", "h4")];
    assert_eq!(
        find_element(&recorded, &elsewhere),
        Some((15, MatchedBy::AxName))
    );
}

#[test]
fn another_element_at_the_recorded_place_or_an_ambiguous_match_is_a_miss() {
    let recorded = element(7, "button", "Buy cable", "html/body/ul/li[1]/button", "h1");
    let replaced = [element(
        7,
        "button",
        "Buy hub",
        "html/body/ul/li[1]/button",
        "h2",
    )];
    assert_eq!(find_element(&recorded, &replaced), None);
    let twins = [
        element(3, "button", "Buy cable", "html/body/div[1]/button", "h5"),
        element(4, "button", "Buy cable", "html/body/div[2]/button", "h6"),
    ];
    assert_eq!(find_element(&recorded, &twins), None);
    let same_hash_twice = [
        element(3, "button", "Buy cable", "a", "h1"),
        element(4, "button", "Buy cable", "b", "h1"),
    ];
    assert_eq!(find_element(&recorded, &same_hash_twice), None);
}
