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
        let cell = |seconds: f64| match m.mib_per_s(seconds) {
            Some(rate) => format!("{rate:.0} MiB/s"),
            None => format!("{:.1} ms", seconds * 1e3),
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
