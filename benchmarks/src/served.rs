//! A workload run through one of the daemon's own device backends
//! ([`sluice_backend::Backend`], e.g. the CUDA server with the models'
//! real layers), in real time, the way the dispatcher drives it: each
//! request submitted at its arrival on `CLOCK_MONOTONIC`, the backend
//! polled between arrivals, completions read off its [`Finished`]
//! records. `sluice bench disb --device cuda --models DIR` and `sluice demo
//! --backend cuda` time and run the ONNX models through it.
//!
//! Requests are untyped (one input span of the model's input bytes, one
//! output span), with zero inputs: the figures are the device's, and
//! outputs are not checked here (`sluice run --device cuda` and the
//! fake-driver checks compare them with the CPU executor).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use shm_proto::{Priority, status};
use sluice_backend::{Backend, Finished, Job, VecMemory};
use sluice_gpu::{GpuError, Ns};
use sluice_model::ModelRegistry;
use sluice_sched::workload::{Arrival, ArrivalTimes, DRAIN_NS, RunResult, Workload};
use sluice_sched::{PolicyStats, Task, TaskDone, TaskFailed};

/// A zeroed arena for one request of `sizes` at a time.
fn arena(sizes: (u64, u64)) -> Arc<VecMemory> {
    VecMemory::new(usize::try_from(sizes.0 + sizes.1).unwrap_or(0))
}

/// A workload the real-time driver cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ServedError {
    /// A client names a model the registry does not have.
    #[error("client {client} names model id {model}, which the registry does not have")]
    Model {
        /// The client's index.
        client: usize,
        /// The model id.
        model: u32,
    },
    /// Pools of clients sharing one trace are the GPU model's only.
    #[error("client {client} is one instance of a pool; pooled arrivals run on the GPU model only")]
    Pool {
        /// The client's index.
        client: usize,
    },
}

/// One request of the run, while the backend has it.
struct Sent {
    task: Task,
    /// When it was submitted (`CLOCK_MONOTONIC` ns).
    submitted_ns: u64,
}

/// When a request the backend finished ended, `CLOCK_MONOTONIC` ns: the
/// backend's own stamp, unless that lies before the submission (a device
/// whose clock does not follow real time, such as the fake driver's, which
/// moves as it is polled); then when the poll saw it.
fn end_ns(f: &Finished, submitted_ns: u64, seen_ns: u64) -> u64 {
    if f.finished_ns >= submitted_ns {
        f.finished_ns
    } else {
        seen_ns
    }
}

