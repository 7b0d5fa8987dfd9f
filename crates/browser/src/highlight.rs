//! browser-use's `highlight_elements`: the interactive elements' boxes and index labels drawn
//! onto the screenshot the model gets (browser-use 0.13's `python_highlights.py`, which draws
//! with PIL on the captured image). Same look: a dashed box (4 px dash, 8 px gap, 2 px wide) in
//! a colour per kind of element (buttons red, inputs teal, selects blue, links green, text areas
//! orange, everything else light purple), and the index in white on a box of that colour with a
//! white border — centred on the element's top edge, inside it, or above it when the element is
//! smaller than 60×30.
//!
//! **Deviations, on purpose.** Every index gets its label (browser-use labels only elements
//! whose text is under 3 characters by default, `filter_highlight_ids`); the model here reads
//! numbers, not text, off the image, and an unlabelled box cannot be tied to the indexed text.
//! Labels are drawn with a built-in 3×5 bitmap font of the ten digits (indices are numbers
//! only): no font file to ship or find on the worker, no glyph rasteriser, the same pixels on
//! every machine (tests compare them), and a draw that costs microseconds per label.
//!
//! The image is decoded and encoded again in its own format (JPEG at the capture's quality,
//! PNG lossless); see the `capture` bench's `highlight` line for the cost.

use std::io::Cursor;

use image::{ImageFormat, Rgb, RgbImage};

use crate::types::{ElementInfo, SelectorMap};
use browserd_views::{Screenshot, ScreenshotFormat};

/// Why a screenshot could not be highlighted (the plain one is used then).
#[derive(Debug, thiserror::Error)]
pub enum HighlightError {
    #[error("the screenshot could not be decoded: {0}")]
    Decode(String),
    #[error("the highlighted screenshot could not be encoded: {0}")]
    Encode(String),
}

/// browser-use's `ELEMENT_COLORS`.
pub const COLOR_BUTTON: [u8; 3] = [0xFF, 0x6B, 0x6B];
pub const COLOR_INPUT: [u8; 3] = [0x4E, 0xCD, 0xC4];
pub const COLOR_SELECT: [u8; 3] = [0x45, 0xB7, 0xD1];
pub const COLOR_LINK: [u8; 3] = [0x96, 0xCE, 0xB4];
pub const COLOR_TEXTAREA: [u8; 3] = [0xFF, 0x8C, 0x42];
pub const COLOR_OTHER: [u8; 3] = [0xDD, 0xA0, 0xDD];
const WHITE: [u8; 3] = [0xFF, 0xFF, 0xFF];

const DASH: i64 = 4;
const GAP: i64 = 8;
const LINE: i64 = 2;

/// The colour of an element's box (browser-use's `get_element_color`).
pub fn color_of(element: &ElementInfo) -> [u8; 3] {
    match element.tag_name.as_str() {
        "input" if matches!(element.attr("type"), Some("button" | "submit")) => COLOR_BUTTON,
        "button" => COLOR_BUTTON,
        "input" => COLOR_INPUT,
        "select" => COLOR_SELECT,
        "a" => COLOR_LINK,
        "textarea" => COLOR_TEXTAREA,
        _ => COLOR_OTHER,
    }
}

/// A rectangle in image pixels, `x1..x2` × `y1..y2` (ends excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelRect {
    pub x1: i64,
    pub y1: i64,
    pub x2: i64,
    pub y2: i64,
}

impl PixelRect {
    /// Whether pixel (`x`, `y`) is inside.
    pub fn contains(&self, x: i64, y: i64) -> bool {
        (self.x1..self.x2).contains(&x) && (self.y1..self.y2).contains(&y)
    }
}

/// One element as drawn: its box (the dashed outline runs along its inside edge) and its label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrawnElement {
    pub index: u32,
    pub color: [u8; 3],
    pub outline: PixelRect,
    pub label: PixelRect,
}

/// Digits 0–9, 3 columns × 5 rows, one `u8` per row (bit 2 = left column).
const DIGITS: [[u8; 5]; 10] = [
    [0b111, 0b101, 0b101, 0b101, 0b111],
    [0b010, 0b110, 0b010, 0b010, 0b111],
    [0b111, 0b001, 0b111, 0b100, 0b111],
    [0b111, 0b001, 0b111, 0b001, 0b111],
    [0b101, 0b101, 0b111, 0b001, 0b001],
    [0b111, 0b100, 0b111, 0b001, 0b111],
    [0b111, 0b100, 0b111, 0b101, 0b111],
    [0b111, 0b001, 0b010, 0b010, 0b010],
    [0b111, 0b101, 0b111, 0b101, 0b111],
    [0b111, 0b101, 0b111, 0b001, 0b111],
];

