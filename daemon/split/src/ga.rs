//! SPLIT's genetic search for evenly sized blocks (ICPP'23 §3.3).
//!
//! An individual is a cut vector: `m − 1` ascending, unique kernel indices
//! in `1..M`. Its fitness is Eq. 2 ([`crate::fitness`]). One run:
//!
//! 1. **Initial population** of [`GaParams::population`] cut vectors, biased
//!    away from the model's start (SPLIT §3.2: early cuts cost more in the
//!    paper's setting): each cut position is drawn with density growing
//!    linearly from the start, `c = 1 + ⌊(M − 1)·√u⌋` for uniform `u`, so the
//!    last quarter of the model is seven times as likely as the first. The
//!    vanilla evenness observation is left to the fitness.
//! 2. **Selection**: tournaments of [`GaParams::tournament`] individuals,
//!    the fittest wins.
//! 3. **Crossover** with probability [`GaParams::crossover`]: one point on
//!    the two sorted parents (`a[..k] ++ b[k..]`), then repaired (sorted,
//!    duplicates replaced by fresh biased draws); otherwise the first parent
//!    is copied.
//! 4. **Mutation**: each cut moves with probability [`GaParams::mutation`]
//!    by a random step of 1 to `max(1, M / 10)` kernels either way, clamped
//!    to `1..M`, then repaired.
//! 5. **Elitism**: the top [`GaParams::elite`] fraction (at least one)
//!    passes unchanged into the next generation.
//! 6. **Stop** when the best fitness has not improved for
//!    [`GaParams::stall`] generations, or after [`GaParams::generations`].
//!
//! The run is deterministic given [`GaParams::seed`]: the only randomness
//! is a SplitMix64 counter ([`sluice_rng::Counter`]).

use std::collections::BTreeSet;

use sluice_rng::{Counter, Draws};

use serde::Serialize;

use crate::SplitError;
use crate::fitness::Evaluation;
use crate::graph::OperatorGraph;

/// The GA's parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GaParams {
    /// Individuals per generation.
    pub population: usize,
    /// Most generations (`G_max`).
    pub generations: usize,
    /// Stop after this many generations without a better best (`G_stall`).
    pub stall: usize,
    /// Fraction of the population kept unchanged (elitism), at least one.
    pub elite: f64,
    /// Probability that two parents are crossed rather than copied.
    pub crossover: f64,
    /// Probability that one cut of a child moves.
    pub mutation: f64,
    /// Tournament size of the selection.
    pub tournament: usize,
    /// Seed of the run.
    pub seed: u64,
}

impl Default for GaParams {
    fn default() -> Self {
        Self {
            population: 64,
            generations: 200,
            stall: 25,
            elite: 0.1,
            crossover: 0.8,
            mutation: 0.3,
            tournament: 3,
            seed: 1,
        }
    }
}

/// What a GA run found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GaResult {
    /// The best cut vector found.
    pub best: Evaluation,
    /// Generations run (the initial population is generation 0).
    pub generations: usize,
    /// Generation at which the best fitness last improved: generations to
    /// converge.
    pub converged_at: usize,
    /// Best fitness after each generation.
    pub history: Vec<f64>,
}

/// A cut position in `1..kernels` with density growing away from the start.
fn biased_cut(rng: &mut Counter, kernels: usize) -> u32 {
    let span = (kernels - 1) as f64;
    let c = 1 + (span * rng.unit().sqrt()) as usize;
    c.min(kernels - 1) as u32
}

/// Sorts, removes duplicates and tops up with fresh biased draws.
fn repair(cuts: &mut Vec<u32>, want: usize, kernels: usize, rng: &mut Counter) {
    let mut set: BTreeSet<u32> = cuts.iter().copied().collect();
    while set.len() < want {
        set.insert(biased_cut(rng, kernels));
    }
    cuts.clear();
    cuts.extend(set);
}

fn random_individual(rng: &mut Counter, want: usize, kernels: usize) -> Vec<u32> {
    let mut v = Vec::with_capacity(want);
    repair(&mut v, want, kernels, rng);
    v
}

/// Checks that `m` blocks fit the graph.
pub(crate) fn check_blocks(graph: &OperatorGraph, blocks: usize) -> Result<(), SplitError> {
    if blocks == 0 || blocks > graph.len() {
        return Err(SplitError::BadBlocks {
            model: graph.model.clone(),
            blocks,
            kernels: graph.len(),
        });
    }
    Ok(())
}

