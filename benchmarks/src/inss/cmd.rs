//! The commands `sluice train inss` and `sluice bench inss`: arguments,
//! progress lines, the report's tables and plots. The experiments
//! themselves are in [`crate::inss`] (setup, planners, serving,
//! load search, ceilings) and [`crate::inss::trace`] (the bursty
//! trace); this module only drives them. **Simulated** throughout: the
//! GPU model on the `a100` profile by default.

use serde::Serialize;
use sluice_inss::ExecModel;

use crate::inss::{
    Agents, GROUP_GPUS, InssBenchOptions, InssReport, PlannerKind, ThroughputRow,
    cluster_instances, plan, run, setup,
};

fn pct(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{:.2} %", 100.0 * x)
    }
}

/// The human-readable report.
pub fn table(r: &InssReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "InSS on the GPU model (SIMULATED, device profile `{}`)\n\nSLO rule: {}\n",
        r.device, r.slo_rule
    );
    let _ = writeln!(
        o,
        "| instance | model | SLO ms | paper SLO ms | base rate rps |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|");
    for (n, m, slo, p, b) in &r.instances {
        let _ = writeln!(o, "| {n} | {m} | {slo:.1} | {p} | {b:.1} |");
    }
    let _ = writeln!(
        o,
        "\nLatency model ({}) against the GPU model, Tables 3–4 analogues; largest error {:.2} %:\n",
        r.latency_fit, r.model_max_error_pct
    );
    let _ = writeln!(
        o,
        "| table | case | batch | share % | observed ms | predicted ms | error % |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for v in &r.model_error {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {:.3} | {:.3} | {:.2} |",
            v.table, v.case, v.batch, v.share_pct, v.observed_ms, v.predicted_ms, v.error_pct
        );
    }
    if let Some(e) = &r.env_score {
        let _ = writeln!(
            o,
            "\nInSS's greedy score on its training environment ({} episodes, seed {}): reward {:.2} per step, violation {}, throughput {:.0} rps",
            e.episodes,
            e.seed,
            e.reward,
            pct(e.violation),
            e.throughput
        );
        for (name, b) in &r.baseline_env_scores {
            let _ = writeln!(
                o,
                "{name}'s decisions, scored the same way: reward {:.2} per step, violation {}, throughput {:.0} rps",
                b.reward,
                pct(b.violation),
                b.throughput
            );
        }
    }
    if let (Some(first), Some(last)) = (r.training.first(), r.training.last()) {
        let _ = writeln!(
            o,
            "\nTraining: {} episodes; reward {:.2} → {:.2}, throughput {:.0} → {:.0} rps, violation {} → {}; {:.1} s per episode (median)\n",
            r.training.len(),
            first.reward,
            last.reward,
            first.throughput,
            last.throughput,
            pct(first.violation),
            pct(last.violation),
            median(r.training.iter().map(|e| e.wall_s).collect()),
        );
    }
    let _ = writeln!(
        o,
        "\nSLO-preserved maximum load (≤ 1 % late, dropped or unserved), served on the GPU model:\n"
    );
    rows_table(&mut o, &r.throughput, true);
    let _ = writeln!(
        o,
        "\nCeilings (fluid relaxation: every instance at its most GPU-efficient share and batch, GPUs filled exactly; no planner can pass the first two; the third counts a share's rate as what its batches cover of Poisson arrivals under sluice's burst rule, 1 % overflow):\n"
    );
    let _ = writeln!(
        o,
        "| rule | load × base | throughput rps per {GROUP_GPUS} GPUs |"
    );
    let _ = writeln!(o, "|---|---|---|");
    for b in &r.bounds {
        let _ = writeln!(
            o,
            "| {} | {:.3} | {:.1} |",
            b.rule, b.load_factor, b.throughput_rps
        );
    }
    if let Some(f) = r.fixed_load.first() {
        let _ = writeln!(
            o,
            "\nEvery planner at load {:.2} × base rates (Fig. 10–12's shape):\n",
            f.load_factor
        );
        rows_table(&mut o, &r.fixed_load, false);
        let _ = writeln!(
            o,
            "\nThroughput over time at that load (Fig. 11): requests within SLO per second of the run\n"
        );
        let _ = writeln!(o, "| GPUs | planner | min | median | max | seconds |");
        let _ = writeln!(o, "|---|---|---|---|---|---|");
        for f in &r.fixed_load {
            let mut v = f.goodput_per_s.clone();
            v.sort_unstable();
            if let (Some(lo), Some(hi)) = (v.first(), v.last()) {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {} |",
                    f.gpus,
                    f.planner,
                    lo,
                    v[v.len() / 2],
                    hi,
                    v.len()
                );
            }
        }
    }
    if let Some(rules) = &r.trace_rules {
        let _ = writeln!(o, "\nBursty trace, re-planned every period ({rules}):\n");
        let _ = writeln!(
            o,
            "| planner | period s | arrived | violation | goodput rps | worst 20 s window | plans (failed) | decision ms (median) |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
        for t in &r.trace {
            let worst = t.window_violation.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {:.1} | {} | {} ({}) | {:.2} |",
                t.planner,
                t.period_s,
                t.arrived,
                pct(t.violation),
                t.goodput_rps,
                pct(worst),
                t.plans,
                t.failed_plans,
                t.decision_ms_median
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{} GPU-model points measured for serving; {:.1} s wall",
        r.truth_points, r.wall_s
    );
    o
}

/// Planner rows as a markdown table, with their load factor or without
/// (the fixed-load table, where it is one for all).
fn rows_table(o: &mut String, rows: &[ThroughputRow], with_load: bool) {
    use std::fmt::Write;
    let load = if with_load { " load × base |" } else { "" };
    let _ = writeln!(
        o,
        "| GPUs | planner |{load} throughput rps | late | dropped | fragment % | GPUs used | decision ms | note |"
    );
    let _ = writeln!(
        o,
        "|---|---|{}---|---|---|---|---|---|---|",
        if with_load { "---|" } else { "" }
    );
    for t in rows {
        let load = if with_load {
            format!(" {:.3} |", t.load_factor)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "| {} | {} |{load} {:.1} | {} | {} | {} | {} | {:.2} | {} |",
            t.gpus,
            t.planner,
            t.throughput_rps,
            pct(t.violation),
            pct(t.drop),
            t.fragment,
            t.gpus_used,
            t.decision_ms,
            t.note.as_deref().unwrap_or("")
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A progress line on stderr: rewritten in place on a terminal; otherwise
/// (a log, CI) one line per tenth of the work, so logs stay short.
fn progress_line(what: &'static str, unit: &'static str) -> impl FnMut(usize, usize) {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last = usize::MAX;
    move |done, total| {
        if tty {
            eprint!("\r{what} {done}/{total} {unit}");
            if done == total {
                eprintln!();
            }
            return;
        }
        // Workers may report out of order: only ever move forward.
        let tenth = (done * 10).checked_div(total).unwrap_or(10);
        if last == usize::MAX || tenth > last {
            last = tenth;
            eprintln!("{what} {done}/{total} {unit}");
        }
    }
}

/// `sluice train inss`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TrainInssArgs {
    /// Directory to write the agents into (created; an existing checkpoint
    /// there is replaced), with the latency model they observe through
    /// (`latency.json`, which `cluster.planner = "inss"` reads).
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Episodes (InSS Table 2: 1600).
    #[arg(long, default_value_t = 1600)]
    pub episodes: usize,
    /// Steps per episode (Table 2: 100), each one second of arrivals.
    #[arg(long, default_value_t = 100)]
    pub steps: usize,
    /// Seed of the weights, exploration, replay and environment: the same
    /// seed on one thread gives the same agents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Device profile of the simulated GPU (InSS's testbed: a100).
    #[arg(long, default_value = "a100")]
    pub device: String,
    /// Train InSS-ni: the latency model without its interference terms.
    #[arg(long)]
    pub no_interference: bool,
    /// Hidden layer widths (Table 2: 256,256).
    #[arg(long, value_delimiter = ',', default_value = "256,256")]
    pub hidden: Vec<usize>,
    /// Mini-batch size of both agents (Table 2: 256).
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    /// Also write the agents to `--out` every this many episodes (0:
    /// only at the end), so a long run can be evaluated or kept if
    /// stopped.
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: usize,
    /// Factor on the rewards the agents learn from; the training record
    /// stays unscaled. Table 2 gives none; 1 is Eq. 2 as it is, whose
    /// ω = 40 makes a step's reward reach −40 per instance and the
    /// critics' targets thousands. Of 1, 0.1, 1/ω and 0.005 the default
    /// 0.1 ended highest in training reward here (docs/inss.md, "Reward
    /// scale").
    #[arg(long, default_value_t = sluice_inss::ts::DEFAULT_REWARD_SCALE)]
    pub reward_scale: f64,
    /// Every this many episodes, score the agents' greedy decisions on
    /// `--eval-episodes` episodes of the training environment (the
    /// latency model, fixed seed) and keep the best-scoring agents in
    /// `<out>/best` (0: off). The serving benchmark is never read.
    #[arg(long, default_value_t = 25)]
    pub eval_every: usize,
    /// Episodes of each `--eval-every` score.
    #[arg(long, default_value_t = 5)]
    pub eval_episodes: usize,
    /// Print the per-episode record as JSON at the end.
    #[arg(long)]
    pub json: bool,
}

/// Seed of the greedy scores (`--eval-every`, `bench inss`'s `env_score`):
/// one for every run, so that scores compare.
pub const EVAL_SEED: u64 = 0xE7A1;

/// What `<out>/best/selection.json` says about the kept agents.
#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    /// Training episodes behind the kept agents.
    pub episode: usize,
    /// Their greedy score on the training environment.
    pub score: sluice_inss::ts::EvalScore,
    /// The rule, in words.
    pub rule: String,
}

/// Trains InSS's agents (`sluice train inss`) and writes them to
/// `args.out`; returns the training record. Progress goes to stderr.
pub fn train_cmd(args: &TrainInssArgs) -> Result<Vec<sluice_inss::ts::EpisodeRecord>, String> {
    if args.episodes == 0 || args.steps == 0 {
        return Err(format!(
            "--episodes {} and --steps {} must both be at least 1",
            args.episodes, args.steps
        ));
    }
    if args.hidden.is_empty() || args.hidden.contains(&0) || args.batch_size == 0 {
        return Err(format!(
            "--hidden {:?} needs at least one width, none 0, and --batch-size {} at least 1",
            args.hidden, args.batch_size
        ));
    }
    if !(args.reward_scale.is_finite() && args.reward_scale > 0.0) {
        return Err(format!(
            "--reward-scale {}: give a positive factor (1 = Eq. 2 as it is)",
            args.reward_scale
        ));
    }
    let mut fit = progress_line("train inss: profiling the latency model", "simulations");
    let s = setup(&args.device, &mut fit).map_err(|e| e.to_string())?;
    let latency = if args.no_interference {
        s.latency.without_interference()
    } else {
        s.latency.clone()
    };
    let exec: &dyn ExecModel = &latency;
    // The agents observe through this model: a planner loading them
    // (`cluster.planner = "inss"`) reads it from their directory.
    let mut dirs = vec![args.out.clone()];
    if args.eval_every > 0 {
        dirs.push(args.out.join("best"));
    }
    for dir in dirs {
        sluice_inss::planner::save_latency(&dir, &args.device, &latency).map_err(|e| {
            format!(
                "cannot write {}: {e}",
                dir.join(sluice_inss::planner::LATENCY_FILE).display()
            )
        })?;
    }
    let mut cfg = sluice_inss::ts::TrainConfig {
        episodes: args.episodes,
        hidden: args.hidden.clone(),
        seed: args.seed,
        reward_scale: args.reward_scale,
        ..Default::default()
    };
    cfg.env.steps = args.steps;
    cfg.sacd.batch_size = args.batch_size;
    cfg.td3.batch_size = args.batch_size;
    let started = std::time::Instant::now();
    let total = args.episodes;
    let instances = s.instances.clone();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let every = args.checkpoint_every;
    let out = args.out.clone();
    let seed = args.seed;
    let (eval_every, eval_episodes) = (args.eval_every, args.eval_episodes.max(1));
    let mut best: Option<f64> = None;
    let mut on_episode = |ts: &sluice_inss::ts::TwoStage,
                          recs: &[sluice_inss::ts::EpisodeRecord]|
     -> Result<(), sluice_inss::ts::TsError> {
        let e = recs.last().expect("called after an episode");
        if every > 0 && e.episode % every == 0 && e.episode < total {
            ts.save(&out, exec, &instances, seed, recs)?;
        }
        if eval_every > 0 && (e.episode % eval_every == 0 || e.episode == total) {
            let score = ts.evaluate(exec, &instances, eval_episodes, EVAL_SEED)?;
            if best.is_none_or(|b| score.reward > b) {
                best = Some(score.reward);
                let dir = out.join("best");
                ts.save(&dir, exec, &instances, seed, recs)?;
                let sel = Selection {
                    episode: e.episode,
                    score,
                    rule: format!(
                        "the checkpoint (every {eval_every} episodes) whose greedy decisions score the highest mean Eq. 2 reward on {eval_episodes} episodes of the training environment (latency model, seed {EVAL_SEED})"
                    ),
                };
                let text = serde_json::to_string_pretty(&sel).expect("selection serialises");
                std::fs::write(dir.join("selection.json"), text).map_err(|err| {
                    sluice_inss::ts::TsError::Save {
                        dir: dir.display().to_string(),
                        message: err.to_string(),
                    }
                })?;
            }
            if !tty {
                eprintln!(
                    "train inss: episode {} greedy score {:.2} (violation {:.2} %){}",
                    e.episode,
                    score.reward,
                    100.0 * score.violation,
                    if best == Some(score.reward) {
                        ", best so far: kept in best/"
                    } else {
                        ""
                    }
                );
            }
        }
        let el = started.elapsed().as_secs_f64();
        let eta = el / e.episode as f64 * (total - e.episode) as f64;
        let line = format!(
            "train inss: episode {}/{total}  reward {:8.2}  throughput {:7.0} rps  violation {:6.2} %  {:.0} s left   ",
            e.episode,
            e.reward,
            e.throughput,
            100.0 * e.violation,
            eta
        );
        if tty {
            eprint!("\r{line}");
            if e.episode == total {
                eprintln!();
            }
        } else if e.episode % total.div_ceil(20) == 0 || e.episode == total {
            eprintln!("{line}");
        }
        Ok(())
    };
    let (ts, records) = sluice_inss::ts::train(exec, &s.instances, &cfg, &mut on_episode)
        .map_err(|e| format!("training failed: {e}"))?;
    ts.save(&args.out, exec, &s.instances, args.seed, &records)
        .map_err(|e| e.to_string())?;
    eprintln!(
        "train inss: {} episodes in {:.1} s ({:.2} s per episode); agents digest {:016x}; written to {}",
        records.len(),
        started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64() / records.len() as f64,
        ts.digest(),
        args.out.display()
    );
    Ok(records)
}

/// `sluice bench inss`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchInssArgs {
    /// Agents from `sluice train inss --out DIR` (without: InSS is not run).
    #[arg(long)]
    pub agents: Option<std::path::PathBuf>,
    /// InSS-ni's agents (`sluice train inss --no-interference --out DIR`).
    #[arg(long)]
    pub agents_ni: Option<std::path::PathBuf>,
    /// GPU counts, multiples of 4 (InSS: 4 and 64).
    #[arg(long, value_delimiter = ',', default_value = "4,64")]
    pub gpus: Vec<usize>,
    /// Planners: inss, inss-ni, gpulet, gpulet-measured, gslice, igniter (default all).
    #[arg(long, value_delimiter = ',')]
    pub planners: Vec<PlannerKind>,
    /// Slack for both gpulet planners: every entry of their L(b, p) tables is
    /// multiplied by this (at least 1; 1 is gpulet's rule as written, which
    /// leaves no room for Poisson bursts). Also applies to --trace.
    #[arg(long, default_value_t = 1.0)]
    pub gpulet_margin: f64,
    /// Virtual seconds of Poisson arrivals per serving run.
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Bisection steps of each load search.
    #[arg(long, default_value_t = 5)]
    pub search_steps: u32,
    /// Load factor (× every base rate) of the fixed-load comparison.
    #[arg(long, default_value_t = 0.5)]
    pub fixed_load: f64,
    /// Seed of arrivals and routing.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// What serves the plans: daemon (the daemon's cluster backend in
    /// virtual time: its shared queue per model, adaptive batch and
    /// deadline drops) or sim (the request-level simulator: routing by
    /// share, deadline batches).
    #[arg(long, value_enum, default_value = "daemon")]
    pub engine: crate::cluster::sim::Engine,
    /// Device profile (InSS's testbed: a100).
    #[arg(long, default_value = "a100")]
    pub device: String,
    /// Print one JSON object (`model_error`, `training`, `throughput`, …).
    #[arg(long)]
    pub json: bool,
    /// Write the plots (inss-training.svg, inss-throughput.svg,
    /// inss-fixed-load.svg, and with `--trace` inss-trace.svg) into this
    /// directory.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Skip the ceilings on the load factor (a scan of every share and
    /// batch of every model on the GPU model; ~40 s).
    #[arg(long)]
    pub no_bounds: bool,
    /// Also run the bursty-trace experiment (beyond the paper): gpulet
    /// Fig. 15's two waves, each planner re-planning every
    /// `--trace-periods` seconds on the first `--gpus` count.
    #[arg(long)]
    pub trace: bool,
    /// Re-planning periods of `--trace`, s (20: an MPS restart's pace;
    /// 1: sluice's in-place repartitioning).
    #[arg(long, value_delimiter = ',', default_value = "20,1")]
    pub trace_periods: Vec<f64>,
    /// Length of the `--trace` trace, s (gpulet's is 3200; its shape
    /// scales).
    #[arg(long, default_value_t = 800.0)]
    pub trace_duration: f64,
    /// Load factors of `--trace`: low, first peak, second peak.
    #[arg(long, value_delimiter = ',', default_value = "0.2,0.5,0.7")]
    pub trace_load: Vec<f64>,
    /// Print each planner's placement at the fixed load on the first GPU
    /// count (share, batch and rate of every instance on every GPU) to
    /// stderr.
    #[arg(long)]
    pub show_plans: bool,
}

/// A placement, one line per partition: `gpu g: p % (duty d ms): model
/// b=B r=R rps, ...`; the unassigned percent of each GPU last.
pub fn plan_text(p: &sluice_planner::Placement) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    for (g, gp) in p.gpus.iter().enumerate() {
        let used: u32 = gp.partitions.iter().map(|q| q.size_pct).sum();
        for q in &gp.partitions {
            let _ = write!(
                o,
                "  gpu {g}: {:>3} % (duty {:.1} ms):",
                q.size_pct, q.duty_cycle_ms
            );
            for a in &q.models {
                let _ = write!(o, " {} b={} r={:.0} rps;", a.model, a.batch, a.share_rps);
            }
            o.push('\n');
        }
        let _ = writeln!(
            o,
            "  gpu {g}: {:>3} % unassigned",
            100u32.saturating_sub(used)
        );
    }
    o
}

