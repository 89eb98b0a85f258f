//! A plan as a self-contained replay program: what a GPU runner with no
//! TensorFlow and no core needs to play the planned step with real kernels,
//! real copies and real allocations, and to set its measurements next to
//! the simulator's predictions (`replay/`, measured by `experiments/gpu/`).
//!
//! # The rule
//! The replay is the simulator's own view of the planned step, written out:
//! - `ops`: the compute stream in the simulator's order (originals in
//!   schedule order, each recompute's clones right after its trigger), each
//!   with its op type, kernel class ([`crate::opkind::kernel_class`]),
//!   inputs (and where each is read from: the original, a swap-in copy or a
//!   clone, [`crate::simulate::stream_items`]), outputs, the in-place rule
//!   ([`crate::inplace`]), its predicted time and its predicted start and end;
//! - `tensors`: dtype, shape, device bytes and buffer owner of every tensor;
//! - `swaps`: each swapped tensor's bytes, producer, `after`, release and
//!   gate nodes, the swap-out's predicted interval, and per swap-in its
//!   trigger, readers (ops and clones) and predicted interval;
//! - `clones`: each recompute (nodes, trigger, consumers);
//! - `timeline`: every stream event (compute, d2h, h2d) sorted by start, as
//!   [`crate::simulate::SimResult::events`] lists them, and the predicted
//!   memory timeline.
//!
//! The swap-ins of one tensor run on the serial host-to-device engine one
//! at a time: the order their copies end in the simulation assigns the
//! simulator's events to them.
//!
//! # Format
//! JSON, `version` [`VERSION`]; a reader refuses another version
//! ([`from_json`]). Seconds and bytes throughout; node and tensor ids are
//! the core's (a node id is its `GraphDef` position).
//!
//! # Complexity
//! One simulation with every event kept, O(simulate + N + T + E + M), and
//! O(P) to read a plan report. Deterministic: the output depends on the
//! graph, plan, device and profile alone.

use serde::{Deserialize, Serialize};

use crate::api::op_times;
use crate::build::BuildOptions;
use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, NONE};
use crate::plan::Plan;
use crate::schema::PlanReport;
use crate::simulate::{stream_items, Detail, EventKind, Read, Simulator};
use crate::Analysis;

/// The version of the replay format this core writes and reads.
pub const VERSION: u32 = 1;

/// A replay program (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub version: u32,
    /// The device model the predictions are for.
    pub device: DeviceModel,
    pub strategy: String,
    /// Device bytes the plan was made for.
    pub budget: u64,
    /// Variables and optimizer slots, on the device for the whole step.
    pub persistent_bytes: u64,
    pub predicted: Predicted,
    pub tensors: Vec<ReplayTensor>,
    pub ops: Vec<ReplayOp>,
    pub swaps: Vec<ReplaySwap>,
    pub clones: Vec<ReplayClone>,
    pub timeline: Vec<ReplayEvent>,
    /// `(time s, device bytes in use)`, the simulator's memory timeline.
    pub memory: Vec<(f64, u64)>,
}

/// The simulator's figures for the planned step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    pub step_time_s: f64,
    pub compute_time_s: f64,
    pub recompute_time_s: f64,
    pub stall_time_s: f64,
    pub peak_bytes: u64,
    pub peak_time_s: f64,
    pub bytes_d2h: u64,
    pub bytes_h2d: u64,
}

/// One tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayTensor {
    /// `node:output`, as TensorFlow names it.
    pub name: String,
    pub node: u32,
    pub output: u32,
    /// TensorFlow's dtype name (`float32`, `int32`, `resource`...).
    pub dtype: String,
    pub shape: Vec<i64>,
    /// Bytes on the device timeline (0 for aliases and handles).
    pub bytes: u64,
    /// Bytes of the value, aliases included.
    pub value_bytes: u64,
    /// The tensor whose buffer this one is (itself unless an alias).
    pub owner: u32,
    /// Made by a source (fed input, constant, variable handle): held by the
    /// caller for the whole step, never written in place.
    pub source: bool,
}

/// Where an op input is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum ReplayRead {
    /// The original tensor.
    Device { tensor: u32 },
    /// The copy brought back by `swaps[swap].ins[index]`.
    SwapIn { tensor: u32, swap: u32, index: u32 },
    /// The output of the clone of `clones[recompute].nodes[index]`.
    Clone {
        tensor: u32,
        recompute: u32,
        index: u32,
    },
}

