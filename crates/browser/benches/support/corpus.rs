//! What the browser benches share: the capture corpus (pages of the Rust toolchain's HTML docs,
//! served over local HTTP by `tests/support/http.rs`) and the median of a run's samples.

use std::time::Duration;

/// The corpus pages, relative to the toolchain's `share/doc/rust/html`.
pub const PAGES: [&str; 7] = [
    "std/index.html",
    "std/iter/trait.Iterator.html",
    "std/vec/struct.Vec.html",
    "book/ch04-01-what-is-ownership.html",
    "book/print.html",
    "src/std/path.rs.html",
    "cargo/index.html",
];

/// Median of `v` (the mean of the middle two for an even count; 0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
