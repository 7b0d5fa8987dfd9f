//! Page capture against real Chromium on local fixture pages.

mod support;

use browserd_browser::{CaptureOptions, PageState, ScreenshotFormat};
use support::{assert_golden, capture, line_with, open, rt};

fn element_by_id<'a>(state: &'a PageState, id: &str) -> Option<&'a browserd_browser::ElementInfo> {
    state
        .selector_map
        .values()
        .map(|e| e.as_ref())
        .find(|e| e.attr("id") == Some(id))
}

fn indexed(state: &PageState, id: &str) -> bool {
    element_by_id(state, id).is_some()
}

#[test]
fn interactivity_rules_in_order() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "rules.html").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        for id in [
            "js-listener", "wrap-label", "wrapped-input", "wrap-span", "span-checkbox",
            "plain-search", "editable", "link", "button", "select", "textarea",
            "onclick", "tabindex", "role-button", "icon", "pointer", "password", "prefilled",
        ] {
            assert!(indexed(&state, id), "#{id} should be indexed:\n{text}");
        }
        for id in ["for-label", "disabled-button", "plain", "display-none", "far-below"] {
            assert!(!indexed(&state, id), "#{id} must not be indexed:\n{text}");
        }
        // Live value of the input, never the password.
        assert!(text.contains("value=changed by script"), "{text}");
        assert!(!text.contains("hunter2"), "password value leaked:\n{text}");
        assert!(!format!("{:?}", state.selector_map).contains("hunter2"));
        // Compound controls and format hints.
        let select = line_with(text, "name=choice").expect("select line");
        assert!(select.contains("compound_components=(name=Dropdown Toggle,role=button),(name=Options,role=listbox,count=2,options=Alpha|Beta)"), "{select}");
        let number = line_with(text, "name=count").expect("number line");
        assert!(number.contains("(name=Value,role=textbox,min=1.0,max=9.0)"), "{number}");
        let date = line_with(text, "name=date").expect("date line");
        assert!(date.contains("format=YYYY-MM-DD") && date.contains("placeholder=YYYY-MM-DD"), "{date}");
        assert!(text.starts_with("[Start of page]\n"), "{text}");
        assert!(!text.ends_with("[End of page]"), "page continues below:\n{text}");
        assert!(state.page_info.pixels_below > 0);
        assert_golden("rules", &state.llm_text);
        session.release().await;
    });
}

#[test]
fn same_and_cross_origin_iframes() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "frames.html").await;
        // Let the cross-origin frame load (a page load: capped at 30 s for a loaded machine).
        let mut state = capture(&session).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if state.llm_text.contains("Button in cross frame") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            state = capture(&session).await;
        }
        let text = &state.llm_text;
        assert!(text.contains("Button in same frame"), "{text}");
        assert!(text.contains("Button in cross frame"), "{text}");
        let buttons: Vec<_> = state
            .selector_map
            .values()
            .filter(|e| e.attr("id") == Some("child-button"))
            .collect();
        assert_eq!(buttons.len(), 2, "one button per frame: {text}");
        let cross = buttons
            .iter()
            .find(|b| b.text.contains("cross"))
            .expect("cross-origin button");
        let same = buttons
            .iter()
            .find(|b| b.text.contains("same"))
            .expect("same-origin button");
        let main_target = session.focused_target().await.unwrap();
        assert_ne!(
            cross.target_id, main_target,
            "cross-origin frame has its own target"
        );
        assert_eq!(same.target_id, main_target);
        // Absolute bounds include the iframe offset.
        let cross_frame = element_by_id(&state, "cross").expect("cross iframe indexed");
        let cb = cross.absolute_bounds.unwrap();
        let fb = cross_frame.absolute_bounds.unwrap();
        assert!(cb.x >= fb.x && cb.y >= fb.y, "{cb:?} inside {fb:?}");
        assert!(
            text.contains("|scroll element[") && text.contains("<iframe"),
            "{text}"
        );
        // The escape hatch reaches the cross-origin target.
        let answer = session
            .cdp(
                Some(&cross.target_id),
                "Runtime.evaluate",
                serde_json::json!({"expression": "location.hostname", "returnByValue": true}),
            )
            .await
            .unwrap();
        assert!(answer.as_str().contains("localhost"), "{}", answer.as_str());
        assert_golden("frames", text);
        session.release().await;
    });
}