/// Where each visible element of `elements` goes on an image of `image` (width, height) pixels
/// that shows a viewport of `viewport` (width, height) CSS pixels; by index.
pub fn layout(
    elements: &SelectorMap,
    image: (u32, u32),
    viewport: (u32, u32),
) -> Vec<DrawnElement> {
    let (iw, ih) = (i64::from(image.0), i64::from(image.1));
    let scale = f64::from(image.0) / f64::from(viewport.0.max(1));
    // browser-use: font 1 % of the width within 10..=20 px, padding 0.5 % within 4..=10 px.
    let font = (iw / 100).clamp(10, 20);
    let pixel = (font / 5).max(2);
    let padding = (iw / 200).clamp(4, 10);
    let mut drawn = Vec::new();
    for element in elements.values() {
        let Some(bounds) = element.absolute_bounds.filter(|_| element.is_visible) else {
            continue;
        };
        // Rounded like PIL's int(): towards zero, then clipped to the image.
        let x1 = ((bounds.x * scale) as i64).clamp(0, iw);
        let y1 = ((bounds.y * scale) as i64).clamp(0, ih);
        let x2 = (((bounds.x + bounds.width) * scale) as i64).clamp(x1, iw);
        let y2 = (((bounds.y + bounds.height) * scale) as i64).clamp(y1, ih);
        if x2 - x1 < 2 || y2 - y1 < 2 {
            continue;
        }
        let digits = element.index.to_string().len() as i64;
        let text_w = digits * 3 * pixel + (digits - 1) * pixel;
        let text_h = 5 * pixel;
        let (w, h) = (text_w + 2 * padding, text_h + 2 * padding);
        let mut lx = x1 + (x2 - x1 - w) / 2;
        let mut ly = if x2 - x1 < 60 || y2 - y1 < 30 {
            (y1 - h - 5).max(0)
        } else {
            y1 + 2
        };
        lx = lx.clamp(0, (iw - w).max(0));
        ly = ly.clamp(0, (ih - h).max(0));
        drawn.push(DrawnElement {
            index: element.index,
            color: color_of(element),
            outline: PixelRect { x1, y1, x2, y2 },
            label: PixelRect {
                x1: lx,
                y1: ly,
                x2: lx + w,
                y2: ly + h,
            },
        });
    }
    drawn
}

fn fill(image: &mut RgbImage, rect: PixelRect, color: [u8; 3]) {
    let (w, h) = (i64::from(image.width()), i64::from(image.height()));
    for y in rect.y1.max(0)..rect.y2.min(h) {
        for x in rect.x1.max(0)..rect.x2.min(w) {
            // In range: both are within the image's u32 dimensions.
            image.put_pixel(x as u32, y as u32, Rgb(color));
        }
    }
}

/// browser-use's dashed outline: dashes of [`DASH`] px every [`DASH`] + [`GAP`] px, [`LINE`]
/// px wide, along the inside of each edge.
fn dashed_outline(image: &mut RgbImage, r: PixelRect, color: [u8; 3]) {
    let mut x = r.x1;
    while x < r.x2 {
        let end = (x + DASH).min(r.x2);
        fill(
            image,
            PixelRect {
                x1: x,
                y1: r.y1,
                x2: end,
                y2: r.y1 + LINE,
            },
            color,
        );
        fill(
            image,
            PixelRect {
                x1: x,
                y1: r.y2 - LINE,
                x2: end,
                y2: r.y2,
            },
            color,
        );
        x += DASH + GAP;
    }
    let mut y = r.y1;
    while y < r.y2 {
        let end = (y + DASH).min(r.y2);
        fill(
            image,
            PixelRect {
                x1: r.x1,
                y1: y,
                x2: r.x1 + LINE,
                y2: end,
            },
            color,
        );
        fill(
            image,
            PixelRect {
                x1: r.x2 - LINE,
                y1: y,
                x2: r.x2,
                y2: end,
            },
            color,
        );
        y += DASH + GAP;
    }
}

fn label(image: &mut RgbImage, element: &DrawnElement, pixel: i64, padding: i64) {
    let r = element.label;
    fill(image, r, WHITE);
    fill(
        image,
        PixelRect {
            x1: r.x1 + 2,
            y1: r.y1 + 2,
            x2: r.x2 - 2,
            y2: r.y2 - 2,
        },
        element.color,
    );
    let mut x = r.x1 + padding;
    let y = r.y1 + padding;
    for digit in element.index.to_string().bytes() {
        let rows = DIGITS[usize::from(digit - b'0')];
        for (row, bits) in rows.iter().enumerate() {
            for col in 0..3 {
                if bits & (0b100 >> col) != 0 {
                    let px = x + col * pixel;
                    let py = y + row as i64 * pixel;
                    fill(
                        image,
                        PixelRect {
                            x1: px,
                            y1: py,
                            x2: px + pixel,
                            y2: py + pixel,
                        },
                        WHITE,
                    );
                }
            }
        }
        x += 4 * pixel;
    }
}

