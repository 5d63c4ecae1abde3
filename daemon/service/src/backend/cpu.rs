//! The CPU backend (`device.backend = "cpu"`): each model's graph on
//! sluice's CPU executor (`sluice_graph::Static::run`), real outputs
//! written into the client's arena.
//!
//! The dispatcher's thread never runs a model: [`CpuBackend::submit`]
//! resolves the job's model version, reads nothing, and queues it;
//! `device.cpu_threads` worker threads take jobs — real-time before
//! best-effort, earliest deadline first within a class ([`EdfQueue`]) —
//! read the inputs out of the arena, run, write the outputs, and hand the
//! completion back through a queue that [`CpuBackend::poll`] drains. A
//! worker writes an eventfd ([`Backend::wake_fd`]) after each completion,
//! so a parked dispatcher wakes at once.
//!
//! - A job whose deadline (or, without one, `received + slo_ms` of the
//!   model's `NAME.toml`) has passed when a worker takes it is not run:
//!   it completes with `DEADLINE_MISSED`.
//! - [`CpuBackend::cancel_client`] drops a departed client's queued jobs;
//!   one running finishes, and its completion is dropped.
//! - The model version is resolved at submit from the snapshot in force
//!   ([`LiveModels`]): the current version when the job's spans fit its
//!   inputs and outputs, else the version it replaced (the job was
//!   validated against it), else the job completes with `MODEL_UNLOADED`.
//!   The job holds that version until it finishes, so a reload or unload
//!   never takes a model from under a request.
//! - Each worker caches the graph specialised per (model id, version,
//!   batch) and drops entries of versions no longer served.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};

use shm_proto::{Priority, status};
use sluice_backend::{Backend, Finished, Job, Span};
use sluice_graph::{DType, Data, Static, Tensor};
use sluice_model::{ElemType, ModelIo, TensorSpec};
use sluice_sched::queue::EdfQueue;

use crate::repo::{LiveModels, LoadedModel, Served};

pub use crate::config::MAX_CPU_THREADS;

/// A job with the version it runs on and where its tensors lie.
struct Task {
    job: Job,
    model: Arc<LoadedModel>,
    batch: u32,
    inputs: Vec<Span>,
    outputs: Vec<Span>,
    /// Absolute deadline, 0 for none (the job's, or its model's SLO).
    deadline_ns: u64,
}

#[derive(Default)]
struct Queue {
    real_time: EdfQueue<Task>,
    best_effort: EdfQueue<Task>,
    /// Jobs taken by workers and not finished, by client.
    running: Vec<u32>,
    /// Clients whose running jobs' completions are dropped.
    cancelled: Vec<u32>,
    done: Vec<Finished>,
    stop: bool,
    /// Workers take nothing while set (tests, to queue several jobs
    /// before any starts).
    #[cfg(test)]
    paused: bool,
}

impl Queue {
    fn pop(&mut self) -> Option<Task> {
        #[cfg(test)]
        if self.paused {
            return None;
        }
        self.real_time.pop().or_else(|| self.best_effort.pop())
    }
}

