//! Small SVG charts for the benchmark results: lines over linear or log axes, grouped bars.
//! Hand-written so the benchmark needs no plotting stack; enough for the paper's figures.

use std::fmt::Write;

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// One named series of points.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points; points with a non-positive coordinate on a log axis are skipped.
    pub points: Vec<(f64, f64)>,
}

/// An axis: label and whether it is logarithmic.
#[derive(Clone, Copy)]
pub struct Axis<'a> {
    /// Axis title.
    pub label: &'a str,
    /// Log10 scale.
    pub log: bool,
}

struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Scale {
    fn new(values: impl Iterator<Item = f64>, log: bool, from: f64, to: f64) -> Self {
        let vals: Vec<f64> = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .map(|v| if log { v.log10() } else { v })
            .collect();
        let (mut lo, mut hi) = vals
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        if vals.is_empty() {
            (lo, hi) = (0.0, 1.0);
        }
        if log {
            (lo, hi) = (lo.floor(), hi.ceil());
        } else {
            lo = lo.min(0.0);
        }
        if hi - lo < 1e-12 {
            hi = lo + 1.0;
        }
        Self {
            lo,
            hi,
            log,
            from,
            to,
        }
    }

    fn map(&self, v: f64) -> Option<f64> {
        if self.log && v <= 0.0 || !v.is_finite() {
            return None;
        }
        let v = if self.log { v.log10() } else { v };
        Some(self.from + (v - self.lo) / (self.hi - self.lo) * (self.to - self.from))
    }

    /// Tick values (in data units).
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            (self.lo as i32..=self.hi as i32)
                .map(|e| 10f64.powi(e))
                .collect()
        } else {
            (0..=5)
                .map(|i| self.lo + (self.hi - self.lo) * i as f64 / 5.0)
                .collect()
        }
    }
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:.0e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn frame(out: &mut String, title: &str, x: Axis, y: Axis) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
<text x="{}" y="{}" text-anchor="middle">{}</text>
<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>
"#,
        (LEFT + W - RIGHT) / 2.0,
        escape(title),
        (LEFT + W - RIGHT) / 2.0,
        H - 15.0,
        escape(&format!("{}{}", x.label, if x.log { " (log)" } else { "" })),
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0,
        escape(&format!("{}{}", y.label, if y.log { " (log)" } else { "" })),
    );
}

fn y_grid(out: &mut String, ys: &Scale) {
    for t in ys.ticks() {
        if let Some(py) = ys.map(t) {
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                W - RIGHT,
                LEFT - 6.0,
                py + 4.0,
                fmt_tick(t)
            );
        }
    }
}

fn legend(out: &mut String, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 20.0;
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            W - RIGHT + 12.0,
            y - 10.0,
            COLORS[i % COLORS.len()],
            W - RIGHT + 30.0,
            y,
            escape(name)
        );
    }
}

/// A line chart of `series` (points sorted by x per series).
pub fn line_chart(title: &str, x: Axis, y: Axis, series: &[Series]) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let xs = Scale::new(all().map(|p| p.0), x.log, LEFT, W - RIGHT);
    let ys = Scale::new(all().map(|p| p.1), y.log, H - BOTTOM, TOP);
    let mut out = String::new();
    frame(&mut out, title, x, y);
    y_grid(&mut out, &ys);
    for t in xs.ticks() {
        if let Some(px) = xs.map(t) {
            let _ = writeln!(
                out,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                H - BOTTOM,
                H - BOTTOM + 16.0,
                fmt_tick(t)
            );
        }
    }
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .points
            .iter()
            .filter_map(|&(a, b)| Some(format!("{:.1},{:.1}", xs.map(a)?, ys.map(b)?)))
            .collect();
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        if pts.len() <= 40 {
            for p in &pts {
                let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(out, r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>"#);
            }
        }
    }
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    legend(&mut out, &names);
    out.push_str("</svg>\n");
    out
}

/// Grouped bars: one group per category, one bar per series (`values[s][c]`, None = missing).
pub fn bar_chart(
    title: &str,
    y: Axis,
    categories: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> String {
    let ys = Scale::new(
        series.iter().flat_map(|s| s.1.iter().flatten().copied()),
        y.log,
        H - BOTTOM,
        TOP,
    );
    let mut out = String::new();
    frame(
        &mut out,
        title,
        Axis {
            label: "",
            log: false,
        },
        y,
    );
    y_grid(&mut out, &ys);
    let group_w = (W - RIGHT - LEFT) / categories.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    let base = if y.log {
        ys.map(10f64.powf(ys.lo)).unwrap_or(H - BOTTOM)
    } else {
        ys.map(0.0).unwrap_or(H - BOTTOM)
    };
    for (c, cat) in categories.iter().enumerate() {
        let gx = LEFT + c as f64 * group_w;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            gx + group_w / 2.0,
            H - BOTTOM + 16.0,
            escape(cat)
        );
        for (s, (_, values)) in series.iter().enumerate() {
            let Some(top) = values.get(c).copied().flatten().and_then(|v| ys.map(v)) else {
                continue;
            };
            let x = gx + group_w * 0.1 + s as f64 * bar_w;
            let _ = writeln!(
                out,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                top.min(base),
                bar_w * 0.9,
                (base - top).abs(),
                COLORS[s % COLORS.len()]
            );
        }
    }
    let names: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
    legend(&mut out, &names);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axes_place_decades_and_skip_non_positive_points() {
        let svg = line_chart(
            "t",
            Axis {
                label: "x",
                log: true,
            },
            Axis {
                label: "y",
                log: true,
            },
            &[Series {
                name: "a<b".into(),
                points: vec![(0.001, 0.01), (0.0, 5.0), (1.0, 10.0)],
            }],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a&lt;b"));
        // Two of three points are drawn (x = 0 has no place on a log axis).
        assert_eq!(svg.matches("<circle").count(), 2);
        // Decades from 1e-3 to 1 on x.
        assert!(svg.contains(">1e-3<") && svg.contains(">1<"));
    }

    #[test]
    fn bars_skip_missing_values() {
        let svg = bar_chart(
            "t",
            Axis {
                label: "speedup",
                log: false,
            },
            &["q1".into(), "q2".into()],
            &[("s".into(), vec![Some(2.0), None])],
        );
        assert_eq!(svg.matches("<rect x=").count(), 1 + 1); // one bar + one legend box
    }
}
