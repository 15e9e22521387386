//! Goodput versus senders, one line per strategy, one panel per block layout: the figure of
//! the seeds (phanishayee-fast08 Fig. 2, vasudevan-sigcomm09 Fig. 1), as SVG or PNG; and
//! values over time ([`timeline`]): a soak's memory, descriptors and tasks.
//!
//! Drawn by hand rather than with a plotting crate: the figure is a few lines, dots and
//! labels, and a plotting crate with a PNG backend would bring an image stack and system
//! fonts into the bench's build. The figure is first laid out as a list of [`Shape`]s; the
//! SVG writer emits them as elements, the PNG writer rasterizes them (a 5x7 bitmap font,
//! upper case) and compresses the pixels with flate2, which hdrhistogram already brings in. The x axis is log2 of the sender count; the dashed line is the line rate measured
//! in the same run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::output::WriteError;
use crate::run::{pooled_goodput, pooled_latency, Measurement, ReadKind, ALL_READS, LARGE_READS, SMALL_READS};

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;
const MARGIN_L: f64 = 60.0;
const MARGIN_R: f64 = 20.0;
const MARGIN_T: f64 = 40.0;
const MARGIN_B: f64 = 50.0;
const LEGEND_H: f64 = 30.0;
const COLORS: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// Why a plot could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// The file name's extension is not one the plotter writes.
    #[error("plot file `{0}` must end in .svg or .png")]
    Format(String),
    /// Writing failed.
    #[error(transparent)]
    Write(#[from] WriteError),
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One element of the figure, in pixels from the top left.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A line segment.
    Line {
        /// Start and end.
        from: (f64, f64),
        /// End.
        to: (f64, f64),
        /// `#rrggbb`.
        color: &'static str,
        /// Stroke width.
        width: f64,
        /// Dashed.
        dashed: bool,
    },
    /// A filled dot.
    Dot {
        /// Centre.
        at: (f64, f64),
        /// Radius.
        r: f64,
        /// `#rrggbb`.
        color: &'static str,
    },
    /// A label.
    Text {
        /// Anchor point (baseline).
        at: (f64, f64),
        /// The text.
        text: String,
        /// -1 right-aligned, 0 centred, 1 left-aligned.
        align: i8,
        /// Written bottom to top.
        vertical: bool,
    },
}

/// The figure: size and shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Scene {
    /// Width in pixels.
    pub width: f64,
    /// Height in pixels.
    pub height: f64,
    /// What to draw, in order.
    pub shapes: Vec<Shape>,
}

/// A line segment.
fn line(from: (f64, f64), to: (f64, f64), color: &'static str, width: f64, dashed: bool) -> Shape {
    Shape::Line {
        from,
        to,
        color,
        width,
        dashed,
    }
}

/// A horizontal label.
fn label(at: (f64, f64), text: String, align: i8) -> Shape {
    Shape::Text {
        at,
        text,
        align,
        vertical: false,
    }
}

/// The size of a figure of `panels` panels side by side.
fn size(panels: usize) -> (f64, f64) {
    let width = panels.max(1) as f64 * (PANEL_W + MARGIN_L + MARGIN_R);
    (width, PANEL_H + MARGIN_T + MARGIN_B + LEGEND_H + 20.0)
}

/// Draws the frame of panel `pi` (box, horizontal grid with its values from 0 to `top`,
/// title, axis names) and returns its left and right edges, and the value-to-pixel map of
/// its y axis.
fn frame(
    out: &mut Vec<Shape>,
    pi: usize,
    top: f64,
    title: &str,
    x_name: &str,
    y_name: &str,
) -> (f64, f64, impl Fn(f64) -> f64) {
    let ys = move |v: f64| MARGIN_T + PANEL_H - v.max(0.0) / top * PANEL_H;
    let grid: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let v = top / 5.0 * f64::from(i);
            (ys(v), format!("{v:.0}"))
        })
        .collect();
    let (x0, x1) = frame_with(out, pi, &grid, title, x_name, y_name);
    (x0, x1, ys)
}

