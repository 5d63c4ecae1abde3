//! Interference between partitions of one GPU (gpulet §4.4).
//!
//! Two models in different partitions of one GPU slow each other down
//! through shared L2 and DRAM bandwidth. gpulet predicts the slowdown of
//! model `m1` next to `m2` with a linear model of their L2 and DRAM
//! utilisations, each measured running alone:
//!
//! ```text
//! factor = c1·L2_m1 + c2·L2_m2 + c3·mem_m1 + c4·mem_m2 + c5
//! ```
//!
//! A planner multiplies `L(b, p)` by the factor. [`Interference`] is the
//! interface; [`LinearInterference`] is gpulet's model, with coefficients
//! and utilisations supplied by the caller: the gpulet authors' measured
//! `INT_MODEL_CONSTANT.CSV` and `UTIL.CSV` (the repository's
//! `data/gpulet/<gpu>/`, built in as [`GPULET_DATA`]) with
//! [`LinearInterference::builtin`], a folder of files in their format with
//! [`LinearInterference::load_dir`], or texts parsed with
//! [`LinearCoefficients::parse_csv`] and [`parse_util_csv`].
//!
//! Rules (each stated in `docs/planners.md`):
//!
//! - A model's factor in a partition is the largest pairwise factor
//!   against any model in another partition of the same GPU, and never
//!   below 1 (the artifact's `getInterference`: max over co-runners,
//!   clamped to 1). Models sharing its partition run in turn, not at once,
//!   so they do not count. A NaN factor counts as infinite (the placement
//!   is refused).
//! - A model without a utilisation table has factor 1, and adds nothing to
//!   the factor of others.
//! - Utilisation at batch `b` is read from the table measured on the whole
//!   GPU: the listed batch, or linear interpolation between the listed
//!   neighbours, the end values beyond the ends; then scaled by `p / 100`
//!   for a `p` % partition (the artifact's `getInterference` does both).

use std::collections::BTreeMap;
use std::path::Path;

/// A latency multiplier for a model running next to another one on the
/// same GPU.
pub trait Interference {
    /// The factor by which `own` (batch `own_batch` on an `own_pct` %
    /// partition) runs slower while `other` runs batch `other_batch` on an
    /// `other_pct` % partition of the same GPU. Planners clamp it to at
    /// least 1 and take the largest over all co-runners.
    fn factor(
        &self,
        own: &str,
        own_batch: u32,
        own_pct: u32,
        other: &str,
        other_batch: u32,
        other_pct: u32,
    ) -> f64;
}

/// No interference: every factor is 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoInterference;

impl Interference for NoInterference {
    fn factor(&self, _: &str, _: u32, _: u32, _: &str, _: u32, _: u32) -> f64 {
        1.0
    }
}

/// Why interference inputs were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterferenceError {
    /// A coefficient file without the expected header and one row of five
    /// numbers.
    #[error(
        "interference coefficients: {what}; expected the header `l2_util_m1,l2_util_m2,dram_util_m1,dram_util_m2,constant` and one row of five numbers"
    )]
    Coefficients {
        /// What is wrong.
        what: String,
    },
    /// A utilisation row that does not parse.
    #[error(
        "utilisation line {line}: {what}; expected `model,batch,avg_duration(ms),SM_util(%),l2_util(%),mem_util(%),…` with percentages in 0..=100"
    )]
    UtilRow {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// A utilisation table with no points, a repeated batch or a value
    /// outside `0..=1`.
    #[error("utilisation table: {what}")]
    UtilTable {
        /// What is wrong.
        what: String,
    },
    /// A file of the data that cannot be read.
    #[error("cannot read {path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// A GPU the built-in data does not have.
    #[error("no built-in gpulet data for GPU `{gpu}`; the data has {known}")]
    UnknownGpu {
        /// The GPU asked for.
        gpu: String,
        /// The GPUs there are, comma-separated.
        known: String,
    },
    /// A file of the data that does not parse.
    #[error("{path}: {error}")]
    InFile {
        /// The file.
        path: String,
        /// What is wrong in it.
        error: Box<InterferenceError>,
    },
}

