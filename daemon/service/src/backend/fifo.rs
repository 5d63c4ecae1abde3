//! The embedded simulated GPU (one job at a time, real time).
//!
//! [`FifoBackend`] behaves like one GPU stream that runs whole requests:
//!
//! - One job runs at a time and is never preempted. When the device is free
//!   it starts a real-time job, or else a best-effort job: within a class
//!   the earliest deadline first, jobs without a deadline after those with
//!   one, in submission order among equals
//!   ([`EdfQueue`](sluice_sched::queue::EdfQueue)).
//! - A job runs for its model's total kernel time times `time_scale`.
//! - Time is virtual and exact: a job that starts at `S` finishes at
//!   `S + duration`, and the next one starts at `max(previous finish, its
//!   received_ns)`. Start decisions at time `t` consider only jobs received
//!   by `t`, so the schedule does not depend on how late `poll` is called.
//!   Decisions are made in [`Backend::poll`], never in [`Backend::submit`], so
//!   a real-time job submitted right after a best-effort one with the same
//!   receive time still goes first.
//! - When a job finishes (in `poll`, once its finish time is not after
//!   `now`), the device computes the reference function of
//!   [`shm_proto::sim`] over the model id and the input span, reading the
//!   input and writing the model's `output_bytes` through
//!   [`Job::memory`](sluice_backend::Job) in 64 KiB chunks on one reusable buffer.
//!   A typed request (`Job::tensors`) gets the typed reference instead:
//!   every input read once, in order, and each output span filled whole
//!   from its own seed (`shm_proto::sim`, "Typed requests").
//! - A job whose deadline has passed when it would start (`start >
//!   deadline_ns`) is not run: it completes at once with `DEADLINE_MISSED`.
//! - [`Backend::cancel_client`] drops a client's queued jobs and its running
//!   one. A dropped running job frees the device at the latest time seen by
//!   `submit`/`poll`, clamped to the job's `[start, finish]`.
//!
//! It is `device.scheduler = "fifo"` (the default of `device.backend =
//! "sim"`); the schedulers that preempt and pad kernels run on the GPU
//! model instead ([`super::modeled`]). This one stays simple on purpose.

use std::sync::Arc;

use shm_proto::Priority;
use shm_proto::sim::{Digest, fill_output, typed_digest, typed_finish};
use shm_proto::status;

use sluice_backend::{Backend, Finished, Job, Span, TensorSpans};
use sluice_model::ModelRegistry;
use sluice_sched::queue::EdfQueue;

/// Bytes moved through [`Job::memory`] per read or write.
pub(crate) const CHUNK: usize = 64 * 1024;

/// [`FifoBackend::new`] was given a bad argument.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    /// The time scale is not a finite number greater than zero.
    #[error(
        "time_scale {0} is not a finite number > 0; use 1.0 for real time, \
         0.5 to run models twice as fast, 2.0 for half speed"
    )]
    BadTimeScale(f64),
}

/// The job on the device and its (virtual) start and finish times.
#[derive(Debug)]
struct Running {
    job: Job,
    started_ns: u64,
    finished_ns: u64,
}

/// The simulated GPU; see the module docs for its semantics.
pub struct FifoBackend {
    name: String,
    models: Arc<ModelRegistry>,
    time_scale: f64,
    /// Run time of each model at `time_scale`, indexed by model id.
    durations_ns: Vec<u64>,
    /// Queued real-time jobs, earliest deadline first.
    rt: EdfQueue<Job>,
    /// Queued best-effort jobs, earliest deadline first.
    be: EdfQueue<Job>,
    running: Option<Running>,
    /// When the device last became free (a finish, a skipped job's start, or
    /// a cancel). No job starts before this.
    free_ns: u64,
    /// Latest `now_ns` passed to `submit` or `poll`.
    now_ns: u64,
    /// Staging buffer for input and output chunks, allocated once.
    buf: Box<[u8]>,
    /// Jobs finished by the last `poll`, kept until
    /// [`Backend::release_finished`] (or the next `poll`) drops their
    /// region references, after the dispatcher has posted the completions.
    finished_jobs: Vec<Job>,
}