struct State {
    queue: Mutex<Queue>,
    work: Condvar,
    wake: OwnedFd,
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// See the module docs.
pub struct CpuBackend {
    state: Arc<State>,
    workers: Vec<std::thread::JoinHandle<()>>,
    live: Arc<LiveModels>,
    served: Arc<Served>,
    generation: u64,
    name: String,
    /// Completions made at submit (no version fits), posted at the next
    /// poll.
    refused: Vec<Finished>,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A job's version, batch, input spans and output spans.
type Resolved = (Arc<LoadedModel>, u32, Vec<Span>, Vec<Span>);

/// Whether `spans` (lengths) are exactly `specs` at `batch`.
fn fits(specs: &[TensorSpec], spans: &[Span], batch: u32, exact: bool) -> bool {
    specs.len() == spans.len()
        && specs.iter().zip(spans).all(|(t, s)| match t.bytes(batch) {
            Some(n) if exact => n == s.len,
            Some(n) => n <= s.len,
            None => false,
        })
}

/// The spans of `job` for `io`, when they fit it.
fn spans_for(job: &Job, io: &ModelIo) -> Option<(u32, Vec<Span>, Vec<Span>)> {
    match &job.tensors {
        Some(t) => {
            let ok = t.batch >= 1
                && t.batch <= io.max_batch
                && fits(&io.inputs, &t.inputs, t.batch, true)
                && fits(&io.outputs, &t.outputs, t.batch, true);
            ok.then(|| (t.batch, t.inputs.clone(), t.outputs.clone()))
        }
        None => {
            let input = Span {
                off: job.input_off,
                len: job.input_len,
            };
            let output = Span {
                off: job.output_off,
                len: job.output_len,
            };
            let ok = fits(&io.inputs, &[input], 1, true) && fits(&io.outputs, &[output], 1, false);
            // The output is exactly the model's; the span may be larger.
            let out = Span {
                off: output.off,
                len: io.outputs.first()?.bytes(1)?,
            };
            ok.then(|| (1, vec![input], vec![out]))
        }
    }
}

impl CpuBackend {
    /// Starts `threads` workers serving the models of `live`.
    pub fn new(live: Arc<LiveModels>, threads: usize) -> std::io::Result<Self> {
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        let state = Arc::new(State {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            wake,
        });
        let threads = threads.clamp(1, MAX_CPU_THREADS);
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let st = state.clone();
            let lv = live.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("sluice-cpu-{i}"))
                    .spawn(move || worker(&st, &lv))?,
            );
        }
        let served = live.current();
        let generation = live.generation();
        Ok(Self {
            state,
            workers,
            served,
            generation,
            live,
            name: format!(
                "cpu ({threads} worker thread{})",
                if threads == 1 { "" } else { "s" }
            ),
            refused: Vec::new(),
        })
    }

    /// The version `job` runs on, and its spans.
    fn resolve(&mut self, job: &Job) -> Option<Resolved> {
        let g = self.live.generation();
        if g != self.generation {
            self.served = self.live.current();
            self.generation = g;
        }
        let current = self.served.current.get(&job.model);
        let previous = self.served.previous.get(&job.model).map(|(p, _)| p);
        for v in current.into_iter().chain(previous) {
            if v.graph.is_none() {
                continue;
            }
            if let Some((batch, i, o)) = spans_for(job, &v.io) {
                return Some((v.clone(), batch, i, o));
            }
        }
        None
    }
}

#[cfg(test)]
impl CpuBackend {
    /// Stops or lets the workers take jobs.
    fn set_paused(&self, paused: bool) {
        self.state.lock().paused = paused;
        self.state.work.notify_all();
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        self.state.lock().stop = true;
        self.state.work.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&mut self, job: Job, now_ns: u64) {
        let Some((model, batch, inputs, outputs)) = self.resolve(&job) else {
            self.refused.push(Finished {
                client: job.client,
                request_id: job.request_id,
                status: status::MODEL_UNLOADED,
                output_len: 0,
                received_ns: job.received_ns,
                started_ns: now_ns,
                finished_ns: now_ns,
            });
            return;
        };
        let deadline_ns = match (job.deadline_ns, model.settings.slo_ms) {
            (0, Some(ms)) => job.received_ns.saturating_add((ms * 1e6) as u64),
            (d, _) => d,
        };
        let class = match model.settings.priority {
            Priority::BestEffort => Priority::BestEffort,
            Priority::RealTime => job.priority,
        };
        let task = Task {
            job,
            model,
            batch,
            inputs,
            outputs,
            deadline_ns,
        };
        let key = (deadline_ns != 0).then_some(deadline_ns);
        {
            let mut q = self.state.lock();
            match class {
                Priority::RealTime => q.real_time.push(key, task),
                Priority::BestEffort => q.best_effort.push(key, task),
            }
        }
        self.state.work.notify_one();
    }

    fn poll(&mut self, _now_ns: u64, done: &mut Vec<Finished>) {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.state.wake, &mut buf);
        done.append(&mut self.refused);
        done.append(&mut self.state.lock().done);
    }

    fn next_event_ns(&self) -> Option<u64> {
        // Completions come through the eventfd, at no predictable time.
        None
    }

    fn cancel_client(&mut self, client: u32) -> usize {
        let before = self.refused.len();
        self.refused.retain(|f| f.client != client);
        let mut n = before - self.refused.len();
        let mut q = self.state.lock();
        let queued = q.real_time.len() + q.best_effort.len();
        q.real_time.retain(|t| t.job.client != client);
        q.best_effort.retain(|t| t.job.client != client);
        n += queued - q.real_time.len() - q.best_effort.len();
        let before = q.done.len();
        q.done.retain(|f| f.client != client);
        n += before - q.done.len();
        let running = q.running.iter().filter(|&&c| c == client).count();
        if running > 0 {
            q.cancelled.push(client);
            n += running;
        }
        n
    }

    fn queued(&self) -> usize {
        let q = self.state.lock();
        q.real_time.len()
            + q.best_effort.len()
            + q.running.len()
            + q.done.len()
            + self.refused.len()
    }

    fn simulated(&self) -> bool {
        false
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.state.wake.as_fd())
    }
}