/// Which input an op may write its output into (TensorFlow's forwarding).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InPlace {
    /// Input slots tried, in order.
    pub slots: Vec<u32>,
    /// The output (tensor id) written in place.
    pub output: u32,
}

/// One item of the compute stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayOp {
    pub node: u32,
    pub name: String,
    /// The op type (`Conv2D`, ...).
    pub op: String,
    /// [`crate::opkind::kernel_class`], or `None`: a busy kernel of `time_s`.
    pub kernel: Option<String>,
    /// `forward`, `backward`, `update` or `other`.
    pub phase: String,
    /// `[recompute, index]` for a clone.
    pub clone: Option<[u32; 2]>,
    pub inputs: Vec<ReplayRead>,
    /// Output tensor ids (a clone's outputs are new buffers of these shapes).
    pub outputs: Vec<u32>,
    pub inplace: Option<InPlace>,
    /// Predicted kernel time (cost model or profile).
    pub time_s: f64,
    pub start_s: f64,
    pub end_s: f64,
}

/// One swap-in of a swapped tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySwapIn {
    /// The copy starts when this node has run (and the swap-out has ended).
    pub trigger: u32,
    /// Original ops reading the copy.
    pub readers: Vec<u32>,
    /// Nodes whose clones read the copy.
    pub clone_readers: Vec<u32>,
    pub start_s: f64,
    pub end_s: f64,
}

/// One swapped tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySwap {
    pub tensor: u32,
    pub bytes: u64,
    pub producer: u32,
    /// The swap-out starts after this node has run.
    pub after: u32,
    /// This node does not start before the swap-out has ended.
    pub release: Option<u32>,
    /// The node with the control edge from the swap-out in the rewritten graph.
    pub gate: Option<u32>,
    pub start_s: f64,
    pub end_s: f64,
    pub ins: Vec<ReplaySwapIn>,
}

/// One recompute: its clones run right after `trigger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayClone {
    pub nodes: Vec<u32>,
    pub trigger: u32,
    pub consumers: Vec<u32>,
    pub clone_consumers: Vec<u32>,
}

/// One stream event. `index`: the op (position in `ops`) on `compute`, the
/// swap on `d2h` and `h2d`; `swap_in`: the swap-in's index on `h2d`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayEvent {
    /// `compute`, `d2h` or `h2d`.
    pub stream: String,
    pub index: u32,
    pub swap_in: Option<u32>,
    pub start_s: f64,
    pub end_s: f64,
}

/// The replay of `plan` on the analysed graph `a`, predicted on `dev` with
/// op times from the cost model or `profile` (`(node id, seconds)`).
///
/// # Errors
/// [`PlanError::InvalidArgument`] for an invalid device, profile or plan (as
/// [`crate::simulate::Simulator::run`]).
///
/// # Complexity
/// See the module docs.
pub fn replay(
    a: &Analysis,
    dev: &DeviceModel,
    plan: &Plan,
    profile: &[(u32, f64)],
    strategy: &str,
    budget: u64,
) -> Result<Replay> {
    dev.validate()?;
    let g = &a.graph;
    let (times, _) = op_times(g, dev, profile)?;
    let every = Detail::Full {
        max_events: usize::MAX,
    };
    let sim = Simulator::new(g, &a.schedule, &times, dev)?.run(plan, every)?;
    let items = stream_items(g, &a.schedule, plan)?;
    let table = crate::inplace::table(g);
    let mut ops: Vec<ReplayOp> = items
        .iter()
        .map(|it| replay_op(g, &table, &times, it))
        .collect();
    let mut swaps = replay_swaps(g, plan);
    let timeline = place_events(plan, &sim, &mut ops, &mut swaps)?;
    Ok(Replay {
        version: VERSION,
        device: dev.clone(),
        strategy: strategy.to_string(),
        budget,
        persistent_bytes: g.persistent_bytes,
        predicted: Predicted {
            step_time_s: sim.step_time_s,
            compute_time_s: sim.compute_time_s,
            recompute_time_s: sim.recompute_time_s,
            stall_time_s: sim.stall_time_s,
            peak_bytes: sim.peak_bytes,
            peak_time_s: sim.peak_time_s,
            bytes_d2h: sim.bytes_d2h,
            bytes_h2d: sim.bytes_h2d,
        },
        tensors: replay_tensors(a),
        ops,
        swaps,
        clones: plan
            .recomputes
            .iter()
            .map(|r| ReplayClone {
                nodes: r.nodes.clone(),
                trigger: r.trigger,
                consumers: r.consumers.clone(),
                clone_consumers: r.clone_consumers.clone(),
            })
            .collect(),
        timeline,
        memory: sim.timeline,
    })
}