impl std::fmt::Debug for FifoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FifoBackend")
            .field("time_scale", &self.time_scale)
            .field("running", &self.running)
            .field("rt_queued", &self.rt.len())
            .field("be_queued", &self.be.len())
            .field("free_ns", &self.free_ns)
            .finish_non_exhaustive()
    }
}

impl FifoBackend {
    /// A simulated GPU running `models`, every model time multiplied by
    /// `time_scale` (1.0 = real time).
    pub fn new(models: Arc<ModelRegistry>, time_scale: f64) -> Result<Self, OpError> {
        if !(time_scale.is_finite() && time_scale > 0.0) {
            return Err(OpError::BadTimeScale(time_scale));
        }
        let durations_ns = models
            .iter()
            // `as` saturates; the product is finite and >= 0.
            .map(|(_, m)| (m.total_time_ns as f64 * time_scale).round() as u64)
            .collect();
        let name = if time_scale == 1.0 {
            "sim (real time)".to_owned()
        } else {
            format!("sim (time x{time_scale})")
        };
        Ok(Self {
            name,
            models,
            time_scale,
            durations_ns,
            rt: EdfQueue::new(),
            be: EdfQueue::new(),
            running: None,
            free_ns: 0,
            now_ns: 0,
            buf: vec![0u8; CHUNK].into_boxed_slice(),
            finished_jobs: Vec::new(),
        })
    }

    /// The factor applied to every model time.
    pub fn time_scale(&self) -> f64 {
        self.time_scale
    }

    /// When the next queued job can start (device free and job received),
    /// or `None` with an empty queue.
    fn next_start_ns(&self) -> Option<u64> {
        let earliest = self
            .rt
            .iter()
            .chain(self.be.iter())
            .map(|j| j.received_ns)
            .min()?;
        Some(earliest.max(self.free_ns))
    }

    /// Removes the job to start at `t`: the first real-time job received by
    /// `t` (in deadline order), else the first such best-effort job.
    fn take_next(&mut self, t: u64) -> Option<Job> {
        for queue in [&mut self.rt, &mut self.be] {
            // Usually the first: jobs arrive in time order, except ones a
            // wrapper (`FairShare`) held back and hands on later.
            if queue.peek().is_some_and(|j| j.received_ns <= t) {
                return queue.pop();
            }
            let first = queue.iter().position(|j| j.received_ns <= t);
            if let Some(i) = first {
                return queue.remove(i);
            }
        }
        None
    }

    /// Starts `job` at `t`, or completes it at once when it cannot run.
    fn start(&mut self, job: Job, t: u64, done: &mut Vec<Finished>) {
        let skipped = |status| Finished {
            client: job.client,
            request_id: job.request_id,
            status,
            output_len: 0,
            received_ns: job.received_ns,
            started_ns: t,
            finished_ns: t,
        };
        if job.deadline_ns != 0 && t > job.deadline_ns {
            done.push(skipped(status::DEADLINE_MISSED));
            self.free_ns = t;
            return;
        }
        let Some(&duration) = usize::try_from(job.model)
            .ok()
            .and_then(|i| self.durations_ns.get(i))
        else {
            tracing::warn!(?job, "sim: job names no model in the registry");
            done.push(skipped(status::DEVICE_ERROR));
            self.free_ns = t;
            return;
        };
        self.running = Some(Running {
            job,
            started_ns: t,
            finished_ns: t.saturating_add(duration),
        });
    }
}

/// `job`'s deadline as [`EdfQueue`] takes it (`None`: the request has none).
pub(crate) fn deadline_of(job: &Job) -> Option<u64> {
    (job.deadline_ns != 0).then_some(job.deadline_ns)
}