/// Draws the frame of panel `pi` with horizontal grid lines at `grid` (pixel heights and
/// their labels), its title and axis names, and returns its left and right edges.
fn frame_with(
    out: &mut Vec<Shape>,
    pi: usize,
    grid: &[(f64, String)],
    title: &str,
    x_name: &str,
    y_name: &str,
) -> (f64, f64) {
    let x0 = pi as f64 * (PANEL_W + MARGIN_L + MARGIN_R) + MARGIN_L;
    let (y0, x1, y1) = (MARGIN_T, x0 + PANEL_W, MARGIN_T + PANEL_H);
    for (y, text) in grid {
        out.push(line((x0, *y), (x1, *y), "#dddddd", 1.0, false));
        out.push(label((x0 - 6.0, *y + 4.0), text.clone(), -1));
    }
    for (a, b) in [
        ((x0, y0), (x1, y0)),
        ((x1, y0), (x1, y1)),
        ((x1, y1), (x0, y1)),
        ((x0, y1), (x0, y0)),
    ] {
        out.push(line(a, b, "#444444", 1.0, false));
    }
    out.push(label((x0 + PANEL_W / 2.0, y0 - 6.0), title.to_owned(), 0));
    out.push(label((x0 + PANEL_W / 2.0, y1 + 36.0), x_name.to_owned(), 0));
    out.push(Shape::Text {
        at: (x0 - 44.0, y0 + PANEL_H / 2.0),
        text: y_name.to_owned(),
        align: 0,
        vertical: true,
    });
    (x0, x1)
}

/// A tick on the x axis at pixel `x`, labelled `text`.
fn x_tick(out: &mut Vec<Shape>, x: f64, text: String) {
    let y1 = MARGIN_T + PANEL_H;
    out.push(line((x, y1), (x, y1 + 5.0), "#444444", 1.0, false));
    out.push(label((x, y1 + 18.0), text, 0));
}

/// A polyline of `pts` (pixels), with a dot at each point if `dots`.
fn polyline(out: &mut Vec<Shape>, pts: &[(f64, f64)], color: &'static str, dots: bool) {
    for w in pts.windows(2) {
        out.push(line(w[0], w[1], color, 2.0, false));
    }
    if dots {
        out.extend(pts.iter().map(|&at| Shape::Dot { at, r: 3.0, color }));
    }
}

/// The legend under the panels: one colour per name, `step` pixels apart.
fn legend<'a>(out: &mut Vec<Shape>, names: impl Iterator<Item = (&'a str, &'static str)>, step: f64) {
    let ly = MARGIN_T + PANEL_H + MARGIN_B + 12.0;
    for (i, (name, color)) in names.enumerate() {
        let x = MARGIN_L + i as f64 * step;
        out.push(line((x, ly), (x + 24.0, ly), color, 3.0, false));
        out.push(label((x + 30.0, ly + 4.0), name.to_owned(), 1));
    }
}

/// Lays out the figure: goodput against senders, or a load curve where the sweep ran
/// several offered loads ([`load_scene`]).
pub fn scene(results: &[Measurement], title: &str) -> Scene {
    let mut loads: Vec<f64> = results.iter().map(|m| m.load).filter(|l| *l > 0.0).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    if loads.len() >= 2 {
        return load_scene(results, &loads, title);
    }
    // Panels: one per (sru or block) layout, in first-seen order.
    let mut panels: Vec<(String, Vec<&Measurement>)> = Vec::new();
    for m in results {
        match panels.iter_mut().find(|(k, _)| *k == m.layout) {
            Some((_, v)) => v.push(m),
            None => panels.push((m.layout.clone(), vec![m])),
        }
    }
    // One line per strategy, or per (strategy, concurrency) when the run had several.
    let several = results.iter().any(|m| m.concurrency != results[0].concurrency);
    let series = |m: &Measurement| {
        if several {
            format!("{} x{}", m.strategy, m.concurrency)
        } else {
            m.strategy.clone()
        }
    };
    let mut strategies: Vec<String> = Vec::new();
    for m in results {
        let s = series(m);
        if !strategies.contains(&s) {
            strategies.push(s);
        }
    }
    let (width, height) = size(panels.len());
    let mut out = vec![label((width / 2.0, 18.0), title.to_owned(), 0)];
    for (pi, (layout, ms)) in panels.iter().enumerate() {
        let max_n = ms.iter().map(|m| m.senders).max().unwrap_or(1).max(2) as f64;
        let rate = ms.iter().map(|m| m.line_rate_mbps).fold(0.0, f64::max);
        let top = ms.iter().map(|m| m.goodput_mbps).fold(rate, f64::max).max(1.0) * 1.1;
        let (x0, x1, ys) = frame(&mut out, pi, top, layout, "senders", "goodput (Mbit/s)");
        let xs = |senders: usize| x0 + (senders.max(1) as f64).log2() / max_n.log2() * PANEL_W;
        let mut t = 1usize;
        while t as f64 <= max_n {
            x_tick(&mut out, xs(t), t.to_string());
            t *= 2;
        }
        if rate > 0.0 {
            out.push(line((x0, ys(rate)), (x1, ys(rate)), "#000000", 1.0, true));
            out.push(label((x1 - 4.0, ys(rate) - 4.0), "line rate".into(), -1));
        }
        for (si, st) in strategies.iter().enumerate() {
            // One point per sender count: a sweep in rounds has a row per round, pooled
            // here as bytes over time.
            let mut ns: Vec<usize> = ms.iter().filter(|m| series(m) == *st).map(|m| m.senders).collect();
            ns.sort_unstable();
            ns.dedup();
            let pts: Vec<(f64, f64)> = ns
                .iter()
                .map(|&n| {
                    let rows = ms.iter().copied().filter(|m| series(m) == *st && m.senders == n);
                    (xs(n), ys(pooled_goodput(rows)))
                })
                .collect();
            polyline(&mut out, &pts, COLORS[si % COLORS.len()], true);
        }
    }
    let names = strategies
        .iter()
        .enumerate()
        .map(|(si, s)| (s.as_str(), COLORS[si % COLORS.len()]));
    legend(&mut out, names, 110.0);
    Scene {
        width,
        height,
        shapes: out,
    }
}