/// Key of a specialised graph: (model id, version, batch).
type CacheKey = (u32, u32, u32);

fn worker(state: &State, live: &LiveModels) {
    let mut cache: HashMap<CacheKey, Arc<Static>> = HashMap::new();
    let mut cache_generation = live.generation();
    loop {
        let task = {
            let mut q = state.lock();
            loop {
                if q.stop {
                    return;
                }
                if let Some(t) = q.pop() {
                    q.running.push(t.job.client);
                    break t;
                }
                q = state.work.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        let g = live.generation();
        if g != cache_generation {
            // Keep only versions still served (current or previous).
            let served = live.current();
            cache.retain(|(id, version, _), _| {
                served
                    .current
                    .get(id)
                    .is_some_and(|m| m.version == *version)
                    || served
                        .previous
                        .get(id)
                        .is_some_and(|(m, _)| m.version == *version)
            });
            cache_generation = g;
        }
        let started = shm_proto::now_ns();
        let finished = if task.deadline_ns != 0 && started > task.deadline_ns {
            finish(&task, status::DEADLINE_MISSED, 0, started, started)
        } else {
            let (code, len) = match run(&task, &mut cache) {
                Ok(len) => (status::OK, len),
                Err(why) => {
                    tracing::error!(
                        model = %task.model.name,
                        version = task.model.version,
                        "cpu backend: {why}"
                    );
                    (status::DEVICE_ERROR, 0)
                }
            };
            finish(&task, code, len, started, shm_proto::now_ns())
        };
        let client = task.job.client;
        drop(task);
        {
            let mut q = state.lock();
            if let Some(i) = q.running.iter().position(|&c| c == client) {
                q.running.swap_remove(i);
            }
            if let Some(i) = q.cancelled.iter().position(|&c| c == client) {
                if !q.running.contains(&client) {
                    q.cancelled.swap_remove(i);
                }
            } else {
                q.done.push(finished);
            }
        }
        let _ = rustix::io::write(&state.wake, &1u64.to_ne_bytes());
    }
}

fn finish(task: &Task, status: u32, output_len: u64, started: u64, finished: u64) -> Finished {
    Finished {
        client: task.job.client,
        request_id: task.job.request_id,
        status,
        output_len,
        received_ns: task.job.received_ns,
        started_ns: started,
        finished_ns: finished,
    }
}

/// Runs `task`; returns the output bytes written.
fn run(task: &Task, cache: &mut HashMap<CacheKey, Arc<Static>>) -> Result<u64, String> {
    let m = &task.model;
    let graph = m.graph.as_ref().ok_or("the model has no graph")?;
    let key = (task.job.model, m.version, task.batch);
    let s = match cache.get(&key) {
        Some(s) => s.clone(),
        None => {
            let s = Arc::new(
                graph
                    .specialize(task.batch as usize)
                    .map_err(|e| format!("cannot specialise at batch {}: {e}", task.batch))?,
            );
            cache.insert(key, s.clone());
            s
        }
    };
    let mut tensors = Vec::with_capacity(m.io.inputs.len());
    for (spec, span) in m.io.inputs.iter().zip(&task.inputs) {
        let mut bytes = vec![0u8; span.len as usize];
        if !task.job.memory.read(span.off, &mut bytes) {
            return Err(format!("input {:?} span out of the arena", spec.name));
        }
        tensors.push(decode(spec, task.batch, &bytes)?);
    }
    let named: Vec<(&str, &Tensor)> =
        m.io.inputs
            .iter()
            .map(|t| t.name.as_str())
            .zip(tensors.iter())
            .collect();
    let outs = s.run(&named).map_err(|e| e.to_string())?;
    let mut written = 0;
    for ((spec, span), (name, t)) in m.io.outputs.iter().zip(&task.outputs).zip(&outs) {
        let bytes = encode(spec.elem, t);
        if bytes.len() as u64 != span.len {
            return Err(format!(
                "output {name:?} has {} bytes at batch {}, the model declares {}",
                bytes.len(),
                task.batch,
                span.len
            ));
        }
        if !task.job.memory.write(span.off, &bytes) {
            return Err(format!("output {name:?} span out of the arena"));
        }
        written += span.len;
    }
    Ok(written)
}

fn dtype(e: ElemType) -> Result<DType, String> {
    Ok(match e {
        ElemType::F32 => DType::F32,
        ElemType::F16 => DType::F16,
        ElemType::BF16 => DType::BF16,
        ElemType::I64 => DType::I64,
        ElemType::I32 => DType::I32,
        ElemType::Bool => DType::Bool,
        ElemType::U8 => return Err("an untyped tensor cannot be run".to_owned()),
    })
}

/// The tensor `spec` at `batch` from its little-endian bytes.
pub fn decode(spec: &TensorSpec, batch: u32, bytes: &[u8]) -> Result<Tensor, String> {
    let mut shape: Vec<usize> = spec.dims.iter().map(|&d| d as usize).collect();
    if spec.batched
        && let Some(first) = shape.first_mut()
    {
        *first = batch as usize;
    }
    let data = match spec.elem {
        ElemType::F32 => Data::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        ElemType::F16 => Data::F32(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        ElemType::BF16 => Data::F32(
            bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        ElemType::I64 => Data::I64(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        ElemType::I32 => Data::I64(
            bytes
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        ElemType::Bool => Data::I64(bytes.iter().map(|&b| i64::from(b != 0)).collect()),
        ElemType::U8 => return Err("an untyped tensor cannot be run".to_owned()),
    };
    Tensor::new(dtype(spec.elem)?, shape, data).map_err(|e| format!("input {:?}: {e}", spec.name))
}

/// `t`'s values as little-endian bytes of `elem`.
pub fn encode(elem: ElemType, t: &Tensor) -> Vec<u8> {
    match (elem, t.data()) {
        (ElemType::F32, Data::F32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (ElemType::F16, Data::F32(v)) => v
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect(),
        (ElemType::BF16, Data::F32(v)) => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect(),
        (ElemType::I64, Data::I64(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (ElemType::I32, Data::I64(v)) => v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect(),
        (ElemType::Bool | ElemType::U8, Data::I64(v)) => {
            v.iter().map(|x| u8::from(*x != 0)).collect()
        }
        // A type the graph did not declare: no bytes, which the caller
        // reports as a size mismatch.
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{ModelRepo, Target};
    use sluice_backend::testmem::VecMemory;
    use sluice_backend::{TensorMemory, TensorSpans};
    use sluice_onnx::test_models::{gemm, gemm_reference};

    struct TempDir(std::path::PathBuf);
    impl TempDir {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("sluice-cpu-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const K: usize = 4;
    const M: usize = 3;

    fn weights(seed: f32) -> (Vec<f32>, Vec<f32>) {
        let w = (0..K * M).map(|i| seed * (i as f32 - 5.0) / 7.0).collect();
        let b = (0..M).map(|i| seed - i as f32).collect();
        (w, b)
    }

    /// A repository with `fc` (batch up to 4) of weights `weights(seed)`.
    fn repo(tag: &str, seed: f32) -> (TempDir, ModelRepo) {
        let dir = TempDir::new(tag);
        let (w, b) = weights(seed);
        std::fs::write(dir.0.join("fc.onnx"), gemm(K, M, &w, &b, true)).unwrap();
        std::fs::write(dir.0.join("fc.toml"), "max_batch = 4\n").unwrap();
        let repo = ModelRepo::open(&dir.0, Target::Cpu).unwrap();
        (dir, repo)
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn from_bytes(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// An untyped job: input at 0, output at 256.
    fn job(
        mem: &Arc<VecMemory>,
        client: u32,
        id: u64,
        priority: Priority,
        deadline_ns: u64,
    ) -> Job {
        Job {
            client,
            request_id: id,
            model: 0,
            priority,
            deadline_ns,
            input_off: 0,
            input_len: (K * 4) as u64,
            output_off: 256,
            output_len: 64,
            memory: mem.clone(),
            received_ns: shm_proto::now_ns(),
            tensors: None,
        }
    }

    /// Polls until `n` jobs have finished (a watchdog, not a time bound).
    fn wait(b: &mut CpuBackend, n: usize) -> Vec<Finished> {
        let mut done = Vec::new();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while done.len() < n {
            assert!(
                std::time::Instant::now() < give_up,
                "jobs never finished: {done:?}"
            );
            b.poll(shm_proto::now_ns(), &mut done);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        done
    }

    #[test]
    fn an_untyped_job_computes_the_model_into_the_arena() {
        let (_dir, repo) = repo("untyped", 1.0);
        let mut b = CpuBackend::new(repo.live().clone(), 1).unwrap();
        assert!(!b.simulated());
        assert!(b.wake_fd().is_some());
        let mem = VecMemory::new(512);
        let x = [0.5f32, -1.0, 2.0, 0.25];
        mem.write(0, &f32s(&x));
        b.submit(job(&mem, 1, 7, Priority::RealTime, 0), shm_proto::now_ns());
        let done = wait(&mut b, 1);
        assert_eq!(done[0].status, status::OK);
        assert_eq!(done[0].request_id, 7);
        assert_eq!(done[0].output_len, (M * 4) as u64);
        let (w, bias) = weights(1.0);
        let want = gemm_reference(K, M, &w, &bias, &x);
        let got = from_bytes(&mem.bytes(256, M * 4));
        for (g, r) in got.iter().zip(&want) {
            assert!((g - r).abs() <= 1e-5, "{got:?} vs {want:?}");
        }
        // The bytes after the model's output are untouched.
        assert_eq!(mem.bytes(256 + M * 4, 4), [0; 4]);
        assert_eq!(b.queued(), 0);
    }

    #[test]
    fn a_typed_job_runs_at_its_batch() {
        let (_dir, repo) = repo("typed", 2.0);
        let mut b = CpuBackend::new(repo.live().clone(), 2).unwrap();
        let mem = VecMemory::new(1024);
        let x: Vec<f32> = (0..3 * K).map(|i| i as f32 * 0.1 - 0.4).collect();
        mem.write(64, &f32s(&x));
        let mut j = job(&mem, 1, 9, Priority::BestEffort, 0);
        j.tensors = Some(Arc::new(TensorSpans {
            batch: 3,
            inputs: vec![Span {
                off: 64,
                len: (3 * K * 4) as u64,
            }],
            outputs: vec![Span {
                off: 512,
                len: (3 * M * 4) as u64,
            }],
        }));
        b.submit(j.clone(), shm_proto::now_ns());
        let done = wait(&mut b, 1);
        assert_eq!(done[0].status, status::OK);
        assert_eq!(done[0].output_len, (3 * M * 4) as u64);
        let (w, bias) = weights(2.0);
        let want = gemm_reference(K, M, &w, &bias, &x);
        let got = from_bytes(&mem.bytes(512, 3 * M * 4));
        for (g, r) in got.iter().zip(&want) {
            assert!((g - r).abs() <= 1e-5, "{got:?} vs {want:?}");
        }
        // A batch over max_batch, or a span of the wrong size, fits no
        // version: MODEL_UNLOADED rather than a wrong read.
        let mut bad = j.clone();
        bad.tensors = Some(Arc::new(TensorSpans {
            batch: 5,
            inputs: vec![Span {
                off: 0,
                len: (5 * K * 4) as u64,
            }],
            outputs: vec![Span {
                off: 512,
                len: (5 * M * 4) as u64,
            }],
        }));
        b.submit(bad, shm_proto::now_ns());
        let done = wait(&mut b, 1);
        assert_eq!(done[0].status, status::MODEL_UNLOADED);
    }

    #[test]
    fn real_time_runs_before_best_effort_and_earlier_deadlines_first() {
        let (_dir, repo) = repo("order", 1.0);
        let mut b = CpuBackend::new(repo.live().clone(), 1).unwrap();
        let mem = VecMemory::new(512);
        b.set_paused(true);
        let far = shm_proto::now_ns() + 3_600_000_000_000;
        let now = shm_proto::now_ns();
        b.submit(job(&mem, 1, 1, Priority::BestEffort, 0), now);
        b.submit(job(&mem, 1, 2, Priority::RealTime, far + 2), now);
        b.submit(job(&mem, 1, 3, Priority::RealTime, far + 1), now);
        b.submit(job(&mem, 1, 4, Priority::RealTime, 0), now);
        b.submit(job(&mem, 1, 5, Priority::BestEffort, far), now);
        b.submit(job(&mem, 1, 6, Priority::RealTime, far + 1), now);
        assert_eq!(b.queued(), 6);
        b.set_paused(false);
        let done = wait(&mut b, 6);
        let order: Vec<u64> = done.iter().map(|f| f.request_id).collect();
        assert_eq!(order, [3, 6, 2, 4, 5, 1]);
        assert!(done.iter().all(|f| f.status == status::OK));
    }

    #[test]
    fn a_job_past_its_deadline_is_not_run() {
        let (_dir, repo) = repo("late", 1.0);
        let mut b = CpuBackend::new(repo.live().clone(), 1).unwrap();
        let mem = VecMemory::new(512);
        b.set_paused(true);
        let now = shm_proto::now_ns();
        let other = VecMemory::new(512);
        b.submit(job(&mem, 1, 1, Priority::RealTime, now + 1_000_000), now);
        b.submit(job(&other, 1, 2, Priority::RealTime, 0), now);
        // Past the first one's deadline before any worker may start it.
        while shm_proto::now_ns() <= now + 1_000_000 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        b.set_paused(false);
        let mut done = wait(&mut b, 2);
        done.sort_by_key(|f| f.request_id);
        assert_eq!(done[0].status, status::DEADLINE_MISSED);
        assert_eq!(done[0].output_len, 0);
        assert_eq!(mem.bytes(256, 4), [0; 4], "a missed job writes nothing");
        assert_eq!(done[1].status, status::OK);
        assert_ne!(other.bytes(256, 4), [0; 4]);
    }

    #[test]
    fn a_departed_clients_queued_jobs_are_dropped() {
        let (_dir, repo) = repo("cancel", 1.0);
        let mut b = CpuBackend::new(repo.live().clone(), 1).unwrap();
        let mem = VecMemory::new(512);
        b.set_paused(true);
        let now = shm_proto::now_ns();
        for id in 0..3 {
            b.submit(job(&mem, 7, id, Priority::RealTime, 0), now);
        }
        b.submit(job(&mem, 8, 99, Priority::BestEffort, 0), now);
        assert_eq!(b.cancel_client(7), 3);
        assert_eq!(b.cancel_client(7), 0);
        assert_eq!(b.queued(), 1);
        b.set_paused(false);
        let done = wait(&mut b, 1);
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].client, done[0].request_id), (8, 99));
        // Nothing more comes.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut more = Vec::new();
        b.poll(shm_proto::now_ns(), &mut more);
        assert!(more.is_empty(), "{more:?}");
        assert_eq!(b.queued(), 0);
    }

    #[test]
    fn a_job_runs_on_the_version_in_force_at_submit() {
        let (dir, mut repo) = repo("versions", 1.0);
        let mut b = CpuBackend::new(repo.live().clone(), 1).unwrap();
        let mem = VecMemory::new(512);
        let x = [1.0f32, 2.0, 3.0, 4.0];
        mem.write(0, &f32s(&x));
        b.set_paused(true);
        b.submit(job(&mem, 1, 1, Priority::RealTime, 0), shm_proto::now_ns());
        // Replace the file and reload while job 1 waits: it keeps version 1.
        let (w2, b2) = weights(-3.0);
        std::fs::write(dir.0.join("fc.onnx"), gemm(K, M, &w2, &b2, true)).unwrap();
        assert_eq!(repo.load("fc").reloaded, ["fc"]);
        let mem2 = VecMemory::new(512);
        mem2.write(0, &f32s(&x));
        b.submit(job(&mem2, 1, 2, Priority::RealTime, 0), shm_proto::now_ns());
        b.set_paused(false);
        let done = wait(&mut b, 2);
        assert!(done.iter().all(|f| f.status == status::OK), "{done:?}");
        let (w1, b1) = weights(1.0);
        let close = |got: Vec<f32>, want: Vec<f32>| {
            got.iter().zip(&want).all(|(g, r)| (g - r).abs() <= 1e-5)
        };
        assert!(close(
            from_bytes(&mem.bytes(256, M * 4)),
            gemm_reference(K, M, &w1, &b1, &x)
        ));
        assert!(close(
            from_bytes(&mem2.bytes(256, M * 4)),
            gemm_reference(K, M, &w2, &b2, &x)
        ));
        // Unloaded: a job handed on after the unload still finds the
        // version it was validated against (the previous one) ...
        repo.unload("fc");
        b.submit(job(&mem, 1, 3, Priority::RealTime, 0), shm_proto::now_ns());
        assert_eq!(wait(&mut b, 1)[0].status, status::OK);
        // ... and one for an id that never was gets MODEL_UNLOADED.
        let mut j = job(&mem, 1, 4, Priority::RealTime, 0);
        j.model = 42;
        b.submit(j, shm_proto::now_ns());
        assert_eq!(wait(&mut b, 1)[0].status, status::MODEL_UNLOADED);
    }
}