/// Computes the reference output of `job` into its output span (every
/// output span of a typed job). Returns the status and the number of bytes
/// written.
pub(crate) fn compute_output(models: &ModelRegistry, buf: &mut [u8], job: &Job) -> (u32, u64) {
    let Some(model) = models.get(job.model) else {
        tracing::warn!(?job, "sim: job names no model in the registry");
        return (status::DEVICE_ERROR, 0);
    };
    if let Some(t) = &job.tensors {
        return compute_typed(buf, job, t);
    }
    // A model known by its manifest writes its `output_bytes` at the start
    // of the span; a typed model of one tensor each way (validated to exact
    // sizes) fills the span.
    let out_len = if model.io.is_untyped() {
        model.output_bytes
    } else {
        job.output_len
    };
    if out_len > job.output_len {
        tracing::warn!(
            ?job,
            out_len,
            "sim: output span smaller than the model's output"
        );
        return (status::DEVICE_ERROR, 0);
    }
    let mut digest = Digest::new(job.model);
    let input = Span {
        off: job.input_off,
        len: job.input_len,
    };
    if !read_into(buf, job, input, &mut digest) {
        return (status::DEVICE_ERROR, 0);
    }
    let output = Span {
        off: job.output_off,
        len: out_len,
    };
    if !fill_span(buf, job, output, digest.finish()) {
        return (status::DEVICE_ERROR, 0);
    }
    (status::OK, out_len)
}

/// The typed reference: one digest over the batch and every input, then
/// each output from its own seed.
fn compute_typed(buf: &mut [u8], job: &Job, t: &TensorSpans) -> (u32, u64) {
    let mut digest = typed_digest(job.model, t.batch);
    for &input in &t.inputs {
        if !read_into(buf, job, input, &mut digest) {
            return (status::DEVICE_ERROR, 0);
        }
    }
    let mut written = 0u64;
    for (k, &output) in (0u32..).zip(&t.outputs) {
        if !fill_span(buf, job, output, typed_finish(digest, k)) {
            return (status::DEVICE_ERROR, 0);
        }
        written = written.saturating_add(output.len);
    }
    (status::OK, written)
}

/// Feeds the bytes of `span` to `digest`, in chunks of `buf`.
fn read_into(buf: &mut [u8], job: &Job, span: Span, digest: &mut Digest) -> bool {
    if buf.is_empty() {
        return span.len == 0;
    }
    let mut done = 0u64;
    while done < span.len {
        let n = (span.len - done).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        let ok = span
            .off
            .checked_add(done)
            .is_some_and(|off| job.memory.read(off, chunk));
        if !ok {
            tracing::warn!(?job, offset = done, "sim: input read outside the arena");
            return false;
        }
        digest.update(chunk);
        done += n as u64;
    }
    true
}

/// Writes the counter-mode bytes of `seed` over `span`, in chunks of `buf`.
fn fill_span(buf: &mut [u8], job: &Job, span: Span, seed: u64) -> bool {
    if buf.is_empty() {
        return span.len == 0;
    }
    let mut done = 0u64;
    while done < span.len {
        let n = (span.len - done).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        fill_output(seed, done, chunk);
        let ok = span
            .off
            .checked_add(done)
            .is_some_and(|off| job.memory.write(off, chunk));
        if !ok {
            tracing::warn!(?job, offset = done, "sim: output write outside the arena");
            return false;
        }
        done += n as u64;
    }
    true
}

impl Backend for FifoBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&mut self, job: Job, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        match job.priority {
            Priority::RealTime => self.rt.push(deadline_of(&job), job),
            Priority::BestEffort => self.be.push(deadline_of(&job), job),
        }
    }

    fn poll(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
        self.now_ns = self.now_ns.max(now_ns);
        self.finished_jobs.clear();
        loop {
            if let Some(run) = self.running.take_if(|r| r.finished_ns <= now_ns) {
                let (status, output_len) = compute_output(&self.models, &mut self.buf, &run.job);
                done.push(Finished {
                    client: run.job.client,
                    request_id: run.job.request_id,
                    status,
                    output_len,
                    received_ns: run.job.received_ns,
                    started_ns: run.started_ns,
                    finished_ns: run.finished_ns,
                });
                self.free_ns = run.finished_ns;
                self.finished_jobs.push(run.job);
            }
            if self.running.is_some() {
                return;
            }
            let Some(t) = self.next_start_ns().filter(|&t| t <= now_ns) else {
                return;
            };
            let Some(job) = self.take_next(t) else {
                return;
            };
            self.start(job, t, done);
        }
    }

    /// The running job's finish time. With nothing running but jobs queued,
    /// the time the next one can start (normally already past, so the caller
    /// polls at once); `None` when idle with an empty queue.
    fn next_event_ns(&self) -> Option<u64> {
        match &self.running {
            Some(run) => Some(run.finished_ns),
            None => self.next_start_ns(),
        }
    }

    fn cancel_client(&mut self, client: u32) -> usize {
        let before = self.rt.len() + self.be.len();
        self.rt.retain(|j| j.client != client);
        self.be.retain(|j| j.client != client);
        let mut dropped = before - (self.rt.len() + self.be.len());
        if let Some(run) = self.running.take_if(|r| r.job.client == client) {
            self.free_ns = self.now_ns.clamp(run.started_ns, run.finished_ns);
            dropped += 1;
        }
        self.finished_jobs.retain(|j| j.client != client);
        dropped
    }

    fn release_finished(&mut self) {
        self.finished_jobs.clear();
    }

    fn queued(&self) -> usize {
        self.rt.len() + self.be.len() + usize::from(self.running.is_some())
    }
}