/// A CSV reader over `text` that trims fields, skips blank lines, allows
/// rows of different lengths (the artifact's rows end in a comma its
/// header lacks) and, with `header`, takes the first row as the header.
fn csv_reader(text: &str, header: bool) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .has_headers(header)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes())
}

/// A record as its line reads, for messages.
fn joined(r: &csv::StringRecord) -> String {
    r.iter().collect::<Vec<_>>().join(",")
}

/// gpulet's five regression coefficients (§4.4): `c1..c5` for own L2,
/// the other's L2, own DRAM, the other's DRAM and the constant, with
/// utilisations as fractions of 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearCoefficients {
    /// `c1`, times the model's own L2 utilisation.
    pub l2_own: f64,
    /// `c2`, times the co-runner's L2 utilisation.
    pub l2_other: f64,
    /// `c3`, times the model's own DRAM utilisation.
    pub dram_own: f64,
    /// `c4`, times the co-runner's DRAM utilisation.
    pub dram_other: f64,
    /// `c5`.
    pub constant: f64,
}

impl LinearCoefficients {
    /// Parses the artifact's `INT_MODEL_CONSTANT.CSV`: the header
    /// `l2_util_m1,l2_util_m2,dram_util_m1,dram_util_m2,constant` and one
    /// row of five finite numbers, in that order.
    pub fn parse_csv(text: &str) -> Result<Self, InterferenceError> {
        let bad = |what: String| InterferenceError::Coefficients { what };
        let mut records = csv_reader(text, false).into_records();
        let mut next = || {
            records
                .next()
                .transpose()
                .map_err(|e| bad(format!("it is not CSV ({e})")))
        };
        let header = next()?.ok_or_else(|| bad("the file is empty".into()))?;
        let want = [
            "l2_util_m1",
            "l2_util_m2",
            "dram_util_m1",
            "dram_util_m2",
            "constant",
        ];
        if !header.iter().eq(want) {
            return Err(bad(format!("the header is `{}`", joined(&header))));
        }
        let row = next()?.ok_or_else(|| bad("there is no row of values".into()))?;
        let v: Vec<f64> = row
            .iter()
            .map(str::parse::<f64>)
            .collect::<Result<_, _>>()
            .map_err(|e| bad(format!("`{}` is not five numbers ({e})", joined(&row))))?;
        if v.len() != 5 || v.iter().any(|x| !x.is_finite()) {
            return Err(bad(format!(
                "`{}` is not five finite numbers",
                joined(&row)
            )));
        }
        if let Some(extra) = next()? {
            return Err(bad(format!(
                "an extra line `{}` follows the values",
                joined(&extra)
            )));
        }
        Ok(LinearCoefficients {
            l2_own: v[0],
            l2_other: v[1],
            dram_own: v[2],
            dram_other: v[3],
            constant: v[4],
        })
    }
}

/// One model's L2 and DRAM utilisation running alone on a whole GPU, per
/// batch size, as fractions of 1.
#[derive(Debug, Clone, PartialEq)]
pub struct UtilTable {
    /// `(batch, l2, dram)`, batches strictly ascending.
    points: Vec<(u32, f64, f64)>,
}