fn replay_tensors(a: &Analysis) -> Vec<ReplayTensor> {
    let g = &a.graph;
    (0..g.num_tensors() as u32)
        .map(|t| {
            let tt = &g.tensors[t as usize];
            ReplayTensor {
                name: g.tensor_name(t),
                node: tt.node,
                output: tt.index,
                dtype: tt.dtype.name().to_string(),
                shape: g.shape(t).to_vec(),
                bytes: tt.bytes,
                value_bytes: tt.value_bytes,
                owner: a.liveness.owner[t as usize],
                source: crate::inplace::pinned(g, tt.node),
            }
        })
        .collect()
}

fn replay_op(g: &Graph, table: &[u8], times: &[f64], it: &crate::simulate::StreamItem) -> ReplayOp {
    let v = it.node;
    let op = g.op_name(v);
    let inputs = it
        .inputs
        .iter()
        .map(|&r| match r {
            Read::Original { tensor } => ReplayRead::Device { tensor },
            Read::SwapIn {
                tensor,
                swap,
                index,
            } => ReplayRead::SwapIn {
                tensor,
                swap,
                index,
            },
            Read::Clone {
                tensor,
                recompute,
                index,
            } => ReplayRead::Clone {
                tensor,
                recompute,
                index,
            },
        })
        .collect();
    let inplace = crate::inplace::of_node(g, table, v).map(|(f, out)| InPlace {
        slots: f.slots(g.inputs(v).len()).map(|s| s as u32).collect(),
        output: out,
    });
    ReplayOp {
        node: v,
        name: g.node_name(v).to_string(),
        op: op.to_string(),
        kernel: crate::opkind::kernel_class(op).map(str::to_string),
        phase: g.phase[v as usize].name().to_string(),
        clone: it.clone.map(|(r, i)| [r, i]),
        inputs,
        outputs: g.outputs(v).collect(),
        inplace,
        time_s: times[v as usize],
        start_s: 0.0,
        end_s: 0.0,
    }
}

fn replay_swaps(g: &Graph, plan: &Plan) -> Vec<ReplaySwap> {
    let node = |v: u32| (v != NONE).then_some(v);
    plan.swaps
        .iter()
        .map(|s| {
            let t = &g.tensors[s.tensor as usize];
            ReplaySwap {
                tensor: s.tensor,
                bytes: t.bytes,
                producer: t.node,
                after: s.after,
                release: node(s.release),
                gate: node(s.gate),
                start_s: 0.0,
                end_s: 0.0,
                ins: s
                    .ins
                    .iter()
                    .map(|i| ReplaySwapIn {
                        trigger: i.trigger,
                        readers: i.consumers.clone(),
                        clone_readers: i.clone_consumers.clone(),
                        start_s: 0.0,
                        end_s: 0.0,
                    })
                    .collect(),
            }
        })
        .collect()
}

fn mismatch(what: &str) -> PlanError {
    PlanError::InvalidArgument(format!(
        "internal error: the simulator's events do not match the plan ({what}); please report it with the graph and plan"
    ))
}