#[test]
fn open_and_closed_shadow_dom() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "shadow.html").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        assert!(text.contains("|SHADOW(open)|"), "{text}");
        assert!(text.contains("|SHADOW(closed)|"), "{text}");
        assert!(
            text.contains("Open Shadow")
                && text.contains("Closed Shadow")
                && text.contains("Shadow End"),
            "{text}"
        );
        assert!(
            indexed(&state, "open-button") && indexed(&state, "closed-input"),
            "{text}"
        );
        assert!(
            element_by_id(&state, "closed-input")
                .unwrap()
                .in_shadow_root
        );
        assert_eq!(state.stats.shadow_open, 1);
        assert_eq!(state.stats.shadow_closed, 1);
        assert_golden("shadow", text);
        session.release().await;
    });
}

#[test]
fn scroll_containers_report_pages() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "scroll.html").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        let list = line_with(text, "|scroll element").expect("scroll container line");
        assert!(list.contains("pages above") && list.contains("pages below"), "{list}");
        // The list has no interactive descendants → it is itself indexed.
        assert!(indexed(&state, "list"), "{text}");
        // The listbox is a dropdown container → indexed even with option children.
        assert!(indexed(&state, "menu"), "{text}");
        assert!(element_by_id(&state, "list").unwrap().is_scrollable);
        // Scroll the page: pixels above appear and the start marker goes away.
        session.cdp(Some(&session.focused_target().await.unwrap()), "Runtime.evaluate",
            serde_json::json!({"expression": "window.scrollTo(0, document.documentElement.scrollHeight)"})).await.unwrap();
        let scrolled = capture(&session).await;
        assert!(scrolled.page_info.pixels_above >= 1000, "{:?}", scrolled.page_info);
        assert!(!scrolled.llm_text.starts_with("[Start of page]"));
        assert!(scrolled.llm_text.ends_with("[End of page]"), "{}", scrolled.llm_text);
        assert!(scrolled.llm_text.contains("bottom link"));
        assert_golden("scroll", text);
        session.release().await;
    });
}

/// An unscaled screenshot is taken from the view (no surface copy is kept in the GPU process):
/// it shows the scrolled page with its fixed box, pixel for pixel what the surface path gives,
/// and a change made just before it.
#[test]
fn unscaled_screenshot_shows_the_scrolled_page_as_the_surface_does() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "screenshot.html").await;
        let target = session.focused_target().await.unwrap();
        let eval = |expression: &str| {
            session.cdp(
                Some(&target),
                "Runtime.evaluate",
                serde_json::json!({"expression": expression}),
            )
        };
        eval("window.scrollTo(0, 1900)").await.unwrap();
        let decode = |data: &[u8]| {
            image::load_from_memory_with_format(data, image::ImageFormat::Png)
                .unwrap()
                .into_rgb8()
        };
        let view = session
            .viewport_screenshot(ScreenshotFormat::Png, None)
            .await
            .unwrap();
        let view = decode(&view.data);
        let surface = session
            .cdp(
                Some(&target),
                "Page.captureScreenshot",
                serde_json::json!({"format": "png"}),
            )
            .await
            .unwrap()
            .decode::<serde_json::Value>()
            .unwrap();
        let surface = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            surface["data"].as_str().unwrap(),
        )
        .unwrap();
        let surface = decode(&surface);
        assert_eq!(view.dimensions(), (1920, 1080));
        assert!(view == surface, "the view and the surface differ");
        // The block (document y 2000–2200) is 100–300 px down the scrolled viewport; the fixed
        // box stays in the top right corner (left of the scrollbar).
        assert_eq!(view.get_pixel(200, 200).0, [200, 0, 0]);
        assert_eq!(view.get_pixel(200, 50).0, [255, 255, 255]);
        let right = 1920 - 1 - 20;
        assert_eq!(view.get_pixel(right, 50).0, [0, 160, 0]);
        // A change right before the screenshot is in it.
        eval("document.getElementById('fixed').style.background = 'rgb(0, 0, 200)'")
            .await
            .unwrap();
        let changed = session
            .viewport_screenshot(ScreenshotFormat::Png, None)
            .await
            .unwrap();
        assert_eq!(decode(&changed.data).get_pixel(right, 50).0, [0, 0, 200]);
        session.release().await;
    });
}

#[test]
fn element_behind_modal_is_hidden() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "modal.html").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        assert!(indexed(&state, "close"), "{text}");
        assert!(
            !indexed(&state, "behind"),
            "covered button must not be indexed:\n{text}"
        );
        assert!(!text.contains("Text behind the modal"), "{text}");
        assert!(text.contains("Dialog text"));
        assert_golden("modal", text);
        session.release().await;
    });
}