impl UtilTable {
    /// A table from `(batch, l2, dram)` points in any order; refuses no
    /// points, a repeated batch, batch 0, and a utilisation that is not in
    /// `0..=1`.
    pub fn new(mut points: Vec<(u32, f64, f64)>) -> Result<Self, InterferenceError> {
        let bad = |what: String| InterferenceError::UtilTable { what };
        if points.is_empty() {
            return Err(bad("no points; give at least one (batch, l2, dram)".into()));
        }
        points.sort_by_key(|p| p.0);
        for w in points.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(bad(format!(
                    "batch {} appears twice; keep one measurement per batch",
                    w[0].0
                )));
            }
        }
        for &(b, l2, dram) in &points {
            if b == 0 {
                return Err(bad("batch 0; batch sizes start at 1".into()));
            }
            for (what, v) in [("l2", l2), ("dram", dram)] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(bad(format!(
                        "{what} utilisation {v} at batch {b} is not a fraction in 0..=1 (divide percentages by 100)"
                    )));
                }
            }
        }
        Ok(UtilTable { points })
    }

    /// `(l2, dram)` measured at exactly `batch` on a whole GPU, if listed.
    pub fn get(&self, batch: u32) -> Option<(f64, f64)> {
        let p = &self.points;
        let i = p.binary_search_by_key(&batch, |q| q.0).ok()?;
        Some((p[i].1, p[i].2))
    }

    /// `(l2, dram)` at `batch` on a whole GPU: the listed point, linear
    /// interpolation between the listed neighbours, the end values beyond
    /// the ends.
    pub fn at(&self, batch: u32) -> (f64, f64) {
        let p = &self.points;
        let i = p.partition_point(|q| q.0 < batch);
        if i < p.len() && p[i].0 == batch {
            return (p[i].1, p[i].2);
        }
        if i == 0 {
            return (p[0].1, p[0].2);
        }
        if i == p.len() {
            let last = p[p.len() - 1];
            return (last.1, last.2);
        }
        let (lo, hi) = (p[i - 1], p[i]);
        let t = f64::from(batch - lo.0) / f64::from(hi.0 - lo.0);
        (lo.1 + t * (hi.1 - lo.1), lo.2 + t * (hi.2 - lo.2))
    }
}

/// Parses the artifact's `UTIL.CSV` (`bench,batch,avg_duration(ms),
/// SM_util(%),l2_util(%),mem_util(%),…`, one row per model and batch, a
/// trailing comma allowed) into one [`UtilTable`] per model name, with the
/// percentages divided by 100.
pub fn parse_util_csv(text: &str) -> Result<BTreeMap<String, UtilTable>, InterferenceError> {
    let mut rows: BTreeMap<String, Vec<(u32, f64, f64)>> = BTreeMap::new();
    for record in csv_reader(text, true).into_records() {
        let f = record.map_err(|e| InterferenceError::UtilRow {
            line: e
                .position()
                .map_or(0, |p| usize::try_from(p.line()).unwrap_or(usize::MAX)),
            what: format!("not CSV ({e})"),
        })?;
        let line = f
            .position()
            .map_or(0, |p| usize::try_from(p.line()).unwrap_or(usize::MAX));
        let bad = |what: String| InterferenceError::UtilRow { line, what };
        if f.len() < 6 {
            return Err(bad(format!("{} fields, need at least 6", f.len())));
        }
        let batch: u32 = f[1]
            .parse()
            .map_err(|e| bad(format!("batch `{}` ({e})", &f[1])))?;
        let pct = |i: usize, what: &str| -> Result<f64, InterferenceError> {
            let v: f64 = f[i]
                .parse()
                .map_err(|e| bad(format!("{what} `{}` ({e})", &f[i])))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(bad(format!("{what} {v}% is outside 0..=100")));
            }
            Ok(v / 100.0)
        };
        let l2 = pct(4, "l2_util")?;
        let dram = pct(5, "mem_util")?;
        rows.entry(f[0].to_owned())
            .or_default()
            .push((batch, l2, dram));
    }
    rows.into_iter()
        .map(|(name, pts)| UtilTable::new(pts).map(|t| (name, t)))
        .collect()
}

/// The gpulet authors' measured interference inputs, built in from the
/// repository's `data/gpulet/` (provenance in `data/gpulet/README.md`):
/// `(gpu, INT_MODEL_CONSTANT.CSV, UTIL.CSV)` for the RTX 2080 Ti
/// (`2080ti`) and the RTX 3080 (`3080`). The files are small (about 11 KB
/// each), so they are compiled in and an installed binary reads them
/// without a checkout; [`LinearInterference::load_dir`] reads other copies.
pub const GPULET_DATA: [(&str, &str, &str); 2] = [
    (
        "2080ti",
        include_str!("../../../data/gpulet/2080ti/INT_MODEL_CONSTANT.CSV"),
        include_str!("../../../data/gpulet/2080ti/UTIL.CSV"),
    ),
    (
        "3080",
        include_str!("../../../data/gpulet/3080/INT_MODEL_CONSTANT.CSV"),
        include_str!("../../../data/gpulet/3080/UTIL.CSV"),
    ),
];

