//! Loop accumulators kept on the host: which of a loop's `TensorList`s the
//! plan keeps in host memory, element by element, and what that costs.
//!
//! # The rule
//! A forward `While` whose gradient is taken pushes, every iteration, each
//! value its gradient loop reads onto a `TensorList` accumulator (a loop
//! output that only the gradient loop reads, which pops one element per
//! iteration). The caller (Python: `hybridplan.accumulators`, which reads the
//! loops' bodies) states each such list that can be kept on the host, an
//! [`AccumulatorStatement`]: the forward loop's output, the gradient loop's
//! input that reads it, one element's dtype and shape, the trip count, the
//! output of the same loop that holds the same elements too (counted once,
//! in the accumulator, while it is on the device: `crate::body`), and each
//! loop's per-iteration scratch when its lists are hosted (the copies are
//! nodes of the bodies). [`resolve`] checks the graph side of every
//! statement and returns a typed error for a bad one.
//!
//! Hosting is the planner's last resort: the step is planned with every list
//! on the device first; when that does not fit, the largest lists are hosted
//! first, as few as the budget needs ([`fewest`]: bisection over the count).
//! Only a device model of TensorFlow's CPU kernels (the devices of the
//! `cpu-emulation` rewrite) may host lists: on a GPU a push or pop placed on
//! the host makes TensorFlow copy the whole `TensorList` each iteration, and
//! the GPU rewrite cannot write such a plan.
//!
//! # The model
//! - A hosted list holds 0 device bytes; the output that shares its elements
//!   (when not hosted itself) holds them instead. Each loop's scratch is the
//!   larger of its own and the stated hosted scratch ([`hosted_analysis`]).
//! - Each per-iteration copy costs the link latency plus its bytes at the
//!   link bandwidth (device-to-host in the forward loop, host-to-device in
//!   the gradient loop). The forward loop takes the longer of its compute
//!   and its copies (they overlap); the gradient loop, run one iteration at a
//!   time (`parallel_iterations = 1`), its compute plus its copies. The copies
//!   are in the loops' op times ([`add_copy_times`]), so the simulated step
//!   holds them.
//! - A hosted list's bytes are held in host memory from the forward loop's
//!   start to the gradient loop's end ([`buffers`]): in the plan's host peak,
//!   under `host_budget`, and in the report's `bytes_d2h` / `bytes_h2d`.
//!
//! # Complexity
//! [`resolve`]: O(S log S + S * (dims + readers)) for S statements after the
//! name lookups. [`hosted_analysis`]: O(N + T) (a clone, and a new schedule
//! and liveness: O(N log N + E)). [`fewest`]: at most `2 + ceil(log2 A)`
//! plannings for A lists.

use crate::device::DeviceModel;
use crate::error::{PlanError, Result};
use crate::graph::{Graph, NodeFlags, NONE};
use crate::host::HostBuffer;
use crate::schema::HostedAccumulator;
use crate::simulate::SimResult;
use crate::Analysis;

/// One accumulator the caller says can be kept on the host (see the module
/// doc). Bytes; names of the graph's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccumulatorStatement {
    /// The forward loop's node name.
    pub forward: String,
    /// Its output that is the list.
    pub output: u32,
    /// The gradient loop that pops it.
    pub gradient: String,
    /// The gradient loop's input that reads the list.
    pub input: u32,
    /// `DataType` enum value of one element.
    pub dtype: i64,
    /// Shape of one element (every dimension known).
    pub dims: Vec<i64>,
    /// Elements in the list (the trip count).
    pub count: u64,
    /// Another output of the forward loop that holds the same elements.
    pub shared_with: Option<u32>,
    /// The forward loop's per-iteration scratch with its lists hosted.
    pub forward_scratch: u64,
    /// The gradient loop's per-iteration scratch with its lists hosted.
    pub gradient_scratch: u64,
}

/// A checked statement, by ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostable {
    pub forward: u32,
    pub output: u32,
    /// The list tensor (the forward loop's output).
    pub tensor: u32,
    pub gradient: u32,
    /// Bytes of one element.
    pub element_bytes: u64,
    pub count: u64,
    /// The tensor that holds the same elements, or [`NONE`].
    pub shared: u32,
    pub forward_scratch: u64,
    pub gradient_scratch: u64,
}

impl Hostable {
    /// The list's bytes: `count * element_bytes` (below 2^63, checked).
    pub fn bytes(&self) -> u64 {
        self.count * self.element_bytes
    }
}

