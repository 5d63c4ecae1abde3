//! The queue discipline inside one priority class: earliest deadline first.
//!
//! [`EdfQueue`] orders what waits in one class by deadline, earliest first;
//! items without a deadline come after every item with one, and equal keys
//! (the same deadline, or none) leave in the order they came (FIFO). With
//! no deadlines at all it is a FIFO queue, so a workload without deadlines
//! is scheduled exactly as before.
//!
//! Every policy that holds tasks before launching them keeps them in one of
//! these per class (`seq`, `reef` and `wait-preempt`, `split`; `paella` and
//! `prema` put the deadline first in their own keys), and so does the
//! daemon wherever requests wait in software (the dispatcher's per-client
//! lanes, the `fifo` device). Because the order is by deadline, the tasks
//! whose deadline has passed are always a prefix of the queue:
//! [`EdfQueue::pop_startable`] drops that prefix ([`Ctx::drop_if_late`])
//! and returns the first task that may still start.
//!
//! Implementation: a `VecDeque` kept sorted by `(deadline, arrival
//! sequence)`; an insert is a binary search and a shift, `O(1)` for an item
//! without a deadline (it goes to the back). Queues here hold a handful of
//! items per class (the dispatcher hands a policy at most
//! `clients.on_device_per_client` requests of each client per class).

use std::collections::VecDeque;

use super::{Ctx, Task};
use sluice_gpu::Ns;

/// Sort key: deadline (`u64::MAX` for none), then arrival sequence.
type Key = (Ns, u64);

/// Items of one priority class, earliest deadline first; see the module
/// docs.
#[derive(Debug, Clone)]
pub struct EdfQueue<T> {
    items: VecDeque<(Key, T)>,
    seq: u64,
}

impl<T> Default for EdfQueue<T> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
            seq: 0,
        }
    }
}

impl<T> EdfQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `item` with `deadline` (`None`: after every item with one).
    pub fn push(&mut self, deadline: Option<Ns>, item: T) {
        let key = (deadline.unwrap_or(Ns::MAX), self.seq);
        self.seq += 1;
        // Keys are unique (the sequence), so this is the first key above.
        let at = self.items.partition_point(|(k, _)| *k < key);
        self.items.insert(at, (key, item));
    }

    /// Takes the first item: the earliest deadline, else the oldest.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front().map(|(_, t)| t)
    }

    /// The first item, as [`Self::pop`] would take it.
    pub fn peek(&self) -> Option<&T> {
        self.items.front().map(|(_, t)| t)
    }

    /// The first item's deadline (`None`: empty, or it has none).
    pub fn first_deadline(&self) -> Option<Ns> {
        self.items
            .front()
            .and_then(|((d, _), _)| (*d != Ns::MAX).then_some(*d))
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The items, first first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|(_, t)| t)
    }

    /// Removes and returns the item at position `i` (0: the first).
    pub fn remove(&mut self, i: usize) -> Option<T> {
        self.items.remove(i).map(|(_, t)| t)
    }

    /// Keeps only the items `keep` accepts, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.items.retain(|(_, t)| keep(t));
    }

    /// Removes and returns every item, first first.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.items.drain(..).map(|(_, t)| t)
    }
}

impl EdfQueue<Task> {
    /// Queues `task` by its own deadline.
    pub fn push_task(&mut self, task: Task) {
        self.push(task.deadline, task);
    }

    /// Takes the first task that may still start: tasks whose deadline has
    /// passed (a prefix, by the order) are dropped through
    /// [`Ctx::drop_if_late`] on the way.
    pub fn pop_startable(&mut self, cx: &mut Ctx<'_>) -> Option<Task> {
        while let Some(task) = self.pop() {
            if !cx.drop_if_late(task) {
                return Some(task);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_deadline_first_then_no_deadline_fifo_among_equals() {
        let mut q = EdfQueue::new();
        q.push(None, "a");
        q.push(Some(30), "b");
        q.push(Some(10), "c");
        q.push(None, "d");
        q.push(Some(30), "e");
        q.push(Some(20), "f");
        assert_eq!(q.first_deadline(), Some(10));
        let order: Vec<_> = q.drain().collect();
        assert_eq!(order, ["c", "f", "b", "e", "a", "d"]);
    }

    #[test]
    fn without_deadlines_it_is_fifo() {
        let mut q = EdfQueue::new();
        for i in 0..100 {
            q.push(None, i);
        }
        assert_eq!(q.first_deadline(), None);
        assert!(q.drain().eq(0..100));
    }

    #[test]
    fn retain_keeps_the_order() {
        let mut q = EdfQueue::new();
        for (i, d) in [(0, Some(5)), (1, None), (2, Some(1)), (3, Some(9))] {
            q.push(d, i);
        }
        q.retain(|&i| i != 0);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), [2, 3, 1]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.peek(), Some(&2));
    }
}