#[test]
fn five_thousand_elements_and_new_marks() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "big.html").await;
        let first = capture(&session).await;
        assert!(first.selector_map.len() > 100, "{}", first.selector_map.len());
        assert!(!first.llm_text.contains("*["), "nothing is new on the first capture");
        // Elements far below the viewport band are not listed.
        assert!(!first.llm_text.contains("btn 4998"));
        // Add an element: only it is marked new.
        let target = session.focused_target().await.unwrap();
        session.cdp(Some(&target), "Runtime.evaluate", serde_json::json!({"expression":
            "const b=document.createElement('button');b.id='fresh';b.textContent='fresh';document.body.prepend(b)"}))
            .await.unwrap();
        let second = capture(&session).await;
        let new: Vec<_> = second.selector_map.values().filter(|e| e.is_new).collect();
        assert_eq!(new.len(), 1, "exactly the new button is new");
        assert_eq!(new[0].attr("id"), Some("fresh"));
        assert!(second.llm_text.contains(&format!("*[{}]<button", new[0].index)));
        session.release().await;
    });
}

/// (width, height) from a JPEG's start-of-frame segment.
fn jpeg_size(data: &[u8]) -> (u32, u32) {
    let mut at = 2;
    while at + 9 < data.len() {
        assert_eq!(data[at], 0xFF, "JPEG segment marker at {at}");
        let marker = data[at + 1];
        let len = usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]]));
        if matches!(marker, 0xC0..=0xC3) {
            let height = u16::from_be_bytes([data[at + 5], data[at + 6]]);
            let width = u16::from_be_bytes([data[at + 7], data[at + 8]]);
            return (width.into(), height.into());
        }
        at += 2 + len;
    }
    panic!("no JPEG frame header");
}

#[test]
fn screenshot_in_same_capture() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "modal.html").await;
        let jpeg = session
            .capture(&CaptureOptions {
                screenshot: Some(ScreenshotFormat::Jpeg { quality: 60 }),
                ..Default::default()
            })
            .await
            .unwrap();
        let shot = jpeg.screenshot.expect("jpeg");
        assert_eq!(&shot.data[..3], &[0xFF, 0xD8, 0xFF]);
        // The whole 1920×1080 viewport, or scaled by Chrome to fit a budget.
        assert_eq!((shot.width, shot.height), (1920, 1080));
        assert_eq!(jpeg_size(&shot.data), (1920, 1080));
        let scaled = session
            .capture(&CaptureOptions {
                screenshot: Some(ScreenshotFormat::Jpeg { quality: 60 }),
                screenshot_max_size: Some((1280, 800)),
                ..Default::default()
            })
            .await
            .unwrap()
            .screenshot
            .expect("scaled jpeg");
        assert_eq!((scaled.width, scaled.height), (1280, 720));
        assert_eq!(jpeg_size(&scaled.data), (1280, 720));
        let alone = session
            .viewport_screenshot(ScreenshotFormat::Jpeg { quality: 60 }, Some((1280, 800)))
            .await
            .unwrap();
        assert_eq!(jpeg_size(&alone.data), (1280, 720));
        let png = session
            .capture(&CaptureOptions {
                screenshot: Some(ScreenshotFormat::Png),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(&png.screenshot.expect("png").data[..4], b"\x89PNG");
        assert!(capture(&session).await.screenshot.is_none());
        session.release().await;
    });
}

#[test]
fn text_cap_and_tabs() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "big.html").await;
        let state = session
            .capture(&CaptureOptions {
                max_text_len: 500,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(state.truncated);
        assert_eq!(state.truncation_note(500), " (truncated to 500 characters)");
        assert!(
            state.llm_text.chars().count()
                <= 500 + "[Start of page]\n".len() + "\n[End of page]".len()
        );
        let tab = session
            .new_tab(&format!("http://{}/rules.html", support::server().await))
            .await
            .unwrap();
        let tabs = session.tabs().await.unwrap();
        assert_eq!(tabs.len(), 2);
        let short = &tabs.iter().find(|t| t.target_id == tab).unwrap().tab_id;
        assert_eq!(short.len(), 4);
        assert!(tab.ends_with(short.as_str()));
        let state = capture(&session).await;
        assert_eq!(state.focused_tab.as_deref(), Some(short.as_str()));
        assert_eq!(state.title, "Rules");
        session
            .switch_tab(&tabs.iter().find(|t| t.target_id != tab).unwrap().tab_id)
            .await
            .unwrap();
        assert_eq!(capture(&session).await.title, "Big");
        session.release().await;
    });
}