#[cfg(test)]
mod tests {
    use shm_proto::sim::expected_output;

    use super::*;
    use sluice_backend::TensorMemory;

    use sluice_backend::testmem::{BrokenMemory, VecMemory};

    const US: u64 = 1000;
    const ECHO_NS: u64 = 50 * US;

    fn registry() -> Arc<ModelRegistry> {
        Arc::new(ModelRegistry::builtin())
    }

    fn id(name: &str) -> u32 {
        ModelRegistry::builtin().lookup(name).unwrap().0
    }

    fn gpu() -> FifoBackend {
        FifoBackend::new(registry(), 1.0).unwrap()
    }

    /// A job of `model` with input at 0 and output right after it.
    fn job(model: &str, client: u32, request_id: u64, priority: Priority, received_ns: u64) -> Job {
        let reg = ModelRegistry::builtin();
        let (model, m) = reg.lookup(model).unwrap();
        sluice_backend::testmem::job(
            client,
            request_id,
            model,
            priority,
            (m.input_bytes, m.output_bytes),
            received_ns,
        )
    }

    fn rt(client: u32, request_id: u64, received_ns: u64) -> Job {
        job(
            "echo_small",
            client,
            request_id,
            Priority::RealTime,
            received_ns,
        )
    }

    fn be(client: u32, request_id: u64, received_ns: u64) -> Job {
        job(
            "echo_small",
            client,
            request_id,
            Priority::BestEffort,
            received_ns,
        )
    }

    fn poll(gpu: &mut FifoBackend, now_ns: u64) -> Vec<Finished> {
        let mut done = Vec::new();
        gpu.poll(now_ns, &mut done);
        done
    }

    /// (request id, started, finished) of each completion.
    fn timeline(done: &[Finished]) -> Vec<(u64, u64, u64)> {
        done.iter()
            .map(|f| (f.request_id, f.started_ns, f.finished_ns))
            .collect()
    }

    #[test]
    fn rt_jumps_ahead_of_queued_be() {
        let mut gpu = gpu();
        gpu.submit(be(1, 1, 0), 0);
        gpu.submit(be(1, 2, 0), 0);
        gpu.submit(rt(2, 3, 0), 0);
        let done = poll(&mut gpu, 1_000 * US);
        assert_eq!(
            timeline(&done),
            [
                (3, 0, ECHO_NS),
                (1, ECHO_NS, 2 * ECHO_NS),
                (2, 2 * ECHO_NS, 3 * ECHO_NS)
            ]
        );
    }

    #[test]
    fn running_be_is_not_preempted_but_rt_skips_the_queue() {
        let mut gpu = gpu();
        gpu.submit(be(1, 1, 0), 0);
        gpu.submit(be(1, 2, 0), 0);
        assert!(poll(&mut gpu, 0).is_empty());
        gpu.submit(rt(2, 3, 10 * US), 10 * US);
        let done = poll(&mut gpu, 1_000 * US);
        assert_eq!(
            timeline(&done),
            [
                (1, 0, ECHO_NS),
                (3, ECHO_NS, 2 * ECHO_NS),
                (2, 2 * ECHO_NS, 3 * ECHO_NS)
            ]
        );
    }

