//! Client behaviours that `sluice demo` and `sluice bench ipc` run in
//! separate processes (`sluice __client`, `sluice __bench-client`). Each
//! prints one JSON report on stdout.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_client::{Client, Error, Priority, Span, Submit, Ticket, now_ns};

use sluice_stats::{Summary, histogram};

/// How a demo client issues requests.
#[derive(Debug, Clone, Copy)]
pub enum Pattern {
    /// One request every period (a sensor-driven real-time task), one in
    /// flight at a time: a request still running at the next tick delays
    /// that tick's request until it completes, and missed ticks are
    /// skipped. So no request ever queues behind the client's own previous
    /// one, also when the daemon's GPU model falls behind real time and
    /// reads several submissions at once.
    Periodic(Duration),
    /// Closed loop: `window` requests in flight, a new one as soon as one
    /// completes (throughput work). A window of 2 keeps the client's next
    /// request at the daemon when the previous one finishes, as DISB's
    /// closed loop has it, however late the client process wakes up.
    ClosedLoop {
        /// Requests kept in flight, at least 1.
        window: u32,
    },
}

/// The most requests a periodic client keeps in flight.
pub const PERIODIC_WINDOW: usize = 1;

/// A demo client.
#[derive(Debug, Clone)]
pub struct ClientRole {
    /// Daemon socket.
    pub socket: PathBuf,
    /// Shown in status and in the table.
    pub name: String,
    /// Model name.
    pub model: String,
    /// Priority class.
    pub priority: Priority,
    /// Request pattern.
    pub pattern: Pattern,
    /// How long to run.
    pub duration: Duration,
    /// Spin budget before parking.
    pub spin: Duration,
    /// Whether outputs are checked against the simulated device's
    /// reference ([`shm_proto::sim::expected_output`]). A real backend
    /// (CUDA) computes the model, which a client cannot check without its
    /// weights: then inputs are f32 values in [-1, 1) and outputs are
    /// counted, not checked.
    pub check: bool,
}

/// What a demo client measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientReport {
    /// Client name.
    pub name: String,
    /// Model name.
    pub model: String,
    /// `"rt"` or `"be"`.
    pub priority: String,
    /// Requests completed with status OK and the right output.
    pub ok: u64,
    /// Requests with an error status.
    pub errors: u64,
    /// OK completions whose output differed from the reference function.
    pub wrong_outputs: u64,
    /// Whether outputs were checked (false on a real backend).
    #[serde(default = "yes")]
    pub checked: bool,
    /// Submit → completion seen by the client, µs.
    pub latency_us: Summary,
    /// The daemon's own timestamps: `finished_ns - received_ns` of each OK
    /// completion (request read off the ring → device finished it), µs.
    /// Unlike `latency_us` it leaves out the client's wake-up.
    #[serde(default)]
    pub daemon_latency_us: Summary,
    /// Submit → the daemon read the request (`received_ns` less the
    /// client's submit time, one clock), µs: large when the daemon falls
    /// behind.
    #[serde(default)]
    pub ingest_lag_us: Summary,
    /// Of which: waiting in the daemon before the device started it, µs (median).
    pub queue_wait_p50_us: u64,
    /// The model's manifest total, as the daemon reports it at lookup, µs
    /// (`sluice demo` shows the measured standalone time instead).
    pub standalone_us: u64,
}

fn yes() -> bool {
    true
}

/// f32 values in [-1, 1), native byte order: a valid input tensor for a
/// real model, varied by `counter`.
fn fill_f32_input(buf: &mut [u8], seed: u64, counter: u64) {
    for (i, c) in buf.chunks_exact_mut(4).enumerate() {
        let r = sluice_rng::splitmix(seed ^ counter.rotate_left(32) ^ i as u64);
        let v = (r >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        c.copy_from_slice(&v.to_ne_bytes());
    }
}

fn fill_input(buf: &mut [u8], seed: u64, counter: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (sluice_rng::splitmix(seed ^ (i as u64 / 8)) >> ((i % 8) * 8)) as u8;
    }
    let c = counter.to_le_bytes();
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&c[..n]);
}

