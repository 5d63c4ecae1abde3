//! The request-level simulator behind `sluice bench cluster`: many GPUs,
//! each split into partitions, serving Poisson arrivals of several models in
//! virtual time, with batch durations from `L(b, p)` tables.
//!
//! A block-level simulation (the GPU model, `sluice-gpusim`) of 64 GPUs for
//! minutes would take hours; here a batch is one event whose duration is
//! looked up, so the cost is a few heap operations per request and per
//! batch. The tables themselves come from the GPU model
//! (`sluice_gpusim::lbp`), once per model and run; this module takes them
//! as plain numbers and knows nothing of planners or devices.
//!
//! # What it simulates, exactly
//!
//! - **Arrivals.** Each model's requests arrive by a Poisson process of its
//!   own (a SplitMix64 stream seeded from the run's seed and the model's
//!   index), at a piecewise-constant rate: a rate for the whole run, or a
//!   trace of `(start s, rate)` segments. Arrivals stop at the run's
//!   duration; what is queued then is still served.
//! - **Routing.** A model's requests go to the partitions its placement
//!   lists, in proportion to their `share_rps`: [`Routing::Random`] picks
//!   one at random with those weights, so each partition sees a Poisson
//!   process at exactly its planned share (the thinning of a Poisson
//!   process); [`Routing::Wrr`] cycles through them by smooth weighted round
//!   robin (deterministic, nginx's algorithm), which spreads them more
//!   evenly than Poisson. A model with no partition has every request
//!   counted unserved.
//! - **Execution.** Each partition visits its models in plan order, in
//!   rounds. At its turn a model first drops, oldest first, every queued
//!   request that could no longer finish within its SLO even in a batch of
//!   one (`now + L(1) − arrival > SLO`; Nexus's early drop, counted as a
//!   violation), then takes the oldest `n = min(queued, planned batch)`
//!   requests as one batch, which runs `L(n)` (the slot's latency table; an
//!   empty queue is skipped and costs nothing). All `n` complete together
//!   at the batch's end. The next model's turn starts when the batch ends.
//!   [`Rounds::WorkConserving`]: a new round starts as soon as the previous
//!   one ends; a partition with nothing queued sleeps until an arrival for
//!   it. [`Rounds::Fixed`]: rounds start every duty cycle, or when the
//!   previous round ends if it ran longer (Nexus's fixed duty cycle; a
//!   request may wait for the next round even when the partition is idle).
//! - **Outcome.** A request violates its SLO when completion − arrival >
//!   SLO, when it is dropped, or when it is never served (still queued when
//!   the simulation stops, at the run's end plus twice the longest SLO plus
//!   1 s, or routed nowhere).
//!
//! Times are integer nanoseconds; the event queue is a binary heap of
//! `(time, code)`, arrivals ordered before partition events at the same
//! nanosecond, ties otherwise by index, so a run is a pure function of its
//! inputs and seed. The hot loop allocates nothing per request (queues are
//! ring buffers that grow to their high-water mark).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;
use sluice_rng::{Draws, Stream};

/// How a model's requests are split over its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// Weighted random by share: each partition sees a Poisson process at
    /// its share.
    Random,
    /// Smooth weighted round robin by share (deterministic).
    Wrr,
}

/// Which code serves a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// The daemon's own cluster backend, in virtual time
    /// ([`crate::cluster::engine`]): its queues, adaptive batch and
    /// deadline drops. [`Routing`], [`Rounds`] and [`Batching`] do not
    /// apply.
    #[default]
    Daemon,
    /// This module's request-level simulator (the planners' execution
    /// model: routing by share, rounds, planned or deadline batches).
    Sim,
}

/// When a partition's next round starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rounds {
    /// As soon as the previous round ends; idle partitions wake on arrival.
    WorkConserving,
    /// Every duty cycle (or at the previous round's end if later).
    Fixed,
}

/// One model's arrivals and objective.
#[derive(Debug, Clone, PartialEq)]
pub struct SimModel {
    /// Name, for reports.
    pub name: String,
    /// Latency objective, ms.
    pub slo_ms: f64,
    /// `(start s, rate rps)` segments, starts ascending from 0; the last
    /// rate holds to the end of the run.
    pub rate: Vec<(f64, f64)>,
}

/// One model's place in a partition's round.
#[derive(Debug, Clone, PartialEq)]
pub struct SimSlot {
    /// Index into the models.
    pub model: usize,
    /// Planned batch size (at most this many per turn).
    pub batch: u32,
    /// Routing weight, requests/s (the plan's `share_rps`).
    pub share_rps: f64,
    /// `latency_ms[n − 1]` is the time a batch of `n` takes, `n` from 1 to
    /// at least `batch` (more: larger batches [`Batching::Deadline`] may
    /// take), interference included.
    pub latency_ms: Vec<f64>,
}

