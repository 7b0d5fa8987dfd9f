//! The page a replayed step must reach: two URLs are the same place when their origins are
//! equal and their paths are equal once ids are wildcards (UUIDs, hex runs of 8 or more
//! characters, digit runs), a trailing `/` aside; the query and the fragment are ignored.
//! `/orders/1042/edit` and `/orders/77/edit` are the same place; `/orders` and `/cart` are not.

use std::sync::LazyLock;

use regex::Regex;

static IDS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{8,}|[0-9]+",
    )
    .expect("valid regex")
});

/// `url` reduced to what [`same_place`] compares.
pub fn place(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) if parsed.has_host() => {
            let path = IDS.replace_all(parsed.path(), "*");
            let path = path.trim_end_matches('/');
            format!("{}{}", parsed.origin().ascii_serialization(), path)
        }
        _ => url.split(['?', '#']).next().unwrap_or(url).to_owned(),
    }
}

/// Whether `expected` and `actual` are the same place (see the module).
pub fn same_place(expected: &str, actual: &str) -> bool {
    place(expected) == place(actual)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_query_and_fragment_do_not_make_another_place() {
        assert!(same_place(
            "https://shop.test/orders/1042/edit?x=1",
            "https://shop.test/orders/77/edit#top"
        ));
        assert!(same_place(
            "https://shop.test/cart/",
            "https://shop.test/cart"
        ));
        assert!(same_place(
            "https://shop.test/o/550e8400-e29b-41d4-a716-446655440000",
            "https://shop.test/o/6ba7b810-9dad-11d1-80b4-00c04fd430c8"
        ));
        assert!(same_place(
            "https://shop.test/s/deadbeefcafe",
            "https://shop.test/s/0123456789ab"
        ));
        assert!(!same_place(
            "https://shop.test/orders",
            "https://shop.test/cart"
        ));
        assert!(!same_place(
            "https://shop.test/cart",
            "http://shop.test/cart"
        ));
        assert!(!same_place(
            "https://shop.test/cart",
            "https://shop.test:8443/cart"
        ));
        assert!(!same_place("https://a.test/x", "https://b.test/x"));
        assert!(!same_place(
            "https://shop.test/beef",
            "https://shop.test/cafe"
        ));
        assert!(same_place("about:blank", "about:blank"));
        assert!(!same_place("about:blank", "https://shop.test/"));
    }
}