/// gpulet's linear interference model (§4.4) over per-model utilisation
/// tables looked up by model name.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearInterference {
    /// The regression coefficients.
    pub coeffs: LinearCoefficients,
    /// Utilisation tables by model name; a model without one has factor 1.
    pub util: BTreeMap<String, UtilTable>,
}

impl LinearInterference {
    /// The model with `coeffs` and no utilisation tables yet.
    pub fn new(coeffs: LinearCoefficients) -> Self {
        LinearInterference {
            coeffs,
            util: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) the utilisation table of `model`.
    pub fn with_util(mut self, model: &str, table: UtilTable) -> Self {
        self.util.insert(model.to_owned(), table);
        self
    }

    /// The gpulet authors' data for one GPU, from the folder `dir` that
    /// holds the artifact's `INT_MODEL_CONSTANT.CSV`
    /// ([`LinearCoefficients::parse_csv`]) and `UTIL.CSV`
    /// ([`parse_util_csv`]), with the tables under the data's model names
    /// (look one up with [`LinearInterference::util_of`]).
    pub fn load_dir(dir: &Path) -> Result<Self, InterferenceError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| InterferenceError::Read {
                path: path.display().to_string(),
                why: e.to_string(),
            })
        };
        let (coeffs, util) = (read("INT_MODEL_CONSTANT.CSV")?, read("UTIL.CSV")?);
        Self::from_texts(&coeffs, &util, &dir.display().to_string())
    }

    /// The gpulet authors' built-in data ([`GPULET_DATA`]) for `gpu`
    /// (`2080ti` or `3080`), as [`LinearInterference::load_dir`] reads the
    /// repository's `data/gpulet/<gpu>/`.
    pub fn builtin(gpu: &str) -> Result<Self, InterferenceError> {
        let Some((_, coeffs, util)) = GPULET_DATA.iter().find(|(g, _, _)| *g == gpu) else {
            return Err(InterferenceError::UnknownGpu {
                gpu: gpu.to_owned(),
                known: GPULET_DATA.map(|(g, _, _)| g).join(", "),
            });
        };
        Self::from_texts(coeffs, util, &format!("data/gpulet/{gpu} (built in)"))
    }

    /// Parses the texts of `INT_MODEL_CONSTANT.CSV` and `UTIL.CSV`; an
    /// error names the file as `origin/<file>`.
    fn from_texts(coeffs: &str, util: &str, origin: &str) -> Result<Self, InterferenceError> {
        let in_file = |name: &str| {
            let path = format!("{origin}/{name}");
            move |error| InterferenceError::InFile {
                path,
                error: Box::new(error),
            }
        };
        let coeffs =
            LinearCoefficients::parse_csv(coeffs).map_err(in_file("INT_MODEL_CONSTANT.CSV"))?;
        let util = parse_util_csv(util).map_err(in_file("UTIL.CSV"))?;
        Ok(LinearInterference { coeffs, util })
    }

    /// The utilisation table the data gives `name`, also under the name
    /// the gpulet artifact's 3080 data uses for it (SSD-MobileNet is
    /// `ssd` there).
    pub fn util_of(&self, name: &str) -> Option<&UtilTable> {
        let alias = if name == "ssd-mobilenetv1" {
            "ssd"
        } else {
            name
        };
        self.util.get(name).or_else(|| self.util.get(alias))
    }
}

