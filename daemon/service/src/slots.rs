//! [`SlotTable`]: values kept densely for iteration and addressed by a
//! small, stable *slot* number, reused once its value is removed.
//!
//! The dispatcher keeps its clients here. A client's slot travels with its
//! requests through the device wrapper ([`crate::backend::fair`]) and names
//! the epoll registration of its eventfd, so every look-up on the request
//! path is two array indexings instead of a hash of the client's id.
//!
//! Encoding: `dense` holds the values with their slots, in no particular
//! order; `pos[slot]` is the value's index in `dense`, or [`VACANT`];
//! `free` holds the vacant slots below `pos.len()`. Removing swaps the last
//! value into the hole and updates its `pos`. Slots never exceed the
//! largest number of values held at once, so `pos` stays that small.

/// `pos` entry of a slot that holds nothing.
const VACANT: u32 = u32::MAX;

/// Values addressed by reusable slot numbers; see the module docs.
#[derive(Debug)]
pub(crate) struct SlotTable<T> {
    dense: Vec<(u32, T)>,
    pos: Vec<u32>,
    free: Vec<u32>,
}

impl<T> Default for SlotTable<T> {
    fn default() -> Self {
        Self {
            dense: Vec::new(),
            pos: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> SlotTable<T> {
    /// Stores `value` and returns its slot: a vacant one if any, else the
    /// next new one.
    pub(crate) fn insert(&mut self, value: T) -> u32 {
        let at = u32::try_from(self.dense.len()).expect("fewer than 2^32 values");
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.pos.push(VACANT);
                at
            }
        };
        self.pos[slot as usize] = at;
        self.dense.push((slot, value));
        slot
    }

    /// Removes and returns the value in `slot` (`None` when vacant); the
    /// slot may be handed out again.
    pub(crate) fn remove(&mut self, slot: u32) -> Option<T> {
        let at = *self.pos.get(slot as usize).filter(|&&p| p != VACANT)?;
        let (_, value) = self.dense.swap_remove(at as usize);
        if let Some(&(moved, _)) = self.dense.get(at as usize) {
            self.pos[moved as usize] = at;
        }
        self.pos[slot as usize] = VACANT;
        self.free.push(slot);
        Some(value)
    }

    /// The value in `slot`.
    #[inline]
    pub(crate) fn get_mut(&mut self, slot: u32) -> Option<&mut T> {
        let at = *self.pos.get(slot as usize)?;
        self.dense.get_mut(at as usize).map(|(_, v)| v)
    }

    /// The value in `slot`.
    #[inline]
    pub(crate) fn get(&self, slot: u32) -> Option<&T> {
        let at = *self.pos.get(slot as usize)?;
        self.dense.get(at as usize).map(|(_, v)| v)
    }

    /// Values held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.dense.len()
    }

    /// The `i`-th value in dense order (`i < len()`) and its slot; the
    /// order changes only when a value is removed.
    #[inline]
    pub(crate) fn nth_mut(&mut self, i: usize) -> Option<(u32, &mut T)> {
        self.dense.get_mut(i).map(|(s, v)| (*s, v))
    }

    /// Every value with its slot, in dense order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.dense.iter().map(|(s, v)| (*s, v))
    }

    /// Every value with its slot, in dense order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.dense.iter_mut().map(|(s, v)| (*s, v))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn slots_are_stable_and_reused() {
        let mut t = SlotTable::default();
        let a = t.insert("a");
        let b = t.insert("b");
        let c = t.insert("c");
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.remove(a), None, "a vacant slot holds nothing");
        assert_eq!(t.get(a), None);
        // `c` moved into the hole in `dense`; its slot still finds it.
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.insert("d"), a, "the freed slot is reused");
        assert_eq!(t.get(a), Some(&"d"));
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(7), None);
        assert_eq!(t.remove(7), None);
    }

    #[test]
    fn dense_iteration_sees_each_value_once() {
        let mut t = SlotTable::default();
        for v in 0..5u32 {
            t.insert(v * 10);
        }
        t.remove(1);
        t.remove(3);
        let mut seen: Vec<(u32, u32)> = t.iter().map(|(s, v)| (s, *v)).collect();
        seen.sort_unstable();
        assert_eq!(seen, [(0, 0), (2, 20), (4, 40)]);
        for i in 0..t.len() {
            let (s, v) = t.nth_mut(i).unwrap();
            *v += s;
        }
        assert_eq!(t.get(4), Some(&44));
        assert!(t.nth_mut(t.len()).is_none());
    }

    proptest::proptest! {
        /// Any sequence of inserts and removes agrees with a map from slot
        /// to value, never hands out a slot in use, and keeps the slots
        /// below the most values ever held at once.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0u32..12), 1..200)) {
            let mut t = SlotTable::default();
            let mut model: HashMap<u32, u32> = HashMap::new();
            let mut peak = 0;
            for (n, (insert, pick)) in ops.into_iter().enumerate() {
                if insert {
                    let s = t.insert(n as u32);
                    proptest::prop_assert!(model.insert(s, n as u32).is_none(), "slot {} in use", s);
                    peak = peak.max(model.len());
                    proptest::prop_assert!((s as usize) < peak);
                } else {
                    proptest::prop_assert_eq!(t.remove(pick), model.remove(&pick));
                }
                proptest::prop_assert_eq!(t.len(), model.len());
                for (s, v) in &model {
                    proptest::prop_assert_eq!(t.get(*s), Some(v));
                }
                for (s, v) in t.iter_mut() {
                    proptest::prop_assert_eq!(model.get(&s), Some(&*v));
                }
            }
        }
    }
}