    #[test]
    fn timestamps_chain_exactly_however_late_poll_is() {
        let jobs = || [be(1, 1, 0), be(1, 2, 10 * US), be(1, 3, 200 * US)];
        let want = [
            (1, 0, ECHO_NS),
            (2, ECHO_NS, 2 * ECHO_NS),
            (3, 200 * US, 200 * US + ECHO_NS),
        ];
        // One late poll.
        let mut late = gpu();
        for j in jobs() {
            let at = j.received_ns;
            late.submit(j, at);
        }
        assert_eq!(timeline(&poll(&mut late, u64::MAX / 2)), want);
        // Submit at each arrival, poll at each arrival and device event.
        let mut eager = gpu();
        let mut arrivals = std::collections::VecDeque::from(jobs());
        let mut done = Vec::new();
        for _ in 0..100 {
            let arrival = arrivals.front().map(|j| j.received_ns);
            let t = match (arrival, eager.next_event_ns()) {
                (None, None) => break,
                (a, e) => a.unwrap_or(u64::MAX).min(e.unwrap_or(u64::MAX)),
            };
            if arrival == Some(t) {
                eager.submit(arrivals.pop_front().unwrap(), t);
            }
            eager.poll(t, &mut done);
        }
        assert_eq!(timeline(&done), want);
        assert!(done.iter().all(|f| f.status == status::OK));
    }

    #[test]
    fn late_poll_does_not_let_a_later_rt_job_overtake() {
        let mut gpu = gpu();
        gpu.submit(be(1, 1, 0), 0);
        assert!(poll(&mut gpu, 0).is_empty());
        // Received while job 1 runs / after it finished, but polled late.
        gpu.submit(be(1, 2, 40 * US), 40 * US);
        gpu.submit(rt(2, 3, 60 * US), 60 * US);
        let done = poll(&mut gpu, 1_000 * US);
        assert_eq!(
            timeline(&done),
            [
                (1, 0, ECHO_NS),
                (2, ECHO_NS, 2 * ECHO_NS),
                (3, 2 * ECHO_NS, 3 * ECHO_NS)
            ]
        );
    }

