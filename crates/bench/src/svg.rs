//! Charts as hand-written SVG text: a plot area with axes, ticks and grid,
//! an optional second y axis on the right, line, dashed-line and bar series,
//! a legend and a title. Enough for the benchmark's charts, no more.

use super::stats::fmt_g;
use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 540.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b",
];

/// Which y axis a series is drawn against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    Left,
    Right,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Line,
    Dashed,
    /// A wide, pale line: stays visible under a line that coincides with it.
    Wide,
    Bars,
}

impl Style {
    /// Stroke attributes of a line style.
    fn stroke(self) -> &'static str {
        match self {
            Style::Dashed => r#" stroke-width="2" stroke-dasharray="6,4""#,
            Style::Wide => r#" stroke-width="6" stroke-opacity="0.35""#,
            Style::Line | Style::Bars => r#" stroke-width="2""#,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
    pub axis: Axis,
}

impl Series {
    pub fn new(name: &str, points: Vec<(f64, f64)>, style: Style, axis: Axis) -> Series {
        Series {
            name: name.into(),
            points,
            style,
            axis,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Label of the right-hand axis (drawn when a series uses it).
    pub y2_label: String,
    pub series: Vec<Series>,
    /// Ticks to draw on the x axis instead of evenly spaced numbers.
    pub x_ticks: Option<Vec<(f64, String)>>,
}

/// Escape text for XML character data and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// A "nice" step (1, 2 or 5 times a power of ten) near `range / target`.
fn nice_step(range: f64, target: f64) -> f64 {
    let raw = (range / target).abs();
    if !raw.is_finite() || raw == 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Ticks covering `[lo, hi]`, and the range widened to whole steps.
fn ticks(lo: f64, hi: f64) -> (Vec<f64>, f64, f64) {
    let step = nice_step(hi - lo, 5.0);
    let start = (lo / step).floor() * step;
    let end = (hi / step).ceil() * step;
    let end = if end <= start { start + step } else { end };
    let n = ((end - start) / step).round() as usize;
    (
        (0..=n).map(|i| start + i as f64 * step).collect(),
        start,
        end,
    )
}

fn fmt_tick(v: f64) -> String {
    // Remove float noise such as 0.30000000000000004.
    fmt_g((v * 1e9).round() / 1e9, 6)
}

struct Frame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
}

impl Frame {
    fn x(&self, v: f64, lo: f64, hi: f64) -> f64 {
        self.left + (v - lo) / (hi - lo) * self.width
    }
    fn y(&self, v: f64, lo: f64, hi: f64) -> f64 {
        self.top + self.height - (v - lo) / (hi - lo) * self.height
    }
}

impl Chart {
    /// The chart as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let finite = |s: &Series| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect()
        };
        let series: Vec<(&Series, Vec<(f64, f64)>)> =
            self.series.iter().map(|s| (s, finite(s))).collect();
        let has_right = series
            .iter()
            .any(|(s, p)| s.axis == Axis::Right && !p.is_empty());
        let frame = Frame {
            left: 80.0,
            top: 70.0,
            width: WIDTH - 80.0 - if has_right { 80.0 } else { 30.0 },
            height: HEIGHT - 70.0 - 60.0,
        };

        // X range; bars get half a slot of room on each side.
        let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
        let (mut x_lo, mut x_hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        if !x_lo.is_finite() {
            (x_lo, x_hi) = (0.0, 1.0);
        }
        let bar_slot = series
            .iter()
            .filter(|(s, _)| s.style == Style::Bars)
            .map(|(_, p)| min_gap(p))
            .fold(f64::INFINITY, f64::min);
        if bar_slot.is_finite() {
            x_lo -= bar_slot / 2.0;
            x_hi += bar_slot / 2.0;
        }
        if x_hi <= x_lo {
            x_hi = x_lo + 1.0;
        }
        let (x_ticks, x_lo, x_hi) = match &self.x_ticks {
            Some(t) => (t.clone(), x_lo, x_hi),
            None => {
                let (t, lo, hi) = ticks(x_lo, x_hi);
                (t.into_iter().map(|v| (v, fmt_tick(v))).collect(), lo, hi)
            }
        };
        let y_range = |axis: Axis| {
            let max = series
                .iter()
                .filter(|(s, _)| s.axis == axis)
                .flat_map(|(_, p)| p.iter().map(|q| q.1))
                .fold(0.0f64, f64::max);
            ticks(0.0, if max > 0.0 { max } else { 1.0 })
        };
        let (y_ticks, y_lo, y_hi) = y_range(Axis::Left);
        let (y2_ticks, y2_lo, y2_hi) = y_range(Axis::Right);

        let mut o = String::new();
        let _ = writeln!(
            o,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>
<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        let (l, t, r, b) = (
            frame.left,
            frame.top,
            frame.left + frame.width,
            frame.top + frame.height,
        );
        // Grid and ticks.
        for &(v, ref label) in &x_ticks {
            if v < x_lo || v > x_hi {
                continue;
            }
            let x = frame.x(v, x_lo, x_hi);
            let _ = writeln!(
                o,
                r##"<line x1="{x:.1}" y1="{t:.1}" x2="{x:.1}" y2="{b:.1}" stroke="#e0e0e0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                b + 16.0,
                escape(label)
            );
        }
        for &v in &y_ticks {
            let y = frame.y(v, y_lo, y_hi);
            let _ = writeln!(
                o,
                r##"<line x1="{l:.1}" y1="{y:.1}" x2="{r:.1}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                l - 6.0,
                y + 4.0,
                fmt_tick(v)
            );
        }
        if has_right {
            for &v in &y2_ticks {
                let y = frame.y(v, y2_lo, y2_hi);
                let _ = writeln!(
                    o,
                    r#"<line x1="{r:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="black"/><text x="{:.1}" y="{:.1}" text-anchor="start">{}</text>"#,
                    r + 4.0,
                    r + 7.0,
                    y + 4.0,
                    fmt_tick(v)
                );
            }
        }
        // Axes and their labels.
        let _ = writeln!(
            o,
            r#"<polyline points="{l:.1},{t:.1} {l:.1},{b:.1} {r:.1},{b:.1}{}" fill="none" stroke="black"/>"#,
            if has_right {
                format!(" {r:.1},{t:.1}")
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            l + frame.width / 2.0,
            b + 40.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            o,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            l - 55.0,
            t + frame.height / 2.0,
            escape(&self.y_label)
        );
        if has_right {
            let _ = writeln!(
                o,
                r#"<text transform="translate({:.1},{:.1}) rotate(90)" text-anchor="middle">{}</text>"#,
                r + 60.0,
                t + frame.height / 2.0,
                escape(&self.y2_label)
            );
        }
        // Series.
        let bars: Vec<usize> = (0..series.len())
            .filter(|&i| series[i].0.style == Style::Bars)
            .collect();
        for (i, (s, pts)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let (lo, hi) = match s.axis {
                Axis::Left => (y_lo, y_hi),
                Axis::Right => (y2_lo, y2_hi),
            };
            match s.style {
                Style::Line | Style::Dashed | Style::Wide => {
                    let coords: Vec<String> = pts
                        .iter()
                        .map(|&(x, y)| {
                            format!("{:.1},{:.1}", frame.x(x, x_lo, x_hi), frame.y(y, lo, hi))
                        })
                        .collect();
                    let _ = writeln!(
                        o,
                        r#"<polyline points="{}" fill="none" stroke="{color}"{}/>"#,
                        coords.join(" "),
                        s.style.stroke()
                    );
                }
                Style::Bars => {
                    let slot = bar_slot * frame.width / (x_hi - x_lo);
                    let each = slot * 0.8 / bars.len().max(1) as f64;
                    let k = bars.iter().position(|&j| j == i).unwrap_or(0) as f64;
                    for &(x, y) in pts {
                        let x0 = frame.x(x, x_lo, x_hi) - slot * 0.4 + k * each;
                        let y0 = frame.y(y.max(lo), lo, hi);
                        let _ = writeln!(
                            o,
                            r#"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                            each.max(0.5),
                            (b - y0).max(0.0)
                        );
                    }
                }
            }
        }
        // Legend, in a row above the plot.
        let mut x = l;
        for (i, (s, _)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let swatch = match s.style {
                Style::Bars => {
                    format!(r#"<rect x="{x:.1}" y="40" width="18" height="10" fill="{color}"/>"#)
                }
                Style::Line | Style::Dashed | Style::Wide => format!(
                    r#"<line x1="{x:.1}" y1="45" x2="{:.1}" y2="45" stroke="{color}"{}/>"#,
                    x + 18.0,
                    s.style.stroke()
                ),
            };
            let side = if s.axis == Axis::Right && has_right {
                " (right axis)"
            } else {
                ""
            };
            let label = format!("{}{side}", s.name);
            let _ = writeln!(
                o,
                r#"{swatch}<text x="{:.1}" y="49">{}</text>"#,
                x + 24.0,
                escape(&label)
            );
            x += 40.0 + 7.0 * label.chars().count() as f64;
        }
        o.push_str("</svg>\n");
        o
    }
}

/// The smallest distance between distinct x values (1 for a single point).
fn min_gap(points: &[(f64, f64)]) -> f64 {
    let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(if xs.len() < 2 { 1.0 } else { f64::INFINITY })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal XML well-formedness check: balanced, properly nested
    /// elements under one root, quoted attributes, no stray `<` or `&` in
    /// text. Returns the element names in document order.
    pub(crate) fn check_xml(doc: &str) -> Result<Vec<String>, String> {
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut rest = doc.trim_start();
        if let Some(r) = rest.strip_prefix("<?xml") {
            rest = &r[r.find("?>").ok_or("unterminated XML declaration")? + 2..];
        }
        let mut roots = 0;
        while !rest.is_empty() {
            let lt = rest.find('<').unwrap_or(rest.len());
            let text = &rest[..lt];
            check_text(text)?;
            if stack.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            rest = &rest[lt..];
            if rest.is_empty() {
                break;
            }
            let gt = find_tag_end(rest).ok_or("unterminated tag")?;
            let tag = &rest[1..gt];
            rest = &rest[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("stray </{name}>"))?;
                if open != name.trim() {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name = body
                .split_whitespace()
                .next()
                .ok_or("empty tag")?
                .to_string();
            check_attributes(&body[name.len()..])?;
            if stack.is_empty() {
                roots += 1;
            }
            names.push(name.clone());
            if !self_closing {
                stack.push(name);
            }
        }
        if let Some(open) = stack.pop() {
            return Err(format!("<{open}> never closed"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(names)
    }

    fn find_tag_end(s: &str) -> Option<usize> {
        let mut quote = None;
        for (i, c) in s.char_indices().skip(1) {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '>') => return Some(i),
                (None, '<') => return None,
                _ => {}
            }
        }
        None
    }

    fn check_text(text: &str) -> Result<(), String> {
        for (i, _) in text.match_indices('&') {
            let ent = &text[i..];
            if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| ent.starts_with(e))
            {
                return Err(format!("bare & in {text:?}"));
            }
        }
        Ok(())
    }

    fn check_attributes(mut s: &str) -> Result<(), String> {
        loop {
            s = s.trim_start();
            if s.is_empty() {
                return Ok(());
            }
            let eq = s
                .find('=')
                .ok_or(format!("attribute without value: {s:?}"))?;
            let name = &s[..eq];
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("bad attribute name {name:?}"));
            }
            let v = &s[eq + 1..];
            let q = v
                .chars()
                .next()
                .filter(|c| *c == '"' || *c == '\'')
                .ok_or("unquoted attribute")?;
            let end = v[1..].find(q).ok_or("unterminated attribute")?;
            check_text(&v[1..1 + end])?;
            if v[1..1 + end].contains('<') {
                return Err("< in attribute".into());
            }
            s = &v[end + 2..];
        }
    }

    #[test]
    fn checker_rejects_broken_xml() {
        assert!(check_xml("<svg><g></svg>").is_err());
        assert!(check_xml("<svg><text>a & b</text></svg>").is_err());
        assert!(check_xml("<svg x=1/>").is_err());
        assert!(check_xml("<a/><b/>").is_err());
        assert!(check_xml("<svg><text>a &amp; b</text><g x=\"1\"/></svg>").is_ok());
    }

    #[test]
    fn chart_is_well_formed_svg_with_every_series() {
        let chart = Chart {
            title: "TPS <ramp> & \"quotes\"".into(),
            x_label: "seconds".into(),
            y_label: "sessions/s".into(),
            y2_label: "ms".into(),
            series: vec![
                Series::new(
                    "attempted",
                    vec![(0.0, 5.0), (1.0, 10.0), (2.0, 15.0)],
                    Style::Wide,
                    Axis::Left,
                ),
                Series::new(
                    "failed",
                    vec![(0.0, 0.0), (1.0, f64::NAN), (2.0, 1.0)],
                    Style::Line,
                    Axis::Left,
                ),
                Series::new(
                    "mean response",
                    vec![(0.0, 120.0), (2.0, 90.0)],
                    Style::Dashed,
                    Axis::Right,
                ),
                Series::new(
                    "runs",
                    vec![(1.0, 3.0), (2.0, 4.0)],
                    Style::Bars,
                    Axis::Left,
                ),
            ],
            x_ticks: None,
        };
        let svg = chart.to_svg();
        let names = check_xml(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(names[0], "svg");
        assert_eq!(
            svg.matches("stroke-opacity=\"0.35\"").count(),
            2,
            "wide series + swatch"
        );
        assert_eq!(
            svg.matches("<polyline").count(),
            1 + 3,
            "axes + 3 line series"
        );
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            2,
            "series + legend swatch"
        );
        assert!(svg.contains("TPS &lt;ramp&gt; &amp; &quot;quotes&quot;"));
        for name in ["attempted", "failed", "mean response (right axis)", "runs"] {
            assert!(svg.contains(&format!(">{name}</text>")), "{name}");
        }
        // The NaN point is dropped, the others kept.
        let failed = svg
            .lines()
            .filter(|l| l.starts_with("<polyline"))
            .nth(2)
            .unwrap();
        assert_eq!(
            failed
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .split(' ')
                .count(),
            2
        );
        // Two bars, each inside the plot.
        assert_eq!(
            svg.matches("<rect").count(),
            1 + 2 + 1,
            "background + bars + legend swatch"
        );
    }

    #[test]
    fn empty_and_custom_ticks() {
        let svg = Chart {
            title: "nothing".into(),
            x_ticks: Some(vec![(0.0, "0%".into()), (1.0, "90%".into())]),
            ..Default::default()
        }
        .to_svg();
        check_xml(&svg).unwrap();
        assert!(svg.contains(">90%</text>"));
    }

    #[test]
    fn tick_steps_are_nice() {
        let (t, lo, hi) = ticks(0.0, 93.0);
        assert_eq!((lo, hi), (0.0, 100.0));
        assert_eq!(t, vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let (t, _, _) = ticks(0.0, 0.7);
        let labels: Vec<String> = t.iter().map(|&v| fmt_tick(v)).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8"]);
    }
}