/// Copies the simulator's event times onto the ops and swaps, and lists the
/// events as the replay's timeline (same order).
fn place_events(
    plan: &Plan,
    sim: &crate::simulate::SimResult,
    ops: &mut [ReplayOp],
    swaps: &mut [ReplaySwap],
) -> Result<Vec<ReplayEvent>> {
    let events = &sim.events;
    let swap_of: rustc_hash::FxHashMap<u32, u32> = plan
        .swaps
        .iter()
        .enumerate()
        .map(|(k, s)| (s.tensor, k as u32))
        .collect();
    // Swap-ins of each swap in the order the engine serves them, one at a
    // time: the order their copies end.
    let mut base = 0usize;
    let mut in_queue: Vec<std::collections::VecDeque<u32>> = Vec::with_capacity(plan.swaps.len());
    for s in &plan.swaps {
        let end = |j: u32| {
            sim.swap_in_end
                .get(base + j as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        let mut js: Vec<u32> = (0..s.ins.len() as u32).collect();
        js.sort_by(|&a, &b| end(a).total_cmp(&end(b)).then(a.cmp(&b)));
        in_queue.push(js.into());
        base += s.ins.len();
    }
    let mut next_op = 0usize;
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let (stream, index, swap_in) = match e.kind {
            EventKind::Op | EventKind::Clone => {
                let o = ops.get_mut(next_op).ok_or_else(|| mismatch("extra op"))?;
                if o.node != e.id || o.clone.is_some() != (e.kind == EventKind::Clone) {
                    return Err(mismatch("op order"));
                }
                (o.start_s, o.end_s) = (e.start_s, e.end_s);
                next_op += 1;
                ("compute", next_op as u32 - 1, None)
            }
            EventKind::SwapOut => {
                let k = *swap_of.get(&e.id).ok_or_else(|| mismatch("swap-out"))?;
                let s = &mut swaps[k as usize];
                (s.start_s, s.end_s) = (e.start_s, e.end_s);
                ("d2h", k, None)
            }
            EventKind::SwapIn => {
                let k = *swap_of.get(&e.id).ok_or_else(|| mismatch("swap-in"))?;
                let j = in_queue[k as usize]
                    .pop_front()
                    .ok_or_else(|| mismatch("swap-in count"))?;
                let si = &mut swaps[k as usize].ins[j as usize];
                (si.start_s, si.end_s) = (e.start_s, e.end_s);
                ("h2d", k, Some(j))
            }
        };
        out.push(ReplayEvent {
            stream: stream.to_string(),
            index,
            swap_in,
            start_s: e.start_s,
            end_s: e.end_s,
        });
    }
    if next_op != ops.len() || in_queue.iter().any(|q| !q.is_empty()) {
        return Err(mismatch("missing events"));
    }
    Ok(out)
}

/// The plan of a plan report's JSON (the plan schema, `schema.rs`: a
/// report made by the planner or saved by the Python `Plan.save`), with its
/// strategy and budget.
///
/// # Errors
/// [`PlanError::PlanVersion`] for a plan of another schema version,
/// [`PlanError::InvalidArgument`] when the JSON is not a plan report,
/// names a node or output `g` lacks, or keeps loop accumulators on the host.
///
/// # Complexity
/// O(plan size).
pub fn plan_from_report(g: &Graph, report_json: &str) -> Result<(Plan, String, u64)> {
    let r = PlanReport::from_json(report_json)?;
    if !r.hosted_accumulators.is_empty() {
        return Err(PlanError::InvalidArgument(
            "the plan keeps loop accumulators on the host (hosted_accumulators), which only \
             the cpu-emulation rewrite writes and the replay's GPU runner cannot: plan the step \
             for a GPU device model, whose plans keep them on the device"
                .into(),
        ));
    }
    Ok((r.plan(g)?, r.strategy, r.budget))
}

/// Decodes and analyses `GraphDef` bytes and writes the replay of the plan
/// in `report_json` (see [`plan_from_report`]) as JSON.
///
/// # Errors
/// Any [`PlanError`] of decoding and analysis; as [`plan_from_report`] and
/// [`replay`].
pub fn replay_json(
    bytes: &[u8],
    build: &BuildOptions,
    dev: &DeviceModel,
    report_json: &str,
    profile: &[(u32, f64)],
) -> Result<String> {
    replay_analysis_json(&crate::analyze(bytes, build)?, dev, report_json, profile)
}

/// [`replay_json`] of an analysed graph.
///
/// # Errors
/// As [`plan_from_report`] and [`replay`].
pub fn replay_analysis_json(
    a: &Analysis,
    dev: &DeviceModel,
    report_json: &str,
    profile: &[(u32, f64)],
) -> Result<String> {
    let (plan, strategy, budget) = plan_from_report(&a.graph, report_json)?;
    let r = replay(a, dev, &plan, profile, &strategy, budget)?;
    serde_json::to_string(&r)
        .map_err(|e| PlanError::InvalidArgument(format!("cannot serialise the replay: {e}")))
}

/// Reads a replay written by this core.
///
/// # Errors
/// [`PlanError::InvalidArgument`] for JSON that is not a replay, or one of
/// another format version.
pub fn from_json(text: &str) -> Result<Replay> {
    #[derive(Deserialize)]
    struct Version {
        version: u32,
    }
    let v: Version = serde_json::from_str(text)
        .map_err(|e| PlanError::InvalidArgument(format!("not a replay (no version field): {e}")))?;
    if v.version != VERSION {
        return Err(PlanError::InvalidArgument(format!(
            "replay format version {} is not {VERSION}, the version this core reads: write it again with this hybridplan",
            v.version
        )));
    }
    serde_json::from_str(text)
        .map_err(|e| PlanError::InvalidArgument(format!("not a valid replay: {e}")))
}
