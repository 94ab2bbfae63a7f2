//! Results: rows as JSON objects, percentiles, ratios, the summary table and the plots.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Map, Value, json};

/// The `q` quantile (0..=1) of `samples`, which this sorts; `None` when empty.
pub fn quantile(samples: &mut [u64], q: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = (q * (samples.len() - 1) as f64).round() as usize;
    Some(samples[rank.min(samples.len() - 1)])
}

/// A number from a row.
pub fn num(row: &Value, field: &str) -> Option<f64> {
    row.get(field).and_then(Value::as_f64)
}

/// `ours / theirs` of `field` between the rows of two designs that agree on `point` (the
/// swept parameter), keyed `{ours}_vs_{theirs}_{what}` (plus `@{point}={value}` when the
/// sweep has several points).
pub fn ratios(rows: &[Value], point: &str, pairs: &[(&str, &str, &str, &str)], out: &mut Map<String, Value>) {
    let mut points: Vec<Value> = rows.iter().filter_map(|r| r.get(point).cloned()).collect();
    points.dedup();
    let several = points.len() > 1;
    for at in &points {
        let find = |design: &str| {
            rows.iter()
                .find(|r| r["design"] == design && r.get(point) == Some(at))
        };
        for (a, b, field, what) in pairs {
            let (Some(ra), Some(rb)) = (find(a), find(b)) else {
                continue;
            };
            let (Some(x), Some(y)) = (num(ra, field), num(rb, field)) else {
                continue;
            };
            if y == 0.0 {
                continue;
            }
            let mut key = format!("{a}_vs_{b}_{what}");
            if several {
                let _ = write!(key, "@{point}={at}");
            }
            out.insert(key, json!(round3(x / y)));
        }
    }
}

/// `x` to three significant decimals, for readable JSON.
pub fn round3(x: f64) -> f64 {
    if x.abs() >= 100.0 {
        x.round()
    } else {
        (x * 1000.0).round() / 1000.0
    }
}

/// A human figure: 1.23 M, 45.6 k, 789.
pub fn human(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} k", x / 1e3)
    } else if a >= 100.0 || x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// Bytes in binary units.
pub fn human_bytes(x: f64) -> String {
    let a = x.abs();
    if a >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", x / (1u64 << 30) as f64)
    } else if a >= (1 << 20) as f64 {
        format!("{:.1} MiB", x / (1 << 20) as f64)
    } else if a >= 10.0 * 1024.0 {
        format!("{:.1} KiB", x / 1024.0)
    } else {
        format!("{x:.0} B")
    }
}

/// A column of the summary table: header, field, and how to show it.
pub type Column = (&'static str, &'static str, fn(f64) -> String);

/// The summary table of `rows` over `columns`, aligned, as Markdown.
pub fn table(rows: &[Value], columns: &[Column]) -> String {
    let mut cells: Vec<Vec<String>> = vec![columns.iter().map(|c| c.0.to_string()).collect()];
    for row in rows {
        cells.push(
            columns
                .iter()
                .map(|(_, field, show)| match row.get(*field) {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.as_f64().map_or_else(|| v.to_string(), show),
                    None => "-".into(),
                })
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| cells.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (n, row) in cells.iter().enumerate() {
        out.push('|');
        for (i, cell) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, " {cell:<w$} |", w = widths[i]);
            } else {
                let _ = write!(out, " {cell:>w$} |", w = widths[i]);
            }
        }
        out.push('\n');
        if n == 0 {
            out.push('|');
            for (i, w) in widths.iter().enumerate() {
                out.push_str(if i == 0 { ":" } else { " " });
                out.push_str(&"-".repeat(*w));
                out.push_str(if i == 0 { " |" } else { ":|" });
            }
            out.push('\n');
        }
    }
    out
}

/// A log-log line plot of `y` against `x`, one series per design, written as SVG to `path`.
pub fn plot(
    path: &Path,
    title: &str,
    rows: &[Value],
    (x, x_label): (&str, &str),
    (y, y_label): (&str, &str),
) -> Result<(), String> {
    use plotters::prelude::*;

    let mut designs: Vec<&str> = Vec::new();
    for r in rows {
        if let Some(d) = r["design"].as_str()
            && !designs.contains(&d)
        {
            designs.push(d);
        }
    }
    let series: Vec<(&str, Vec<(f64, f64)>)> = designs
        .iter()
        .map(|d| {
            let pts = rows
                .iter()
                .filter(|r| r["design"] == *d)
                .filter_map(|r| Some((num(r, x)?, num(r, y)?)))
                .filter(|(a, b)| *a > 0.0 && *b > 0.0)
                .collect();
            (*d, pts)
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    if all.is_empty() {
        return Err("nothing to plot".into());
    }
    let (xmin, xmax) = bounds(all.iter().map(|p| p.0));
    let (ymin, ymax) = bounds(all.iter().map(|p| p.1));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| human(*v))
        .y_label_formatter(&|v| human(*v))
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (design, pts)) in series.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(design)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| draw(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    (lo / 2.0, hi * 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_sample() {
        let mut s: Vec<u64> = (1..=1000).rev().collect();
        assert_eq!(quantile(&mut s, 0.5), Some(501));
        assert_eq!(quantile(&mut s, 0.99), Some(990));
        assert_eq!(quantile(&mut s, 1.0), Some(1000));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn ratios_pair_rows_at_the_same_point() {
        let rows = vec![
            json!({"design": "ring", "watchers": 10, "d": 100.0}),
            json!({"design": "naive", "watchers": 10, "d": 4.0}),
            json!({"design": "ring", "watchers": 20, "d": 50.0}),
            json!({"design": "naive", "watchers": 20, "d": 0.0}),
        ];
        let mut out = Map::new();
        ratios(&rows, "watchers", &[("ring", "naive", "d", "x")], &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out["ring_vs_naive_x@watchers=10"], json!(25.0));
        let mut single = Map::new();
        ratios(
            &rows[..2],
            "watchers",
            &[("ring", "naive", "d", "x")],
            &mut single,
        );
        assert_eq!(single["ring_vs_naive_x"], json!(25.0));
    }

    #[test]
    fn the_table_aligns_and_marks_missing_fields() {
        let rows = vec![
            json!({"design": "ring", "a": 1234567.0}),
            json!({"design": "naive_copy"}),
        ];
        let t = table(&rows, &[("design", "design", human), ("a", "a", human)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].contains("1.23 M"), "{t}");
        assert!(lines[3].ends_with("- |"), "{t}");
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{t}");
    }

    #[test]
    fn a_plot_is_written_as_svg() {
        let dir = std::env::temp_dir().join(format!("watchcache-bench-plot-{}", std::process::id()));
        let path = dir.join("p.svg");
        let rows = vec![
            json!({"design": "ring", "w": 1.0, "d": 10.0}),
            json!({"design": "ring", "w": 100.0, "d": 1000.0}),
            json!({"design": "naive", "w": 1.0, "d": 5.0}),
        ];
        plot(&path, "t", &rows, ("w", "watchers"), ("d", "deliveries/s")).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("naive"),
            "{}",
            &svg[..100.min(svg.len())]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