/// Checks `stated` against `g` and returns the lists by ids, largest first
/// (ties: a list sharing its elements with another last, then by tensor id).
///
/// # Errors
/// [`PlanError::Hosting`] for a statement whose loops, output or input are
/// not in the graph or not a loop accumulator read by the gradient loop
/// alone, whose element size is unknown, or that repeats another.
pub(crate) fn resolve(
    g: &Graph,
    stated: &[AccumulatorStatement],
    lookup: &impl Fn(&Graph, &str) -> Option<u32>,
) -> Result<Vec<Hostable>> {
    let mut out = Vec::with_capacity(stated.len());
    for s in stated {
        let h = check(g, s, lookup).map_err(|reason| PlanError::Hosting {
            node: s.forward.clone(),
            output: s.output,
            reason,
        })?;
        if out.iter().any(|o: &Hostable| o.tensor == h.tensor) {
            return Err(PlanError::Hosting {
                node: s.forward.clone(),
                output: s.output,
                reason: "is stated twice".into(),
            });
        }
        out.push(h);
    }
    // Among lists of one size, one whose elements no other list holds first:
    // hosting it frees all of its bytes.
    out.sort_by_key(|h| (std::cmp::Reverse(h.bytes()), h.shared != NONE, h.tensor));
    Ok(out)
}

/// One statement's graph side, or why it is wrong.
fn check(
    g: &Graph,
    s: &AccumulatorStatement,
    lookup: &impl Fn(&Graph, &str) -> Option<u32>,
) -> std::result::Result<Hostable, String> {
    let forward = stated_loop(g, &s.forward, lookup)?;
    let gradient = stated_loop(g, &s.gradient, lookup)?;
    if forward == gradient {
        return Err("names the same loop as forward and gradient loop".into());
    }
    let tensor = handle_output(g, forward, s.output)?;
    let readers = g.consumers(tensor);
    let slot = g.inputs(gradient).get(s.input as usize).copied();
    if readers.len() != 1 || readers[0] != gradient || slot != Some(tensor) {
        return Err(format!(
            "is not read by input {} of loop '{}' alone",
            s.input, s.gradient
        ));
    }
    let shared = match s.shared_with {
        Some(k) if k == s.output => return Err("shares its elements with itself".into()),
        Some(k) => handle_output(g, forward, k)?,
        None => NONE,
    };
    let element_bytes = element_bytes(s.dtype, &s.dims, s.count)
        .ok_or_else(|| format!("has elements of dtype {} and shape {:?} x {}, whose size is unknown or past 2^63 bytes", s.dtype, s.dims, s.count))?;
    Ok(Hostable {
        forward,
        output: s.output,
        tensor,
        gradient,
        element_bytes,
        count: s.count,
        shared,
        forward_scratch: s.forward_scratch,
        gradient_scratch: s.gradient_scratch,
    })
}

/// The node named `name`: a loop whose body memory was stated.
fn stated_loop(
    g: &Graph,
    name: &str,
    lookup: &impl Fn(&Graph, &str) -> Option<u32>,
) -> std::result::Result<u32, String> {
    let v = lookup(g, name).ok_or_else(|| format!("names node '{name}', not in the graph"))?;
    let n = &g.nodes[v as usize];
    if !crate::opkind::is_loop(g.op_name(v)) || !n.flags.has(NodeFlags::BODY_KNOWN) {
        return Err(format!(
            "names node '{name}', which is not a loop whose body memory is stated"
        ));
    }
    Ok(v)
}

/// Output `k` of node `v`, a handle (`variant`).
fn handle_output(g: &Graph, v: u32, k: u32) -> std::result::Result<u32, String> {
    match g.outputs(v).nth(k as usize) {
        Some(t) if g.tensors[t as usize].dtype.is_handle() => Ok(t),
        Some(_) => Err(format!("names output {k}, which is not a list")),
        None => Err(format!("names output {k}, which the loop lacks")),
    }
}

/// Bytes of one element, when `count` of them stay below 2^63 bytes.
fn element_bytes(dtype: i64, dims: &[i64], count: u64) -> Option<u64> {
    let one = crate::body::held_bytes(&crate::body::Held {
        output: 0,
        branch: 0,
        dtype,
        dims: dims.to_vec(),
        count: 1,
    })?;
    let all = u128::from(one) * u128::from(count);
    (all < 1u128 << 63).then_some(one)
}

