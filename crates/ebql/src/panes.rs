//! Time windows built from panes (thesis Table 1, sliding windows).
//!
//! `WINDOW(time, size, step)` closes one kernel generation per *pane* of one
//! step (the flip protocol of [`crate::executor`], run every step), and every
//! step emits the window made of the last `size / step` panes. A tumbling
//! window is the case of one pane per window. Every event is in exactly one
//! pane, so it is in exactly `size / step` windows (the windows whose panes
//! include its own).
//!
//! What a pane keeps, so that a window never needs the kernel again:
//! - kernel-aggregated queries: per group, its map value merged over CPUs
//!   (`[count][states…]`, see `ebql_compiler::agg`); a window merges its
//!   panes' values with each aggregate's `Synopsis::merge` and evaluates
//!   once. A group absent from every pane of a window is absent from it.
//! - raw streams (and aggregates that run in user space): the pane's decoded
//!   rows; the window's DataFusion plan runs over the rows of its panes.
//! - under `ebql check`, the tap's raw rows, from which the reference
//!   evaluates the same window.
//! - the events the pane lost (exact per pane); a window's drops are the sum.
//!
//! Memory: at most `size / step` panes, each at most the group table's
//! entries (or the step's rows). The first `size / step - 1` windows after
//! the query starts have fewer panes than a full window: they are emitted,
//! starting where the query started, and marked partial
//! ([`Window::panes`] < [`Window::panes_full`]).

use crate::window::WindowDrops;
use datafusion::arrow::record_batch::RecordBatch;
use std::collections::{BTreeMap, VecDeque};

/// A group of a kernel-aggregated pane: its group-table key with the window
/// tag zeroed (so the same group has the same id in every pane), and its CPU
/// when `cpu` is a group key (0 otherwise).
pub type GroupId = (Vec<u8>, usize);

/// What a pane holds of the query's own rows.
#[derive(Debug, Clone)]
pub enum PaneRows {
    /// Kernel-aggregated: each group that saw events in the pane, and its
    /// value (`[count u64][states…]`) merged over CPUs.
    Groups(BTreeMap<GroupId, Vec<u8>>),
    /// Rows the kernel streamed (the user-space plan's input), one batch.
    Rows(RecordBatch),
}

/// One step of a time window: one kernel generation, closed.
#[derive(Debug, Clone)]
pub struct Pane {
    /// CLOCK_MONOTONIC ns when the pane opened (the previous pane's end).
    pub start: u64,
    /// CLOCK_MONOTONIC ns when it was closed (generation flipped).
    pub end: u64,
    /// The query's rows or groups.
    pub rows: PaneRows,
    /// The differential oracle's raw tap rows (`ebql check` only).
    pub reference: Option<RecordBatch>,
    /// Tap events whose pairing the reference cannot order
    /// (`check::Pairer`): a disagreement in a window holding them is inconclusive.
    pub reference_unordered: u64,
    /// Events the kernel could not record in this pane.
    pub drops: WindowDrops,
}

/// A window assembled from its panes, ready for the user-space plan.
#[derive(Debug, Clone)]
pub struct Window {
    /// Start of its first pane (ns).
    pub start: u64,
    /// End of its last pane (ns).
    pub end: u64,
    /// Panes it holds.
    pub panes: usize,
    /// Panes in a full window (`size / step`); more than `panes` only for the
    /// windows emitted before the query has run for `size`.
    pub panes_full: usize,
    /// The sum of its panes' drops.
    pub drops: WindowDrops,
    /// Groups merged over the panes, or the panes' rows.
    pub rows: WindowRows,
    /// The panes' tap rows, oldest first (`ebql check` only).
    pub reference: Option<Vec<RecordBatch>>,
    /// The sum of its panes' [`Pane::reference_unordered`].
    pub reference_unordered: u64,
}

/// The query's part of a [`Window`].
#[derive(Debug, Clone)]
pub enum WindowRows {
    /// Each group that saw events in any pane, its values merged over the panes.
    Groups(Vec<(GroupId, Vec<u8>)>),
    /// The panes' rows, oldest first.
    Rows(Vec<RecordBatch>),
}

/// The open panes of a time-windowed query: the last `size / step` closed ones.
#[derive(Debug)]
pub struct Panes {
    per_window: usize,
    open: VecDeque<Pane>,
}

impl Panes {
    /// Keeps the last `per_window` panes (at least 1).
    pub fn new(per_window: usize) -> Panes {
        let per_window = per_window.max(1);
        Panes {
            per_window,
            open: VecDeque::with_capacity(per_window),
        }
    }

    /// Adds a closed pane (the newest) and forgets the one that no window needs any more.
    pub fn push(&mut self, pane: Pane) {
        if self.open.len() == self.per_window {
            self.open.pop_front();
        }
        self.open.push_back(pane);
    }

