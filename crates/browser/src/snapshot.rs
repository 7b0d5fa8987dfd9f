//! Typed, allocation-light decoding of the CDP answers the capture reads.
//!
//! Only the fields we use are declared; everything else in Chrome's answer is skipped by
//! serde, so protocol additions cannot break decoding. Strings borrow from the raw answer
//! where they contain no escapes, and arrays of small arrays (attributes, styles, rects) are
//! decoded into flat buffers instead of one `Vec` per node.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, SeqAccess, Visitor},
};

/// Computed styles requested from `DOMSnapshot.captureSnapshot`, in this order.
///
/// browser-use asks for ten; `pointer-events` and `position` are never read, so they are
/// not requested (fewer strings for Chrome to produce and for us to decode).
pub const SNAPSHOT_STYLES: [&str; 8] = [
    "display",
    "visibility",
    "opacity",
    "overflow",
    "overflow-x",
    "overflow-y",
    "cursor",
    "background-color",
];
pub(crate) const STYLE_DISPLAY: usize = 0;
pub(crate) const STYLE_VISIBILITY: usize = 1;
pub(crate) const STYLE_OPACITY: usize = 2;
pub(crate) const STYLE_OVERFLOW: usize = 3;
pub(crate) const STYLE_OVERFLOW_X: usize = 4;
pub(crate) const STYLE_OVERFLOW_Y: usize = 5;
pub(crate) const STYLE_CURSOR: usize = 6;
pub(crate) const STYLE_BACKGROUND: usize = 7;

/// `DOMSnapshot.captureSnapshot` result.
#[derive(Deserialize)]
pub(crate) struct CaptureSnapshot<'a> {
    pub documents: Vec<DocumentSnapshot>,
    #[serde(borrow)]
    pub strings: Vec<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DocumentSnapshot {
    #[serde(rename = "documentURL")]
    pub document_url: i64,
    pub frame_id: i64,
    pub nodes: NodeTreeSnapshot,
    pub layout: LayoutTreeSnapshot,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct NodeTreeSnapshot {
    pub parent_index: Vec<i64>,
    pub node_type: Vec<i64>,
    pub shadow_root_type: RareStrings,
    pub node_name: Vec<i64>,
    pub node_value: Vec<i64>,
    pub backend_node_id: Vec<i64>,
    pub attributes: FlatArrays<i64>,
    pub text_value: RareStrings,
    pub input_value: RareStrings,
    pub input_checked: RareBooleans,
    pub option_selected: RareBooleans,
    pub content_document_index: RareIntegers,
    pub pseudo_type: RareStrings,
    pub is_clickable: RareBooleans,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct LayoutTreeSnapshot {
    pub node_index: Vec<i64>,
    pub styles: FlatArrays<i64>,
    pub bounds: Vec<MaybeRect>,
    pub paint_orders: Vec<i64>,
    pub scroll_rects: Vec<MaybeRect>,
    pub client_rects: Vec<MaybeRect>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct RareStrings {
    pub index: Vec<i64>,
    pub value: Vec<i64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct RareIntegers {
    pub index: Vec<i64>,
    pub value: Vec<i64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct RareBooleans {
    pub index: Vec<i64>,
}

/// A `[x, y, w, h]` array, or an empty array (`None`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MaybeRect(pub Option<[f64; 4]>);

impl<'de> Deserialize<'de> for MaybeRect {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RectVisitor;
        impl<'de> Visitor<'de> for RectVisitor {
            type Value = MaybeRect;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of numbers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeRect, A::Error> {
                let mut values = [0.0f64; 4];
                let mut count = 0usize;
                while let Some(v) = seq.next_element::<f64>()? {
                    if count < 4 {
                        values[count] = v;
                    }
                    count += 1;
                }
                Ok(MaybeRect(if count >= 4 { Some(values) } else { None }))
            }
        }
        deserializer.deserialize_seq(RectVisitor)
    }
}

/// An array of arrays stored as one flat buffer plus offsets.
#[derive(Debug)]
pub(crate) struct FlatArrays<T> {
    offsets: Vec<u32>,
    values: Vec<T>,
}

impl<T> Default for FlatArrays<T> {
    fn default() -> Self {
        Self {
            offsets: vec![0],
            values: Vec::new(),
        }
    }
}

impl<T> FlatArrays<T> {
    pub fn get(&self, i: usize) -> &[T] {
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.values[a as usize..b as usize],
            _ => &[],
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for FlatArrays<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Outer<T>(std::marker::PhantomData<T>);
        struct Inner<'b, T>(&'b mut Vec<T>);
        impl<'de, T: Deserialize<'de>> serde::de::DeserializeSeed<'de> for Inner<'_, T> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_seq(self)
            }
        }
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Inner<'_, T> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while let Some(v) = seq.next_element::<T>()? {
                    self.0.push(v);
                }
                Ok(())
            }
        }
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Outer<T> {
            type Value = FlatArrays<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of arrays")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FlatArrays<T>, A::Error> {
                let mut out = FlatArrays::<T>::default();
                if let Some(n) = seq.size_hint() {
                    out.offsets.reserve(n);
                }
                while seq.next_element_seed(Inner(&mut out.values))?.is_some() {
                    out.offsets.push(out.values.len() as u32);
                }
                Ok(out)
            }
        }
        deserializer.deserialize_seq(Outer(std::marker::PhantomData))
    }
}

/// One node of `Accessibility.getPartialAXTree` / `getFullAXTree`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AxNodeWire {
    #[serde(default)]
    pub ignored: bool,
    #[serde(default)]
    pub role: Option<AxValueWire>,
    #[serde(default)]
    pub name: Option<AxValueWire>,
    #[serde(default)]
    pub properties: Vec<AxPropertyWire>,
    #[serde(default)]
    pub child_ids: Vec<IgnoredAny>,
    #[serde(rename = "backendDOMNodeId", default)]
    pub backend_dom_node_id: Option<i64>,
}

#[derive(Deserialize)]
pub(crate) struct AxValueWire {
    #[serde(default)]
    pub value: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub(crate) struct AxPropertyWire {
    pub name: String,
    pub value: AxValueWire,
}

#[derive(Deserialize)]
pub(crate) struct AxTreeWire {
    pub nodes: Vec<AxNodeWire>,
}

/// `Page.getLayoutMetrics` (only the parts we read).
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct LayoutMetrics {
    pub css_layout_viewport: ViewportWire,
    pub css_visual_viewport: ViewportWire,
    pub visual_viewport: ViewportWire,
    pub layout_viewport: ViewportWire,
    pub css_content_size: SizeWire,
    pub content_size: SizeWire,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ViewportWire {
    pub client_width: Option<f64>,
    pub client_height: Option<f64>,
    pub page_x: Option<f64>,
    pub page_y: Option<f64>,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub(crate) struct SizeWire {
    pub width: Option<f64>,
    pub height: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_arrays_and_rects_decode() {
        #[derive(Deserialize)]
        struct T {
            a: FlatArrays<i64>,
            r: Vec<MaybeRect>,
        }
        let t: T = serde_json::from_str(r#"{"a":[[1,2],[],[3]],"r":[[1,2,3,4],[]]}"#).unwrap();
        assert_eq!(t.a.get(0), &[1, 2]);
        assert!(t.a.get(1).is_empty());
        assert_eq!(t.a.get(2), &[3]);
        assert!(t.a.get(3).is_empty());
        assert_eq!(t.r[0].0, Some([1.0, 2.0, 3.0, 4.0]));
        assert!(t.r[1].0.is_none());
    }
}