/// Runs `workload` on `backend` in real time from now: the result's times
/// are relative to the start, like [`sluice_sched::workload::run_on`]'s.
/// A request's arrival is its intended time (a driver that falls behind
/// counts the delay in the request's latency, as a client would). After
/// the last arrival the backend gets up to
/// [`DRAIN_NS`] to finish; whatever it still holds then is cancelled and
/// counted in `unfinished`. A failed request (any status but OK and
/// `DEADLINE_MISSED`) is in `failed`, its status in the error's message.
/// The policy's statistics are not the backend trait's to give:
/// `stats` is empty (the caller reads them off its server).
pub fn run(
    backend: &mut dyn Backend,
    models: &ModelRegistry,
    workload: &Workload,
) -> Result<RunResult, ServedError> {
    let mut arenas = Vec::with_capacity(workload.clients.len());
    let mut sizes = Vec::with_capacity(workload.clients.len());
    let mut times = Vec::with_capacity(workload.clients.len());
    for (i, c) in workload.clients.iter().enumerate() {
        let m = models.get(c.model).ok_or(ServedError::Model {
            client: i,
            model: c.model,
        })?;
        if matches!(c.arrival, Arrival::Pool { .. }) {
            return Err(ServedError::Pool { client: i });
        }
        sizes.push((m.input_bytes, m.output_bytes));
        arenas.push(arena((m.input_bytes, m.output_bytes)));
        times.push(ArrivalTimes::new(i, c));
    }
    let t0 = shm_proto::now_ns();
    let mut arrivals: BinaryHeap<Reverse<(Ns, u32)>> = BinaryHeap::new();
    for (i, t) in times.iter_mut().enumerate() {
        if let Some(at) = t.next()
            && at < workload.duration_ns
        {
            arrivals.push(Reverse((at, i as u32)));
        }
    }
    let mut sent: HashMap<u64, Sent> = HashMap::new();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let mut finished: Vec<Finished> = Vec::new();
    let mut next_id = 0u64;
    let stop = workload.duration_ns.saturating_add(DRAIN_NS);
    loop {
        let now = shm_proto::now_ns();
        let rel = now.saturating_sub(t0);
        while let Some(&Reverse((at, ci))) = arrivals.peek() {
            if at > rel {
                break;
            }
            arrivals.pop();
            let c = &workload.clients[ci as usize];
            let id = next_id;
            next_id += 1;
            let task = Task {
                id,
                client: ci,
                priority: c.priority,
                model: c.model,
                arrival: at,
                deadline: None,
            };
            sent.insert(
                id,
                Sent {
                    task,
                    submitted_ns: now,
                },
            );
            backend.submit(
                Job::untyped(
                    ci,
                    id,
                    c.model,
                    c.priority,
                    sizes[ci as usize],
                    arenas[ci as usize].clone(),
                    t0 + at,
                ),
                now,
            );
            if c.arrival != Arrival::ClosedLoop
                && let Some(tn) = times[ci as usize].next()
                && tn < workload.duration_ns
            {
                arrivals.push(Reverse((tn, ci)));
            }
        }
        backend.poll(now, &mut finished);
        let seen = shm_proto::now_ns();
        for f in finished.drain(..) {
            let Some(Sent { task, submitted_ns }) = sent.remove(&f.request_id) else {
                continue;
            };
            let at = end_ns(&f, submitted_ns, seen).saturating_sub(t0);
            let c = &workload.clients[task.client as usize];
            if c.arrival == Arrival::ClosedLoop {
                // The next request when this one ends (or shortly after a
                // failure, as `run_on` does).
                let next = if f.status == status::OK {
                    at
                } else {
                    at + sluice_sched::workload::RETRY_AFTER_FAILURE_NS
                };
                if next < workload.duration_ns {
                    arrivals.push(Reverse((next, task.client)));
                }
            }
            match f.status {
                status::OK => done.push(TaskDone { task, finished: at }),
                s if s == status::DEADLINE_MISSED => {}
                s => failed.push(TaskFailed {
                    task,
                    at,
                    error: GpuError::Driver {
                        backend: "served",
                        op: "request",
                        message: format!("completed with status {s}: {}", status::describe(s)),
                    },
                }),
            }
        }
        let arriving = arrivals.peek().is_some();
        if (!arriving && sent.is_empty()) || rel > stop {
            break;
        }
        std::hint::spin_loop();
    }
    let unfinished = sent.len() as u64;
    if unfinished > 0 {
        for ci in 0..workload.clients.len() {
            backend.cancel_client(ci as u32);
        }
        // Let the backend take the cancelled work off the device.
        let give_up = shm_proto::now_ns() + DRAIN_NS;
        while backend.queued() > 0 && shm_proto::now_ns() < give_up {
            backend.poll(shm_proto::now_ns(), &mut finished);
            finished.clear();
        }
    }
    Ok(RunResult {
        done,
        failed,
        missed: Vec::new(),
        unfinished,
        stats: PolicyStats::default(),
        end_ns: shm_proto::now_ns().saturating_sub(t0),
        utilisation: 0.0,
        decision_ns: sluice_stats::histogram(),
        callback_ns: sluice_stats::histogram(),
    })
}

