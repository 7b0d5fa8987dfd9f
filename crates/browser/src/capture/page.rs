//! The page's layout metrics, browser-use's page info from them, and screenshots.

use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use serde_json::json;

use crate::{
    cdp::CdpConnection,
    error::{BrowserError, Result},
    snapshot::LayoutMetrics,
    types::{PageInfo, Screenshot, ScreenshotFormat, Viewport},
};

pub(super) async fn layout_metrics(
    conn: &CdpConnection,
    session: &str,
    timeout: Duration,
) -> Result<LayoutMetrics> {
    conn.call_raw(Some(session), "Page.getLayoutMetrics", json!({}), timeout)
        .await?
        .decode()
}

pub(super) fn device_pixel_ratio(m: &LayoutMetrics) -> f64 {
    let css = m
        .css_visual_viewport
        .client_width
        .or(m.css_layout_viewport.client_width)
        .unwrap_or(1920.0);
    let device = m.visual_viewport.client_width.unwrap_or(css);
    if css > 0.0 { device / css } else { 1.0 }
}

/// Page metrics as browser-use's `_get_page_info` computes them.
pub(crate) fn page_info_from_metrics(m: &LayoutMetrics) -> PageInfo {
    let css_width = m
        .css_visual_viewport
        .client_width
        .or(m.css_layout_viewport.client_width)
        .unwrap_or(1280.0);
    let device_width = m.visual_viewport.client_width.unwrap_or(css_width);
    let dpr = if css_width > 0.0 {
        device_width / css_width
    } else {
        1.0
    };
    let nonzero = |v: Option<f64>| v.filter(|x| *x != 0.0);
    let viewport_width = nonzero(m.css_layout_viewport.client_width)
        .or(m.layout_viewport.client_width)
        .unwrap_or(1280.0) as i64;
    let viewport_height = nonzero(m.css_layout_viewport.client_height)
        .or(m.layout_viewport.client_height)
        .unwrap_or(720.0) as i64;
    let page_width = (m.content_size.width.unwrap_or(viewport_width as f64 * dpr) / dpr) as i64;
    let page_height = (m
        .content_size
        .height
        .unwrap_or(viewport_height as f64 * dpr)
        / dpr) as i64;
    let scroll_x = nonzero(m.css_visual_viewport.page_x)
        .or(m.css_layout_viewport.page_x)
        .unwrap_or(0.0) as i64;
    let scroll_y = nonzero(m.css_visual_viewport.page_y)
        .or(m.css_layout_viewport.page_y)
        .unwrap_or(0.0) as i64;
    PageInfo {
        viewport_width,
        viewport_height,
        page_width,
        page_height,
        scroll_x,
        scroll_y,
        pixels_above: scroll_y,
        pixels_below: (page_height - viewport_height - scroll_y).max(0),
        pixels_left: scroll_x,
        pixels_right: (page_width - viewport_width - scroll_x).max(0),
    }
}

/// A screenshot of the visual viewport of `viewport`'s size, scaled down to fit `max_size`
/// when given and smaller. Chrome scales it while rendering: a `clip` of the visual viewport
/// (document coordinates, so its scroll offset is read first) with a `scale`, which neither
/// resizes the page nor fires resize / media-query events, and keeps the scrollbars.
///
/// Unscaled, it is taken from the view (`fromSurface: false`): the same pixels after the same
/// forced redraw, but Chrome's GPU process then keeps no copy of the frame, which an unclipped
/// surface capture leaves there until the tab's next frame — on a page that stays still while
/// the model thinks, 4 bytes per viewport pixel (8 MB for 1920×1080) per tab. A clipped
/// capture (the scaled one here) keeps none either; the view path ignores `clip`, so a scaled
/// screenshot still comes from the surface.
pub(crate) async fn screenshot(
    conn: &CdpConnection,
    session: &str,
    format: ScreenshotFormat,
    viewport: Viewport,
    max_size: Option<(u32, u32)>,
    timeout: Duration,
) -> Result<Screenshot> {
    #[derive(Deserialize)]
    struct Shot {
        data: String,
    }
    let mut params = match format {
        ScreenshotFormat::Png => json!({"format": "png", "captureBeyondViewport": false}),
        ScreenshotFormat::Jpeg { quality } => json!({
            "format": "jpeg", "quality": quality.min(100), "captureBeyondViewport": false
        }),
    };
    let (width, height) = viewport.screenshot_size(max_size);
    if (width, height) == (viewport.width, viewport.height) {
        params["fromSurface"] = json!(false);
    } else {
        let metrics = layout_metrics(conn, session, timeout).await?;
        let scroll = &metrics.css_visual_viewport;
        params["clip"] = json!({
            "x": scroll.page_x.unwrap_or(0.0),
            "y": scroll.page_y.unwrap_or(0.0),
            "width": viewport.width,
            "height": viewport.height,
            "scale": f64::from(width) / f64::from(viewport.width.max(1)),
        });
    }
    let raw = conn
        .call_raw(Some(session), "Page.captureScreenshot", params, timeout)
        .await?;
    let shot: Shot = raw.decode()?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(shot.data.as_bytes())
        .map_err(|e| BrowserError::Decode {
            method: "Page.captureScreenshot".into(),
            reason: e.to_string(),
        })?;
    Ok(Screenshot {
        format,
        data,
        width,
        height,
    })
}