/// One partition.
#[derive(Debug, Clone, PartialEq)]
pub struct SimPartition {
    /// Its GPU, for reports.
    pub gpu: usize,
    /// Share of the GPU, percent.
    pub size_pct: u32,
    /// Duty cycle, ms ([`Rounds::Fixed`] only).
    pub duty_cycle_ms: f64,
    /// Its models in round order.
    pub slots: Vec<SimSlot>,
}

/// Run parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimOptions {
    /// Arrivals stop after this many virtual seconds.
    pub duration_s: f64,
    /// Seed of every arrival stream and of random routing.
    pub seed: u64,
    /// See [`Routing`].
    pub routing: Routing,
    /// See [`Rounds`].
    pub rounds: Rounds,
    /// See [`Batching`].
    pub batching: Batching,
    /// See [`Engine`]; [`simulate`] itself is always [`Engine::Sim`],
    /// [`crate::cluster::serve`] picks by this.
    pub engine: Engine,
    /// How the arrival streams are seeded.
    pub arrivals: ArrivalSeeding,
}

/// How the arrival streams are seeded.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ArrivalSeeding {
    /// One stream per model for the whole run, from the run's `seed`.
    #[default]
    Run,
    /// A fresh stream per model for each whole second of a longer trace,
    /// from `seed` and the second's index, the run starting at `t0_s` of
    /// the trace: runs that cover the same seconds of the trace at the same
    /// rates draw the same arrivals there, whatever their length (Poisson
    /// arrivals are memoryless, so restarting at a second's start changes
    /// nothing else).
    PerSecond {
        /// The trace's seed.
        seed: u64,
        /// Where the run starts in the trace, s.
        t0_s: f64,
    },
}

/// How many queued requests a turn takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// At most the planned batch (the plan's execution model).
    Planned,
    /// When more than the planned batch is queued, as many more as the
    /// slot's latency table lists and the oldest request can still finish
    /// within its SLO with (`now + L(n) − oldest ≤ SLO`): a burst is
    /// served in one larger batch instead of waiting a round.
    Deadline,
}

/// One model's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelOutcome {
    /// Requests that arrived.
    pub arrived: u64,
    /// Requests that completed (late or not).
    pub completed: u64,
    /// Requests that violated the SLO: late, dropped or unserved.
    pub violated: u64,
    /// Of those, dropped because they could no longer make it.
    pub dropped: u64,
    /// Of those, never served.
    pub unserved: u64,
    /// Completed requests' latency, ms: median, 99th percentile, largest.
    pub latency_ms: [f64; 3],
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// Per model, in input order.
    pub models: Vec<ModelOutcome>,
    /// Batches executed.
    pub batches: u64,
    /// Events processed (arrivals and partition turns).
    pub events: u64,
    /// Virtual time of the last event, s.
    pub end_s: f64,
    /// GPU time spent executing, in whole GPUs over the arrival window:
    /// Σ partition size × busy time / duration.
    pub busy_gpus: f64,
    /// Requests each partition completed, in input order.
    pub partition_completed: Vec<u64>,
    /// Requests completed within their SLO in each whole second of the
    /// arrival window (`duration_s`, a last partial second included), by
    /// completion time, all models together: goodput over time.
    pub goodput_per_s: Vec<u64>,
}

impl ModelOutcome {
    /// Violations over arrivals (0 without arrivals).
    pub fn violation_rate(&self) -> f64 {
        rate(self.violated, self.arrived)
    }
}

impl SimResult {
    /// Requests over all models.
    pub fn arrived(&self) -> u64 {
        self.models.iter().map(|m| m.arrived).sum()
    }

    /// Violations over all models.
    pub fn violated(&self) -> u64 {
        self.models.iter().map(|m| m.violated).sum()
    }

    /// Violations over arrivals (0 without arrivals).
    pub fn violation_rate(&self) -> f64 {
        rate(self.violated(), self.arrived())
    }
}

/// `violated / arrived`, 0 without arrivals.
fn rate(violated: u64, arrived: u64) -> f64 {
    if arrived == 0 {
        0.0
    } else {
        violated as f64 / arrived as f64
    }
}

/// Why a run cannot start (or, on the daemon's engine, went wrong).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The daemon's cluster backend refused the run or failed a request
    /// ([`crate::cluster::engine`]).
    #[error("the daemon's cluster backend: {0}")]
    Engine(String),
    /// A duration that is not positive and finite.
    #[error("duration {0} s is not a positive number of seconds; give e.g. --duration 60")]
    Duration(f64),
    /// A bad rate segment.
    #[error(
        "model {model:?}: rate segment {index} ({start_s} s, {rate_rps} rps) is invalid: starts must rise from 0 and rates be finite and ≥ 0"
    )]
    Rate {
        /// Model.
        model: String,
        /// Segment index.
        index: usize,
        /// Its start.
        start_s: f64,
        /// Its rate.
        rate_rps: f64,
    },
    /// A slot naming no model, or with a latency table of the wrong length.
    #[error(
        "partition {partition} slot {slot}: model index {model} of {models}, batch {batch} with {latencies} latencies (need one per batch size 1..=batch, each positive)"
    )]
    Slot {
        /// Partition index.
        partition: usize,
        /// Slot index.
        slot: usize,
        /// Its model index.
        model: usize,
        /// Models given.
        models: usize,
        /// Its batch.
        batch: u32,
        /// Latencies given.
        latencies: usize,
    },
}