/// A request of a demo client in flight.
struct InFlight {
    ticket: Ticket,
    slot: usize,
    t0: u64,
}

/// What a demo client has counted so far.
struct Tally {
    lat: hdrhistogram::Histogram<u64>,
    daemon_lat: hdrhistogram::Histogram<u64>,
    lag: hdrhistogram::Histogram<u64>,
    wait: hdrhistogram::Histogram<u64>,
    ok: u64,
    errors: u64,
    wrong: u64,
}

/// Runs a demo client to the end: issues requests for `role.duration`,
/// then collects the ones still in flight.
pub fn run_client(role: &ClientRole) -> Result<ClientReport, Error> {
    let mut c = Client::connect(&role.socket, &role.name)?;
    c.set_spin(role.spin);
    let m = c.lookup_model(&role.model)?;
    let window = match role.pattern {
        Pattern::Periodic(_) => PERIODIC_WINDOW,
        Pattern::ClosedLoop { window } => window.max(1) as usize,
    };
    // One arena slot per request in flight: input, then output.
    let out_off = m.input_bytes.next_multiple_of(64);
    let slot_bytes = (out_off + m.output_bytes).next_multiple_of(4096);
    let slots = window.min((c.arena_len() / slot_bytes.max(1)).max(1) as usize);
    let seed = sluice_rng::splitmix(role.name.len() as u64 ^ u64::from(std::process::id()));
    let mut inputs = vec![vec![0u8; m.input_bytes as usize]; slots];
    let mut outbuf = vec![0u8; m.output_bytes as usize];
    let mut expect = vec![0u8; m.output_bytes as usize];
    let mut free: Vec<usize> = (0..slots).rev().collect();
    let mut inflight: std::collections::VecDeque<InFlight> = std::collections::VecDeque::new();
    let mut tally = Tally {
        lat: histogram(),
        daemon_lat: histogram(),
        lag: histogram(),
        wait: histogram(),
        ok: 0,
        errors: 0,
        wrong: 0,
    };
    let mut counter = 0u64;
    let start = Instant::now();
    let mut next = start;
    let submit = |c: &mut Client, slot: usize, counter: u64, inputs: &mut [Vec<u8>]| {
        let base = slot as u64 * slot_bytes;
        let inbuf = &mut inputs[slot];
        if role.check {
            fill_input(inbuf, seed, counter);
        } else {
            fill_f32_input(inbuf, seed, counter);
        }
        c.write_arena(base, inbuf)?;
        let t0 = now_ns();
        let ticket = c.submit(&Submit {
            model_id: m.id,
            priority: role.priority,
            deadline_ns: 0,
            input: Span {
                off: base,
                len: m.input_bytes,
            },
            output: Span {
                off: base + out_off,
                len: m.output_bytes,
            },
        })?;
        Ok::<_, Error>(InFlight { ticket, slot, t0 })
    };
    let mut finish = |c: &mut Client,
                      r: InFlight,
                      done: sluice_client::Completion,
                      t1: u64,
                      inputs: &[Vec<u8>]|
     -> Result<(), Error> {
        if done.status != sluice_client::status::OK {
            tally.errors += 1;
            return Ok(());
        }
        tally.lat.saturating_record(t1.saturating_sub(r.t0) / 1000);
        tally
            .daemon_lat
            .saturating_record(done.finished_ns.saturating_sub(done.received_ns) / 1000);
        tally
            .lag
            .saturating_record(done.received_ns.saturating_sub(r.t0) / 1000);
        tally
            .wait
            .saturating_record(done.started_ns.saturating_sub(done.received_ns) / 1000);
        if !role.check {
            tally.ok += 1;
            return Ok(());
        }
        c.read_arena(r.slot as u64 * slot_bytes + out_off, &mut outbuf)?;
        shm_proto::sim::expected_output(m.id, &inputs[r.slot], &mut expect);
        if outbuf == expect {
            tally.ok += 1;
        } else {
            tally.wrong += 1;
        }
        Ok(())
    };
    while start.elapsed() < role.duration {
        let now = Instant::now();
        let due = match role.pattern {
            Pattern::Periodic(_) => now >= next,
            Pattern::ClosedLoop { .. } => true,
        };
        if due && let Some(slot) = free.pop() {
            counter += 1;
            inflight.push_back(submit(&mut c, slot, counter, &mut inputs)?);
            if let Pattern::Periodic(p) = role.pattern {
                next += p;
                while next <= now {
                    next += p;
                }
            }
            continue;
        }
        // Nothing to submit now: wait for the oldest request, until the
        // next period at most.
        let limit = match role.pattern {
            Pattern::Periodic(_) if due => None,
            Pattern::Periodic(_) => Some(next.saturating_duration_since(now)),
            Pattern::ClosedLoop { .. } => None,
        };
        let Some(front) = inflight.front() else {
            if let Some(d) = limit {
                std::thread::sleep(d);
            }
            continue;
        };
        match c.wait_timeout(front.ticket, limit) {
            Ok(done) => {
                let t1 = now_ns();
                let r = inflight.pop_front().expect("front exists");
                free.push(r.slot);
                finish(&mut c, r, done, t1, &inputs)?;
            }
            Err(Error::Timeout) => {}
            Err(e) => return Err(e),
        }
        // Others that completed meanwhile (completions may come out of
        // order).
        let mut i = 0;
        while i < inflight.len() {
            if let Some(done) = c.try_poll(inflight[i].ticket)? {
                let t1 = now_ns();
                let r = inflight.remove(i).expect("index in range");
                free.push(r.slot);
                finish(&mut c, r, done, t1, &inputs)?;
            } else {
                i += 1;
            }
        }
    }
    // Collect what is still in flight, so that every output is checked.
    while let Some(r) = inflight.pop_front() {
        let done = c.wait_timeout(r.ticket, Some(Duration::from_secs(60)))?;
        let t1 = now_ns();
        finish(&mut c, r, done, t1, &inputs)?;
    }
    Ok(ClientReport {
        name: role.name.clone(),
        model: role.model.clone(),
        priority: role.priority.as_str().to_owned(),
        ok: tally.ok,
        errors: tally.errors,
        wrong_outputs: tally.wrong,
        checked: role.check,
        latency_us: Summary::of(&tally.lat),
        daemon_latency_us: Summary::of(&tally.daemon_lat),
        ingest_lag_us: Summary::of(&tally.lag),
        queue_wait_p50_us: Summary::of(&tally.wait).p50,
        standalone_us: m.standalone_ns / 1000,
    })
}