/// `model`'s standalone time on `backend`, ns: one request alone, one
/// untimed, then the median of `reps` (at least 1), each from its
/// submission to the backend's end of its last kernel (see [`end_ns`] for
/// a device whose clock does not follow real time). `None` if a request
/// did not complete OK within [`DRAIN_NS`] (the backend's status in the
/// error).
pub fn standalone_ns(
    backend: &mut dyn Backend,
    models: &ModelRegistry,
    model: u32,
    reps: u32,
) -> Result<Ns, String> {
    let m = models
        .get(model)
        .ok_or_else(|| format!("no model with id {model}"))?;
    let sizes = (m.input_bytes, m.output_bytes);
    let memory = arena(sizes);
    let mut samples = Vec::new();
    let mut finished = Vec::new();
    for rep in 0..=reps.max(1) {
        let now = shm_proto::now_ns();
        backend.submit(
            Job::untyped(
                0,
                u64::from(rep),
                model,
                Priority::RealTime,
                sizes,
                memory.clone(),
                now,
            ),
            now,
        );
        let give_up = now + DRAIN_NS;
        let (f, seen) = loop {
            backend.poll(shm_proto::now_ns(), &mut finished);
            if let Some(f) = finished.pop() {
                break (f, shm_proto::now_ns());
            }
            if shm_proto::now_ns() > give_up {
                backend.cancel_client(0);
                return Err(format!(
                    "`{}` did not finish alone within {} s",
                    m.name(),
                    DRAIN_NS / 1_000_000_000
                ));
            }
            std::hint::spin_loop();
        };
        if f.status != status::OK {
            return Err(format!(
                "`{}` alone completed with status {}: {}",
                m.name(),
                f.status,
                status::describe(f.status)
            ));
        }
        if rep > 0 {
            samples.push(end_ns(&f, now, seen).saturating_sub(now).max(1));
        }
    }
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sched::workload::ClientSpec;

    /// A backend that finishes each job `service_ns` after it could start
    /// (one at a time, in submission order), on the real clock.
    struct Serial {
        service_ns: u64,
        queue: std::collections::VecDeque<(Job, u64)>,
        busy_until: u64,
        fail_every: u64,
    }

    impl Backend for Serial {
        fn name(&self) -> &str {
            "serial"
        }
        fn submit(&mut self, job: Job, now_ns: u64) {
            self.queue.push_back((job, now_ns));
        }
        fn poll(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
            while let Some((job, at)) = self.queue.front() {
                let start = self.busy_until.max(*at);
                let end = start + self.service_ns;
                if end > now_ns {
                    break;
                }
                self.busy_until = end;
                let failing = self.fail_every > 0 && job.request_id % self.fail_every == 0;
                done.push(Finished {
                    client: job.client,
                    request_id: job.request_id,
                    status: if failing {
                        status::DEVICE_ERROR
                    } else {
                        status::OK
                    },
                    output_len: job.output_len,
                    received_ns: job.received_ns,
                    started_ns: start,
                    finished_ns: end,
                });
                self.queue.pop_front();
            }
        }
        fn next_event_ns(&self) -> Option<u64> {
            None
        }
        fn cancel_client(&mut self, client: u32) -> usize {
            let before = self.queue.len();
            self.queue.retain(|(j, _)| j.client != client);
            before - self.queue.len()
        }
        fn queued(&self) -> usize {
            self.queue.len()
        }
    }

    fn serial(service_ns: u64, fail_every: u64) -> Serial {
        Serial {
            service_ns,
            queue: Default::default(),
            busy_until: 0,
            fail_every,
        }
    }

    #[test]
    fn open_and_closed_loop_clients_are_served_in_real_time() {
        let models = ModelRegistry::builtin();
        let m = models.lookup("resnet152").expect("built-in").0;
        let workload = Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::RealTime,
                    model: m,
                    arrival: Arrival::Uniform {
                        period_ns: 10_000_000,
                        offset_ns: 0,
                    },
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: m,
                    arrival: Arrival::ClosedLoop,
                },
            ],
            duration_ns: 100_000_000,
        };
        let mut b = serial(1_000_000, 0);
        let r = run(&mut b, &models, &workload).expect("runs");
        let rt = r.done.iter().filter(|d| d.task.client == 0).count();
        assert_eq!(rt, 10, "one RT request per 10 ms for 100 ms");
        let be = r.done.iter().filter(|d| d.task.client == 1).count();
        // The closed loop shares the device with RT (at most 100 of 1 ms in
        // 100 ms; fewer when this machine is slow to poll).
        assert!((2..=100).contains(&be), "{be} closed-loop requests");
        assert!(r.failed.is_empty() && r.unfinished == 0);
        for d in &r.done {
            assert!(d.finished >= d.task.arrival + 1_000_000, "{d:?}");
        }
        // Each closed-loop request arrives when the one before finished.
        let mut ends: Vec<_> = r.done.iter().filter(|d| d.task.client == 1).collect();
        ends.sort_by_key(|d| d.task.arrival);
        for w in ends.windows(2) {
            assert!(w[1].task.arrival >= w[0].finished, "{:?}", w);
        }
    }

    #[test]
    fn failures_are_reported_and_the_closed_loop_goes_on() {
        let models = ModelRegistry::builtin();
        let m = models.lookup("vgg19").expect("built-in").0;
        let workload = Workload {
            clients: vec![ClientSpec {
                priority: Priority::BestEffort,
                model: m,
                arrival: Arrival::ClosedLoop,
            }],
            duration_ns: 30_000_000,
        };
        let mut b = serial(500_000, 3);
        let r = run(&mut b, &models, &workload).expect("runs");
        assert!(!r.failed.is_empty(), "every third request fails");
        assert!(r.done.len() > r.failed.len(), "{} ok", r.done.len());
        assert!(
            r.failed[0].error.to_string().contains("status 9"),
            "{}",
            r.failed[0].error
        );
    }

    #[test]
    fn the_standalone_time_is_the_backends_service_time() {
        let models = ModelRegistry::builtin();
        let m = models.lookup("vgg19").expect("built-in").0;
        let t = standalone_ns(&mut serial(2_000_000, 0), &models, m, 3).expect("times");
        // Submission to the backend's finish: the service time (the
        // backend stamps its own end, however late the poll).
        assert_eq!(t, 2_000_000);
        let e = standalone_ns(&mut serial(1_000, 1), &models, m, 3).unwrap_err();
        assert!(e.contains("status 9"), "{e}");
    }
}
