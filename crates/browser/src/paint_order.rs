//! Union of opaque rectangles for paint-order occlusion, indexed by a uniform grid.
//!
//! Semantics follow browser-use's `RectUnionPure` (a disjoint set of rectangles; a query is
//! "fully covered by the union"; at most 5 000 stored pieces, after which nothing more is
//! added). The grid makes each query look only at pieces near the query instead of at every
//! piece, which turns the O(n²) pass into roughly O(n) on real pages.

use std::collections::HashMap;

const MAX_RECTS: usize = 5000;
const CELL: f64 = 256.0;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PRect {
    pub x1: f64,
    pub y1: f64,
    pub x2: f64,
    pub y2: f64,
}

impl PRect {
    fn intersects(&self, o: &PRect) -> bool {
        !(self.x2 <= o.x1 || o.x2 <= self.x1 || self.y2 <= o.y1 || o.y2 <= self.y1)
    }
    fn contains(&self, o: &PRect) -> bool {
        self.x1 <= o.x1 && self.y1 <= o.y1 && self.x2 >= o.x2 && self.y2 >= o.y2
    }
}

/// a \ b as up to four pieces (a intersects b).
fn split_diff(a: &PRect, b: &PRect, out: &mut Vec<PRect>) {
    if a.y1 < b.y1 {
        out.push(PRect {
            x1: a.x1,
            y1: a.y1,
            x2: a.x2,
            y2: b.y1,
        });
    }
    if b.y2 < a.y2 {
        out.push(PRect {
            x1: a.x1,
            y1: b.y2,
            x2: a.x2,
            y2: a.y2,
        });
    }
    let y_lo = a.y1.max(b.y1);
    let y_hi = a.y2.min(b.y2);
    if a.x1 < b.x1 {
        out.push(PRect {
            x1: a.x1,
            y1: y_lo,
            x2: b.x1,
            y2: y_hi,
        });
    }
    if b.x2 < a.x2 {
        out.push(PRect {
            x1: b.x2,
            y1: y_lo,
            x2: a.x2,
            y2: y_hi,
        });
    }
}

#[derive(Default)]
pub(crate) struct RectUnion {
    rects: Vec<PRect>,
    grid: HashMap<(i64, i64), Vec<u32>>,
    /// Scratch buffer of candidate ids, with a visit stamp to deduplicate.
    stamp: Vec<u32>,
    epoch: u32,
}

fn cells(r: &PRect) -> impl Iterator<Item = (i64, i64)> {
    let cx1 = (r.x1 / CELL).floor() as i64;
    let cx2 = (r.x2 / CELL).floor() as i64;
    let cy1 = (r.y1 / CELL).floor() as i64;
    let cy2 = (r.y2 / CELL).floor() as i64;
    // Bound pathological sizes: huge rects are clamped to a sane cell range.
    let cx2 = cx2.min(cx1 + 4096);
    let cy2 = cy2.min(cy1 + 4096);
    (cx1..=cx2).flat_map(move |x| (cy1..=cy2).map(move |y| (x, y)))
}

impl RectUnion {
    fn candidates(&mut self, r: &PRect) -> Vec<u32> {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.epoch = 1;
        }
        let mut out = Vec::new();
        for cell in cells(r) {
            if let Some(ids) = self.grid.get(&cell) {
                for &id in ids {
                    let s = &mut self.stamp[id as usize];
                    if *s != self.epoch {
                        *s = self.epoch;
                        if self.rects[id as usize].intersects(r) {
                            out.push(id);
                        }
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// True iff `r` is fully covered by the union.
    pub fn contains(&mut self, r: &PRect) -> bool {
        if self.rects.is_empty() {
            return false;
        }
        let candidates = self.candidates(r);
        if candidates.is_empty() {
            return false;
        }
        let mut stack = vec![*r];
        let mut next = Vec::new();
        for id in candidates {
            let s = self.rects[id as usize];
            next.clear();
            for piece in &stack {
                if s.contains(piece) {
                    continue;
                }
                if piece.intersects(&s) {
                    split_diff(piece, &s, &mut next);
                } else {
                    next.push(*piece);
                }
            }
            if next.is_empty() {
                return true;
            }
            std::mem::swap(&mut stack, &mut next);
        }
        false
    }

    /// Inserts `r` unless covered; pieces are kept disjoint.
    pub fn add(&mut self, r: PRect) {
        if self.rects.len() >= MAX_RECTS {
            return;
        }
        if self.contains(&r) {
            return;
        }
        let candidates = self.candidates(&r);
        let mut pending = vec![r];
        let mut next = Vec::new();
        for id in candidates {
            let s = self.rects[id as usize];
            next.clear();
            for piece in &pending {
                if piece.intersects(&s) {
                    split_diff(piece, &s, &mut next);
                } else {
                    next.push(*piece);
                }
            }
            std::mem::swap(&mut pending, &mut next);
        }
        for piece in pending {
            if piece.x2 <= piece.x1 || piece.y2 <= piece.y1 {
                // Degenerate slivers cover nothing.
                continue;
            }
            let id = self.rects.len() as u32;
            self.rects.push(piece);
            self.stamp.push(0);
            for cell in cells(&piece) {
                self.grid.entry(cell).or_default().push(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(x1: f64, y1: f64, x2: f64, y2: f64) -> PRect {
        PRect { x1, y1, x2, y2 }
    }

    #[test]
    fn union_covers_only_what_was_added() {
        let mut u = RectUnion::default();
        assert!(!u.contains(&r(0.0, 0.0, 10.0, 10.0)));
        u.add(r(0.0, 0.0, 600.0, 300.0));
        u.add(r(600.0, 0.0, 1200.0, 300.0));
        assert!(
            u.contains(&r(100.0, 100.0, 1100.0, 200.0)),
            "spans two pieces and cells"
        );
        assert!(
            !u.contains(&r(100.0, 100.0, 1300.0, 200.0)),
            "sticks out right"
        );
        assert!(!u.contains(&r(-1.0, 0.0, 10.0, 10.0)), "sticks out left");
        u.add(r(500.0, 200.0, 700.0, 900.0));
        assert!(u.contains(&r(550.0, 250.0, 650.0, 850.0)));
        assert!(!u.contains(&r(450.0, 250.0, 650.0, 850.0)));
    }
}