/// What an IPC benchmark client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchMode {
    /// Round trips on the zero-time model, spinning for the completion.
    Spin,
    /// Round trips on the zero-time model, parking on the futex at once.
    Parked,
    /// Round trips on a 50 µs model, parking at once, device time
    /// subtracted: the cost of a round trip with the client asleep.
    ParkedDevice,
    /// Round trips over a plain Unix stream socket to an echo server.
    Uds,
    /// As many zero-time requests as possible, `inflight` outstanding.
    Throughput,
    /// Round trips on the zero-time model with a fixed 50 µs spin budget
    /// (the default before the adaptive budget).
    Spin50,
    /// Round trips on the zero-time model with the adaptive spin budget
    /// (the library's default).
    Adaptive,
    /// The hardware floor: a raw cache-line ping-pong with a server thread
    /// over the shared file at `socket`, over lines rotating as a ring's
    /// slots ([`crate::ipc_floor::FloorKind::Ring`]).
    Floor,
    /// The same over one fixed pair of lines
    /// ([`crate::ipc_floor::FloorKind::Pair`]).
    FloorPair,
}

/// An IPC benchmark client.
#[derive(Debug, Clone)]
pub struct BenchRole {
    /// Daemon socket, or the echo server's socket for `Uds`.
    pub socket: PathBuf,
    /// What to measure.
    pub mode: BenchMode,
    /// Round trips measured (after warm-up).
    pub samples: u64,
    /// Requests kept in flight (throughput).
    pub inflight: u32,
    /// How long to run (throughput).
    pub duration: Duration,
    /// CPU to pin the client to.
    pub cpu: Option<usize>,
}