impl Interference for LinearInterference {
    fn factor(
        &self,
        own: &str,
        own_batch: u32,
        own_pct: u32,
        other: &str,
        other_batch: u32,
        other_pct: u32,
    ) -> f64 {
        let (Some(a), Some(b)) = (self.util.get(own), self.util.get(other)) else {
            return 1.0;
        };
        let (l2a, dra) = a.at(own_batch);
        let (l2b, drb) = b.at(other_batch);
        let sa = f64::from(own_pct) / 100.0;
        let sb = f64::from(other_pct) / 100.0;
        let c = &self.coeffs;
        c.l2_own * l2a * sa
            + c.l2_other * l2b * sb
            + c.dram_own * dra * sa
            + c.dram_other * drb * sb
            + c.constant
    }
}

/// The factor of `own` at `(batch, pct)` against every co-runner
/// `(name, batch, pct)`: the largest pairwise factor, at least 1, a NaN
/// counting as infinite.
pub(crate) fn combined<'a>(
    intf: &dyn Interference,
    own: &str,
    batch: u32,
    pct: u32,
    others: impl IntoIterator<Item = (&'a str, u32, u32)>,
) -> f64 {
    others.into_iter().fold(1.0, |acc: f64, (o, ob, op)| {
        let f = intf.factor(own, batch, pct, o, ob, op);
        if f.is_nan() {
            f64::INFINITY
        } else {
            acc.max(f)
        }
    })
}

/// Pairwise factors measured on a GPU (`sluice profile --device cuda A
/// --pair B --split P`): for each ordered pair `(own, other)`, the factor
/// of `own` at the partition sizes it was measured at.
///
/// Lookup: the point of the pair whose `own` partition is nearest the
/// asked one (at equal distance the larger factor); the batches and the
/// other model's partition are not looked at (the measurement fixes them:
/// one batch, the other model in the rest of the GPU). A pair never
/// measured has factor 1, as a model without a utilisation table has
/// under [`LinearInterference`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeasuredInterference {
    /// `(own, other)` → `(own_pct, factor)`, ascending by `own_pct`.
    pub points: BTreeMap<(String, String), Vec<(u32, f64)>>,
}

impl MeasuredInterference {
    /// Adds the factor of `own` on `own_pct` % beside `other` (replacing
    /// an earlier one at the same size).
    pub fn with_point(mut self, own: &str, other: &str, own_pct: u32, factor: f64) -> Self {
        let v = self
            .points
            .entry((own.to_owned(), other.to_owned()))
            .or_default();
        v.retain(|&(p, _)| p != own_pct);
        v.push((own_pct, factor));
        v.sort_by_key(|&(p, _)| p);
        self
    }

    /// The same points under other model names: `rename(name)` gives the
    /// names a model is known by to the planner (none: the point is
    /// dropped).
    pub fn renamed(&self, rename: &dyn Fn(&str) -> Vec<String>) -> Self {
        let mut out = MeasuredInterference::default();
        for ((own, other), pts) in &self.points {
            for o in rename(own) {
                for t in rename(other) {
                    for &(p, f) in pts {
                        out = out.with_point(&o, &t, p, f);
                    }
                }
            }
        }
        out
    }
}

impl Interference for MeasuredInterference {
    fn factor(&self, own: &str, _: u32, own_pct: u32, other: &str, _: u32, _: u32) -> f64 {
        let Some(pts) = self.points.get(&(own.to_owned(), other.to_owned())) else {
            return 1.0;
        };
        let mut best: Option<(u32, f64)> = None;
        for &(p, f) in pts {
            let d = p.abs_diff(own_pct);
            best = match best {
                Some((bd, bf)) if bd < d || (bd == d && bf >= f) => Some((bd, bf)),
                _ => Some((d, f)),
            };
        }
        best.map_or(1.0, |(_, f)| f)
    }
}

/// Either interference model, for callers that choose at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyInterference {
    /// gpulet's linear model.
    Linear(LinearInterference),
    /// Factors measured pairwise.
    Measured(MeasuredInterference),
}