pub(crate) fn ns(ms: f64) -> u64 {
    (ms * 1e6).round().max(0.0) as u64
}

/// One model's Poisson arrivals (the engines share them: one seed, one
/// stream of arrivals).
pub(crate) struct Arrivals {
    rng: Stream,
    /// Segments in seconds, rate in rps.
    rate: Vec<(f64, f64)>,
    seg: usize,
    /// Time of the pending arrival, s.
    t: f64,
    index: usize,
    /// [`ArrivalSeeding::PerSecond`]: its seed, its start, and the next
    /// whole second of the trace (relative to the run), where the stream
    /// restarts.
    per_second: Option<(u64, f64, f64)>,
}

/// The stream of model `index` in second `second` of a trace seeded `seed`.
fn second_stream(seed: u64, index: usize, second: u64) -> Stream {
    Stream::new(sluice_rng::splitmix(
        seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (index as u64 + 1).wrapping_mul(0xd134_2543_de82_ef95)
            ^ second.wrapping_mul(0xbf58_476d_1ce4_e5b9),
    ))
}

impl Arrivals {
    /// Model `index`'s arrivals at `rate` under the run's `seed` and
    /// `seeding`.
    pub(crate) fn new(
        seed: u64,
        index: usize,
        rate: &[(f64, f64)],
        seeding: ArrivalSeeding,
    ) -> Self {
        let (rng, per_second) = match seeding {
            ArrivalSeeding::Run => (
                Stream::new(seed ^ (index as u64 + 1).wrapping_mul(0xd134_2543_de82_ef95)),
                None,
            ),
            ArrivalSeeding::PerSecond { seed, t0_s } => {
                let first = t0_s.max(0.0).floor();
                (
                    second_stream(seed, index, first as u64),
                    Some((seed, t0_s, first + 1.0 - t0_s)),
                )
            }
        };
        Self {
            rng,
            rate: rate.to_vec(),
            seg: 0,
            t: 0.0,
            index,
            per_second,
        }
    }

    /// The first arrival after `self.t`, or None past `end`.
    pub(crate) fn advance(&mut self, end: f64) -> Option<f64> {
        loop {
            let (_, r) = self.rate[self.seg];
            let seg_end = self.rate.get(self.seg + 1).map_or(end, |s| s.0).min(end);
            let tick = self.per_second.map_or(f64::INFINITY, |(_, _, t)| t);
            let bound = seg_end.min(tick);
            if r > 0.0 {
                let gap = -self.rng.unit_nonzero().ln() / r;
                if self.t + gap < bound {
                    self.t += gap;
                    return Some(self.t);
                }
            }
            // Memoryless: restart the gap at a second's start (a fresh
            // stream) or at the segment's end.
            if let Some((seed, t0, t)) = self.per_second
                && t < seg_end
            {
                self.t = t;
                let second = (t0 + t).round().max(0.0) as u64;
                self.rng = second_stream(seed, self.index, second);
                self.per_second = Some((seed, t0, t + 1.0));
                continue;
            }
            if seg_end >= end || self.seg + 1 >= self.rate.len() {
                return None;
            }
            self.t = seg_end;
            self.seg += 1;
        }
    }
}

struct Slot {
    model: usize,
    batch: usize,
    /// `lat[n]`: batch of n, ns (`lat[0]` unused).
    lat: Vec<u64>,
    queue: VecDeque<u64>,
}

struct Part {
    slots: std::ops::Range<usize>,
    size: f64,
    duty: u64,
    /// Next slot to visit (offset in `slots`).
    pos: usize,
    busy: bool,
    round_start: u64,
    busy_ns: u64,
    completed: u64,
}

struct Route {
    /// Slot indices and cumulative normalised weights (random) or weights
    /// (wrr).
    slots: Vec<usize>,
    cum: Vec<f64>,
    weight: Vec<f64>,
    current: Vec<f64>,
    total: f64,
}

struct ModelState {
    slo: u64,
    out: ModelOutcome,
    hist: hdrhistogram::Histogram<u64>,
    /// Requests completed within the SLO in each whole second of the
    /// arrival window, by completion time.
    good: Vec<u64>,
}

/// Runs one simulation.
pub fn simulate(
    models: &[SimModel],
    parts: &[SimPartition],
    opts: &SimOptions,
) -> Result<SimResult, SimError> {
    validate(models, parts, opts)?;
    simulate_checked(models, parts, opts)
}

