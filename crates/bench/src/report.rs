//! What a benchmark hands back, and where it goes: the human table (stdout),
//! the `--json` file, the `--chart` SVG, and the progress bar on stderr
//! (drawn only when stderr is a terminal). Output files are created before
//! the measuring starts, so a bad path fails at once.

use super::svg::Chart;
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// A finished benchmark.
pub struct Outcome {
    /// The human-readable report.
    pub table: String,
    pub json: serde_json::Value,
    pub chart: Chart,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct OutputError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The `--json` and `--chart` files, opened for writing.
pub struct Outputs {
    json: Option<(PathBuf, File)>,
    chart: Option<(PathBuf, File)>,
}

fn create(path: &Option<PathBuf>) -> Result<Option<(PathBuf, File)>, OutputError> {
    path.as_ref()
        .map(|p| {
            File::create(p)
                .map(|f| (p.clone(), f))
                .map_err(|source| OutputError {
                    path: p.clone(),
                    source,
                })
        })
        .transpose()
}

impl Outputs {
    pub fn open(json: &Option<PathBuf>, chart: &Option<PathBuf>) -> Result<Outputs, OutputError> {
        Ok(Outputs {
            json: create(json)?,
            chart: create(chart)?,
        })
    }

    /// Write the JSON and the chart, where asked for.
    pub fn write(self, outcome: &Outcome) -> Result<(), OutputError> {
        fn put(path: &Path, mut f: File, bytes: &[u8]) -> Result<(), OutputError> {
            f.write_all(bytes)
                .and_then(|_| f.flush())
                .map_err(|source| OutputError {
                    path: path.to_path_buf(),
                    source,
                })
        }
        if let Some((path, f)) = self.json {
            let mut text =
                serde_json::to_string_pretty(&outcome.json).unwrap_or_else(|_| "null".into());
            text.push('\n');
            put(&path, f, text.as_bytes())?;
        }
        if let Some((path, f)) = self.chart {
            put(&path, f, outcome.chart.to_svg().as_bytes())?;
        }
        Ok(())
    }
}

/// A progress bar of `len` steps on stderr, hidden unless stderr is a
/// terminal.
pub fn progress(len: u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = format!("{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}}");
    let style =
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(len).with_style(style.progress_chars("=> "))
}

/// A plain text table: the first column left-aligned, the rest right.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &mut dyn Iterator<Item = &str>, out: &mut String| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate().take(cols) {
            if i == 0 {
                let _ = write!(s, "{cell:<w$}", w = width[0]);
            } else {
                let _ = write!(s, "  {cell:>w$}", w = width[i]);
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(&mut header.iter().copied(), &mut out);
    for row in rows {
        line(&mut row.iter().map(String::as_str), &mut out);
    }
    out
}

/// `x` with `d` decimals.
pub fn f(x: f64, d: usize) -> String {
    format!("{x:.d$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["rate", "ok", "mean ms"],
            &[
                vec!["5".into(), "5".into(), "1.5".into()],
                vec!["100".into(), "1000".into(), "12.25".into()],
            ],
        );
        assert_eq!(
            t,
            "rate    ok  mean ms\n5        5      1.5\n100   1000    12.25\n"
        );
    }

    #[test]
    fn outputs_fail_early_and_write() {
        let dir = tempfile::tempdir().unwrap();
        let bad = Some(dir.path().join("no/such/dir/x.json"));
        let e = Outputs::open(&bad, &None).err().unwrap();
        assert!(e.to_string().starts_with("cannot write "), "{e}");
        let json = dir.path().join("r.json");
        let svg = dir.path().join("r.svg");
        let out = Outputs::open(&Some(json.clone()), &Some(svg.clone())).unwrap();
        out.write(&Outcome {
            table: String::new(),
            json: serde_json::json!({"a": 1}),
            chart: Chart::default(),
        })
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
        assert_eq!(v["a"], 1);
        assert!(std::fs::read_to_string(svg).unwrap().contains("</svg>"));
    }
}
