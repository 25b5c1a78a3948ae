//! Line plots as inline SVG, drawn on the server: a page without JavaScript shows them.

use super::html::esc;

/// One line: its label and its points `(x, y)`, y in payment base units.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, u64)>,
}

/// A plot of several series over the x range `x`, with `x_ticks` labelled and, optionally, a
/// vertical marker (e.g. "now").
pub struct Plot<'a> {
    /// Its accessible name (`aria-label`) and the id of the `<svg>`.
    pub id: &'a str,
    pub title: &'a str,
    pub series: Vec<Series>,
    pub x: (f64, f64),
    pub x_ticks: Vec<(f64, String)>,
    pub marker: Option<(f64, String)>,
    /// Formats a y value (base units) as a label.
    pub y_label: &'a dyn Fn(u64) -> String,
}

const W: f64 = 600.0;
const H: f64 = 200.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 24.0;
/// One colour per series, in order (as many as GPU classes).
const COLOURS: [&str; 8] = [
    "#3f6fd8", "#d8793f", "#1b9e77", "#b3261e", "#7b57c8", "#8c6d1f", "#d63f9b", "#4a5568",
];

impl Plot<'_> {
    /// The plot's `<svg>` (each series a `<polyline>` over a light area) and its legend.
    pub fn render(&self) -> String {
        let top = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .max()
            .unwrap_or(0)
            .max(1);
        // Headroom above the highest point, and a round number of base units at the top.
        let y_max = top + top / 10 + 1;
        let (x0, x1) = self.x;
        let span = if x1 > x0 { x1 - x0 } else { 1.0 };
        let px = |x: f64| LEFT + (x - x0) / span * (W - LEFT - RIGHT);
        let py = |y: u64| TOP + (1.0 - y as f64 / y_max as f64) * (H - TOP - BOTTOM);
        let base = py(0);
        let mut svg = format!(
            "<svg class=\"plot\" id=\"{id}\" role=\"img\" aria-label=\"{title}\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" xmlns=\"http://www.w3.org/2000/svg\"><title>{title}</title>",
            id = esc(self.id),
            title = esc(self.title),
        );
        // Axes, with the y scale at 0, half and the top.
        svg.push_str(&format!(
            "<path d=\"M{LEFT} {TOP}V{base}H{}\" stroke=\"#9aa3b5\" fill=\"none\"/>",
            W - RIGHT
        ));
        for y in [0, y_max / 2, y_max] {
            svg.push_str(&format!(
                "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#eceef3\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                W - RIGHT,
                LEFT - 6.0,
                py(y) + 4.0,
                esc(&(self.y_label)(y)),
                yy = py(y),
            ));
        }
        for (x, label) in &self.x_ticks {
            // Labels at the ends stay inside the plot.
            let anchor = match *x {
                x if x <= x0 => "start",
                x if x >= x1 => "end",
                _ => "middle",
            };
            svg.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
                px(*x),
                H - 6.0,
                esc(label)
            ));
        }
        if let Some((x, label)) = &self.marker {
            svg.push_str(&format!(
                "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{TOP}\" y2=\"{base}\" stroke=\"#5a6478\" stroke-dasharray=\"3 3\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                px(*x) + 3.0,
                TOP + 10.0,
                esc(label),
                xx = px(*x),
            ));
        }
        for (s, colour) in self.series.iter().zip(COLOURS.iter().cycle()) {
            let points: Vec<String> = s
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let (Some(first), Some(last)) = (s.points.first(), s.points.last()) else {
                continue;
            };
            svg.push_str(&format!(
                "<polygon points=\"{:.1},{base:.1} {} {:.1},{base:.1}\" fill=\"{colour}\" fill-opacity=\"0.08\"/>",
                px(first.0),
                points.join(" "),
                px(last.0),
            ));
            svg.push_str(&format!(
                "<polyline data-series=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                esc(&s.label),
                points.join(" ")
            ));
            // The latest point, visible even when it is the only one.
            svg.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                px(last.0),
                py(last.1)
            ));
        }
        svg.push_str("</svg>");
        let legend: String = self
            .series
            .iter()
            .zip(COLOURS.iter().cycle())
            .map(|(s, colour)| {
                format!(
                    "<span><i style=\"background:{colour}\"></i>{}</span>",
                    esc(&s.label)
                )
            })
            .collect();
        format!("<figure>{svg}<figcaption class=\"legend\">{legend}</figcaption></figure>")
    }
}

/// A unix time's time of day, UTC, `HH:MM:SS`.
pub fn clock(t: i64) -> String {
    let s = t.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3_600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_series_is_a_polyline_within_the_plot() {
        let label = |y: u64| y.to_string();
        let plot = Plot {
            id: "p",
            title: "a <plot>",
            series: vec![
                Series {
                    label: "class 0".into(),
                    points: vec![(0.0, 10), (5.0, 20), (10.0, 0)],
                },
                Series {
                    label: "class 1".into(),
                    points: vec![(3.0, 7)],
                },
            ],
            x: (0.0, 10.0),
            x_ticks: vec![(0.0, "0".into()), (10.0, "10".into())],
            marker: Some((5.0, "now".into())),
            y_label: &label,
        };
        let svg = plot.render();
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(svg.contains("aria-label=\"a &lt;plot&gt;\""));
        // x from LEFT to W - RIGHT; y 0 at the axis, the highest point below the top.
        assert!(svg.contains(&format!("points=\"{LEFT:.1},")), "{svg}");
        assert!(
            svg.contains(&format!("{:.1},{:.1}\"", W - RIGHT, H - BOTTOM)),
            "{svg}"
        );
        assert_eq!(clock(86_400 + 3_661), "01:01:01");
    }
}
