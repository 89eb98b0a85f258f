//! hybridplan-core: plans which activations of a training step to swap to
//! host memory and which to recompute, under a device memory budget.
//!
//! The crate knows nothing of Python or TensorFlow: it reads a serialized
//! `GraphDef` (or flat node specs) and works on integer ids, byte sizes and
//! seconds. The phases, each in its own module:
//!
//! | phase | module | what |
//! |---|---|---|
//! | decode + build | `flatdecode`, `direct` (with `nametable`) | `GraphDef` bytes -> [`graph::Graph`] (CSR arrays) in one pass over flat arrays, with typed errors: [`graph_from_bytes`] |
//! | build | [`build`] | flat node specs -> [`graph::Graph`]; what both routes share; op facts from [`opkind`] |
//! | test oracle | `graphdef`, `reference` (tests and the `testing` feature) | the reference decoder: `GraphDef` bytes -> borrowed node records -> node specs |
//! | phases | [`phase`] | forward / backward / update from the loss |
//! | schedule | [`schedule`] | deterministic topological order |
//! | liveness | [`liveness`], [`inplace`], [`workspace`] | live intervals, memory timeline, peak; outputs written into their input's buffer; the kernels' scratch |
//! | device | [`device`] | device and host-link models, named presets |
//! | cost | [`cost`] | op times: roofline from FLOPs and bytes, or a measured profile |
//! | simulate | [`simulate`] | compute + D2H + H2D streams: step time, stall, peak, timeline ([`simulate::Simulator::run`], at a [`simulate::Detail`]) |
//! | hosting | [`hosting`] | loop accumulators kept on the host: the checks, the model, the search |
//! | plan | [`plan`] | candidates, units, options, the greedy, TFLMS, the strategies ([`plan::planner`]) |
//! | all of it | [`api`] | bytes -> analysis -> plan -> simulated report, in one call |
//! | export | [`export`] | the problem as plain data for exact solvers; an outside plan judged |
//! | replay | [`replay`] | a plan as a self-contained program for a GPU runner (`replay/`) |
//! | write-back | [`writeback`] | a plan's swaps written into the `GraphDef` bytes (the Python writer adds recomputes) |
//!
//! `synth` (synthetic training steps, for tests, benchmarks and
//! experiments) is compiled with the `testing` feature only.
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use hybridplan_core::{analyze, build::BuildOptions, synth};
//! let bytes = synth::residual_graphdef(&synth::SynthSpec { blocks: 2, ..Default::default() });
//! let a = analyze(&bytes, &BuildOptions::default()).unwrap();
//! assert!(a.liveness.peak_bytes > a.graph.persistent_bytes);
//! # }
//! ```

pub mod api;
pub mod body;
pub mod build;
pub mod cost;
pub(crate) mod dead;
pub mod device;
pub(crate) mod direct;
pub mod dtype;
pub(crate) mod error;
pub mod export;
pub mod facts;
pub(crate) mod flatdecode;
pub mod graph;
#[cfg(any(test, feature = "testing"))]
pub mod graphdef;
pub mod host;
pub mod hosting;
pub(crate) mod inplace;
pub mod liveness;
pub(crate) mod nametable;
pub mod opkind;
pub mod opscan;
pub(crate) mod phase;
pub mod plan;
#[cfg(any(test, feature = "testing"))]
pub mod reference;
pub mod replay;
pub mod schedule;
pub mod schema;
pub mod simulate;
#[cfg(feature = "testing")]
pub mod synth;
pub(crate) mod wire;
pub mod workspace;
pub mod writeback;

pub use direct::graph_from_bytes;
pub use error::{PlanError, Result};

/// A graph with its schedule and liveness.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub graph: graph::Graph,
    pub schedule: schedule::Schedule,
    pub liveness: liveness::Liveness,
}

/// Decodes, builds, schedules and analyses a serialized `GraphDef`.
///
/// # Errors
/// Any [`PlanError`] of the decode, build and schedule phases.
///
/// # Complexity
/// O(bytes + N log N + E).
pub fn analyze(bytes: &[u8], opts: &build::BuildOptions) -> Result<Analysis> {
    let graph = graph_from_bytes(bytes, opts)?;
    analyze_graph(graph)
}

/// Schedules and analyses an already built graph.
///
/// # Errors
/// [`PlanError::Cycle`].
pub fn analyze_graph(graph: graph::Graph) -> Result<Analysis> {
    let schedule = schedule::schedule(&graph)?;
    let liveness = liveness::liveness(&graph, &schedule);
    Ok(Analysis {
        graph,
        schedule,
        liveness,
    })
}
