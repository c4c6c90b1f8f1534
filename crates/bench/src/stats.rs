//! Numbers from samples: the ministat summary (N, Min, Max, Median, Avg,
//! Stddev, printed the way FreeBSD's ministat prints them), latency
//! histograms in microseconds (hdrhistogram) and the percentiles taken from
//! them.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt::Write as _;

/// ministat's summary of a data set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    /// As ministat: the middle value, for an even count the upper middle one.
    pub median: f64,
    pub avg: f64,
    /// Sample standard deviation (n - 1); 0 for a single value.
    pub stddev: f64,
}

/// Summarize the finite values of `data`; `None` when there are none.
pub fn summarize(data: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = data.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let sum: f64 = v.iter().sum();
    let avg = sum / n as f64;
    let stddev = if n > 1 {
        (v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some(Summary {
        n,
        min: v[0],
        max: v[n - 1],
        median: v[n / 2],
        avg,
        stddev,
    })
}

/// C's `%.<prec>g`.
pub fn fmt_g(v: f64, prec: usize) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return "0".into();
    }
    let prec = prec.max(1);
    let sci = format!("{:.*e}", prec - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let m = trim_zeros(mantissa);
        format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let decimals = usize::try_from(prec as i32 - 1 - exp).unwrap_or(0);
        trim_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The ministat table: a header and one row per labelled summary.
pub fn ministat_table(rows: &[(&str, Summary)]) -> String {
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(1).max(1);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:width$} {:>4} {:>13} {:>13} {:>13} {:>13} {:>13}",
        "", "N", "Min", "Max", "Median", "Avg", "Stddev"
    );
    for (label, s) in rows {
        let _ = writeln!(
            out,
            "{label:width$} {:>4} {:>13} {:>13} {:>13} {:>13} {:>13}",
            s.n,
            fmt_g(s.min, 8),
            fmt_g(s.max, 8),
            fmt_g(s.median, 8),
            fmt_g(s.avg, 8),
            fmt_g(s.stddev, 8)
        );
    }
    out
}

/// A latency histogram in microseconds, 1 µs to 1 hour, 3 significant
/// digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// Record a duration in microseconds (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, d: std::time::Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    h.saturating_record(us);
}

/// Latency figures in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub stddev_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// Read the latency figures off a microsecond histogram (all zero when
/// empty).
pub fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Latency {
        count: h.len(),
        min_ms: ms(h.min()),
        mean_ms: h.mean() / 1000.0,
        stddev_ms: h.stdev() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    }
}

/// The percentile curve (percentile, milliseconds) at the usual points, for
/// charts and JSON.
pub fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    const POINTS: [f64; 17] = [
        0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 75.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9,
        99.99, 100.0,
    ];
    POINTS
        .iter()
        .map(|&p| (p, h.value_at_quantile(p / 100.0) as f64 / 1000.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ministat_numbers_on_known_data() {
        // `seq 1 10 | ministat -n`:
        //     N           Min           Max        Median           Avg        Stddev
        // x  10             1            10             6           5.5     3.0276504
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = summarize(&v).unwrap();
        assert_eq!(
            (s.n, s.min, s.max, s.median, s.avg),
            (10, 1.0, 10.0, 6.0, 5.5)
        );
        assert_eq!(fmt_g(s.stddev, 8), "3.0276504");
        let table = ministat_table(&[("x", s)]);
        assert_eq!(
            table.lines().nth(1).unwrap(),
            "x   10             1            10             6           5.5     3.0276504"
        );

        // ministat on 3.5 1.25 9 2 2 7.75:
        // x   6          1.25             9           3.5          4.25     3.3015148
        let s = summarize(&[3.5, 1.25, 9.0, 2.0, 2.0, 7.75]).unwrap();
        assert_eq!((s.min, s.max, s.median, s.avg), (1.25, 9.0, 3.5, 4.25));
        assert_eq!(fmt_g(s.stddev, 8), "3.3015148");

        // Odd count, ministat on 1..=11: median 6, avg 6, stddev 3.3166248.
        let s = summarize(&(1..=11).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!(
            (s.median, s.avg, fmt_g(s.stddev, 8).as_str()),
            (6.0, 6.0, "3.3166248")
        );

        let one = summarize(&[4.0, f64::NAN]).unwrap();
        assert_eq!((one.n, one.stddev, one.median), (1, 0.0, 4.0));
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn fmt_g_matches_printf() {
        // Values checked against printf '%.8g'.
        for (v, want) in [
            (0.0, "0"),
            (1.0, "1"),
            (5.5, "5.5"),
            (123456789.0, "1.2345679e+08"),
            (12345678.0, "12345678"),
            (0.0001234, "0.0001234"),
            (0.00001234, "1.234e-05"),
            (-2.5, "-2.5"),
            (99999999.5, "1e+08"),
            (1234.56789012, "1234.5679"),
        ] {
            assert_eq!(fmt_g(v, 8), want, "{v}");
        }
    }

    #[test]
    fn percentiles_from_histogram() {
        let mut h = new_histogram();
        for ms in 1..=1000u64 {
            record(&mut h, Duration::from_millis(ms));
        }
        let l = latency(&h);
        assert_eq!(l.count, 1000);
        // 3 significant digits: within 0.1 %.
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 1e-9;
        assert!(close(l.p50_ms, 500.0), "{l:?}");
        assert!(close(l.p90_ms, 900.0), "{l:?}");
        assert!(close(l.p99_ms, 990.0), "{l:?}");
        assert!(close(l.p999_ms, 999.0), "{l:?}");
        assert!(close(l.min_ms, 1.0) && close(l.max_ms, 1000.0), "{l:?}");
        assert!(close(l.mean_ms, 500.5), "{l:?}");
        let curve = percentile_curve(&h);
        assert_eq!(curve.first().unwrap().0, 0.0);
        assert!(curve.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(latency(&new_histogram()), Latency::default());
        // Out-of-range values are clamped, not lost.
        record(&mut h, Duration::from_secs(10_000));
        assert_eq!(h.len(), 1001);
    }
}