    /// The window made of the panes held (the last `size / step` closed),
    /// group values combined with `merge` (count and states, see
    /// `decode::merge_value`). `None` before the first pane.
    pub fn window(&self, merge: impl Fn(&mut [u8], &[u8])) -> Option<Window> {
        let first = self.open.front()?;
        let last = self.open.back()?;
        let mut drops = WindowDrops::default();
        for p in &self.open {
            drops.add(&p.drops);
        }
        let rows = match &last.rows {
            PaneRows::Groups(_) => {
                let mut merged: BTreeMap<&GroupId, Vec<u8>> = BTreeMap::new();
                for p in &self.open {
                    let PaneRows::Groups(groups) = &p.rows else {
                        continue;
                    };
                    for (id, value) in groups {
                        match merged.get_mut(id) {
                            Some(into) => merge(into, value),
                            None => {
                                merged.insert(id, value.clone());
                            }
                        }
                    }
                }
                WindowRows::Groups(merged.into_iter().map(|(id, v)| (id.clone(), v)).collect())
            }
            PaneRows::Rows(_) => WindowRows::Rows(
                self.open
                    .iter()
                    .filter_map(|p| match &p.rows {
                        PaneRows::Rows(b) => Some(b.clone()),
                        PaneRows::Groups(_) => None,
                    })
                    .collect(),
            ),
        };
        let reference = last.reference.is_some().then(|| {
            self.open
                .iter()
                .filter_map(|p| p.reference.clone())
                .collect()
        });
        Some(Window {
            start: first.start,
            end: last.end,
            panes: self.open.len(),
            panes_full: self.per_window,
            drops,
            rows,
            reference,
            reference_unordered: self.open.iter().map(|p| p.reference_unordered).sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::UInt64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    /// A value `[count][sum]` and a merge that adds both, like COUNT and SUM.
    fn value(count: u64, sum: u64) -> Vec<u8> {
        [count.to_le_bytes(), sum.to_le_bytes()].concat()
    }

    fn add(into: &mut [u8], from: &[u8]) {
        for i in 0..2 {
            let r = i * 8..i * 8 + 8;
            let s = u64::from_le_bytes(into[r.clone()].try_into().unwrap())
                + u64::from_le_bytes(from[r.clone()].try_into().unwrap());
            into[r].copy_from_slice(&s.to_le_bytes());
        }
    }

    fn group_pane(start: u64, groups: &[(u8, u64, u64)], dropped: u64) -> Pane {
        let groups = groups
            .iter()
            .map(|&(k, c, s)| ((vec![k, 0, 0, 0], 0), value(c, s)))
            .collect();
        Pane {
            start,
            end: start + 10,
            rows: PaneRows::Groups(groups),
            reference: None,
            reference_unordered: 0,
            drops: WindowDrops {
                groups_full: dropped,
                ..Default::default()
            },
        }
    }

    fn groups(w: &Window) -> Vec<(u8, Vec<u8>)> {
        match &w.rows {
            WindowRows::Groups(g) => g.iter().map(|((k, _), v)| (k[0], v.clone())).collect(),
            WindowRows::Rows(_) => panic!("rows"),
        }
    }

    #[test]
    fn windows_merge_the_last_panes_and_forget_older_ones() {
        let mut p = Panes::new(3);
        assert!(p.window(add).is_none());
        p.push(group_pane(0, &[(1, 2, 20)], 0));
        let w = p.window(add).unwrap();
        assert_eq!((w.start, w.end, w.panes, w.panes_full), (0, 10, 1, 3));
        assert_eq!(groups(&w), vec![(1, value(2, 20))]);
        p.push(group_pane(10, &[(1, 1, 5), (2, 4, 40)], 3));
        p.push(group_pane(20, &[], 1));
        let w = p.window(add).unwrap();
        assert_eq!((w.start, w.end, w.panes), (0, 30, 3));
        assert_eq!(groups(&w), vec![(1, value(3, 25)), (2, value(4, 40))]);
        assert_eq!(w.drops.groups_full, 4);
        // The first pane leaves: group 1 keeps only its second pane's share.
        p.push(group_pane(30, &[(3, 1, 1)], 0));
        let w = p.window(add).unwrap();
        assert_eq!((w.start, w.end, w.panes), (10, 40, 3));
        assert_eq!(
            groups(&w),
            vec![(1, value(1, 5)), (2, value(4, 40)), (3, value(1, 1))]
        );
        assert_eq!(w.drops.groups_full, 4);
        // A group absent from every pane of the window is gone.
        p.push(group_pane(40, &[], 0));
        p.push(group_pane(50, &[], 0));
        let w = p.window(add).unwrap();
        assert_eq!(groups(&w), vec![(3, value(1, 1))]);
        p.push(group_pane(60, &[], 0));
        assert!(groups(&p.window(add).unwrap()).is_empty());
    }

    #[test]
    fn stream_windows_hold_their_panes_rows_in_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::UInt64, false)]));
        let batch = |v: Vec<u64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(v))]).unwrap()
        };
        let mut p = Panes::new(2);
        for (i, v) in [vec![1, 2], vec![], vec![3]].into_iter().enumerate() {
            let b = batch(v);
            p.push(Pane {
                start: i as u64,
                end: i as u64 + 1,
                rows: PaneRows::Rows(b.clone()),
                reference: Some(b),
                reference_unordered: 0,
                drops: WindowDrops::default(),
            });
        }
        let w = p.window(add).unwrap();
        let WindowRows::Rows(rows) = &w.rows else {
            panic!("groups")
        };
        assert_eq!(
            rows.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(w.reference.as_ref().map(|r| r.len()), Some(2));
        assert_eq!((w.start, w.end), (1, 3));
    }
}