/// browser-use's bounded listener probe: up to 100 listener-bearing elements are all marked
/// (click/mousedown/pointerdown alike, keydown not); above 100 the probe marks none.
#[test]
fn click_listener_probe_is_bounded() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "listeners.html#100").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        assert!(
            indexed(&state, "pointer-only"),
            "pointerdown listener:\n{text}"
        );
        for i in [0, 1, 50, 98] {
            assert!(
                indexed(&state, &format!("l{i}")),
                "#l{i} has a listener:\n{text}"
            );
        }
        assert!(
            !indexed(&state, "keydown-only"),
            "keydown is not a click listener:\n{text}"
        );
        session.release().await;

        let session = open(&guard, "listeners.html#101").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        for id in ["pointer-only", "l0", "l1", "l99", "keydown-only"] {
            assert!(
                !indexed(&state, id),
                "#{id}: over 100 matches the probe marks none:\n{text}"
            );
        }
        session.release().await;
    });
}

/// A small but very deep DOM: the capture must not overflow a runtime worker's stack (deep
/// trees are serialized on the large-stack capture thread) and still finds the button.
#[test]
fn deep_small_dom_is_captured() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "deep.html").await;
        let state = capture(&session).await;
        assert!(indexed(&state, "deep-button"), "{}", state.llm_text);
        assert!(state.llm_text.contains("Deep button"), "{}", state.llm_text);
        session.release().await;
    });
}

/// An indexed element as both implementations can name it: tag + identity attributes.
fn identity(
    tag: &str,
    attributes: impl Iterator<Item = (String, String)>,
    keys: &[String],
) -> String {
    let mut attrs: Vec<(String, String)> = attributes.filter(|(k, _)| keys.contains(k)).collect();
    attrs.sort();
    let attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("<{tag} {}>", attrs.join(" "))
}

/// The rustdoc page (a copy of the toolchain's std/index.html with its CSS/JS) at the default
/// 1920×1080 viewport indexes exactly the elements browser-use 0.13.14 indexes
/// (tests/golden/browser_use_std_index.json, from tests/golden/browser_use_elements.py).
#[test]
fn same_elements_as_browser_use_on_a_rustdoc_page() {
    assert_same_elements_as_browser_use(
        "rustdoc/std/index.html",
        include_str!("golden/browser_use_std_index.json"),
    );
}

/// Form controls and `<details>` (hosts of Chrome's user-agent shadow roots, which browser-use
/// marks `|SHADOW(open)|` and browserd does not: see ARCHITECTURE.md) are indexed alike.
#[test]
fn same_elements_as_browser_use_on_user_agent_shadow_hosts() {
    assert_same_elements_as_browser_use(
        "ua-shadow.html",
        include_str!("golden/browser_use_ua_shadow.json"),
    );
}

fn assert_same_elements_as_browser_use(page: &str, golden: &str) {
    let expected: serde_json::Value = serde_json::from_str(golden).expect("browser-use golden");
    let keys: Vec<String> =
        serde_json::from_value(expected["identity_attributes"].clone()).expect("keys");
    let mut theirs: Vec<String> = expected["elements"]
        .as_array()
        .expect("elements")
        .iter()
        .map(|e| {
            let attrs = e["attributes"].as_object().expect("attributes");
            identity(
                e["tag"].as_str().expect("tag"),
                attrs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())),
                &keys,
            )
        })
        .collect();
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, page).await;
        let state = capture(&session).await;
        let origin = format!("http://{}", support::server().await);
        let mut ours: Vec<String> = state
            .selector_map
            .values()
            .map(|e| {
                let attrs = e.attributes.iter().map(|(k, v)| (k.clone(), v.replace(&origin, "http://127.0.0.1:PORT")));
                identity(&e.tag_name, attrs, &keys)
            })
            .collect();
        ours.sort();
        theirs.sort();
        let only = |a: &[String], b: &[String]| {
            let mut b = b.to_vec();
            a.iter()
                .filter(|x| match b.iter().position(|y| y == *x) {
                    Some(i) => {
                        b.remove(i);
                        false
                    }
                    None => true,
                })
                .cloned()
                .collect::<Vec<_>>()
        };
        let missing = only(&theirs, &ours);
        let extra = only(&ours, &theirs);
        assert!(
            missing.is_empty() && extra.is_empty(),
            "browserd indexes {} elements, browser-use {}\nonly browser-use: {missing:#?}\nonly browserd: {extra:#?}\n\nbrowserd:\n{}\n\nbrowser-use:\n{}",
            ours.len(),
            theirs.len(),
            state.llm_text,
            expected["text"].as_str().unwrap_or_default()
        );
        session.release().await;
    });
}