/// The checks [`simulate`] makes of its inputs (the daemon's engine,
/// [`crate::cluster::engine`], makes them too).
pub(crate) fn validate(
    models: &[SimModel],
    parts: &[SimPartition],
    opts: &SimOptions,
) -> Result<(), SimError> {
    if !(opts.duration_s.is_finite() && opts.duration_s > 0.0) {
        return Err(SimError::Duration(opts.duration_s));
    }
    for m in models {
        for (i, &(s, r)) in m.rate.iter().enumerate() {
            let prev = if i == 0 { None } else { Some(m.rate[i - 1].0) };
            let ok_start = match prev {
                None => s == 0.0,
                Some(p) => s.is_finite() && s > p,
            };
            if !(ok_start && r.is_finite() && r >= 0.0) {
                return Err(SimError::Rate {
                    model: m.name.clone(),
                    index: i,
                    start_s: s,
                    rate_rps: r,
                });
            }
        }
    }
    let nm = models.len();
    for (pi, p) in parts.iter().enumerate() {
        for (si, s) in p.slots.iter().enumerate() {
            let bad = s.model >= nm
                || s.batch == 0
                || s.latency_ms.len() < s.batch as usize
                || s.latency_ms.iter().any(|&l| !(l.is_finite() && l > 0.0));
            if bad {
                return Err(SimError::Slot {
                    partition: pi,
                    slot: si,
                    model: s.model,
                    models: nm,
                    batch: s.batch,
                    latencies: s.latency_ms.len(),
                });
            }
        }
    }
    Ok(())
}

