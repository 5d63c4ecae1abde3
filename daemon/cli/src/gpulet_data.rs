//! The gpulet authors' interference data for one GPU
//! (`../shared/data/gpulet/<gpu>/`, measured by them with Nsight; see that
//! folder's README): the coefficients of their §4.4 linear model
//! (`INT_MODEL_CONSTANT.CSV`) and each model's L2 and DRAM utilisation per
//! batch (`UTIL.CSV`). Used as measured inputs by `sluice bench
//! interference` and `sluice bench cluster --interference gpulet-*`.

use std::collections::HashMap;
use std::path::Path;

/// gpulet's interference data for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuletData {
    /// c1..c5 of `c1 L2_own + c2 L2_other + c3 mem_own + c4 mem_other + c5`.
    pub coef: [f64; 5],
    /// (model, batch) → (L2, DRAM) utilisation as fractions.
    pub util: HashMap<(String, u32), (f64, f64)>,
}

impl GpuletData {
    /// Reads `dir/INT_MODEL_CONSTANT.CSV` and `dir/UTIL.CSV`.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .map_err(|e| format!("cannot read {}: {e}", dir.join(f).display()))
        };
        let c = read("INT_MODEL_CONSTANT.CSV")?;
        let line = c
            .lines()
            .nth(1)
            .ok_or_else(|| format!("{}: no coefficient row", dir.display()))?;
        let v: Vec<f64> = line
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}/INT_MODEL_CONSTANT.CSV: {e}", dir.display()))?;
        let coef: [f64; 5] = v.try_into().map_err(|v: Vec<f64>| {
            format!(
                "{}/INT_MODEL_CONSTANT.CSV: {} coefficients, expected 5",
                dir.display(),
                v.len()
            )
        })?;
        let u = read("UTIL.CSV")?;
        let mut util = HashMap::new();
        for (i, line) in u.lines().enumerate().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 6 {
                continue;
            }
            let parse = |s: &str| s.trim().parse::<f64>();
            let (Ok(b), Ok(l2), Ok(mem)) = (f[1].trim().parse::<u32>(), parse(f[4]), parse(f[5]))
            else {
                return Err(format!(
                    "{}/UTIL.CSV line {}: cannot read {line:?}",
                    dir.display(),
                    i + 1
                ));
            };
            util.insert((f[0].trim().to_owned(), b), (l2 / 100.0, mem / 100.0));
        }
        Ok(Self { coef, util })
    }

    /// The factor gpulet's model predicts for `m1` beside `m2`, both at
    /// exactly `batch` (`None` if either has no row there); at least 1.
    pub fn factor(&self, m1: &str, m2: &str, batch: u32) -> Option<f64> {
        let own = *self.util.get(&(m1.to_owned(), batch))?;
        let other = *self.util.get(&(m2.to_owned(), batch))?;
        Some(self.linear(own, other))
    }

    /// The §4.4 linear model on the (L2, DRAM) utilisation of the model
    /// itself and of what runs beside it; at least 1.
    pub fn linear(&self, own: (f64, f64), other: (f64, f64)) -> f64 {
        let c = self.coef;
        (c[0] * own.0 + c[1] * other.0 + c[2] * own.1 + c[3] * other.1 + c[4]).max(1.0)
    }

    /// The coefficients as the planner crate takes them.
    pub fn coefficients(&self) -> sluice_planner::LinearCoefficients {
        let c = self.coef;
        sluice_planner::LinearCoefficients {
            l2_own: c[0],
            l2_other: c[1],
            dram_own: c[2],
            dram_other: c[3],
            constant: c[4],
        }
    }

    /// (L2, DRAM) of `name` at the listed batch nearest `batch` (the 3080
    /// data names SSD-MobileNet `ssd`: [`alias`]).
    pub fn lookup(&self, name: &str, batch: u32) -> Option<(f64, f64)> {
        [name, alias(name)].iter().find_map(|n| {
            self.util
                .iter()
                .filter(|((m, _), _)| m == n)
                .min_by_key(|((_, b), _)| (b.abs_diff(batch), *b))
                .map(|(_, v)| *v)
        })
    }
}

/// The name `UTIL.CSV` may give `name` instead: the 3080 data names
/// SSD-MobileNet `ssd`.
pub fn alias(name: &str) -> &str {
    if name == "ssd-mobilenetv1" {
        "ssd"
    } else {
        name
    }
}