/// Lays out a load curve (`sweep --load 0.2,0.5,0.8`): mean read latency against the
/// offered load, one panel per kind of read (the small and the large reads of a `--mix`
/// sweep, else every read), one line per strategy (per strategy and configuration where
/// the sweep ran several), rounds pooled ([`pooled_latency`]). The latency runs on a log
/// scale in decades: the strategies of one load differ by up to a thousand times (`naive`'s
/// seconds of retransmission timeouts beside milliseconds), and a linear scale flattens
/// every line but the slowest.
fn load_scene(results: &[Measurement], loads: &[f64], title: &str) -> Scene {
    let rows: Vec<&Measurement> = results.iter().filter(|m| m.load > 0.0).collect();
    let mixed = rows.iter().any(|m| m.mix.is_some());
    let kinds: &[(&str, ReadKind)] = if mixed {
        &[("small reads", SMALL_READS), ("large reads", LARGE_READS)]
    } else {
        &[("every read", ALL_READS)]
    };
    let config = |m: &Measurement| (m.layout.clone(), m.senders, m.concurrency);
    let several = rows.iter().any(|m| config(m) != config(rows[0]));
    let series = |m: &Measurement| {
        if several {
            format!("{} N={} R={} {}", m.strategy, m.senders, m.concurrency, m.layout)
        } else {
            m.strategy.clone()
        }
    };
    let mut names: Vec<String> = Vec::new();
    for m in &rows {
        let s = series(m);
        if !names.contains(&s) {
            names.push(s);
        }
    }
    // Each kind's points: per series, (load, pooled mean latency) where reads completed.
    let curves: Vec<Vec<Vec<(f64, f64)>>> = kinds
        .iter()
        .map(|(_, kind)| {
            names
                .iter()
                .map(|name| {
                    loads
                        .iter()
                        .filter_map(|&load| {
                            let at: Vec<&Measurement> = rows
                                .iter()
                                .copied()
                                .filter(|m| series(m) == *name && m.load == load)
                                .collect();
                            pooled_latency(&at, kind)
                                .map(|(mean, _)| (load, mean))
                                .filter(|(_, mean)| *mean > 0.0)
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let (width, height) = size(kinds.len());
    let mut out = vec![label((width / 2.0, 18.0), title.to_owned(), 0)];
    for (pi, ((kind, _), lines)) in kinds.iter().zip(&curves).enumerate() {
        let means = lines.iter().flatten().map(|p| p.1);
        let lo = means.clone().fold(f64::MAX, f64::min).max(1e-3).log10().floor();
        let hi = means.fold(0.0, f64::max).max(1e-3).log10().ceil().max(lo + 1.0);
        let ys = |ms: f64| MARGIN_T + PANEL_H - (ms.max(1e-3).log10() - lo) / (hi - lo) * PANEL_H;
        let grid: Vec<(f64, String)> = (lo as i32..=hi as i32)
            .map(|d| {
                let v = 10f64.powi(d);
                (ys(v), if d < 0 { format!("{v}") } else { format!("{v:.0}") })
            })
            .collect();
        let (x0, _) = frame_with(
            &mut out,
            pi,
            &grid,
            kind,
            "offered load (share of the line rate)",
            "mean latency (ms)",
        );
        let xs = |load: f64| x0 + load.clamp(0.0, 1.0) * PANEL_W;
        for i in 0..=5 {
            let load = f64::from(i) / 5.0;
            x_tick(&mut out, xs(load), format!("{load:.1}"));
        }
        for (si, pts) in lines.iter().enumerate() {
            let pts: Vec<(f64, f64)> = pts.iter().map(|&(l, ms)| (xs(l), ys(ms))).collect();
            polyline(&mut out, &pts, COLORS[si % COLORS.len()], true);
        }
    }
    let names = names
        .iter()
        .enumerate()
        .map(|(si, s)| (s.as_str(), COLORS[si % COLORS.len()]));
    legend(&mut out, names, if several { 260.0 } else { 110.0 });
    Scene {
        width,
        height,
        shapes: out,
    }
}

/// The scene as an SVG document.
pub fn svg(scene: &Scene) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">"#,
        scene.width, scene.height
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for sh in &scene.shapes {
        let _ = match sh {
            Shape::Line {
                from,
                to,
                color,
                width,
                dashed,
            } => writeln!(
                s,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="{width}"{}/>"#,
                from.0,
                from.1,
                to.0,
                to.1,
                if *dashed { r#" stroke-dasharray="6,4""# } else { "" }
            ),
            Shape::Dot { at, r, color } => {
                writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{color}"/>"#,
                    at.0, at.1
                )
            }
            Shape::Text {
                at,
                text,
                align,
                vertical,
            } => {
                let anchor = match align {
                    -1 => "end",
                    0 => "middle",
                    _ => "start",
                };
                let rot = if *vertical {
                    format!(r#" transform="rotate(-90 {:.1} {:.1})""#, at.0, at.1)
                } else {
                    String::new()
                };
                writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}"{rot}>{}</text>"#,
                    at.0,
                    at.1,
                    esc(text)
                )
            }
        };
    }
    s.push_str("</svg>\n");
    s
}

/// The scene as a PNG image (8-bit RGB).
pub fn png(scene: &Scene) -> Vec<u8> {
    let (w, h) = (scene.width.ceil() as usize, scene.height.ceil() as usize);
    let mut c = Canvas {
        w,
        h,
        px: vec![255; w * h * 3],
    };
    for sh in &scene.shapes {
        match sh {
            Shape::Line {
                from,
                to,
                color,
                width,
                dashed,
            } => c.line(*from, *to, rgb(color), *width, *dashed),
            Shape::Dot { at, r, color } => c.dot(*at, *r, rgb(color)),
            Shape::Text {
                at,
                text,
                align,
                vertical,
            } => c.text(*at, text, *align, *vertical),
        }
    }
    c.encode()
}

fn rgb(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap_or(0);
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    fn dot(&mut self, (cx, cy): (f64, f64), r: f64, c: [u8; 3]) {
        let ri = r.ceil() as i64;
        for dy in -ri..=ri {
            for dx in -ri..=ri {
                if ((dx * dx + dy * dy) as f64) <= r * r {
                    self.set(cx.round() as i64 + dx, cy.round() as i64 + dy, c);
                }
            }
        }
    }

    fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64), c: [u8; 3], width: f64, dashed: bool) {
        let len = ((x1 - x0).powi(2) + (y1 - y0).powi(2)).sqrt();
        let steps = len.ceil().max(1.0) as usize;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            if dashed && (t * len) % 10.0 >= 6.0 {
                continue;
            }
            let (x, y) = (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t);
            if width <= 1.0 {
                self.set(x.round() as i64, y.round() as i64, c);
            } else {
                self.dot((x, y), width / 2.0, c);
            }
        }
    }

    /// Upper-case 5x7 glyphs with one column of spacing; the anchor is the baseline.
    fn text(&mut self, (x, y): (f64, f64), s: &str, align: i8, vertical: bool) {
        let chars: Vec<char> = s.chars().collect();
        let len = chars.len() as f64 * 6.0;
        let start = match align {
            -1 => -len,
            0 => -len / 2.0,
            _ => 0.0,
        };
        for (i, ch) in chars.iter().enumerate() {
            let g = glyph(*ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) == 0 {
                        continue;
                    }
                    let along = start + i as f64 * 6.0 + col as f64;
                    let up = row as f64 - 7.0;
                    let (px, py) = if vertical {
                        (x + up, y - along)
                    } else {
                        (x + along, y + up)
                    };
                    self.set(px.round() as i64, py.round() as i64, [0, 0, 0]);
                }
            }
        }
    }

    fn encode(&self) -> Vec<u8> {
        // Raw scanlines, each with filter type 0.
        let mut raw = Vec::with_capacity(self.h * (self.w * 3 + 1));
        for row in self.px.chunks(self.w * 3) {
            raw.push(0);
            raw.extend_from_slice(row);
        }
        // zlib with flate2, already in the build for hdrhistogram's serialization.
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        let z = enc
            .write_all(&raw)
            .and_then(|()| enc.finish())
            .expect("compressing into memory cannot fail");
        let mut ihdr = Vec::with_capacity(13);
        ihdr.extend_from_slice(&(self.w as u32).to_be_bytes());
        ihdr.extend_from_slice(&(self.h as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in [(b"IHDR", &ihdr[..]), (b"IDAT", &z[..]), (b"IEND", &[][..])] {
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let start = out.len();
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            let crc = crc32(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        }
        out
    }
}

/// CRC-32 (IEEE 802.3), as PNG chunks use.
fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// 5x7 glyph rows (bit 4 is the left column); letters are drawn upper case, and a character
/// without a glyph is drawn as a box.
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        ' ' => [0; 7],
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        'A' => [0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        ',' => [0, 0, 0, 0, 0x0C, 0x04, 0x08],
        ':' => [0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '=' => [0, 0, 0x1F, 0, 0x1F, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0],
        _ => [0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F],
    }
}

/// One panel of a [`timeline`]: named series of (seconds, value) points.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    /// Title above the panel.
    pub label: String,
    /// Name of the y axis.
    pub y_label: String,
    /// Named series, drawn in the palette's order.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Lays out values over time, one panel each, side by side, with a dashed mark (and its
/// label) at each of `marks` (seconds): the soak's resident memory, descriptors and tasks
/// across its fault phases.
pub fn timeline(panels: &[Panel], marks: &[(f64, String)], title: &str) -> Scene {
    let (width, height) = size(panels.len());
    let mut out = vec![label((width / 2.0, 18.0), title.to_owned(), 0)];
    let end = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|(_, v)| v.iter().map(|p| p.0)))
        .fold(1.0, f64::max);
    for (pi, panel) in panels.iter().enumerate() {
        let top = panel
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.1;
        let (x0, _, ys) = frame(&mut out, pi, top, &panel.label, "seconds", &panel.y_label);
        let xs = |t: f64| x0 + t.clamp(0.0, end) / end * PANEL_W;
        for i in 0..=4 {
            let t = end / 4.0 * f64::from(i);
            x_tick(&mut out, xs(t), format!("{t:.0}"));
        }
        for (t, mark) in marks {
            out.push(line(
                (xs(*t), MARGIN_T),
                (xs(*t), MARGIN_T + PANEL_H),
                "#aaaaaa",
                1.0,
                true,
            ));
            // Written down the mark, from the top: a soak has dozens of phases side by side.
            out.push(Shape::Text {
                at: (xs(*t) + 9.0, MARGIN_T + 4.0),
                text: mark.clone(),
                align: -1,
                vertical: true,
            });
        }
        for (si, (_, pts)) in panel.series.iter().enumerate() {
            let pts: Vec<(f64, f64)> = pts.iter().map(|&(t, v)| (xs(t), ys(v))).collect();
            polyline(&mut out, &pts, COLORS[si % COLORS.len()], false);
        }
    }
    let names = panels.iter().flat_map(|p| {
        p.series
            .iter()
            .enumerate()
            .map(|(si, (name, _))| (name.as_str(), COLORS[si % COLORS.len()]))
    });
    legend(&mut out, names, 150.0);
    Scene {
        width,
        height,
        shapes: out,
    }
}

