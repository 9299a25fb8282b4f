//! The benchmark table: per benchmark and path, median / min / max, and the ratio against sec2
//! (and against the `pread` roofline where there is one).

use crate::stats::{speedup, Measurement};
use std::fmt::Write;

fn find<'a>(all: &'a [Measurement], benchmark: &str, path: &str) -> Option<&'a Measurement> {
    all.iter()
        .find(|m| m.benchmark == benchmark && m.path == path)
}

/// A plain-text table, one row per (benchmark, path), with a ratio column per baseline path.
pub fn table(all: &[Measurement], baselines: &[&str]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<38} {:<7} {:>12} {:>12} {:>12}",
        "benchmark", "path", "median", "min", "max"
    );
    for b in baselines {
        let _ = write!(out, " {:>10}", format!("vs {b}"));
    }
    out.push('\n');
    for m in all {
        let cell = |seconds: f64| match (m.mib_per_s(seconds), m.ns_per_call(seconds)) {
            (Some(rate), _) => format!("{rate:.0} MiB/s"),
            (None, Some(ns)) => format!("{ns:.0} ns/call"),
            (None, None) => format!("{:.1} ms", seconds * 1e3),
        };
        // For throughput, min time is max rate: show the slowest run under "min".
        let (lo, hi) = if m.bytes.is_some() {
            (m.max(), m.min())
        } else {
            (m.min(), m.max())
        };
        let ratio = |baseline: &str| match find(all, &m.benchmark, baseline) {
            Some(b) if m.path != baseline => format!("{:.2}x", speedup(m, b)),
            _ => String::from("-"),
        };
        let _ = write!(
            out,
            "{:<38} {:<7} {:>12} {:>12} {:>12}",
            m.benchmark,
            m.path,
            cell(m.median()),
            cell(lo),
            cell(hi)
        );
        for b in baselines {
            let _ = write!(out, " {:>10}", ratio(b));
        }
        out.push('\n');
    }
    out
}

/// The results as JSON: per measurement its timings, summary, and ratios against `baselines`.
/// A part of a run that did not run, and why; reported in the JSON and the plot, so that a file
/// without device rows says it has none and why.
pub struct Skipped {
    pub part: &'static str,
    pub reason: String,
}

pub fn json(
    all: &[Measurement],
    baselines: &[&str],
    labels: &[(&str, &str)],
    skipped: &[Skipped],
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = all
        .iter()
        .map(|m| {
            let ratios: serde_json::Map<String, serde_json::Value> = baselines
                .iter()
                .filter_map(|b| {
                    let base = find(all, &m.benchmark, b).filter(|_| m.path != *b)?;
                    Some((format!("vs_{b}"), serde_json::json!(speedup(m, base))))
                })
                .collect();
            serde_json::json!({
                "benchmark": m.benchmark,
                "path": m.path,
                "bytes": m.bytes,
                "calls": m.calls,
                "seconds": m.seconds,
                "median_s": m.median(),
                "min_s": m.min(),
                "max_s": m.max(),
                "median_mib_per_s": m.mib_per_s(m.median()),
                "median_ns_per_call": m.ns_per_call(m.median()),
                "ratios": ratios,
            })
        })
        .collect();
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    let skipped: Vec<serde_json::Value> = skipped
        .iter()
        .map(|s| serde_json::json!({ "part": s.part, "reason": s.reason }))
        .collect();
    serde_json::json!({ "labels": labels, "results": rows, "skipped": skipped })
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A horizontal bar chart of median throughput per path, grouped by benchmark (throughput
/// measurements only), with the min–max range drawn as a whisker.
pub fn svg(all: &[Measurement], title: &str, skipped: &[Skipped]) -> String {
    let rows: Vec<&Measurement> = all.iter().filter(|m| m.bytes.is_some()).collect();
    let max_rate = rows
        .iter()
        .filter_map(|m| m.mib_per_s(m.min()))
        .fold(1.0f64, f64::max);
    let (left, bar_width, row_h) = (330.0, 420.0, 22.0);
    let height = 60.0 + row_h * (rows.len() + skipped.len()) as f64 + 30.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"860\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\n\
         <text x=\"10\" y=\"44\" fill=\"#555\">median throughput (MiB/s); whiskers span min to max</text>\n",
        escape(title)
    );
    let colour = |path: &str| match path {
        "gds" => "#2b7bb9",
        "sec2" => "#999999",
        "pread" => "#66a61e",
        _ => "#d95f02",
    };
    for (i, m) in rows.iter().enumerate() {
        let y = 60.0 + row_h * i as f64;
        let scale = |rate: f64| bar_width * rate / max_rate;
        let median = m.mib_per_s(m.median()).unwrap_or(0.0);
        let (lo, hi) = (
            m.mib_per_s(m.max()).unwrap_or(0.0),
            m.mib_per_s(m.min()).unwrap_or(0.0),
        );
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} — {}</text>\n\
             <rect x=\"{left}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"/>\n\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{median:.0}</text>\n",
            left - 8.0,
            y + 15.0,
            escape(&m.benchmark),
            escape(&m.path),
            y + 3.0,
            scale(median),
            row_h - 6.0,
            colour(&m.path),
            left + scale(lo),
            left + scale(hi),
            y + row_h / 2.0,
            y + row_h / 2.0,
            left + scale(hi).max(scale(median)) + 6.0,
            y + 15.0,
        ));
    }
    for (i, s) in skipped.iter().enumerate() {
        let y = 60.0 + row_h * (rows.len() + i) as f64 + 15.0;
        out.push_str(&format!(
            "<text x=\"10\" y=\"{y}\" fill=\"#a00\">{} benchmarks skipped: {}</text>\n",
            escape(s.part),
            escape(&s.reason)
        ));
    }
    out.push_str("</svg>\n");
    out
}