/// `highlight_elements`: the screenshot differs from the plain one exactly in the elements'
/// outlines and index labels (lossless PNG, so pixels compare exactly), and each outline
/// starts with a dash in the element's colour.
#[test]
fn highlight_elements_draws_boxes_and_indices() {
    use browserd_browser::highlight::{self, COLOR_BUTTON, COLOR_INPUT, COLOR_LINK, COLOR_SELECT};
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "highlight.html").await;
        let png = |highlight_elements| CaptureOptions {
            screenshot: Some(ScreenshotFormat::Png),
            highlight_elements,
            ..Default::default()
        };
        let plain = session.capture(&png(false)).await.unwrap();
        let lit = session.capture(&png(true)).await.unwrap();
        assert!(lit.timings.highlight > std::time::Duration::ZERO);
        let decode = |state: &PageState| {
            image::load_from_memory_with_format(
                &state.screenshot.as_ref().expect("a screenshot").data,
                image::ImageFormat::Png,
            )
            .unwrap()
            .into_rgb8()
        };
        let (a, b) = (decode(&plain), decode(&lit));
        assert_eq!(a.dimensions(), (1920, 1080));
        assert_eq!(b.dimensions(), a.dimensions());
        let drawn = highlight::layout(&lit.selector_map, b.dimensions(), (1920, 1080));
        let color_of = |id: &str| {
            let index = element_by_id(&lit, id).expect(id).index;
            drawn.iter().find(|d| d.index == index).expect(id).color
        };
        assert_eq!(color_of("big"), COLOR_BUTTON);
        assert_eq!(color_of("link"), COLOR_LINK);
        assert_eq!(color_of("field"), COLOR_INPUT);
        assert_eq!(color_of("choice"), COLOR_SELECT);
        for d in &drawn {
            let (x, y) = (d.outline.x1 as u32, d.outline.y1 as u32);
            assert_eq!(b.get_pixel(x, y).0, d.color, "box edge of [{}]", d.index);
            assert_eq!(
                b.get_pixel(x + 1, y + 1).0,
                d.color,
                "box edge of [{}]",
                d.index
            );
        }
        let mut changed = 0;
        for (x, y, pixel) in b.enumerate_pixels() {
            if a.get_pixel(x, y) != pixel {
                changed += 1;
                let (x, y) = (i64::from(x), i64::from(y));
                assert!(
                    drawn
                        .iter()
                        .any(|d| d.outline.contains(x, y) || d.label.contains(x, y)),
                    "({x}, {y}) changed outside every box and label"
                );
            }
        }
        assert!(changed > 500, "{changed} pixels changed");
        // The big button's index label sits inside its box, top centre, white digits on red.
        let big = drawn
            .iter()
            .find(|d| d.color == COLOR_BUTTON)
            .expect("the button");
        assert!(big.label.y1 >= big.outline.y1 && big.label.y2 <= big.outline.y2);
        assert_eq!(
            b.get_pixel(big.label.x1 as u32, big.label.y1 as u32).0,
            [255, 255, 255]
        );
        assert_eq!(
            b.get_pixel(big.label.x1 as u32 + 3, big.label.y1 as u32 + 3)
                .0,
            COLOR_BUTTON
        );
        session.release().await;
    });
}

/// `fixtures/slotted.html`: a web component's label is light-DOM text slotted into its shadow
/// tree (Shoelace's sl-button and sl-checkbox); it is printed and the host stays indexed. (Where:
/// browserd prints it at its slot, inside the shadow tree; browser-use under the host, before
/// the shadow root — see ARCHITECTURE.md.)
#[test]
fn slotted_labels_of_web_components_are_printed() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "slotted.html").await;
        let state = capture(&session).await;
        let text = &state.llm_text;
        assert!(text.contains("Subscribe"), "{text}");
        assert!(text.contains("I accept the terms"), "{text}");
        assert!(
            indexed(&state, "save") && indexed(&state, "terms"),
            "{text}"
        );
        session.release().await;
    });
}
