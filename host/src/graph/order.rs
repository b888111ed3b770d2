//! The order of nodes in each (sub-)graph: a doubly linked list with ordinals.
//!
//! Inserting before a node, erasing one and asking "is `a` before `b`" are all
//! O(1): ordinals leave gaps, and only when a gap is used up is the graph
//! renumbered (O(n), rare). A `Vec` order made every fix call O(n).

use super::{Graph, NodeId};

/// Space left between neighbours' ordinals.
const GAP: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Link {
    prev: Option<NodeId>,
    next: Option<NodeId>,
    ordinal: u64,
}

/// Ends of one graph's list.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Ends {
    pub head: Option<NodeId>,
    pub tail: Option<NodeId>,
    pub len: usize,
}

impl Graph {
    fn link_mut(&mut self, id: NodeId) -> &mut Link {
        let index = id.0 as usize;
        if self.links.len() <= index {
            self.links.resize(index + 1, Link::default());
        }
        &mut self.links[index]
    }

    pub(super) fn ordinal(&self, id: NodeId) -> u64 {
        self.links[id.0 as usize].ordinal
    }

    pub(super) fn prev(&self, id: NodeId) -> Option<NodeId> {
        self.links[id.0 as usize].prev
    }

    /// Places `id` right after `after` (at the head with None) in `subgraph`.
    pub(super) fn place_after(&mut self, subgraph: u32, after: Option<NodeId>, id: NodeId) {
        let ends = self.subgraphs[subgraph as usize].ends;
        let next = match after {
            Some(a) => self.links[a.0 as usize].next,
            None => ends.head,
        };
        *self.link_mut(id) = Link { prev: after, next, ordinal: 0 };
        match after {
            Some(a) => self.links[a.0 as usize].next = Some(id),
            None => self.subgraphs[subgraph as usize].ends.head = Some(id),
        }
        match next {
            Some(n) => self.links[n.0 as usize].prev = Some(id),
            None => self.subgraphs[subgraph as usize].ends.tail = Some(id),
        }
        self.subgraphs[subgraph as usize].ends.len += 1;
        self.assign_ordinal(subgraph, id);
    }

    /// Takes `id` out of `subgraph`'s list; returns the node it followed.
    pub(super) fn unplace(&mut self, subgraph: u32, id: NodeId) -> Option<NodeId> {
        let Link { prev, next, .. } = self.links[id.0 as usize];
        match prev {
            Some(p) => self.links[p.0 as usize].next = next,
            None => self.subgraphs[subgraph as usize].ends.head = next,
        }
        match next {
            Some(n) => self.links[n.0 as usize].prev = prev,
            None => self.subgraphs[subgraph as usize].ends.tail = prev,
        }
        self.links[id.0 as usize] = Link::default();
        self.subgraphs[subgraph as usize].ends.len -= 1;
        prev
    }

    fn assign_ordinal(&mut self, subgraph: u32, id: NodeId) {
        let Link { prev, next, .. } = self.links[id.0 as usize];
        let low = prev.map_or(0, |p| self.ordinal(p));
        let ordinal = match next {
            None => low + GAP,
            Some(n) => {
                let high = self.ordinal(n);
                if high - low < 2 {
                    self.renumber(subgraph);
                    return;
                }
                low + (high - low) / 2
            }
        };
        self.links[id.0 as usize].ordinal = ordinal;
    }

    fn renumber(&mut self, subgraph: u32) {
        let mut cursor = self.subgraphs[subgraph as usize].ends.head;
        let mut ordinal = GAP;
        while let Some(id) = cursor {
            self.links[id.0 as usize].ordinal = ordinal;
            ordinal += GAP;
            cursor = self.links[id.0 as usize].next;
        }
    }

    /// The nodes of `subgraph`, first to last.
    pub fn order(&self, subgraph: u32) -> impl DoubleEndedIterator<Item = NodeId> + '_ {
        let ends = self.subgraphs.get(subgraph as usize).map(|s| s.ends).unwrap_or_default();
        OrderIter { graph: self, front: ends.head, back: ends.tail, left: ends.len }
    }
}

struct OrderIter<'a> {
    graph: &'a Graph,
    front: Option<NodeId>,
    back: Option<NodeId>,
    left: usize,
}

impl Iterator for OrderIter<'_> {
    type Item = NodeId;
    fn next(&mut self) -> Option<NodeId> {
        if self.left == 0 {
            return None;
        }
        let id = self.front?;
        self.left -= 1;
        self.front = self.graph.links[id.0 as usize].next;
        Some(id)
    }
}

impl DoubleEndedIterator for OrderIter<'_> {
    fn next_back(&mut self) -> Option<NodeId> {
        if self.left == 0 {
            return None;
        }
        let id = self.back?;
        self.left -= 1;
        self.back = self.graph.links[id.0 as usize].prev;
        Some(id)
    }
}