/// The analysis of `a`'s graph with `lists` hosted: their tensors hold 0
/// device bytes, a tensor that shares their elements (not hosted itself)
/// holds them, each loop's scratch is at least its hosted scratch.
///
/// # Errors
/// [`PlanError::Cycle`] (never for a graph `a` scheduled).
pub(crate) fn hosted_analysis(a: &Analysis, lists: &[Hostable]) -> Result<Analysis> {
    let mut g = a.graph.clone();
    let hosted = |t: u32| lists.iter().any(|h| h.tensor == t);
    for h in lists {
        set_bytes(&mut g, h.tensor, 0);
        if h.shared != NONE && !hosted(h.shared) {
            let b = g.tensors[h.shared as usize].bytes.saturating_add(h.bytes());
            set_bytes(&mut g, h.shared, b);
        }
        raise_scratch(&mut g, h.forward, h.forward_scratch);
        raise_scratch(&mut g, h.gradient, h.gradient_scratch);
    }
    crate::analyze_graph(g)
}

fn set_bytes(g: &mut Graph, t: u32, bytes: u64) {
    let tt = &mut g.tensors[t as usize];
    tt.bytes = bytes;
    tt.value_bytes = bytes;
}

fn raise_scratch(g: &mut Graph, v: u32, bytes: u64) {
    if g.workspace.is_empty() {
        g.workspace = vec![0; g.num_nodes()];
    }
    let w = &mut g.workspace[v as usize];
    *w = (*w).max(bytes);
}

/// Adds the per-iteration copies of `lists` to the loops' op times (see the
/// module doc). O(A + loops).
pub(crate) fn add_copy_times(times: &mut [f64], lists: &[Hostable], dev: &DeviceModel) {
    let copies = |h: &Hostable, bandwidth: f64| {
        h.count as f64 * (dev.link_latency_s + h.element_bytes as f64 / bandwidth)
    };
    let mut out: std::collections::BTreeMap<u32, f64> = Default::default();
    let mut back: std::collections::BTreeMap<u32, f64> = Default::default();
    for h in lists {
        *out.entry(h.forward).or_default() += copies(h, dev.d2h_bandwidth);
        *back.entry(h.gradient).or_default() += copies(h, dev.h2d_bandwidth);
    }
    for (v, c) in out {
        times[v as usize] = times[v as usize].max(c);
    }
    for (v, c) in back {
        times[v as usize] += c;
    }
}

/// The host buffers of `lists` in the simulation `sim` (at full detail) with
/// op times `times`: each list from its forward loop's start to its
/// gradient loop's end. O(A).
pub(crate) fn buffers(lists: &[Hostable], sim: &SimResult, times: &[f64]) -> Vec<HostBuffer> {
    let start = |v: u32| sim.op_start.get(v as usize).copied().unwrap_or(0.0);
    lists
        .iter()
        .map(|h| HostBuffer {
            bytes: h.bytes(),
            from_s: start(h.forward),
            to_s: start(h.gradient) + times[h.gradient as usize],
        })
        .collect()
}

/// Total bytes of `lists`.
pub(crate) fn total_bytes(lists: &[Hostable]) -> u64 {
    lists.iter().fold(0u64, |s, h| s.saturating_add(h.bytes()))
}

/// The plan schema's record of `lists`, in node then output order.
pub(crate) fn records(g: &Graph, lists: &[Hostable]) -> Vec<HostedAccumulator> {
    let mut r: Vec<(u32, u32)> = lists.iter().map(|h| (h.forward, h.output)).collect();
    r.sort_unstable();
    r.into_iter()
        .map(|(v, output)| HostedAccumulator {
            node: String::from(&g.nodes[v as usize].name),
            output,
        })
        .collect()
}

/// Whether `dev` may host lists: TensorFlow's CPU kernels (`kernels` is
/// `cpu` or a CPU scratch rule), the devices of the `cpu-emulation` rewrite.
pub(crate) fn may_host(dev: &DeviceModel) -> bool {
    dev.kernels == "cpu" || dev.kernels.starts_with("cpu-")
}

