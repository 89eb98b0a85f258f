//! A plan as plain data: which tensors are swapped (and when each swap-in
//! starts), which forward ops are cloned in the backward pass (and when).
//!
//! Tests, the simulator and the rewrite all read this one format; the
//! planners write it. Node and tensor ids are those of [`crate::graph::Graph`].
//!
//! # Semantics
//! - A [`Swap`] copies `tensor` to the host once, starting when it exists and
//!   the device-to-host engine is free (not before node `after` has finished).
//!   Each [`SwapIn`] copies it back, starting when `trigger` has finished and
//!   the host-to-device engine is free; the nodes in `consumers` read that
//!   copy instead of the original, and so do the clones of the nodes in
//!   `clone_consumers`. The original buffer is freed once every other reader
//!   has run and the swap-out has finished. If `release` is set, that node
//!   does not start before the swap-out has finished. A swap-in that
//!   `follows` starts its copy only once the copy of the swap-in listed before
//!   it in the plan with the same trigger (swaps in order, each one's
//!   swap-ins in order) has ended: the order of copies one op releases
//!   together is the plan's (`queue.rs`).
//! - A [`Recompute`] clones `nodes` (in schedule order); the clones run right
//!   after `trigger`. The nodes in `consumers` read the clones' outputs
//!   instead of the originals, and so do the clones of the nodes in
//!   `clone_consumers` (clones of a later recompute). A clone's input from
//!   outside `nodes` reads the original tensor unless a swap-in or an earlier
//!   recompute lists that clone as a clone consumer.

use serde::{Deserialize, Serialize};

/// One swap-in of a swapped tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapIn {
    /// The node whose completion starts the host-to-device copy.
    pub trigger: u32,
    /// Nodes that read the swapped-in copy (sorted, unique).
    pub consumers: Vec<u32>,
    /// Nodes whose recompute clones read the swapped-in copy (sorted, unique).
    #[serde(default)]
    pub clone_consumers: Vec<u32>,
    /// The copy waits for the copy of the previous swap-in with the same
    /// trigger in plan order (a control edge between the two copies).
    #[serde(default)]
    pub follows: bool,
}

/// A tensor copied to the host and back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Swap {
    pub tensor: u32,
    /// The swap-out starts after this node (the producer, or the last
    /// forward reader when the copy should not compete with earlier reads).
    pub after: u32,
    pub ins: Vec<SwapIn>,
    /// This node does not start before the swap-out has ended (a control
    /// edge from the copy): the executor cannot run ahead while the original
    /// stays alive waiting for its copy. [`NONE`](crate::graph::NONE): no
    /// such node. Chosen by `release.rs` where the copy was predicted to
    /// end anyway, so it costs no time in the simulation that chose it;
    /// for a swap the step waits for (`wait.rs`), right after the
    /// original's last forward reader, where the wait is the plan's.
    #[serde(default = "no_node")]
    pub release: u32,
    /// The node that gets the control edge from the copy: `release` itself,
    /// or a variable read feeding it (`release.rs`: Grappler does not fuse
    /// an op that has a control edge, and the unfused kernels round
    /// differently). [`NONE`](crate::graph::NONE) when `release` is.
    #[serde(default = "no_node")]
    pub gate: u32,
}

fn no_node() -> u32 {
    crate::graph::NONE
}

/// A forward sub-graph cloned late in the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recompute {
    /// Original nodes to clone, in schedule order.
    pub nodes: Vec<u32>,
    /// The clones run right after this node.
    pub trigger: u32,
    /// Nodes that read the clones' outputs (sorted, unique).
    pub consumers: Vec<u32>,
    /// Nodes whose clones (of a later recompute) read these clones' outputs.
    #[serde(default)]
    pub clone_consumers: Vec<u32>,
}

/// A whole plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub swaps: Vec<Swap>,
    pub recomputes: Vec<Recompute>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.swaps.is_empty() && self.recomputes.is_empty()
    }
}

pub mod candidates;
pub(crate) mod cuts;
pub(crate) mod d2h;
pub(crate) mod feed;
mod fit;
pub mod greedy;
pub(crate) mod links;
pub(crate) mod memtree;
pub mod options;
mod paper;
pub mod partition;
pub mod planner;
mod portfolio;
pub(crate) mod queue;
pub(crate) mod rebuild;
mod recomputes;
pub(crate) mod release;
pub mod select;
mod spans;
pub(crate) mod stab;
pub mod tflms;
mod tflms_grid;
pub(crate) mod tried;
pub(crate) mod trigger;
mod wait;
