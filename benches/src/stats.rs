//! Measurements and their summary: min / median / max, throughput, ratios against a baseline.

/// One benchmark's timings for one path (driver or roofline).
#[derive(Clone, Debug)]
pub struct Measurement {
    pub benchmark: String,
    pub path: String,
    /// Bytes moved per run, when throughput is meaningful.
    pub bytes: Option<u64>,
    /// Calls made per run, for the per-call rows (shown as time per call).
    pub calls: Option<u64>,
    pub seconds: Vec<f64>,
}

impl Measurement {
    pub fn throughput(benchmark: &str, path: &str, bytes: u64, seconds: Vec<f64>) -> Self {
        Measurement {
            benchmark: benchmark.to_string(),
            path: path.to_string(),
            bytes: Some(bytes),
            calls: None,
            seconds,
        }
    }

    pub fn duration(benchmark: &str, path: &str, seconds: Vec<f64>) -> Self {
        Measurement {
            benchmark: benchmark.to_string(),
            path: path.to_string(),
            bytes: None,
            calls: None,
            seconds,
        }
    }

    /// A run of `calls` calls, each shown as its share of the run's time.
    pub fn per_call(benchmark: &str, path: &str, calls: u64, seconds: Vec<f64>) -> Self {
        Measurement {
            calls: Some(calls),
            ..Measurement::duration(benchmark, path, seconds)
        }
    }

    /// Nanoseconds per call for a run that took `seconds`, for the per-call rows.
    pub fn ns_per_call(&self, seconds: f64) -> Option<f64> {
        self.calls.map(|n| seconds * 1e9 / n as f64)
    }

    fn sorted(&self) -> Vec<f64> {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }

    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }

    pub fn median(&self) -> f64 {
        let s = self.sorted();
        match s.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        }
    }

    /// MiB/s for a run that took `seconds`.
    pub fn mib_per_s(&self, seconds: f64) -> Option<f64> {
        self.bytes.map(|b| b as f64 / (1u64 << 20) as f64 / seconds)
    }
}

/// How many times faster `m` is than `baseline` (ratio of median times; > 1 is faster).
pub fn speedup(m: &Measurement, baseline: &Measurement) -> f64 {
    baseline.median() / m.median()
}

/// `1 GiB`, `256 MiB`, `12 KiB`, `100 B`.
pub fn size_label(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let m = Measurement::throughput("b", "gds", 1 << 30, vec![2.0, 1.0, 4.0, 3.0]);
        assert_eq!((m.min(), m.median(), m.max()), (1.0, 2.5, 4.0));
        assert_eq!(m.mib_per_s(2.0), Some(512.0));
        let base = Measurement::duration("b", "sec2", vec![5.0]);
        assert_eq!(speedup(&m, &base), 2.0);
        assert_eq!(size_label(1 << 30), "1 GiB");
        assert_eq!(size_label(3 << 20), "3 MiB");
        assert_eq!(size_label(1000), "1000 B");
    }
}