    fn check_output(model: &str) {
        let mut gpu = gpu();
        let j = job(model, 1, 7, Priority::RealTime, 0);
        let (input_len, output_len) = (j.input_len as usize, j.output_len as usize);
        let input: Vec<u8> = (0..input_len).map(|i| (i * 31 % 251) as u8).collect();
        assert!(j.memory.write(0, &input));
        let mem = Arc::clone(&j.memory);
        gpu.submit(j, 0);
        let done = poll(&mut gpu, u64::MAX / 2);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].status, status::OK);
        assert_eq!(done[0].output_len, output_len as u64);
        let mut want = vec![0u8; output_len];
        expected_output(id(model), &input, &mut want);
        let mut got = vec![0u8; output_len];
        assert!(mem.read(input_len as u64, &mut got));
        assert_eq!(got, want);
    }

    #[test]
    fn output_equals_reference_function() {
        check_output("echo_small");
        // Input and output both span several 64 KiB chunks.
        check_output("yolov3");
        check_output("bert_base");
    }

    #[test]
    fn a_typed_job_gets_each_output_from_its_own_seed() {
        let mut gpu = gpu();
        let mut j = rt(1, 1, 0);
        let mem = VecMemory::new(1 << 18);
        // Two inputs (the second over a 64 KiB chunk), three outputs.
        let a: Vec<u8> = (0..100u32).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        assert!(mem.write(0, &a) && mem.write(4096, &b));
        let outs = [(80_000, 24), (90_000, 70_000), (170_000, 0)];
        j.memory = mem.clone();
        j.tensors = Some(Arc::new(TensorSpans {
            batch: 3,
            inputs: vec![
                Span { off: 0, len: 100 },
                Span {
                    off: 4096,
                    len: 70_000,
                },
            ],
            outputs: outs.iter().map(|&(off, len)| Span { off, len }).collect(),
        }));
        gpu.submit(j, 0);
        let done = poll(&mut gpu, ECHO_NS);
        assert_eq!((done[0].status, done[0].output_len), (status::OK, 70_024));
        for (k, &(off, len)) in outs.iter().enumerate() {
            let mut want = vec![0u8; len as usize];
            shm_proto::sim::expected_typed_output(
                id("echo_small"),
                3,
                &[&a, &b],
                k as u32,
                &mut want,
            );
            assert_eq!(mem.bytes(off as usize, len as usize), want, "output {k}");
        }
    }

    #[test]
    fn writes_exactly_the_model_output_size() {
        let mut gpu = gpu();
        let mut j = rt(1, 1, 0);
        j.output_len = 128; // span larger than the model's 64 bytes
        let mem = VecMemory::new(256);
        assert!(mem.write(0, &[0xAA; 256]));
        j.memory = mem.clone();
        gpu.submit(j, 0);
        let done = poll(&mut gpu, ECHO_NS);
        assert_eq!((done[0].status, done[0].output_len), (status::OK, 64));
        assert_eq!(mem.bytes(128, 128), vec![0xAA; 128]);
    }

    #[test]
    fn within_a_class_earlier_deadlines_run_first() {
        let mut gpu = gpu();
        // All queued before the first start (decisions are made in poll):
        // deadline order, those without one last, in submission order.
        let far = 1_000_000 * US;
        let deadlines = [0, 0, far + 3, far + 1, 0, far + 2];
        for (i, d) in deadlines.into_iter().enumerate() {
            let mut j = rt(i as u32, i as u64, 0);
            j.deadline_ns = d;
            gpu.submit(j, 0);
        }
        let ids: Vec<u64> = poll(&mut gpu, 10 * ECHO_NS)
            .iter()
            .map(|f| f.request_id)
            .collect();
        assert_eq!(ids, [3, 5, 2, 0, 1, 4]);
    }

    #[test]
    fn deadline_missed_job_is_not_run() {
        let mut gpu = gpu();
        gpu.submit(be(1, 1, 0), 0);
        assert!(poll(&mut gpu, 0).is_empty(), "job 1 starts at 0");
        let mut late = rt(2, 2, 10 * US);
        late.deadline_ns = 30 * US;
        let mem = late.memory.clone();
        gpu.submit(late, 10 * US);
        let mut on_time = rt(2, 3, 10 * US);
        on_time.deadline_ns = ECHO_NS; // starts exactly at its deadline: runs
        gpu.submit(on_time, 10 * US);
        let done = poll(&mut gpu, 1_000 * US);
        assert_eq!(
            timeline(&done),
            [
                (1, 0, ECHO_NS),
                (2, ECHO_NS, ECHO_NS),
                (3, ECHO_NS, 2 * ECHO_NS)
            ]
        );
        assert_eq!(
            (done[1].status, done[1].output_len),
            (status::DEADLINE_MISSED, 0)
        );
        assert_eq!(done[2].status, status::OK);
        assert_eq!(mem.len(), 128);
        let mut out = [1u8; 64];
        assert!(mem.read(64, &mut out));
        assert_eq!(out, [0; 64], "a missed job writes no output");
    }

    #[test]
    fn finished_jobs_hold_their_memory_until_released() {
        let mut gpu = gpu();
        let a = rt(1, 1, 0);
        let memory = Arc::clone(&a.memory);
        gpu.submit(a, 0);
        assert_eq!(Arc::strong_count(&memory), 2);
        assert_eq!(poll(&mut gpu, ECHO_NS).len(), 1);
        // Finished, its completion not yet posted: still referenced.
        assert_eq!(Arc::strong_count(&memory), 2);
        gpu.release_finished();
        assert_eq!(Arc::strong_count(&memory), 1);

        // Without release_finished, the next poll drops them.
        let b = rt(1, 2, 2 * ECHO_NS);
        let memory = Arc::clone(&b.memory);
        gpu.submit(b, 2 * ECHO_NS);
        assert_eq!(poll(&mut gpu, 3 * ECHO_NS).len(), 1);
        assert_eq!(Arc::strong_count(&memory), 2);
        assert!(poll(&mut gpu, 4 * ECHO_NS).is_empty());
        assert_eq!(Arc::strong_count(&memory), 1);

        // A departed client's finished jobs go with it.
        let c = rt(3, 3, 5 * ECHO_NS);
        let memory = Arc::clone(&c.memory);
        gpu.submit(c, 5 * ECHO_NS);
        assert_eq!(poll(&mut gpu, 6 * ECHO_NS).len(), 1);
        assert_eq!(gpu.cancel_client(3), 0);
        assert_eq!(Arc::strong_count(&memory), 1);
    }

    #[test]
    fn cancel_client_drops_queued_and_running_jobs() {
        let mut gpu = gpu();
        gpu.submit(be(1, 1, 0), 0);
        gpu.submit(be(1, 2, 0), 0);
        gpu.submit(be(2, 3, 0), 0);
        gpu.submit(rt(1, 4, 0), 0);
        assert_eq!(gpu.queued(), 4);
        assert!(poll(&mut gpu, 10 * US).is_empty());
        assert_eq!(gpu.next_event_ns(), Some(ECHO_NS)); // job 4 (RT) runs
        assert_eq!(gpu.cancel_client(1), 3);
        assert_eq!(gpu.queued(), 1);
        assert_eq!(gpu.cancel_client(9), 0);
        // The device is free from the cancel time (the last poll, 10 µs).
        let done = poll(&mut gpu, 1_000 * US);
        assert_eq!(timeline(&done), [(3, 10 * US, 10 * US + ECHO_NS)]);
        assert_eq!(gpu.queued(), 0);
        assert_eq!(gpu.next_event_ns(), None);
    }

    #[test]
    fn time_scale_multiplies_model_time() {
        for (scale, want) in [(0.5, 25 * US), (2.0, 100 * US), (1e-3, 50)] {
            let mut gpu = FifoBackend::new(registry(), scale).unwrap();
            assert_eq!(gpu.time_scale(), scale);
            gpu.submit(rt(1, 1, 5), 5);
            assert!(poll(&mut gpu, 5).is_empty());
            assert_eq!(gpu.next_event_ns(), Some(5 + want));
            assert!(poll(&mut gpu, 4 + want).is_empty());
            assert_eq!(timeline(&poll(&mut gpu, 5 + want)), [(1, 5, 5 + want)]);
        }
        assert_eq!(gpu().name(), "sim (real time)");
        assert_eq!(
            FifoBackend::new(registry(), 0.5).unwrap().name(),
            "sim (time x0.5)"
        );
    }

    #[test]
    fn new_rejects_bad_time_scale() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = FifoBackend::new(registry(), bad).unwrap_err();
            assert!(e.to_string().contains(&format!("time_scale {bad} ")), "{e}");
        }
    }

    #[test]
    fn zero_time_model_completes_at_its_start() {
        let mut gpu = gpu();
        gpu.submit(job("null", 1, 1, Priority::RealTime, 100), 100);
        assert_eq!(gpu.next_event_ns(), Some(100));
        let done = poll(&mut gpu, 100);
        assert_eq!(timeline(&done), [(1, 100, 100)]);
        assert_eq!((done[0].status, done[0].output_len), (status::OK, 0));
        assert_eq!(done[0].received_ns, 100);
        assert_eq!(gpu.next_event_ns(), None);
    }

    #[test]
    fn memory_failure_reports_device_error() {
        let mut gpu = gpu();
        let mut j = rt(1, 1, 0);
        j.memory = Arc::new(BrokenMemory);
        gpu.submit(j, 0);
        let done = poll(&mut gpu, ECHO_NS);
        assert_eq!(
            (done[0].status, done[0].output_len),
            (status::DEVICE_ERROR, 0)
        );
        assert_eq!(timeline(&done), [(1, 0, ECHO_NS)]);
    }

    #[test]
    fn unknown_model_reports_device_error() {
        let mut gpu = gpu();
        let mut j = rt(1, 1, 0);
        j.model = 1000;
        gpu.submit(j, 0);
        let done = poll(&mut gpu, 0);
        assert_eq!(timeline(&done), [(1, 0, 0)]);
        assert_eq!(done[0].status, status::DEVICE_ERROR);
    }

    #[test]
    fn does_not_finish_early() {
        let mut gpu = gpu();
        gpu.submit(rt(1, 1, 0), 0);
        assert!(poll(&mut gpu, ECHO_NS - 1).is_empty());
        assert_eq!(gpu.queued(), 1);
        assert_eq!(poll(&mut gpu, ECHO_NS).len(), 1);
        assert_eq!(gpu.queued(), 0);
    }
}