/// Runs `sluice bench inss`; returns the report.
pub fn bench_cmd(args: &BenchInssArgs) -> Result<InssReport, String> {
    if let Some(&g) = args.gpus.iter().find(|&&g| g == 0 || g % GROUP_GPUS != 0) {
        return Err(format!(
            "--gpus {g}: InSS decides per group of {GROUP_GPUS} GPUs; give multiples of {GROUP_GPUS} (4, 64)"
        ));
    }
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err(format!(
            "--duration {}: give a positive number of seconds",
            args.duration
        ));
    }
    if !(args.fixed_load.is_finite() && args.fixed_load > 0.0) {
        return Err(format!(
            "--fixed-load {}: give a positive load factor (1 = every instance at its base rate)",
            args.fixed_load
        ));
    }
    if !(args.gpulet_margin.is_finite() && (1.0..=10.0).contains(&args.gpulet_margin)) {
        return Err(format!(
            "--gpulet-margin {}: give a factor from 1 (gpulet's rule as written) to 10, e.g. 1.05 for 5 % slack",
            args.gpulet_margin
        ));
    }
    if args.trace {
        if let Some(p) = args
            .trace_periods
            .iter()
            .find(|p| !(p.is_finite() && **p > 0.0))
        {
            return Err(format!(
                "--trace-periods {p}: give positive periods in seconds (e.g. 20,1)"
            ));
        }
        if args.trace_load.len() != 3
            || args.trace_load.iter().any(|x| !(x.is_finite() && *x > 0.0))
        {
            return Err(format!(
                "--trace-load {:?}: give three positive load factors: low, first peak, second peak (e.g. 0.2,0.5,0.7)",
                args.trace_load
            ));
        }
        if !(args.trace_duration.is_finite() && args.trace_duration >= 1.0) {
            return Err(format!(
                "--trace-duration {}: give at least 1 s",
                args.trace_duration
            ));
        }
    }
    let mut fit = progress_line("bench inss: profiling the latency model", "simulations");
    let s = setup(&args.device, &mut fit).map_err(|e| e.to_string())?;
    let load = |dir: &std::path::Path, m: &dyn ExecModel| -> Result<_, String> {
        let (ts, inst, rec) = sluice_inss::ts::TwoStage::load(dir, m).map_err(|e| e.to_string())?;
        // JSON keeps f64 to its shortest round-trip form, which serde_json
        // reads back within an ulp or two: compare rates and SLOs to 1e-9.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
        let same = inst.len() == s.instances.len()
            && inst.iter().zip(&s.instances).all(|(a, b)| {
                a.name == b.name
                    && a.model == b.model
                    && close(a.slo_ms, b.slo_ms)
                    && close(a.max_rate_rps, b.max_rate_rps)
            });
        if !same {
            return Err(format!(
                "the agents in {} were trained for other instances (SLOs or rates differ from this build's setup on {}); retrain with `sluice train inss --device {} --out {}`",
                dir.display(),
                args.device,
                args.device,
                dir.display()
            ));
        }
        Ok((ts, rec))
    };
    let mut training = Vec::new();
    let agents = match &args.agents {
        None => None,
        Some(dir) => {
            let (inss, rec) = load(dir, &s.latency)?;
            training = rec;
            let inss_ni = match &args.agents_ni {
                None => None,
                Some(d) => {
                    let ni = s.latency.without_interference();
                    Some((load(d, &ni)?.0, ni))
                }
            };
            Some(Agents { inss, inss_ni })
        }
    };
    let opts = InssBenchOptions {
        gpus: args.gpus.clone(),
        planners: if args.planners.is_empty() {
            PlannerKind::ALL.to_vec()
        } else {
            args.planners.clone()
        },
        duration_s: args.duration,
        search_steps: args.search_steps,
        seed: args.seed,
        fixed_load: args.fixed_load,
        bounds: !args.no_bounds,
        gpulet_margin: args.gpulet_margin,
        engine: args.engine,
    };
    if args.show_plans {
        let g = opts.gpus[0];
        let (inst, base) = cluster_instances(&s, g);
        let rates: Vec<f64> = base.iter().map(|r| r * opts.fixed_load).collect();
        for &k in &opts.planners {
            match plan(
                k,
                &s.plan_inputs(opts.gpulet_margin),
                agents.as_ref(),
                &inst,
                &rates,
                g,
                opts.seed,
            ) {
                Ok(p) => eprintln!(
                    "bench inss: {} at load {} on {g} GPUs:\n{}",
                    k.name(),
                    opts.fixed_load,
                    plan_text(&p.placement)
                ),
                Err(e) => eprintln!("bench inss: {}: {e}", k.name()),
            }
        }
    }
    let mut prog = progress_line("bench inss:", "planner runs");
    let mut r = run(&s, agents.as_ref(), &training, &opts, &mut prog).map_err(|e| e.to_string())?;
    if let Some(a) = &agents {
        r.env_score = Some(
            a.inss
                .evaluate(&s.latency, &s.instances, 5, EVAL_SEED)
                .map_err(|e| e.to_string())?,
        );
        let cfg = *a.inss.env_config();
        for k in [PlannerKind::Gslice, PlannerKind::Igniter] {
            let mut rule = |env: &sluice_inss::Env,
                            _: &sluice_inss::Decision|
             -> Result<sluice_inss::Decision, sluice_inss::ts::TsError> {
                Ok(if k == PlannerKind::Gslice {
                    sluice_inss::baselines::gslice(&s.latency, &s.instances, env.rates(), cfg.gpus)
                } else {
                    sluice_inss::baselines::igniter(&s.latency, &s.instances, env.rates(), cfg.gpus)
                })
            };
            let score = sluice_inss::ts::evaluate_decisions(
                cfg,
                &s.latency,
                &s.instances,
                5,
                EVAL_SEED,
                &mut rule,
            )
            .map_err(|e| e.to_string())?;
            r.baseline_env_scores.push((k.name().to_owned(), score));
        }
    }
    if args.trace {
        let topts = crate::inss::trace::InssTraceOptions {
            planners: opts
                .planners
                .iter()
                .copied()
                .filter(|&k| {
                    k != PlannerKind::InssNi || agents.as_ref().is_some_and(|a| a.inss_ni.is_some())
                })
                .filter(|&k| {
                    !matches!(k, PlannerKind::Inss | PlannerKind::InssSized) || agents.is_some()
                })
                .collect(),
            periods_s: args.trace_periods.clone(),
            duration_s: args.trace_duration,
            low: args.trace_load[0],
            peak1: args.trace_load[1],
            peak2: args.trace_load[2],
            gpus: opts.gpus[0],
            seed: opts.seed,
            gpulet_margin: opts.gpulet_margin,
            engine: opts.engine,
            ..Default::default()
        };
        let mut tp = progress_line("bench inss: trace", "periods");
        let started = std::time::Instant::now();
        r.trace = crate::inss::trace::run_trace(&s, agents.as_ref(), &topts, &mut tp)
            .map_err(|e| e.to_string())?;
        r.trace_rules = Some(crate::inss::trace::rules(&topts));
        r.wall_s += started.elapsed().as_secs_f64();
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the plot directory {}: {e}", dir.display()))?;
        for (name, svg) in plots(&r).map_err(|e| e.to_string())? {
            let p = dir.join(name);
            std::fs::write(&p, svg).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
            eprintln!("bench inss: wrote {}", p.display());
        }
    }
    Ok(r)
}