/// Runs the GA for `blocks` blocks.
pub fn run(graph: &OperatorGraph, blocks: usize, p: &GaParams) -> Result<GaResult, SplitError> {
    check_blocks(graph, blocks)?;
    p.check()?;
    let want = blocks - 1;
    if want == 0 {
        let best = graph.evaluate(&[])?;
        return Ok(GaResult {
            history: vec![best.fitness],
            best,
            generations: 0,
            converged_at: 0,
        });
    }
    let kernels = graph.len();
    let mut rng = Counter::new(p.seed);
    let mut pop: Vec<(f64, Vec<u32>)> = (0..p.population)
        .map(|_| {
            let c = random_individual(&mut rng, want, kernels);
            (graph.fitness_of(&c), c)
        })
        .collect();
    let by_fitness = |a: &(f64, Vec<u32>), b: &(f64, Vec<u32>)| b.0.total_cmp(&a.0);
    pop.sort_by(by_fitness);
    let elite = ((p.elite * p.population as f64).ceil() as usize).clamp(1, p.population);
    let max_step = (kernels / 10).max(1);
    let mut history = vec![pop[0].0];
    let (mut generation, mut converged_at) = (0usize, 0usize);
    while generation < p.generations && generation - converged_at < p.stall {
        generation += 1;
        let mut next: Vec<(f64, Vec<u32>)> = pop[..elite].to_vec();
        while next.len() < p.population {
            let a = tournament(&pop, p.tournament, &mut rng);
            let b = tournament(&pop, p.tournament, &mut rng);
            let mut child = if rng.unit() < p.crossover {
                let k = rng.below(want + 1);
                let mut c: Vec<u32> = pop[a].1[..k].to_vec();
                c.extend_from_slice(&pop[b].1[k..]);
                c
            } else {
                pop[a].1.clone()
            };
            for cut in &mut child {
                if rng.unit() < p.mutation {
                    let step = 1 + rng.below(max_step) as i64;
                    let moved = if rng.below(2) == 0 {
                        i64::from(*cut) - step
                    } else {
                        i64::from(*cut) + step
                    };
                    *cut = moved.clamp(1, kernels as i64 - 1) as u32;
                }
            }
            repair(&mut child, want, kernels, &mut rng);
            next.push((graph.fitness_of(&child), child));
        }
        next.sort_by(by_fitness);
        if next[0].0 > pop[0].0 {
            converged_at = generation;
        }
        pop = next;
        history.push(pop[0].0);
    }
    Ok(GaResult {
        best: graph.evaluate(&pop[0].1)?,
        generations: generation,
        converged_at,
        history,
    })
}

/// Index of the fittest of `size` random individuals (`pop` is sorted best
/// first, so the smallest index wins).
fn tournament(pop: &[(f64, Vec<u32>)], size: usize, rng: &mut Counter) -> usize {
    (0..size.max(1))
        .map(|_| rng.below(pop.len()))
        .min()
        .unwrap_or(0)
}

impl GaParams {
    /// Checks the parameters.
    pub fn check(&self) -> Result<(), SplitError> {
        let prob = |x: f64| (0.0..=1.0).contains(&x);
        if self.population < 2
            || self.tournament == 0
            || !prob(self.elite)
            || !prob(self.crossover)
            || !prob(self.mutation)
        {
            return Err(SplitError::BadParams {
                params: format!("{self:?}"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::toy_graph;

    #[test]
    fn deterministic_per_seed() {
        let times: Vec<f64> = (0..60).map(|i| 1.0 + ((i * 37) % 11) as f64).collect();
        let g = toy_graph(&times, 0.5);
        let p = GaParams::default();
        let a = run(&g, 4, &p).expect("ga");
        let b = run(&g, 4, &p).expect("ga");
        assert_eq!(a, b);
        let c = run(
            &g,
            4,
            &GaParams {
                seed: 99,
                ..p.clone()
            },
        )
        .expect("ga");
        assert_eq!(c.best.cuts.len(), 3);
        // History never gets worse (elitism).
        assert!(a.history.windows(2).all(|w| w[1] >= w[0]));
        assert!(a.converged_at <= a.generations && a.generations <= p.generations);
    }

    #[test]
    fn children_are_valid_cut_vectors() {
        let g = toy_graph(&[1.0; 8], 0.0);
        let r = run(&g, 8, &GaParams::default()).expect("ga");
        assert_eq!(r.best.cuts, (1..8).collect::<Vec<u32>>());
        assert!(run(&g, 9, &GaParams::default()).is_err());
        assert!(run(&g, 0, &GaParams::default()).is_err());
        let one = run(&g, 1, &GaParams::default()).expect("m = 1");
        assert!(one.best.cuts.is_empty());
    }

    #[test]
    fn the_bias_favours_late_positions() {
        let mut rng = Counter::new(7);
        let n = 20_000;
        let late = (0..n).filter(|_| biased_cut(&mut rng, 101) > 50).count();
        // P(c > 50) = 1 − 0.5² = 0.75.
        assert!((late as f64 / n as f64 - 0.75).abs() < 0.02, "{late}");
    }
}
