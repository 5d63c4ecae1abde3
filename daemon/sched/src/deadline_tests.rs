//! Deadlines under every policy, on the GPU model in virtual time: a task
//! whose deadline has passed before it starts launches nothing and is
//! dropped ([`Ctx::drop_if_late`]); within a class earlier deadlines go
//! first ([`crate::queue`]); a task with room to spare runs as before.

use std::sync::{Arc, OnceLock};

use shm_proto::Priority;
use sluice_gpu::{DeviceProfile, Event, Ns};
use sluice_gpusim::GpuSim;
use sluice_model::ModelRegistry;

use crate::workload::{TaskRun, run_tasks};
use crate::{PolicyKind, Task, TaskId, make_policy, untag};

const MS: Ns = 1_000_000;

fn models() -> Arc<ModelRegistry> {
    static M: OnceLock<Arc<ModelRegistry>> = OnceLock::new();
    Arc::clone(M.get_or_init(|| Arc::new(ModelRegistry::builtin())))
}

fn model(name: &str) -> u32 {
    models().lookup(name).unwrap().0
}

fn task(id: TaskId, priority: Priority, arrival: Ns, deadline: Option<Ns>) -> Task {
    Task {
        id,
        client: id as u32,
        priority,
        model: model("resnet152"),
        arrival,
        deadline,
    }
}

/// `t` of client 0: one client's tasks share a `reef` lane, where they
/// wait for each other (tasks of different clients run side by side).
fn one_client(t: Task) -> Task {
    Task { client: 0, ..t }
}

/// Runs `tasks` under `kind` on the mi50 model; also returns the task ids
/// of every kernel launched, in launch order.
fn run(kind: PolicyKind, tasks: &[Task]) -> (TaskRun, Vec<TaskId>) {
    let mut gpu = GpuSim::new(DeviceProfile::mi50());
    gpu.record_launches(true);
    let mut policy = make_policy(kind, &models());
    let r = run_tasks(&mut gpu, &models(), policy.as_mut(), tasks);
    let launched = gpu.launched_tags().iter().map(|&t| untag(t).0).collect();
    (r, launched)
}

fn done_ids(r: &TaskRun) -> Vec<TaskId> {
    r.done.iter().map(|d| d.task.id).collect()
}

fn missed_ids(r: &TaskRun) -> Vec<TaskId> {
    r.missed.iter().map(|m| m.task.id).collect()
}

/// The order in which tasks started their first kernel.
fn start_order(r: &TaskRun) -> Vec<TaskId> {
    let mut v = Vec::new();
    for ev in &r.events {
        if let Event::KernelStarted { kernel, .. } = ev {
            let (id, k) = untag(kernel.tag);
            if k == 0 && !v.contains(&id) {
                v.push(id);
            }
        }
    }
    v
}

#[test]
fn a_task_late_on_arrival_is_never_started_under_any_policy() {
    for kind in PolicyKind::ALL {
        // rt-only drops best-effort work: both tasks are real-time.
        let tasks = [
            task(0, Priority::RealTime, 0, Some(1_000 * MS)),
            // Arrives at 2 ms with a deadline of 1 ms: late on arrival.
            task(1, Priority::RealTime, 2 * MS, Some(MS)),
            task(2, Priority::RealTime, 3 * MS, None),
        ];
        let (r, launched) = run(kind, &tasks);
        assert_eq!(missed_ids(&r), [1], "{kind}");
        assert_eq!(r.missed[0].at, 2 * MS, "{kind}: dropped on arrival");
        assert!(
            !launched.contains(&1),
            "{kind}: a kernel of the late task was launched"
        );
        let mut done = done_ids(&r);
        done.sort_unstable();
        assert_eq!(done, [0, 2], "{kind}: the others run normally");
        assert!(r.failed.is_empty(), "{kind}");
    }
}

/// Policies that run one task of a class at a time (or, `reef` and
/// `wait-preempt`, one real-time task at a time): a task whose deadline
/// passes while it waits behind a long one is dropped when its turn comes.
#[test]
fn a_task_whose_deadline_passes_while_it_waits_is_dropped_unstarted() {
    let rt_time = models().lookup("resnet152").unwrap().1.total_time_ns;
    for kind in [
        PolicyKind::Seq,
        PolicyKind::Reef,
        PolicyKind::WaitPreempt,
        PolicyKind::Split,
        PolicyKind::Prema,
        PolicyKind::Paella,
    ] {
        for priority in [Priority::RealTime, Priority::BestEffort] {
            let tasks = [
                task(0, priority, 0, None),
                // Not late on arrival, but long before task 0 can finish.
                task(1, priority, MS / 10, Some(MS)),
                // Room to spare behind task 0.
                task(2, priority, MS / 5, Some(10 * rt_time)),
            ]
            .map(one_client);
            let (r, launched) = run(kind, &tasks);
            if kind == PolicyKind::Paella {
                // Paella runs tasks side by side; task 1 may start at once.
                // Whatever it did, a task it dropped launched nothing.
                for id in missed_ids(&r) {
                    assert!(!launched.contains(&id), "{kind} {priority:?}");
                }
                continue;
            }
            assert_eq!(missed_ids(&r), [1], "{kind} {priority:?}");
            assert!(
                r.missed[0].at > MS,
                "{kind} {priority:?}: dropped when its turn came"
            );
            assert!(!launched.contains(&1), "{kind} {priority:?}");
            assert_eq!(done_ids(&r), [0, 2], "{kind} {priority:?}");
            let t2 = r.done[1].finished;
            assert!(
                t2 <= 10 * rt_time,
                "{kind} {priority:?}: task 2 met its deadline"
            );
        }
    }
}

/// Within a class, tasks waiting behind a long one start earliest deadline
/// first, tasks without a deadline last and in arrival order. (`paella`
/// puts deadlines first in its key too, but dispatches these at arrival:
/// the device has room for them.)
#[test]
fn within_a_class_earlier_deadlines_start_first() {
    let far = 100_000 * MS;
    for kind in [PolicyKind::Seq, PolicyKind::Reef, PolicyKind::WaitPreempt] {
        for priority in [Priority::RealTime, Priority::BestEffort] {
            let tasks = [
                task(0, priority, 0, None),
                task(1, priority, MS / 10, None),
                task(2, priority, MS / 10 + 1, Some(far + 3)),
                task(3, priority, MS / 10 + 2, Some(far + 1)),
                task(4, priority, MS / 10 + 3, None),
                task(5, priority, MS / 10 + 4, Some(far + 2)),
            ]
            .map(one_client);
            let (r, _) = run(kind, &tasks);
            assert!(r.missed.is_empty(), "{kind} {priority:?}");
            assert_eq!(
                start_order(&r),
                [0, 3, 5, 2, 1, 4],
                "{kind} {priority:?}: first kernels in deadline order"
            );
        }
    }
}

/// Without deadlines a policy's queue is FIFO within a class, as before.
#[test]
fn without_deadlines_the_order_is_arrival_order() {
    for kind in [PolicyKind::Seq, PolicyKind::Reef, PolicyKind::WaitPreempt] {
        let tasks: Vec<Task> = (0..5)
            .map(|i| task(i, Priority::RealTime, i * MS / 10, None))
            .collect();
        let (r, _) = run(kind, &tasks);
        assert_eq!(done_ids(&r), [0, 1, 2, 3, 4], "{kind}");
        assert_eq!(start_order(&r), [0, 1, 2, 3, 4], "{kind}");
    }
}