/// Draws `drawn` (from [`layout`]) onto `image`: every outline first, then every label, so no
/// box crosses a number.
pub fn draw(image: &mut RgbImage, drawn: &[DrawnElement]) {
    let iw = i64::from(image.width());
    let pixel = ((iw / 100).clamp(10, 20) / 5).max(2);
    let padding = (iw / 200).clamp(4, 10);
    for element in drawn {
        dashed_outline(image, element.outline, element.color);
    }
    for element in drawn {
        label(image, element, pixel, padding);
    }
}

/// `shot` with the boxes and indices of `elements` drawn on it. `viewport` is the size in CSS
/// pixels of what the screenshot shows (a scaled screenshot is drawn on at its scale). Blocking
/// CPU work (decode, draw, encode): run it off the async runtime.
pub fn highlight_screenshot(
    shot: &Screenshot,
    elements: &SelectorMap,
    viewport: (u32, u32),
) -> Result<Screenshot, HighlightError> {
    let format = match shot.format {
        ScreenshotFormat::Png => ImageFormat::Png,
        ScreenshotFormat::Jpeg { .. } => ImageFormat::Jpeg,
    };
    let mut image = image::load_from_memory_with_format(&shot.data, format)
        .map_err(|e| HighlightError::Decode(e.to_string()))?
        .into_rgb8();
    let size = (image.width(), image.height());
    draw(&mut image, &layout(elements, size, viewport));
    let mut data = Vec::with_capacity(shot.data.len() + shot.data.len() / 4);
    match shot.format {
        ScreenshotFormat::Png => image
            .write_to(&mut Cursor::new(&mut data), ImageFormat::Png)
            .map_err(|e| HighlightError::Encode(e.to_string()))?,
        ScreenshotFormat::Jpeg { quality } => {
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut data, quality.clamp(1, 100))
                .encode_image(&image)
                .map_err(|e| HighlightError::Encode(e.to_string()))?;
        }
    }
    Ok(Screenshot {
        format: shot.format,
        data,
        width: size.0,
        height: size.1,
    })
}

/// [`highlight_screenshot`] on a blocking thread; on failure (logged) the plain screenshot.
pub async fn highlighted(
    shot: Screenshot,
    elements: SelectorMap,
    viewport: (u32, u32),
) -> Screenshot {
    let plain = std::sync::Arc::new(shot);
    let input = plain.clone();
    let drawn =
        tokio::task::spawn_blocking(move || highlight_screenshot(&input, &elements, viewport))
            .await;
    let error = match drawn {
        Ok(Ok(highlighted)) => return highlighted,
        Ok(Err(err)) => err.to_string(),
        Err(err) => format!("the drawing thread failed: {err}"),
    };
    tracing::warn!(%error, "screenshot not highlighted");
    std::sync::Arc::try_unwrap(plain).unwrap_or_else(|shared| (*shared).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_drawn_in_white_on_the_colour() {
        let mut image = RgbImage::from_pixel(200, 100, Rgb([0, 0, 0]));
        let element = DrawnElement {
            index: 7,
            color: COLOR_LINK,
            outline: PixelRect {
                x1: 10,
                y1: 10,
                x2: 150,
                y2: 80,
            },
            label: PixelRect {
                x1: 60,
                y1: 12,
                x2: 60 + 6 + 8,
                y2: 12 + 10 + 8,
            },
        };
        draw(&mut image, std::slice::from_ref(&element));
        // Outline: the first dash of the top edge, then a gap.
        assert_eq!(image.get_pixel(10, 10).0, COLOR_LINK);
        assert_eq!(image.get_pixel(13, 11).0, COLOR_LINK);
        assert_eq!(image.get_pixel(16, 10).0, [0, 0, 0]);
        // Label: white border, coloured inside, the 7's top row white.
        assert_eq!(image.get_pixel(60, 12).0, WHITE);
        assert_eq!(image.get_pixel(62, 14).0, COLOR_LINK);
        assert_eq!(image.get_pixel(64, 16).0, WHITE);
        // Nothing outside the outline and the label changed.
        for (x, y, p) in image.enumerate_pixels() {
            let (x, y) = (i64::from(x), i64::from(y));
            if !element.outline.contains(x, y) && !element.label.contains(x, y) {
                assert_eq!(p.0, [0, 0, 0], "({x}, {y})");
            }
        }
    }
}