/// What an IPC benchmark client measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    /// Round-trip times, ns.
    pub rtt_ns: Summary,
    /// Completions per second (throughput mode).
    pub throughput_rps: f64,
    /// Fraction of waits that actually slept on the futex.
    pub slept_fraction: f64,
    /// Model used.
    pub model: String,
    /// Whether the device time (`finished_ns - started_ns`) was subtracted.
    pub minus_device_time: bool,
    /// Median of submit → the daemon's `received_ns` stamp (client submit,
    /// the line to the daemon, its polling delay), round-trip modes.
    #[serde(default)]
    pub to_daemon_p50_ns: u64,
    /// Median of the daemon's `received_ns` → the client holding the
    /// completion (the daemon's work on the request, the line back).
    #[serde(default)]
    pub from_daemon_p50_ns: u64,
}

/// The size of one request or response on the Unix-socket baseline: the
/// same 64 bytes as a ring record.
pub const UDS_MSG: usize = 64;

/// Runs an IPC benchmark client.
pub fn run_bench(role: &BenchRole) -> Result<BenchReport, String> {
    if let Some(cpu) = role.cpu {
        sluice_service::sys::pin_current_thread(cpu).map_err(|e| e.to_string())?;
    }
    let warmup = (role.samples / 10).max(100);
    if let Some(kind) = match role.mode {
        BenchMode::Floor => Some(crate::ipc_floor::FloorKind::Ring),
        BenchMode::FloorPair => Some(crate::ipc_floor::FloorKind::Pair),
        _ => None,
    } {
        let h = crate::ipc_floor::round_trips(&role.socket, kind, warmup, role.samples)?;
        return Ok(BenchReport {
            rtt_ns: Summary::of(&h),
            throughput_rps: 0.0,
            slept_fraction: 0.0,
            model: "floor".into(),
            minus_device_time: false,
            to_daemon_p50_ns: 0,
            from_daemon_p50_ns: 0,
        });
    }
    if role.mode == BenchMode::Uds {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&role.socket)
            .map_err(|e| format!("connect {}: {e}", role.socket.display()))?;
        let mut h = histogram();
        let mut msg = [0u8; UDS_MSG];
        for i in 0..warmup + role.samples {
            msg[..8].copy_from_slice(&i.to_le_bytes());
            let t0 = now_ns();
            s.write_all(&msg).map_err(|e| e.to_string())?;
            s.read_exact(&mut msg).map_err(|e| e.to_string())?;
            let t1 = now_ns();
            if i >= warmup {
                h.saturating_record(t1 - t0);
            }
        }
        return Ok(BenchReport {
            rtt_ns: Summary::of(&h),
            throughput_rps: 0.0,
            slept_fraction: 1.0,
            model: String::new(),
            minus_device_time: false,
            to_daemon_p50_ns: 0,
            from_daemon_p50_ns: 0,
        });
    }
    let fail = |e: Error| format!("{e}");
    let mut c = Client::connect(&role.socket, "bench-ipc").map_err(fail)?;
    // A parked round trip needs the client asleep before the completion
    // comes: with the zero-time model the completion usually beats the
    // client to the futex. `ParkedDevice` therefore runs `echo_small`
    // (50 µs on the device) and subtracts the device time the daemon
    // stamped, leaving submit path + futex wake-up.
    let model = if role.mode == BenchMode::ParkedDevice {
        "echo_small"
    } else {
        "null"
    };
    let m = c.lookup_model(model).map_err(fail)?;
    let sub = Submit {
        model_id: m.id,
        priority: Priority::RealTime,
        deadline_ns: 0,
        input: Span {
            off: 0,
            len: m.input_bytes,
        },
        output: Span {
            off: m.input_bytes.next_multiple_of(64),
            len: m.output_bytes,
        },
    };
    let minus_device = role.mode == BenchMode::ParkedDevice;
    match role.mode {
        BenchMode::Spin
        | BenchMode::Parked
        | BenchMode::ParkedDevice
        | BenchMode::Spin50
        | BenchMode::Adaptive => {
            match role.mode {
                BenchMode::Spin => c.set_spin(Duration::from_secs(10)),
                BenchMode::Spin50 => c.set_spin(Duration::from_micros(50)),
                BenchMode::Adaptive => c.set_spin_mode(sluice_client::Spin::Adaptive),
                _ => c.set_spin(Duration::ZERO),
            }
            let mut h = histogram();
            let (mut to_daemon, mut from_daemon) = (histogram(), histogram());
            let mut sleeps0 = 0;
            for i in 0..warmup + role.samples {
                let t0 = now_ns();
                let t = c.submit(&sub).map_err(fail)?;
                let done = c.wait(t).map_err(fail)?;
                let t1 = now_ns();
                if i >= warmup {
                    to_daemon.saturating_record(done.received_ns.saturating_sub(t0));
                    from_daemon.saturating_record(t1.saturating_sub(done.received_ns));
                }
                if done.status != sluice_client::status::OK {
                    return Err(format!("status {}", done.status));
                }
                if i == warmup {
                    sleeps0 = c.sleeps();
                }
                if i >= warmup {
                    let device = if minus_device {
                        done.finished_ns.saturating_sub(done.started_ns)
                    } else {
                        0
                    };
                    h.saturating_record((t1 - t0).saturating_sub(device));
                }
            }
            Ok(BenchReport {
                rtt_ns: Summary::of(&h),
                throughput_rps: 0.0,
                slept_fraction: (c.sleeps() - sleeps0) as f64 / role.samples as f64,
                model: model.to_owned(),
                minus_device_time: minus_device,
                to_daemon_p50_ns: Summary::of(&to_daemon).p50,
                from_daemon_p50_ns: Summary::of(&from_daemon).p50,
            })
        }
        BenchMode::Throughput => {
            c.set_spin(Duration::from_secs(10));
            let cap = role.inflight.clamp(1, c.geometry().cq_entries) as usize;
            let mut ring: Vec<Ticket> = Vec::with_capacity(cap);
            let mut head = 0usize;
            let mut completed = 0u64;
            let start = Instant::now();
            let deadline = start + role.duration;
            while Instant::now() < deadline {
                // Top up to `cap` in flight, then take the oldest.
                while ring.len() - head < cap {
                    match c.submit(&sub) {
                        Ok(t) => ring.push(t),
                        Err(Error::RingFull | Error::TooManyInFlight) => break,
                        Err(e) => return Err(fail(e)),
                    }
                }
                let t = ring[head];
                head += 1;
                c.wait(t).map_err(fail)?;
                completed += 1;
                if head > 4096 {
                    ring.drain(..head);
                    head = 0;
                }
            }
            let secs = start.elapsed().as_secs_f64();
            Ok(BenchReport {
                rtt_ns: Summary::default(),
                throughput_rps: completed as f64 / secs,
                slept_fraction: 0.0,
                model: model.to_owned(),
                minus_device_time: false,
                to_daemon_p50_ns: 0,
                from_daemon_p50_ns: 0,
            })
        }
        BenchMode::Uds | BenchMode::Floor | BenchMode::FloorPair => {
            unreachable!("handled above")
        }
    }
}
