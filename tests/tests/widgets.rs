//! The agent on real component libraries: `browserd run` (real Chromium, the mock model whose
//! answers depend only on the page text it is shown) on the widget corpus of
//! `browserd_tests::widgets` — React 19 + MUI, react-window, Shoelace, Flatpickr, Tom Select and
//! Quill from npm (pinned, installed and bundled once by `scripts/widgets`), an
//! IntersectionObserver feed, and a Gradio and a Streamlit app from PyPI. Each scenario picks elements by their
//! text and ends with an assertion on what the app received.

use browserd_tests::widgets::{self, GradioApp, StreamlitApp, run};

/// Runs the npm-bundled scenario `name` and checks what its page submitted.
async fn scenario(name: &str) -> widgets::Outcome {
    let scenario = widgets::scenarios()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap();
    let (first, second, submitted) = widgets::start_server_pair().await;
    let url = scenario.url(first, second);
    let outcome = run(scenario.task, &url, (scenario.brain)(), scenario.max_steps).await;
    assert!(outcome.exited_ok, "{}", outcome.explain());
    assert_eq!(
        submitted.of(scenario.page),
        (scenario.expected)(),
        "{}",
        outcome.explain()
    );
    outcome
}

/// React 19 + MUI: controlled text and number fields, a Select, an Autocomplete, a Dialog.
#[tokio::test]
async fn mui_order_form() {
    scenario("mui").await;
}

/// Shoelace: inputs, a select and a checkbox inside shadow roots.
#[tokio::test]
async fn shoelace_subscription() {
    scenario("shoelace").await;
}

/// Flatpickr: a date chosen in its calendar overlay.
#[tokio::test]
async fn flatpickr_date() {
    scenario("flatpickr").await;
}

/// Tom Select: a searchable select whose options exist only in its dropdown.
#[tokio::test]
async fn tom_select_language() {
    scenario("tomselect").await;
}

/// Quill: a contenteditable rich-text editor.
#[tokio::test]
async fn quill_note() {
    scenario("quill").await;
}

/// react-window: a virtualised list scrolled until the row exists.
#[tokio::test]
async fn react_window_virtual_list() {
    scenario("virtual").await;
}

/// An IntersectionObserver feed that grows on scroll.
#[tokio::test]
async fn intersection_observer_feed() {
    scenario("feed").await;
}

/// Vue + Quasar with the state on the server (set over its WebSocket 300 ms after a click): a
/// QToggle and a QCheckbox clicked once each (the order records one toggle of each), then the
/// order placed with gift wrap.
#[tokio::test]
async fn quasar_server_driven_toggle_and_checkbox() {
    let outcome = scenario("quasar-order").await;
    // The start URL, the toggle, the box, the order, done.
    assert_eq!(outcome.steps(), 5, "{}", outcome.explain());
}

/// A Quasar table in an iframe of another origin of the same site: the row's box and "Archive
/// selected" are real clicks in the frame, the capture after the press shows the server's
/// answer (400 ms later, over the frame's WebSocket), and the server archives once.
#[tokio::test]
async fn quasar_table_in_a_same_site_frame_archives_once() {
    let outcome = scenario("quasar-shipments-same-site").await;
    // The start URL, the box, the press, done.
    assert_eq!(outcome.steps(), 4, "{}", outcome.explain());
}

/// The same in an iframe of another site (out of process).
#[tokio::test]
async fn quasar_table_in_a_cross_site_frame_archives_once() {
    let outcome = scenario("quasar-shipments-cross-site").await;
    assert_eq!(outcome.steps(), 4, "{}", outcome.explain());
}

/// "Checking availability…" for 2.5 s: one `wait` (which lasts until the message is replaced),
/// then the booking.
#[tokio::test]
async fn quasar_one_wait_for_a_loading_message() {
    let outcome = scenario("quasar-availability").await;
    // The start URL, one wait, the booking, done.
    assert_eq!(outcome.steps(), 4, "{}", outcome.explain());
}

/// Gradio (PyPI): a Number typed into, a Dropdown, Tabs; the app's server logs what it got.
#[tokio::test]
async fn gradio_number_and_dropdown() {
    let app = GradioApp::start().await;
    let outcome = run(widgets::GRADIO_TASK, &app.url, widgets::gradio_brain(), 12).await;
    assert!(outcome.exited_ok, "{}", outcome.explain());
    assert_eq!(
        app.received(),
        vec![widgets::gradio_expected()],
        "{}",
        outcome.explain()
    );
}

/// Streamlit (PyPI): the checkbox ticked and the button pressed in one step; the button's
/// result comes over the app's WebSocket after ~400 ms of server work. The app's log holds one
/// press, with the box ticked: a capture taken before the answer was rendered would have made
/// the model press again.
#[tokio::test]
async fn streamlit_checkbox_and_button_in_one_step() {
    let app = StreamlitApp::start().await;
    let outcome = run(
        widgets::STREAMLIT_TASK,
        &app.url,
        widgets::streamlit_brain(),
        8,
    )
    .await;
    assert!(outcome.exited_ok, "{}", outcome.explain());
    assert_eq!(
        app.received(),
        vec![widgets::streamlit_expected()],
        "{}",
        outcome.explain()
    );
}