/// One line panel: `ys` against 1..=n (`xlabel`), titled, y from its
/// minimum to its maximum.
fn line_panel(
    area: &crate::plot::Area<'_>,
    title: &str,
    ys: &[f64],
    color: plotters::style::RGBColor,
    xlabel: &str,
) -> crate::plot::DrawResult {
    use crate::plot::{self, Axes, Line};
    let finite: Vec<f64> = ys.iter().copied().filter(|v| v.is_finite()).collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if finite.is_empty() {
        (0.0, 1.0)
    } else {
        (lo, hi)
    };
    let n = ys.len().max(2) as f64;
    plot::line_chart(
        area,
        title,
        &Axes {
            x: (1.0, n),
            y: (lo, hi),
            x_ticks: &[1.0, n],
            y_ticks: &[lo, hi],
            x_label: xlabel,
            y_label: "",
            y_format: &|v| format!("{v:.3}"),
        },
        &[Line {
            color,
            points: ys
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64 + 1.0, v))
                .collect(),
        }],
    )
}

/// The plots: `inss-training.svg` (Fig. 8–9: reward, throughput and
/// violation per episode) when there is a training record, and
/// `inss-throughput.svg` (Fig. 10, 12, 15–19: per GPU count, each
/// planner's throughput, violations, fragments and decision time),
/// `inss-fixed-load.svg` (Fig. 11: each planner's requests within SLO per
/// second at the common load) and, with the trace, `inss-trace.svg`.
pub fn plots(r: &InssReport) -> Result<Vec<(&'static str, String)>, crate::plot::PlotError> {
    use crate::plot::{self, Axes, Bar, Key, Line, Mark, bar_chart, span};
    let mut out = Vec::new();
    if !r.training.is_empty() {
        let (pw, ph) = (360, 220);
        let series: [(&str, Vec<f64>); 3] = [
            (
                "reward per step (Eq. 2)",
                r.training.iter().map(|e| e.reward).collect(),
            ),
            (
                "throughput, requests/s",
                r.training.iter().map(|e| e.throughput).collect(),
            ),
            (
                "violation (late or dropped)",
                r.training.iter().map(|e| e.violation).collect(),
            ),
        ];
        let svg = plot::figure(
            "inss-training.svg",
            (pw * 3, ph + 30),
            Some(&format!(
                "InSS training (Fig. 8–9), SIMULATED ({} profile, latency model): {} episodes",
                r.device,
                r.training.len()
            )),
            |area| {
                for (i, ((t, ys), panel)) in
                    series.iter().zip(area.split_evenly((1, 3))).enumerate()
                {
                    line_panel(&panel, t, ys, plot::color(i + 1), "episode")?;
                }
                Ok(())
            },
        )?;
        out.push(("inss-training.svg", svg));
    }
    if !r.trace.is_empty() {
        let (pw, ph) = (360, 200);
        let periods: Vec<f64> = {
            let mut v: Vec<f64> = Vec::new();
            for t in &r.trace {
                if !v.contains(&t.period_s) {
                    v.push(t.period_s);
                }
            }
            v
        };
        let planners: Vec<&str> = {
            let mut v: Vec<&str> = Vec::new();
            for t in &r.trace {
                if !v.contains(&t.planner) {
                    v.push(t.planner);
                }
            }
            v
        };
        let svg = plot::figure(
            "inss-trace.svg",
            (
                span(periods.len(), pw),
                span(planners.len(), ph).saturating_add(30),
            ),
            Some(&format!(
                "Bursty trace: % late + dropped per {} s window, SIMULATED ({} profile)",
                crate::inss::trace::WINDOW_S,
                r.device
            )),
            |area| {
                let panels = area.split_evenly((planners.len(), periods.len()));
                for t in &r.trace {
                    let col = periods.iter().position(|&p| p == t.period_s).unwrap_or(0);
                    let row = planners.iter().position(|&p| p == t.planner).unwrap_or(0);
                    let ys: Vec<f64> = t.window_violation.iter().map(|v| 100.0 * v).collect();
                    line_panel(
                        &panels[row * periods.len() + col],
                        &format!(
                            "{}, re-planned every {} s: {} in all",
                            t.planner,
                            t.period_s,
                            pct(t.violation)
                        ),
                        &ys,
                        plot::color(row + 1),
                        "20 s window",
                    )?;
                }
                Ok(())
            },
        )?;
        out.push(("inss-trace.svg", svg));
    }
    let fixed: Vec<&ThroughputRow> = r
        .fixed_load
        .iter()
        .filter(|f| !f.goodput_per_s.is_empty())
        .collect();
    if let Some(first) = fixed.first() {
        // One panel per GPU count, every planner on one axis from 0, so that
        // the gaps between planners read as they are.
        let (pw, ph) = (600, 240);
        let mut gpus: Vec<usize> = fixed.iter().map(|f| f.gpus).collect();
        gpus.dedup();
        let svg = plot::figure(
            "inss-fixed-load.svg",
            (span(gpus.len(), pw), 30 + ph),
            Some(&format!(
                "Throughput over time at load {:.2} × base (Fig. 11), SIMULATED ({} profile)",
                first.load_factor, r.device
            )),
            |area| {
                for (&g, panel) in gpus.iter().zip(area.split_evenly((1, gpus.len()))) {
                    let rows: Vec<&&ThroughputRow> = fixed.iter().filter(|f| f.gpus == g).collect();
                    let hi = rows
                        .iter()
                        .flat_map(|f| f.goodput_per_s.iter().copied())
                        .max()
                        .unwrap_or(1)
                        .max(1) as f64;
                    let n = rows
                        .iter()
                        .map(|f| f.goodput_per_s.len())
                        .max()
                        .unwrap_or(2)
                        .max(2) as f64;
                    let lines: Vec<Line> = rows
                        .iter()
                        .enumerate()
                        .map(|(k, f)| Line {
                            color: plot::color(k + 1),
                            points: f
                                .goodput_per_s
                                .iter()
                                .enumerate()
                                .map(|(i, &v)| (i as f64 + 1.0, v as f64))
                                .collect(),
                        })
                        .collect();
                    let keys: Vec<Key> = rows
                        .iter()
                        .enumerate()
                        .map(|(k, f)| Key {
                            name: format!("{} ({:.0}/s)", f.planner, f.throughput_rps),
                            color: plot::color(k + 1),
                            mark: Mark::Line,
                        })
                        .collect();
                    let (chart, side) = panel.split_horizontally(pw - 200);
                    plot::line_chart(
                        &chart,
                        &format!("{g} GPUs: requests within SLO per second"),
                        &Axes {
                            x: (1.0, n),
                            y: (0.0, hi),
                            x_ticks: &[1.0, n],
                            y_ticks: &[0.0, hi],
                            x_label: "second of the run",
                            y_label: "",
                            y_format: &|v| format!("{v:.0}"),
                        },
                        &lines,
                    )?;
                    plot::legend(&side.margin(30, 0, 0, 0), &keys, None)?;
                }
                Ok(())
            },
        )?;
        out.push(("inss-fixed-load.svg", svg));
    }
    let mut gpus: Vec<usize> = r.throughput.iter().map(|t| t.gpus).collect();
    gpus.dedup();
    if !gpus.is_empty() {
        let (pw, ph) = (300, 230);
        let svg = plot::figure(
            "inss-throughput.svg",
            (pw * 4, span(gpus.len(), ph).saturating_add(30)),
            Some(&format!(
                "Planners at their SLO-preserved maximum load, SIMULATED ({} profile; SLO = 2 × L(32, 100 %))",
                r.device
            )),
            |area| {
                let grid = area.split_evenly((gpus.len(), 4));
                for (gi, &g) in gpus.iter().enumerate() {
                    let rows: Vec<&ThroughputRow> =
                        r.throughput.iter().filter(|t| t.gpus == g).collect();
                    let bars = |f: &dyn Fn(&ThroughputRow) -> f64| -> Vec<Bar> {
                        rows.iter()
                            .enumerate()
                            .map(|(i, t)| Bar {
                                label: t.planner.to_owned(),
                                value: if t.note.is_some() { f64::NAN } else { f(t) },
                                color: plot::color(i + 1),
                            })
                            .collect()
                    };
                    let panels: [(String, &str, Vec<Bar>); 4] = [
                        (
                            format!("{g} GPUs: throughput"),
                            "requests/s within SLO",
                            bars(&|t| t.throughput_rps),
                        ),
                        (
                            format!("{g} GPUs: late + dropped"),
                            "% of requests",
                            bars(&|t| 100.0 * (t.violation + t.drop)),
                        ),
                        (
                            format!("{g} GPUs: fragments"),
                            "% of a GPU",
                            bars(&|t| f64::from(t.fragment)),
                        ),
                        (
                            format!("{g} GPUs: decision time"),
                            "ms (wall)",
                            bars(&|t| t.decision_ms),
                        ),
                    ];
                    for (i, (title, yl, b)) in panels.iter().enumerate() {
                        bar_chart(&grid[gi * 4 + i], title, yl, b, 0.0, None)?;
                    }
                }
                Ok(())
            },
        )?;
        out.push(("inss-throughput.svg", svg));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inss::*;

    #[test]
    fn setup_serves_the_papers_instances_and_baselines_find_a_load() {
        let s = setup("a100", &mut |_, _| {}).unwrap();
        assert_eq!(s.instances.len(), 10);
        assert_eq!(s.instances[8].name, "resnet50#2");
        assert_eq!(s.instances[9].name, "vgg16#2");
        // SLO rule: twice the batch-32 latency on the whole GPU, from the
        // GPU model itself.
        let r50 = &s.instances[1];
        assert_eq!(r50.slo_ms, 2.0 * s.truth.exec_ms(r50.model, 32, 108, &[]));
        assert!(s.base_rps.iter().all(|&b| b > 0.0));
        // The truth is the GPU model: cached, and co-runners change
        // nothing (its partitions do not interfere).
        let a = s.truth.exec_ms(0, 4, 27, &[]);
        let before = s.truth.measured();
        assert_eq!(s.truth.exec_ms(0, 4, 27, &[]), a);
        assert_eq!(s.truth.measured(), before);
        let opts = InssBenchOptions {
            gpus: vec![4],
            planners: vec![PlannerKind::Gpulet],
            duration_s: 3.0,
            search_steps: 1,
            seed: 1,
            fixed_load: 0.5,
            bounds: false,
            gpulet_margin: 1.0,
            engine: crate::cluster::sim::Engine::Daemon,
        };
        let row = max_load(&s, None, PlannerKind::Gpulet, 4, &opts).unwrap();
        assert!(row.load_factor > 0.0, "{row:?}");
        assert!(row.violation + row.drop <= 0.01, "{row:?}");
        // Both gpulet planners plan; a margin on their tables makes them
        // hold more of the GPUs for the same rates.
        let (inst, base) = cluster_instances(&s, 4);
        let rates: Vec<f64> = base.iter().map(|r| r * 0.3).collect();
        for kind in [PlannerKind::Gpulet, PlannerKind::GpuletMeasured] {
            let used = |m: f64| {
                plan(kind, &s.plan_inputs(m), None, &inst, &rates, 4, 1)
                    .unwrap()
                    .used_pct
            };
            let (plain, slack) = (used(1.0), used(1.5));
            assert!(
                slack > plain,
                "{kind:?}: {plain} % held, {slack} % with margin 1.5"
            );
        }
        // Throughput over time: one count per second of the run, adding up
        // to about the run's goodput (requests finishing after arrivals
        // stop are not in a window).
        assert_eq!(row.goodput_per_s.len(), 3, "{row:?}");
        let per_s: u64 = row.goodput_per_s.iter().sum();
        let whole = row.throughput_rps * opts.duration_s;
        assert!(
            per_s as f64 <= whole + 1e-6 && per_s as f64 >= 0.95 * whole,
            "{per_s} of {whole}"
        );
        assert!(row.gpus_used <= 4 && row.fragment <= 400);
        // Without agents InSS is reported as not run, not as zero.
        let r = run(
            &s,
            None,
            &[],
            &InssBenchOptions {
                planners: vec![PlannerKind::Inss],
                ..opts.clone()
            },
            &mut |_, _| {},
        )
        .unwrap();
        assert!(
            r.throughput[0]
                .note
                .as_deref()
                .unwrap()
                .contains("sluice train inss")
        );
        assert!(r.model_error.len() == 28 && r.simulated);
        // gpulet at the common load: its per-second series, and the Fig. 11
        // plot drawn from it.
        let g = run(&s, None, &[], &opts, &mut |_, _| {}).unwrap();
        assert_eq!(g.fixed_load.len(), 1);
        assert_eq!(g.fixed_load[0].goodput_per_s.len(), 3);
        let fig11: Vec<String> = plots(&g)
            .unwrap()
            .into_iter()
            .filter(|(n, _)| *n == "inss-fixed-load.svg")
            .map(|(_, svg)| svg)
            .collect();
        assert_eq!(fig11.len(), 1);
        crate::plot::check_well_formed(&fig11[0]).unwrap();
        let texts = crate::plot::texts(&fig11[0]);
        for want in ["SIMULATED", "4 GPUs", "gpulet ("] {
            assert!(
                texts.iter().any(|t| t.contains(want)),
                "{want} in {texts:?}"
            );
        }
        // The bursty trace: every period re-planned and served, arrivals
        // following the trace (the same seeds give the same arrivals
        // whatever the planner), windows covering it.
        let topts = crate::inss::trace::InssTraceOptions {
            planners: vec![PlannerKind::Gpulet, PlannerKind::Gslice],
            periods_s: vec![2.0, 1.0],
            duration_s: 4.0,
            ..Default::default()
        };
        let mut seen = 0;
        let tr = crate::inss::trace::run_trace(&s, None, &topts, &mut |d, _| seen = d).unwrap();
        assert_eq!(seen, 2 * (2 + 4));
        assert_eq!(tr.len(), 4);
        assert_eq!((tr[0].plans, tr[1].plans), (2, 4));
        assert_eq!(tr[0].arrived, tr[2].arrived);
        // The waves scale to the trace's length: 4 s here, one load per
        // second.
        let offered: f64 = s.base_rps.iter().sum::<f64>()
            * (0..4)
                .map(|j| {
                    crate::cluster::trace::wave_rps(
                        j as f64 + 0.5,
                        4.0,
                        topts.low,
                        topts.peak1,
                        topts.peak2,
                    )
                })
                .sum::<f64>();
        for t in &tr {
            assert!((t.arrived as f64 - offered).abs() < 0.1 * offered, "{t:?}");
            assert!((0.0..=1.0).contains(&t.violation));
            assert_eq!(t.window_violation.len(), 1);
            assert!(t.goodput_rps > 0.0);
        }
        // The documented JSON keys, exactly.
        let j = serde_json::to_value(&r).unwrap();
        for k in ["table", "case", "observed_ms", "predicted_ms"] {
            assert!(j["model_error"][0].get(k).is_some(), "model_error.{k}");
        }
        assert!(j["training"].is_array());
        for k in [
            "gpus",
            "planner",
            "throughput_rps",
            "violation",
            "drop",
            "fragment",
            "decision_ms",
        ] {
            assert!(j["throughput"][0].get(k).is_some(), "throughput.{k}");
        }
        // The group split needs a multiple of four GPUs.
        let e = bench_cmd(&BenchInssArgs {
            agents: None,
            agents_ni: None,
            gpus: vec![6],
            planners: vec![],
            duration: 1.0,
            search_steps: 1,
            fixed_load: 0.5,
            seed: 1,
            gpulet_margin: 1.0,
            engine: crate::cluster::sim::Engine::Daemon,
            device: "a100".into(),
            json: false,
            plot: None,
            no_bounds: false,
            trace: false,
            trace_periods: vec![20.0, 1.0],
            trace_duration: 800.0,
            trace_load: vec![0.2, 0.5, 0.7],
            show_plans: false,
        })
        .unwrap_err();
        assert!(e.contains("--gpus 6"), "{e}");
    }
}