fn simulate_checked(
    models: &[SimModel],
    parts: &[SimPartition],
    opts: &SimOptions,
) -> Result<SimResult, SimError> {
    let nm = models.len();
    let mut slots: Vec<Slot> = Vec::new();
    let mut ps: Vec<Part> = Vec::with_capacity(parts.len());
    let mut routes: Vec<Route> = (0..nm)
        .map(|_| Route {
            slots: Vec::new(),
            cum: Vec::new(),
            weight: Vec::new(),
            current: Vec::new(),
            total: 0.0,
        })
        .collect();
    for p in parts {
        let start = slots.len();
        for s in &p.slots {
            let mut lat = vec![0];
            lat.extend(s.latency_ms.iter().map(|&l| ns(l).max(1)));
            let w = if s.share_rps.is_finite() {
                s.share_rps.max(0.0)
            } else {
                0.0
            };
            if w > 0.0 {
                let r = &mut routes[s.model];
                r.slots.push(slots.len());
                r.weight.push(w);
                r.current.push(0.0);
                r.total += w;
            }
            slots.push(Slot {
                model: s.model,
                batch: s.batch as usize,
                lat,
                queue: VecDeque::with_capacity(2 * s.batch as usize),
            });
        }
        ps.push(Part {
            slots: start..slots.len(),
            size: f64::from(p.size_pct) / 100.0,
            duty: ns(p.duty_cycle_ms).max(1),
            pos: 0,
            busy: false,
            round_start: 0,
            busy_ns: 0,
            completed: 0,
        });
    }
    let slot_part: Vec<usize> = ps
        .iter()
        .enumerate()
        .flat_map(|(pi, p)| p.slots.clone().map(move |_| pi))
        .collect();
    for r in &mut routes {
        let mut acc = 0.0;
        for w in &r.weight {
            acc += w / r.total;
            r.cum.push(acc);
        }
        if let Some(last) = r.cum.last_mut() {
            *last = 1.0;
        }
    }

    let end = opts.duration_s;
    // Whole seconds of the arrival window (a last partial one counts).
    let seconds = end.ceil().min(1e7) as usize;
    let max_slo = models.iter().map(|m| m.slo_ms).fold(0.0, f64::max);
    let stop_ns = ns(end * 1e3 + 2.0 * max_slo + 1e3);
    let mut st: Vec<ModelState> = models
        .iter()
        .map(|m| ModelState {
            slo: ns(m.slo_ms),
            out: ModelOutcome {
                arrived: 0,
                completed: 0,
                violated: 0,
                dropped: 0,
                unserved: 0,
                latency_ms: [0.0; 3],
            },
            hist: hdrhistogram::Histogram::new_with_bounds(1, 86_400_000_000, 3)
                .expect("valid bounds: 1 µs to a day, 3 significant figures"),
            good: vec![0; seconds],
        })
        .collect();
    let mut arr: Vec<Arrivals> = models
        .iter()
        .enumerate()
        .map(|(i, m)| Arrivals::new(opts.seed, i, &m.rate, opts.arrivals))
        .collect();
    let mut route_rng = Stream::new(opts.seed ^ 0x5851_f42d_4c95_7f2d);

    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    for (i, a) in arr.iter_mut().enumerate() {
        if a.rate.is_empty() {
            continue;
        }
        if let Some(t) = a.advance(end) {
            heap.push(Reverse((ns(t * 1e3), i as u32)));
        }
    }
    if opts.rounds == Rounds::Fixed {
        for (pi, p) in ps.iter_mut().enumerate() {
            p.busy = true;
            heap.push(Reverse((0, (nm + pi) as u32)));
        }
    }
    let mut batches = 0u64;
    let mut events = 0u64;
    let mut queued = 0u64;
    let mut pending_arrivals = heap.iter().filter(|e| (e.0.1 as usize) < nm).count();
    let mut last_t = 0u64;

    // One turn of partition `pi` at `t`: runs the next model's batch, or
    // ends the round. Returns the time of its next event, if any.
    let turn = |pi: usize,
                t: u64,
                ps: &mut [Part],
                slots: &mut [Slot],
                st: &mut [ModelState],
                queued: &mut u64,
                batches: &mut u64|
     -> Option<u64> {
        let p = &mut ps[pi];
        let n = p.slots.len();
        let fixed = opts.rounds == Rounds::Fixed;
        if fixed && p.pos == 0 {
            p.round_start = t;
        }
        let mut visited = 0;
        while visited < n {
            if fixed && p.pos >= n {
                break;
            }
            let si = p.slots.start + p.pos % n;
            p.pos = if fixed { p.pos + 1 } else { (p.pos + 1) % n };
            visited += 1;
            let s = &mut slots[si];
            let m = &mut st[s.model];
            while let Some(&a) = s.queue.front() {
                if t + s.lat[1] - a > m.slo {
                    s.queue.pop_front();
                    *queued -= 1;
                    m.out.dropped += 1;
                    m.out.violated += 1;
                } else {
                    break;
                }
            }
            let mut take = s.queue.len().min(s.batch);
            if take == 0 {
                continue;
            }
            if opts.batching == Batching::Deadline && take < s.queue.len() {
                let oldest = s.queue[0];
                let most = s.queue.len().min(s.lat.len() - 1);
                while take < most && t + s.lat[take + 1] - oldest <= m.slo {
                    take += 1;
                }
            }
            let done = t + s.lat[take];
            for _ in 0..take {
                let a = s.queue.pop_front().expect("counted above");
                let lat = done - a;
                m.out.completed += 1;
                if lat > m.slo {
                    m.out.violated += 1;
                } else if let Some(c) = m.good.get_mut((done / 1_000_000_000) as usize) {
                    *c += 1;
                }
                m.hist.saturating_record(lat / 1000);
            }
            *queued -= take as u64;
            *batches += 1;
            p.busy_ns += s.lat[take];
            p.completed += take as u64;
            return Some(done);
        }
        if fixed {
            p.pos = 0;
            Some((p.round_start + p.duty).max(t))
        } else {
            None
        }
    };

    while let Some(Reverse((t, code))) = heap.pop() {
        if t > stop_ns {
            break;
        }
        events += 1;
        last_t = t;
        let code = code as usize;
        if code < nm {
            pending_arrivals -= 1;
            let m = code;
            st[m].out.arrived += 1;
            if let Some(next) = arr[m].advance(end) {
                heap.push(Reverse((ns(next * 1e3), m as u32)));
                pending_arrivals += 1;
            }
            let r = &mut routes[m];
            let k = match r.slots.len() {
                0 => {
                    st[m].out.unserved += 1;
                    st[m].out.violated += 1;
                    continue;
                }
                1 => 0,
                len => match opts.routing {
                    Routing::Random => {
                        let u = route_rng.unit_nonzero();
                        r.cum.partition_point(|&c| c < u).min(len - 1)
                    }
                    Routing::Wrr => {
                        let mut best = 0;
                        for i in 0..len {
                            r.current[i] += r.weight[i];
                            if r.current[i] > r.current[best] {
                                best = i;
                            }
                        }
                        r.current[best] -= r.total;
                        best
                    }
                },
            };
            let si = r.slots[k];
            slots[si].queue.push_back(t);
            queued += 1;
            let pi = slot_part[si];
            if !ps[pi].busy {
                // Work-conserving and asleep: its turn is now.
                if let Some(next) = turn(
                    pi,
                    t,
                    &mut ps,
                    &mut slots,
                    &mut st,
                    &mut queued,
                    &mut batches,
                ) {
                    ps[pi].busy = true;
                    heap.push(Reverse((next, (nm + pi) as u32)));
                }
            }
        } else {
            let pi = code - nm;
            if opts.rounds == Rounds::Fixed && pending_arrivals == 0 && queued == 0 {
                continue; // nothing left to serve: let the partition stop
            }
            match turn(
                pi,
                t,
                &mut ps,
                &mut slots,
                &mut st,
                &mut queued,
                &mut batches,
            ) {
                Some(next) => heap.push(Reverse((next, code as u32))),
                None => ps[pi].busy = false,
            }
        }
    }
    for s in &slots {
        let m = &mut st[s.model].out;
        m.unserved += s.queue.len() as u64;
        m.violated += s.queue.len() as u64;
    }
    let busy_gpus =
        ps.iter().map(|p| p.size * p.busy_ns as f64).sum::<f64>() / (opts.duration_s * 1e9);
    let mut goodput_per_s = vec![0u64; seconds];
    for m in &st {
        for (g, c) in goodput_per_s.iter_mut().zip(&m.good) {
            *g += c;
        }
    }
    let models = st
        .into_iter()
        .map(|mut m| {
            // Recorded in µs; an empty histogram summarises to zeros.
            let q = sluice_stats::Summary::of(&m.hist);
            m.out.latency_ms = [q.p50, q.p99, q.max].map(|us| us as f64 / 1e3);
            m.out
        })
        .collect();
    Ok(SimResult {
        models,
        batches,
        events,
        end_s: last_t as f64 / 1e9,
        busy_gpus,
        partition_completed: ps.iter().map(|p| p.completed).collect(),
        goodput_per_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(rate: f64, slo_ms: f64) -> SimModel {
        SimModel {
            name: "m".into(),
            slo_ms,
            rate: vec![(0.0, rate)],
        }
    }

    /// One partition serving model 0 at `batch`, a batch of n taking
    /// `lat(n)` ms.
    fn part(batch: u32, share: f64, lat: impl Fn(u32) -> f64) -> SimPartition {
        SimPartition {
            gpu: 0,
            size_pct: 100,
            duty_cycle_ms: 10.0,
            slots: vec![SimSlot {
                model: 0,
                batch,
                share_rps: share,
                latency_ms: (1..=batch).map(lat).collect(),
            }],
        }
    }

    /// Per-second seeding: a 3 s run and three 1 s runs over the same
    /// seconds of the trace draw the same arrivals; another trace seed
    /// draws others.
    #[test]
    fn per_second_arrivals_do_not_depend_on_the_run_length() {
        let rate = |n: usize| -> Vec<(f64, f64)> { (0..n).map(|i| (i as f64, 200.0)).collect() };
        let draw = |t0: f64, len: f64, seed: u64| -> Vec<f64> {
            let mut a = Arrivals::new(
                99,
                2,
                &rate(len as usize),
                ArrivalSeeding::PerSecond { seed, t0_s: t0 },
            );
            std::iter::from_fn(|| a.advance(len))
                .map(|t| t + t0)
                .collect()
        };
        let whole = draw(0.0, 3.0, 7);
        let parts: Vec<f64> = (0..3).flat_map(|k| draw(k as f64, 1.0, 7)).collect();
        assert!(whole.len() > 400, "{}", whole.len());
        assert_eq!(whole.len(), parts.len());
        for (a, b) in whole.iter().zip(&parts) {
            assert!((a - b).abs() < 1e-9, "{a} against {b}");
        }
        assert_ne!(draw(0.0, 3.0, 8).len(), 0);
        assert_ne!(draw(0.0, 3.0, 8), whole);
    }

    fn opts(duration_s: f64, seed: u64) -> SimOptions {
        SimOptions {
            duration_s,
            seed,
            routing: Routing::Random,
            rounds: Rounds::WorkConserving,
            batching: Batching::Planned,
            engine: Engine::Sim,
            arrivals: ArrivalSeeding::Run,
        }
    }

    /// One model served by one partition.
    fn serve(m: SimModel, p: SimPartition, o: SimOptions) -> SimResult {
        simulate(&[m], &[p], &o).unwrap()
    }

    #[test]
    fn a_light_load_is_served_alone_at_batch_one_latency() {
        // 1 rps for 2000 s, L(1) = 2 ms: a request finds the partition busy
        // with probability 1 − e^(−0.002) ≈ 0.2 %, so the median latency is
        // exactly L(1) and nothing is late (SLO 100 ms).
        let r = serve(
            model(1.0, 100.0),
            part(4, 1.0, |n| 2.0 * f64::from(n)),
            opts(2000.0, 7),
        );
        let m = &r.models[0];
        // Poisson count: mean 2000, σ ≈ 45.
        assert!((1800..=2200).contains(&m.arrived), "{}", m.arrived);
        assert_eq!(m.completed, m.arrived);
        assert_eq!(m.violated, 0);
        assert_eq!(m.latency_ms[0], 2.0);
        assert!(m.latency_ms[2] < 6.1, "max {}", m.latency_ms[2]);
        assert_eq!(r.partition_completed, vec![m.arrived]);
    }

    #[test]
    fn goodput_over_time_counts_on_time_completions_per_second() {
        // 500 rps into a partition that serves 1000 (batches of 4 taking
        // L(n) = n ms), SLO 100 ms: every request is on time. Over 3.5 s of
        // arrivals there are four windows, the last a half second; a whole
        // one holds a Poisson count of mean 500 (σ ≈ 22), the half one of
        // mean 250, and together they hold every on-time completion but
        // the few still running when arrivals stop.
        let r = serve(model(500.0, 100.0), part(4, 1.0, f64::from), opts(3.5, 3));
        let m = &r.models[0];
        assert_eq!(m.violated, 0);
        assert_eq!(r.goodput_per_s.len(), 4);
        for &g in &r.goodput_per_s[..3] {
            assert!((400..=600).contains(&g), "{:?}", r.goodput_per_s);
        }
        assert!(
            (180..=320).contains(&r.goodput_per_s[3]),
            "{:?}",
            r.goodput_per_s
        );
        let counted: u64 = r.goodput_per_s.iter().sum();
        assert!(
            counted <= m.completed && counted + 8 >= m.completed,
            "{counted} of {}",
            m.completed
        );
        // Nothing on time: every window is empty.
        let late = serve(model(10.0, 1.0), part(1, 1.0, |_| 5.0), opts(2.0, 3));
        assert_eq!(late.goodput_per_s, vec![0, 0]);
        assert_eq!(late.models[0].violated, late.models[0].arrived);
    }

    #[test]
    fn a_saturated_partition_serves_batch_over_its_latency() {
        // 100 000 rps into batches of 4 taking L(n) = n ms: the queue never
        // runs dry, every batch is full, so throughput is 4 / 4 ms = 1000
        // rps. For 1 s of arrivals the partition runs from the first arrival
        // until the last request that can still make its 50 ms SLO: 1000 to
        // 1050 completions; everything else is dropped.
        let r = serve(
            model(100_000.0, 50.0),
            part(4, 1.0, f64::from),
            opts(1.0, 3),
        );
        let m = &r.models[0];
        assert!((1000..=1052).contains(&m.completed), "{}", m.completed);
        // Full batches except the first (the first arrival finds the
        // partition idle and runs alone) and possibly the last.
        assert!(r.batches * 4 >= m.completed && r.batches * 4 <= m.completed + 6);
        assert_eq!(m.dropped, m.arrived - m.completed);
        assert_eq!(m.unserved, 0);
        // Drop rule: `now + L(1) − arrival ≤ SLO` at batch formation, so a
        // served request waits at most 49 ms and runs 4: ≤ 53 ms.
        // (the histogram keeps 3 significant figures)
        assert!(m.latency_ms[2] <= 53.1, "max {}", m.latency_ms[2]);
    }

    #[test]
    fn deadline_batching_takes_a_burst_in_one_larger_batch() {
        // Planned batch 2, tables to 8, L(n) = 1 + n ms, SLO 8 ms, 500 rps
        // (ρ = 0.75 of the planned 2 per 3 ms): a Poisson burst queues more
        // than 2, and with planned batching the rest waits round after
        // round and some miss 8 ms; deadline batching takes the burst in one
        // larger batch as long as the oldest still makes it, so fewer miss.
        let mut p = part(2, 1.0, |n| 1.0 + f64::from(n));
        p.slots[0].latency_ms = (1..=8).map(|n| 1.0 + f64::from(n)).collect();
        let planned = serve(model(500.0, 8.0), p.clone(), opts(20.0, 5));
        let o = SimOptions {
            batching: Batching::Deadline,
            ..opts(20.0, 5)
        };
        let deadline = serve(model(500.0, 8.0), p, o);
        let (a, b) = (&planned.models[0], &deadline.models[0]);
        assert_eq!(a.arrived, b.arrived, "same seed, same arrivals");
        assert!(
            a.completed <= 2 * planned.batches,
            "planned never exceeds 2"
        );
        // The same requests in fewer batches: some took more than 2.
        assert!(deadline.batches < planned.batches);
        assert!(a.violated > 0, "the planned batch misses some");
        assert!(
            2 * b.violated < a.violated,
            "{} vs {}",
            b.violated,
            a.violated
        );
    }

    #[test]
    fn batches_longer_than_the_slo_are_all_late() {
        // L(1) = 2 ms, L(2) = 5 ms, SLO 3 ms, 10 000 rps: the queue holds two
        // or more nearly always, every batch is a pair finishing ≥ 5 ms after
        // its requests arrived, so (almost) every request violates: late or
        // dropped.
        let r = serve(
            model(10_000.0, 3.0),
            part(2, 1.0, |n| if n == 1 { 2.0 } else { 5.0 }),
            opts(0.5, 1),
        );
        let m = &r.models[0];
        assert!(m.completed > 0);
        assert!(m.violated as f64 >= 0.999 * m.arrived as f64, "{m:?}");
        assert!(m.violated > m.dropped, "some were late rather than dropped");
        assert!(r.violation_rate() > 0.99);
    }

    #[test]
    fn a_slo_below_one_execution_drops_everything() {
        let r = serve(
            model(50.0, 1.0),
            part(8, 1.0, |n| 2.0 * f64::from(n)),
            opts(10.0, 1),
        );
        let m = &r.models[0];
        assert_eq!(m.completed, 0);
        assert_eq!(m.dropped, m.arrived);
        assert_eq!(r.violation_rate(), 1.0);
    }

    #[test]
    fn a_model_with_no_partition_is_unserved() {
        let r = simulate(&[model(100.0, 10.0)], &[], &opts(1.0, 1)).unwrap();
        assert!(r.models[0].arrived > 0);
        assert_eq!(r.models[0].unserved, r.models[0].arrived);
        assert_eq!(r.violation_rate(), 1.0);
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_another() {
        let ms = [model(300.0, 20.0), model(150.0, 50.0)];
        let mut p = part(8, 300.0, |n| 1.0 + 0.5 * f64::from(n));
        p.slots.push(SimSlot {
            model: 1,
            batch: 4,
            share_rps: 150.0,
            latency_ms: vec![2.0, 3.0, 4.0, 5.0],
        });
        let a = simulate(&ms, std::slice::from_ref(&p), &opts(30.0, 11)).unwrap();
        let b = simulate(&ms, std::slice::from_ref(&p), &opts(30.0, 11)).unwrap();
        let c = simulate(&ms, std::slice::from_ref(&p), &opts(30.0, 12)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.models[0].arrived, c.models[0].arrived);
    }

    #[test]
    fn requests_follow_the_planned_shares() {
        // Shares 300 : 100 of 400 rps over two partitions: 3/4 and 1/4.
        let two = [
            part(4, 300.0, |_| 0.01),
            SimPartition {
                gpu: 1,
                ..part(4, 100.0, |_| 0.01)
            },
        ];
        let mut o = opts(100.0, 5);
        let r = simulate(&[model(400.0, 100.0)], &two, &o).unwrap();
        let [a, b] = [r.partition_completed[0], r.partition_completed[1]];
        let share = a as f64 / (a + b) as f64;
        // 40 000 requests: σ of the share ≈ 0.002.
        assert!((share - 0.75).abs() < 0.01, "random: {share}");
        o.routing = Routing::Wrr;
        let r = simulate(&[model(400.0, 100.0)], &two, &o).unwrap();
        let [a, b] = [r.partition_completed[0], r.partition_completed[1]];
        // Smooth WRR: exactly 3 of every 4 (the last cycle may be cut).
        assert!(a.abs_diff(3 * b) <= 3, "wrr: {a} vs {b}");
    }

    #[test]
    fn fixed_rounds_make_a_request_wait_for_the_next_round() {
        // Duty cycle 10 ms, L(1) = 1 ms, 2 rps: a request arrives at a
        // uniform point of a round and starts at the next round's start, so
        // its latency is uniform on [1, 11] ms: median 6 ms (at most 12 ms
        // when, rarely, two share a round and run as a batch of 2).
        let mut o = opts(500.0, 2);
        o.rounds = Rounds::Fixed;
        let r = serve(model(2.0, 100.0), part(4, 2.0, f64::from), o);
        let m = &r.models[0];
        assert_eq!(m.completed, m.arrived);
        assert!((m.latency_ms[0] - 6.0).abs() < 0.6, "{m:?}");
        assert!(m.latency_ms[2] <= 12.0 + 1e-2, "{m:?}");
    }

    #[test]
    fn a_rate_trace_changes_the_rate_at_its_segments() {
        // 0 rps for 10 s, then 100 rps for 10 s: about 1000 arrivals.
        let m = SimModel {
            name: "t".into(),
            slo_ms: 100.0,
            rate: vec![(0.0, 0.0), (10.0, 100.0)],
        };
        let r = serve(m, part(4, 1.0, |_| 0.1), opts(20.0, 4));
        assert!((880..=1120).contains(&r.models[0].arrived), "{r:?}");
    }

    #[test]
    fn bad_inputs_name_the_value() {
        let e = simulate(&[model(1.0, 1.0)], &[], &opts(0.0, 1)).unwrap_err();
        assert!(e.to_string().contains("duration 0 s"), "{e}");
        let m = SimModel {
            name: "x".into(),
            slo_ms: 1.0,
            rate: vec![(0.0, -1.0)],
        };
        let e = simulate(&[m], &[], &opts(1.0, 1)).unwrap_err();
        assert!(
            e.to_string().contains("\"x\"") && e.to_string().contains("-1"),
            "{e}"
        );
        let mut p = part(4, 1.0, f64::from);
        p.slots[0].latency_ms.pop();
        let e = simulate(&[model(1.0, 1.0)], &[p], &opts(1.0, 1)).unwrap_err();
        assert!(e.to_string().contains("batch 4 with 3 latencies"), "{e}");
    }
}
