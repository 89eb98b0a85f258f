//! Typed errors of the planning core.
//!
//! Every fallible function of the core returns [`PlanError`]. The Python glue
//! maps each variant onto one exception class in exactly one place
//! (`rust/py/src/errors.rs`).

use thiserror::Error;

/// Everything that can go wrong while reading, analysing or planning a graph.
///
/// Messages say what was wrong and what to do about it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PlanError {
    /// The bytes are not a valid serialized `GraphDef`.
    #[error("malformed GraphDef bytes: {0}. Pass the output of GraphDef.SerializeToString() (a binary .pb) or a text .pbtxt file.")]
    Decode(String),

    /// The graph is well formed protobuf but not a valid dataflow graph.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),

    /// The graph has a cycle; `nodes` names the nodes on one cycle.
    #[error("the graph has a cycle through {}: a training step must be a DAG (control-flow loops must stay inside a While op)", fmt_cycle(.nodes))]
    Cycle { nodes: Vec<String> },

    /// A tensor's shape or dtype is not fully known, so its size is unknown.
    #[error("tensor '{tensor}' has {what}: trace the step with concrete input shapes (tf.TensorSpec with every dimension set) and export with as_graph_def(add_shapes=True)")]
    UnknownShape { tensor: String, what: String },

    /// The graph holds something the planner cannot plan soundly.
    #[error("unsupported graph: node '{node}' (op {op}): {reason}")]
    Unsupported {
        node: String,
        op: String,
        reason: String,
    },

    /// The graph has no backward pass, so nothing can be swapped or
    /// recomputed, and it does not fit the budget as it is.
    #[error("the graph has no backward pass (no loss found, or no gradient op depends on it): there is nothing to swap or recompute, and its peak of {} exceeds the budget of {}; pass a training step's graph (forward, gradients, update) or name its loss with loss=...", bytes_and_units(*.peak), bytes_and_units(*.budget))]
    NoBackward { peak: u64, budget: u64 },

    /// No plan of any strategy fits the budget. `strategy` is the strategy
    /// that reached `best_peak`; `persistent_bytes` the graph's variables and
    /// optimizer slots (named in the message when they alone exceed the budget).
    #[error("{}", fmt_budget(*.budget, *.best_peak, .strategy, *.persistent_bytes))]
    Budget {
        budget: u64,
        best_peak: u64,
        strategy: String,
        persistent_bytes: u64,
    },

    /// Plans fit the device budget, but none the host memory budget (the
    /// swapped bytes held in host memory at once, `host.rs`).
    #[error("no plan within the device budget of {budget} bytes fits the host memory budget of {host_budget} bytes: the smallest host peak reached is {best_host_peak} bytes; raise the host budget to at least {best_host_peak} bytes, raise the device budget (fewer swaps), or use strategy 'recompute'")]
    HostBudget {
        host_budget: u64,
        best_host_peak: u64,
        budget: u64,
    },

    /// A statement of a loop accumulator to keep on the host
    /// (`hosting.rs`) that does not hold in the graph.
    #[error("the accumulator statement of output {output} of loop '{node}' {reason}: state the accumulators from the same graph you plan (hybridplan.accumulators.statements)")]
    Hosting {
        node: String,
        output: u32,
        reason: String,
    },

    /// An argument given by the caller is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A plan report of another plan-schema version than this core's
    /// (`schema.rs`); `found` is none for plans saved before versions existed.
    #[error("this plan is in plan-schema version {}, and this hybridplan reads version {expected} only: re-plan the step (hybridplan.plan, or `hybridplan plan --json`) and save the new plan", .found.as_deref().unwrap_or("1 (unversioned)"))]
    PlanVersion {
        found: Option<String>,
        expected: u32,
    },
}

fn fmt_cycle(nodes: &[String]) -> String {
    let mut s: Vec<&str> = nodes.iter().take(12).map(String::as_str).collect();
    if nodes.len() > 12 {
        s.push("...");
    }
    if let Some(first) = nodes.first() {
        s.push(first);
    }
    s.join(" -> ")
}

fn fmt_budget(budget: u64, best_peak: u64, strategy: &str, persistent: u64) -> String {
    let mut s = format!(
        "no plan fits the budget of {}: the smallest peak reached is {}, by strategy \
         '{strategy}'",
        bytes_and_units(budget),
        bytes_and_units(best_peak)
    );
    if budget < persistent {
        s += &format!(
            "; the variables and optimizer slots alone take {}",
            bytes_and_units(persistent)
        );
    }
    s + &format!("; raise the budget to at least {best_peak} bytes or shrink the batch")
}

/// `N bytes (x.y MiB)`, or `N bytes` below 1 KiB.
pub(crate) fn bytes_and_units(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{n} bytes ({})", human_bytes(n))
    }
}

/// A byte count in binary units with one decimal (`1.5 GiB`), or `N B` below 1 KiB.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut x = n as f64 / 1024.0;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", UNITS[u])
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, PlanError>;