/// Writes the goodput plot of a sweep; the format follows the extension (`.svg` or `.png`).
pub fn write(path: &Path, results: &[Measurement], title: &str) -> Result<(), PlotError> {
    write_scene(path, &scene(results, title))
}

/// Whether `path` names a format the plotter writes (`.svg` or `.png`): checked before a
/// long run, not after it.
pub fn check_format(path: &Path) -> Result<bool, PlotError> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
        .as_str()
    {
        "svg" => Ok(true),
        "png" => Ok(false),
        _ => Err(PlotError::Format(path.display().to_string())),
    }
}

/// Writes a laid-out figure; the format follows the extension (`.svg` or `.png`).
pub fn write_scene(path: &Path, sc: &Scene) -> Result<(), PlotError> {
    let bytes = if check_format(path)? {
        svg(sc).into_bytes()
    } else {
        png(sc)
    };
    std::fs::write(path, bytes).map_err(|source| WriteError {
        path: path.to_owned(),
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_draws_every_series_and_mark_inside_its_panel() {
        let rising: Vec<(f64, f64)> = (0..=60).map(|t| (f64::from(t), f64::from(t) * 2.0)).collect();
        let flat: Vec<(f64, f64)> = (0..=60).map(|t| (f64::from(t), 5.0)).collect();
        let panels = [
            Panel {
                label: "a".into(),
                y_label: "MiB".into(),
                series: vec![("rising".into(), rising)],
            },
            Panel {
                label: "b".into(),
                y_label: "n".into(),
                series: vec![("flat".into(), flat.clone()), ("flat too".into(), flat)],
            },
        ];
        let marks = [(0.0, "none".to_string()), (30.0, "kill".to_string())];
        let sc = timeline(&panels, &marks, "t");
        let series_lines = sc
            .shapes
            .iter()
            .filter(|s| matches!(s, Shape::Line { width, .. } if *width == 2.0))
            .count();
        assert_eq!(series_lines, 3 * 60);
        let dashed = sc
            .shapes
            .iter()
            .filter(|s| matches!(s, Shape::Line { dashed: true, .. }))
            .count();
        assert_eq!(dashed, 2 * marks.len());
        for s in &sc.shapes {
            if let Shape::Line { from, to, .. } = s {
                for (x, y) in [from, to] {
                    assert!((0.0..=sc.width).contains(x) && (0.0..=sc.height).contains(y), "{s:?}");
                }
            }
        }
        // The rising series ends at the top of its panel's scale, not above it.
        let top = sc
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Line { to, width, .. } if *width == 2.0 => Some(to.1),
                _ => None,
            })
            .fold(f64::MAX, f64::min);
        assert!(top >= MARGIN_T, "{top}");
        assert!(check_format(Path::new("x.svg")).unwrap() && !check_format(Path::new("x.PNG")).unwrap());
        assert!(check_format(Path::new("x.pdf")).is_err());
    }
    use crate::output::human;

    fn m(strategy: &str, senders: usize, sru: u64, goodput: f64) -> Measurement {
        Measurement {
            strategy: strategy.into(),
            senders,
            sru_bytes: sru,
            block_bytes: sru * senders as u64,
            goodput_mbps: goodput,
            line_rate_mbps: 900.0,
            layout: format!("SRU {}", human(sru)),
            ..Measurement::default()
        }
    }

    #[test]
    fn a_load_sweep_plots_latency_by_load_on_a_log_scale_per_kind() {
        let row = |strategy: &str, load, small, large| Measurement {
            strategy: strategy.into(),
            senders: 16,
            concurrency: 16,
            layout: "SRU 256KiB".into(),
            load,
            mix: Some("4 x 16KiB".into()),
            mix_blocks: 10,
            mix_mean_ms: small,
            layout_blocks: 10,
            layout_mean_ms: large,
            line_rate_mbps: 900.0,
            ..Measurement::default()
        };
        let rs = [
            row("naive", 0.2, 10.0, 200.0),
            row("default", 0.2, 2.0, 50.0),
            row("naive", 0.8, 100.0, 2000.0),
            row("default", 0.8, 2.0, 80.0),
        ];
        let sc = scene(&rs, "t");
        assert_eq!((sc.width, sc.height), size(2));
        let s = svg(&sc);
        assert!(s.contains("offered load") && s.contains("small reads") && s.contains("large reads"));
        // A dot per strategy, load and kind: the small reads' panel first, naive's line first.
        let dots: Vec<(f64, f64)> = sc
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Dot { at, .. } => Some(*at),
                _ => None,
            })
            .collect();
        assert_eq!(dots.len(), 8);
        // The small reads took 2-100 ms: decades 1 to 100, so 100 ms is the panel's top and
        // 10 ms half-way down; a load of 0.8 is 0.8 of the panel's width.
        assert_eq!(dots[1], (MARGIN_L + 0.8 * PANEL_W, MARGIN_T));
        assert!((dots[0].1 - (MARGIN_T + PANEL_H / 2.0)).abs() < 1e-9, "{dots:?}");
        // default's small reads lie under naive's at both loads.
        assert!(dots[2].1 > dots[0].1 && dots[3].1 > dots[1].1, "{dots:?}");
        // A sweep of one load keeps the goodput plot.
        let one = svg(&scene(&rs[..2], "t"));
        assert!(one.contains("goodput") && !one.contains("offered load"));
    }

    #[test]
    fn one_line_per_strategy_and_rejects_unknown_formats() {
        let rs = [
            m("naive", 4, 32768, 800.0),
            m("naive", 16, 32768, 90.0),
            m("default", 4, 32768, 850.0),
            m("default", 16, 32768, 880.0),
        ];
        let s = svg(&scene(&rs, "t"));
        // One segment per pair of neighbouring points of each strategy, one dot per point.
        assert_eq!(s.matches(r##"stroke="#d62728" stroke-width="2""##).count(), 1);
        assert_eq!(s.matches("<circle").count(), 4);
        assert!(s.contains("SRU 32KiB"));
        assert!(s.contains("line rate"));
        assert!(matches!(
            write(Path::new("/nonexistent/x.gif"), &rs, "t"),
            Err(PlotError::Format(_))
        ));
    }

    #[test]
    fn rounds_of_one_configuration_make_one_point() {
        let round = |n, g, round, elapsed_s| Measurement {
            round,
            elapsed_s,
            ..m("naive", n, 32768, g)
        };
        // 800 Mbit/s for 1 s and 200 for 3 s pool to 350.
        let rs = [
            round(4, 800.0, 0, 1.0),
            round(4, 200.0, 1, 3.0),
            round(16, 90.0, 0, 1.0),
        ];
        let sc = scene(&rs, "t");
        assert_eq!(svg(&sc).matches("<circle").count(), 2);
        let alone = scene(&[round(4, 350.0, 0, 1.0), round(16, 90.0, 0, 1.0)], "t");
        assert_eq!(svg(&sc), svg(&alone));
    }

    #[test]
    fn several_concurrencies_get_a_line_each() {
        let at = |r, n, g| Measurement {
            concurrency: r,
            ..m("naive", n, 32768, g)
        };
        let rs = [at(1, 4, 800.0), at(1, 16, 90.0), at(4, 4, 700.0), at(4, 16, 80.0)];
        let s = svg(&scene(&rs, "t"));
        assert!(s.contains("naive x1") && s.contains("naive x4"), "{s}");
        assert_eq!(s.matches(r#"stroke-width="2""#).count(), 2);
    }

    #[test]
    fn png_is_well_formed_and_shows_the_lines() {
        let rs = [m("naive", 4, 32768, 800.0), m("naive", 16, 32768, 90.0)];
        let sc = scene(&rs, "t");
        let img = png(&sc);
        assert_eq!(&img[..8], b"\x89PNG\r\n\x1a\n");
        // Every chunk's CRC matches; IHDR has the scene's size.
        let mut at = 8;
        let mut kinds = Vec::new();
        while at < img.len() {
            let len = u32::from_be_bytes(img[at..at + 4].try_into().unwrap()) as usize;
            let body = &img[at + 4..at + 8 + len];
            let crc = u32::from_be_bytes(img[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc32(body), crc);
            kinds.push(String::from_utf8_lossy(&body[..4]).into_owned());
            at += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        let w = u32::from_be_bytes(img[16..20].try_into().unwrap());
        assert_eq!(w as f64, sc.width.ceil());
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        // The strategy's colour is on the canvas.
        let mut c = Canvas {
            w: 10,
            h: 10,
            px: vec![255; 300],
        };
        c.line((0.0, 0.0), (9.0, 9.0), rgb("#d62728"), 1.0, false);
        assert_eq!(&c.px[(5 * 10 + 5) * 3..(5 * 10 + 5) * 3 + 3], &[0xd6, 0x27, 0x28]);
    }
}