impl Interference for AnyInterference {
    fn factor(&self, own: &str, ob: u32, op: u32, other: &str, tb: u32, tp: u32) -> f64 {
        match self {
            AnyInterference::Linear(l) => l.factor(own, ob, op, other, tb, tp),
            AnyInterference::Measured(m) => m.factor(own, ob, op, other, tb, tp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_artifacts_files_and_computes_the_factor() {
        // The RTX 2080 Ti row of data/gpulet/2080ti/INT_MODEL_CONSTANT.CSV.
        let c = LinearCoefficients::parse_csv(
            "l2_util_m1,l2_util_m2,dram_util_m1,dram_util_m2,constant\n\
             0.11290838746224496,0.7159598718755424,0.35486591956022895,0.0882038259888065,0.8953693917277343\n",
        )
        .unwrap();
        assert_eq!(c.constant, 0.8953693917277343);
        let util = parse_util_csv(
            "bench,batch,avg_duration(ms),SM_util(%),l2_util(%),mem_util(%),achieved occupancy,theoretical occupancy\n\
             a,1,0.01,10,20,40,1,2,\n\
             a,4,0.02,10,50,60,1,2,\n\
             b,1,0.01,10,10,30,1,2,\n",
        )
        .unwrap();
        assert_eq!(util.len(), 2);
        // a at batch 2: a third of the way from 1 to 4: l2 0.3, dram 0.4667.
        let (l2, dram) = util["a"].at(2);
        assert!((l2 - 0.3).abs() < 1e-12 && (dram - (0.4 + 0.2 / 3.0)).abs() < 1e-12);
        assert_eq!(util["a"].at(32), (0.5, 0.6));
        let m = LinearInterference {
            coeffs: LinearCoefficients {
                l2_own: 1.0,
                l2_other: 2.0,
                dram_own: 3.0,
                dram_other: 4.0,
                constant: 0.5,
            },
            util,
        };
        // a at batch 4 on 50 %: l2 0.25, dram 0.3; b at batch 1 on 100 %:
        // l2 0.1, dram 0.3 → 0.25 + 0.2 + 0.9 + 1.2 + 0.5 = 3.05.
        let f = m.factor("a", 4, 50, "b", 1, 100);
        assert!((f - 3.05).abs() < 1e-12, "{f}");
        assert_eq!(m.factor("a", 4, 50, "unknown", 1, 100), 1.0);

        let e = LinearCoefficients::parse_csv("a,b\n1,2\n").unwrap_err();
        assert!(e.to_string().contains("the header is `a,b`"), "{e}");
        let e = parse_util_csv("h\nx,1,0.1,10,120,30\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "utilisation line 2: l2_util 120% is outside 0..=100; expected `model,batch,avg_duration(ms),SM_util(%),l2_util(%),mem_util(%),…` with percentages in 0..=100"
        );
        let e = UtilTable::new(vec![(1, 0.1, 0.1), (1, 0.2, 0.2)]).unwrap_err();
        assert!(e.to_string().contains("batch 1 appears twice"), "{e}");
    }

    /// Parses the gpulet authors' measured files in the repository's
    /// `data/gpulet/`, and the built-in copy is the same data.
    #[test]
    fn reads_the_gpulet_data_in_the_repository() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/gpulet");
        for gpu in ["2080ti", "3080"] {
            let c = std::fs::read_to_string(format!("{dir}/{gpu}/INT_MODEL_CONSTANT.CSV")).unwrap();
            LinearCoefficients::parse_csv(&c).unwrap();
            let u = std::fs::read_to_string(format!("{dir}/{gpu}/UTIL.CSV")).unwrap();
            let t = parse_util_csv(&u).unwrap();
            assert!(t.contains_key("resnet50"), "{:?}", t.keys());
            let li = LinearInterference::load_dir(&std::path::Path::new(dir).join(gpu)).unwrap();
            assert_eq!(li.util, t);
            assert_eq!(LinearInterference::builtin(gpu).unwrap(), li);
            let (_, bc, bu) = GPULET_DATA.iter().find(|(g, _, _)| *g == gpu).unwrap();
            assert_eq!((*bc, *bu), (c.as_str(), u.as_str()));
        }
        assert_eq!(GPULET_DATA.len(), 2);
        // The 2080 Ti's constant, as committed.
        let li = LinearInterference::builtin("2080ti").unwrap();
        assert_eq!(li.coeffs.constant, 0.8953693917277343);
        assert!(li.util_of("ssd-mobilenetv1").is_some());
        assert!(
            LinearInterference::builtin("3080")
                .unwrap()
                .util_of("ssd-mobilenetv1")
                .is_some()
        );
        let e = LinearInterference::builtin("a100").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no built-in gpulet data for GPU `a100`; the data has 2080ti, 3080"
        );
    }

    /// A folder of the artifact's two files loads as one model; a missing
    /// or malformed file names itself; exact batches and the 3080 data's
    /// name for SSD-MobileNet are found.
    #[test]
    fn loads_a_folder_of_the_artifacts_files() {
        let dir =
            std::env::temp_dir().join(format!("sluice-planner-gpulet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = LinearInterference::load_dir(&dir).unwrap_err();
        assert!(
            matches!(&e, InterferenceError::Read { path, .. } if path.ends_with("INT_MODEL_CONSTANT.CSV")),
            "{e}"
        );
        std::fs::write(
            dir.join("INT_MODEL_CONSTANT.CSV"),
            "l2_util_m1,l2_util_m2,dram_util_m1,dram_util_m2,constant\n0.1,0.2,0.3,0.4,1\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("UTIL.CSV"),
            "h\nssd,1,0.1,10,50,25\nssd,x,1,1,1,1\n",
        )
        .unwrap();
        let e = LinearInterference::load_dir(&dir).unwrap_err();
        assert!(
            e.to_string()
                .contains("UTIL.CSV: utilisation line 3: batch `x`"),
            "{e}"
        );
        std::fs::write(
            dir.join("UTIL.CSV"),
            "h\nssd,1,0.1,10,50,25\nssd,8,0.1,10,70,45\n",
        )
        .unwrap();
        let li = LinearInterference::load_dir(&dir).unwrap();
        assert_eq!(li.coeffs.constant, 1.0);
        let t = li.util_of("ssd-mobilenetv1").expect("the alias");
        assert_eq!(t.get(8), Some((0.7, 0.45)));
        assert_eq!(t.get(4), None);
        assert!(li.util_of("resnet50").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn measured_factors_are_looked_up_by_the_nearest_partition() {
        let m = MeasuredInterference::default()
            .with_point("a", "b", 20, 1.30)
            .with_point("a", "b", 50, 1.10)
            .with_point("a", "b", 80, 1.05)
            .with_point("b", "a", 50, 1.20);
        assert_eq!(m.factor("a", 8, 50, "b", 8, 50), 1.10);
        assert_eq!(m.factor("a", 1, 30, "b", 32, 70), 1.30, "30 is nearest 20");
        assert_eq!(
            m.factor("a", 1, 35, "b", 1, 65),
            1.30,
            "at equal distance the larger"
        );
        assert_eq!(m.factor("a", 1, 100, "b", 1, 0), 1.05);
        assert_eq!(m.factor("b", 1, 10, "a", 1, 90), 1.20);
        assert_eq!(m.factor("a", 1, 50, "c", 1, 50), 1.0, "never measured");
        let r = m.renamed(&|n| {
            if n == "a" {
                vec!["a1".into(), "a2".into()]
            } else {
                vec![n.into()]
            }
        });
        assert_eq!(r.factor("a2", 1, 50, "b", 1, 50), 1.10);
        assert_eq!(r.factor("b", 1, 50, "a1", 1, 50), 1.20);
        assert_eq!(r.factor("a", 1, 50, "b", 1, 50), 1.0);
        let any = AnyInterference::Measured(m);
        assert_eq!(any.factor("a", 8, 20, "b", 8, 80), 1.30);
    }
}