/// The search: `first` is the plan with every list on the device; when it
/// does not fit (a [`PlanError::Budget`]) and there are `lists` lists,
/// `plan(n)` plans with the `n` largest hosted, and the smallest `n` that
/// fits is found by bisection (fitting taken as monotone in `n`). When even
/// all `lists` hosted do not fit, that planning's error is returned.
/// Returns the count hosted and its plan.
///
/// # Errors
/// `first`'s error when it is not a budget error or there are no lists;
/// else `plan(lists)`'s, or any error of `plan` other than a budget one.
///
/// # Complexity
/// At most `2 + ceil(log2 lists)` plannings, `first` included.
pub(crate) fn fewest<T>(
    lists: usize,
    first: Result<T>,
    mut plan: impl FnMut(usize) -> Result<T>,
) -> Result<(usize, T)> {
    match first {
        Ok(t) => return Ok((0, t)),
        Err(e) if lists == 0 || !matches!(e, PlanError::Budget { .. }) => return Err(e),
        Err(_) => {}
    }
    let mut best = (lists, plan(lists)?);
    let (mut lo, mut hi) = (0, lists); // lo does not fit, hi does
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match plan(mid) {
            Ok(t) => (hi, best) = (mid, (mid, t)),
            Err(PlanError::Budget { .. } | PlanError::HostBudget { .. }) => lo = mid,
            Err(e) => return Err(e),
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{BodyMemory, Held};
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec};
    use crate::dtype::DType;
    use crate::graphdef::Shape;

    /// x -> fwd (While: float out 0, lists 1, 2, 3) -> grad (StatelessWhile,
    /// reads x, lists 1 and 2) -> y; `seq` reads list 3.
    fn graph(hosting: Vec<AccumulatorStatement>) -> Result<Graph> {
        let out = |dtype, dims: Vec<i64>| OutSpec {
            dtype: Some(dtype),
            shape: Shape(Some(dims)),
        };
        let node = |name, op, inputs, outputs, calls_function| NodeSpec {
            name,
            op,
            device: "",
            inputs,
            outputs,
            calls_function,
        };
        let list = || out(DType::VARIANT, vec![]);
        let specs = [
            node(
                "x",
                "Placeholder",
                vec![],
                vec![out(DType::FLOAT, vec![8])],
                false,
            ),
            node(
                "fwd",
                "While",
                vec!["x"],
                vec![out(DType::FLOAT, vec![8]), list(), list(), list()],
                true,
            ),
            node(
                "grad",
                "StatelessWhile",
                vec!["x", "fwd:1", "fwd:2"],
                vec![out(DType::FLOAT, vec![8])],
                true,
            ),
            node(
                "seq",
                "TensorListLength",
                vec!["fwd:3"],
                vec![out(DType::INT32, vec![])],
                false,
            ),
            node(
                "y",
                "AddV2",
                vec!["grad", "fwd"],
                vec![out(DType::FLOAT, vec![8])],
                false,
            ),
        ];
        let held = |output, dims| Held {
            output,
            branch: 0,
            dtype: 1,
            dims,
            count: 4,
        };
        let body = |node: &str, held| BodyMemory {
            node: node.into(),
            scratch_bytes: 10,
            held,
        };
        let bodies = vec![
            body("fwd", vec![held(1, vec![8]), held(2, vec![16])]),
            body("grad", vec![]),
        ];
        build(
            &specs,
            &BuildOptions {
                bodies,
                hosting,
                ..Default::default()
            },
        )
    }

    fn stated(output: u32, input: u32, dims: Vec<i64>) -> AccumulatorStatement {
        AccumulatorStatement {
            forward: "fwd".into(),
            output,
            gradient: "grad".into(),
            input,
            dtype: 1,
            dims,
            count: 4,
            shared_with: None,
            forward_scratch: 40,
            gradient_scratch: 50,
        }
    }

    #[test]
    fn statements_resolve_largest_first() {
        let g = graph(vec![stated(1, 1, vec![8]), stated(2, 2, vec![16])]).unwrap();
        let sizes: Vec<(u32, u64)> = g.hostable.iter().map(|h| (h.output, h.bytes())).collect();
        assert_eq!(sizes, vec![(2, 4 * 16 * 4), (1, 4 * 8 * 4)]);
        assert_eq!((g.hostable[0].forward, g.hostable[0].gradient), (1, 2));
        // One size: the list whose elements another list holds too comes last.
        let shared = AccumulatorStatement {
            shared_with: Some(3),
            ..stated(1, 1, vec![16])
        };
        let g = graph(vec![shared, stated(2, 2, vec![16])]).unwrap();
        let order: Vec<u32> = g.hostable.iter().map(|h| h.output).collect();
        assert_eq!(order, vec![2, 1]);
    }

    #[test]
    fn bad_statements_are_typed_errors() {
        let bad = |s: AccumulatorStatement, why: &str| match graph(vec![s]) {
            Err(PlanError::Hosting { reason, .. }) => assert!(reason.contains(why), "{reason}"),
            other => panic!("{other:?}"),
        };
        bad(
            AccumulatorStatement {
                forward: "nowhere".into(),
                ..stated(1, 1, vec![8])
            },
            "not in the graph",
        );
        bad(
            AccumulatorStatement {
                forward: "x".into(),
                ..stated(1, 1, vec![8])
            },
            "not a loop",
        );
        bad(
            AccumulatorStatement {
                gradient: "fwd".into(),
                ..stated(1, 1, vec![8])
            },
            "same loop",
        );
        bad(stated(0, 0, vec![8]), "not a list");
        bad(stated(7, 1, vec![8]), "lacks");
        bad(stated(1, 2, vec![8]), "alone"); // the wrong input
        bad(stated(3, 1, vec![8]), "alone"); // read by another node
        bad(stated(1, 1, vec![-1]), "size is unknown");
        bad(
            AccumulatorStatement {
                shared_with: Some(1),
                ..stated(1, 1, vec![8])
            },
            "itself",
        );
        let twice = graph(vec![stated(1, 1, vec![8]), stated(1, 1, vec![8])]);
        assert!(matches!(twice, Err(PlanError::Hosting { .. })));
    }

    #[test]
    fn a_hosted_list_holds_no_device_bytes_and_its_sharer_takes_them() {
        let shared = AccumulatorStatement {
            shared_with: Some(3),
            ..stated(1, 1, vec![8])
        };
        let g = graph(vec![shared, stated(2, 2, vec![16])]).unwrap();
        let a = crate::analyze_graph(g).unwrap();
        let t = |a: &Analysis, k| a.graph.outputs(1).nth(k).unwrap() as usize;
        assert_eq!(a.graph.tensors[t(&a, 1)].bytes, 128);
        let small = &a.graph.hostable[1..]; // the list of 8 floats alone
        let h = hosted_analysis(&a, small).unwrap();
        assert_eq!(h.graph.tensors[t(&h, 1)].bytes, 0);
        assert_eq!(h.graph.tensors[t(&h, 3)].bytes, 128);
        assert_eq!(h.graph.tensors[t(&h, 2)].bytes, 256);
        assert_eq!((h.graph.workspace_of(1), h.graph.workspace_of(2)), (40, 50));
    }

    #[test]
    fn copies_overlap_the_forward_loop_and_add_to_the_gradient_loop() {
        let g = graph(vec![stated(1, 1, vec![8]), stated(2, 2, vec![16])]).unwrap();
        let dev = crate::device::preset("cpu").unwrap();
        let mut times = vec![1.0; g.num_nodes()];
        add_copy_times(&mut times, &g.hostable, &dev);
        let each = |b: f64, bw: f64| 4.0 * (dev.link_latency_s + b / bw);
        let back = each(64.0, dev.h2d_bandwidth) + each(32.0, dev.h2d_bandwidth);
        assert_eq!(times[1], 1.0); // compute longer than the copies
        assert!((times[2] - 1.0 - back).abs() < 1e-15);
        let mut short = vec![0.0; g.num_nodes()];
        add_copy_times(&mut short, &g.hostable, &dev);
        let out = each(64.0, dev.d2h_bandwidth) + each(32.0, dev.d2h_bandwidth);
        assert!((short[1] - out).abs() < 1e-15);
    }

    #[test]
    fn the_search_hosts_as_few_as_fit_in_few_plannings() {
        let over = || PlanError::Budget {
            budget: 1,
            best_peak: 2,
            strategy: "none".into(),
            persistent_bytes: 0,
        };
        for lists in 1..=17usize {
            for need in 1..=lists {
                let mut calls = 1;
                let found = fewest(lists, Err(over()), |n| {
                    calls += 1;
                    if n >= need {
                        Ok(n)
                    } else {
                        Err(over())
                    }
                });
                assert_eq!(found.unwrap(), (need, need));
                let bound = 2 + (lists as f64).log2().ceil() as usize;
                assert!(calls <= bound, "{lists} {need}: {calls} > {bound}");
            }
        }
        // Fits with every list on the device: no search; none fits: all's error.
        assert_eq!(fewest(3, Ok(7), |_| unreachable!()).unwrap(), (0, 7));
        let all = fewest::<u32>(3, Err(over()), |_| {
            Err(PlanError::InvalidArgument("x".into()))
        });
        assert!(matches!(all, Err(PlanError::InvalidArgument(_))));
        let none = fewest::<u32>(0, Err(over()), |_| unreachable!());
        assert!(matches!(none, Err(PlanError::Budget { .. })));
        let other = fewest::<u32>(
            3,
            Err(PlanError::InvalidArgument("y".into())),
            |_| unreachable!(),
        );
        assert!(matches!(other, Err(PlanError::InvalidArgument(_))));
    }

    #[test]
    fn only_cpu_kernels_may_host() {
        let mut dev = crate::device::preset("cpu").unwrap();
        assert!(may_host(&dev));
        dev.kernels = "cpu-onednn".into();
        assert!(may_host(&dev));
        assert!(!may_host(&crate::device::preset("v100-nvlink2").unwrap()));
    }
}
