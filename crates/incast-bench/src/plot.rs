//! Goodput versus senders, one line per strategy, one panel per block layout: the figure of
//! the seeds (phanishayee-fast08 Fig. 2, vasudevan-sigcomm09 Fig. 1), drawn as SVG.
//!
//! Drawn by hand rather than with a plotting crate: the figure is a few polylines, and this
//! keeps the bench's dependency tree (and CI build time) small. The x axis is log2 of the
//! sender count; the dashed line is the line rate measured in the same run.

use std::fmt::Write as _;
use std::path::Path;

use crate::output::WriteError;
use crate::run::Measurement;

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
    #[error("plot file `{0}` must end in .svg (PNG is not implemented yet; convert the SVG)")]
    Format(String),
    /// Writing failed.
    #[error(transparent)]
    Write(#[from] WriteError),
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders the results as an SVG document.
pub fn svg(results: &[Measurement], title: &str) -> String {
    // Panels: one per (sru or block) layout, in first-seen order.
    let mut panels: Vec<(String, Vec<&Measurement>)> = Vec::new();
    for m in results {
        let key = m.layout.clone();
        match panels.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(m),
            None => panels.push((key, vec![m])),
        }
    }
    let mut strategies: Vec<&str> = Vec::new();
    for m in results {
        if !strategies.contains(&m.strategy.as_str()) {
            strategies.push(&m.strategy);
        }
    }
    let n = panels.len().max(1) as f64;
    let width = n * (PANEL_W + MARGIN_L + MARGIN_R);
    let height = PANEL_H + MARGIN_T + MARGIN_B + LEGEND_H + 20.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>"#,
        width / 2.0,
        esc(title)
    );
    for (pi, (label, ms)) in panels.iter().enumerate() {
        let x0 = pi as f64 * (PANEL_W + MARGIN_L + MARGIN_R) + MARGIN_L;
        let y0 = MARGIN_T;
        let max_n = ms.iter().map(|m| m.senders).max().unwrap_or(1).max(2) as f64;
        let line = ms.iter().map(|m| m.line_rate_mbps).fold(0.0, f64::max);
        let top = ms.iter().map(|m| m.goodput_mbps).fold(line, f64::max).max(1.0) * 1.1;
        let xs = |senders: usize| x0 + (senders.max(1) as f64).log2() / max_n.log2() * PANEL_W;
        let ys = |mbps: f64| y0 + PANEL_H - mbps / top * PANEL_H;
        let _ = writeln!(
            s,
            r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            x0 + PANEL_W / 2.0,
            y0 - 6.0,
            esc(label)
        );
        // Axes: ticks at powers of two, five goodput ticks.
        let mut t = 1usize;
        while t as f64 <= max_n {
            let x = xs(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#444"/><text x="{x}" y="{}" text-anchor="middle">{t}</text>"##,
                y0 + PANEL_H,
                y0 + PANEL_H + 5.0,
                y0 + PANEL_H + 18.0
            );
            t *= 2;
        }
        for i in 0..=5 {
            let v = top / 5.0 * f64::from(i);
            let y = ys(v);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{v:.0}</text>"##,
                x0 + PANEL_W,
                x0 - 6.0,
                y + 4.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">senders</text>"#,
            x0 + PANEL_W / 2.0,
            y0 + PANEL_H + 36.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">goodput (Mbit/s)</text>"#,
            x0 - 44.0,
            y0 + PANEL_H / 2.0
        );
        if line > 0.0 {
            let y = ys(line);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#000" stroke-dasharray="6,4"/><text x="{}" y="{}" text-anchor="end">line rate</text>"##,
                x0 + PANEL_W,
                x0 + PANEL_W - 4.0,
                y - 4.0
            );
        }
        for (si, st) in strategies.iter().enumerate() {
            let mut pts: Vec<(usize, f64)> = ms
                .iter()
                .filter(|m| m.strategy == *st)
                .map(|m| (m.senders, m.goodput_mbps))
                .collect();
            pts.sort_by_key(|p| p.0);
            if pts.is_empty() {
                continue;
            }
            let color = COLORS[si % COLORS.len()];
            let path: Vec<String> = pts
                .iter()
                .map(|(n, g)| format!("{:.1},{:.1}", xs(*n), ys(*g)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for (n, g) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    xs(*n),
                    ys(*g)
                );
            }
        }
    }
    let ly = MARGIN_T + PANEL_H + MARGIN_B + 12.0;
    for (si, st) in strategies.iter().enumerate() {
        let x = MARGIN_L + si as f64 * 110.0;
        let color = COLORS[si % COLORS.len()];
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            ly + 4.0,
            esc(st)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes the plot; the format follows the extension.
pub fn write(path: &Path, results: &[Measurement], title: &str) -> Result<(), PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ext != "svg" {
        return Err(PlotError::Format(path.display().to_string()));
    }
    std::fs::write(path, svg(results, title)).map_err(|source| WriteError {
        path: path.to_owned(),
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn one_line_per_strategy_and_rejects_unknown_formats() {
        let rs = [
            m("naive", 4, 32768, 800.0),
            m("naive", 16, 32768, 90.0),
            m("default", 4, 32768, 850.0),
            m("default", 16, 32768, 880.0),
        ];
        let s = svg(&rs, "t");
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 4);
        assert!(s.contains("SRU 32KiB"));
        assert!(s.contains("line rate"));
        assert!(matches!(
            write(Path::new("/nonexistent/x.gif"), &rs, "t"),
            Err(PlotError::Format(_))
        ));
    }
}
