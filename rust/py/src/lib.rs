//! Thin PyO3 glue for hybridplan: each function converts its inputs, calls
//! one core function with the GIL released, and maps errors in `errors.rs`.
//! No algorithm lives here.

mod errors;

use std::panic::{catch_unwind, AssertUnwindSafe};

use hybridplan_core as core;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::graph::Phase;
use hybridplan_core::plan::planner::PlanOptions;
use hybridplan_core::plan::select::Selection;
use hybridplan_core::plan::tflms::TflmsParams;
use hybridplan_core::simulate::{EventKind, SimEvent};
use hybridplan_core::workspace::WorkspaceRule;
use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Runs `f` without the GIL and turns errors and panics into Python exceptions.
fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> core::Result<T> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(errors::to_py(py, e)),
        Err(p) => Err(errors::panic_to_py(py, p)),
    }
}

/// A graph with its schedule and liveness (the core's `Analysis`).
#[pyclass(module = "hybridplan._core", frozen)]
struct CoreAnalysis {
    inner: core::Analysis,
}

#[pymethods]
impl CoreAnalysis {
    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.graph.num_nodes()
    }
    #[getter]
    fn num_tensors(&self) -> usize {
        self.inner.graph.num_tensors()
    }
    #[getter]
    fn peak_bytes(&self) -> u64 {
        self.inner.liveness.peak_bytes
    }
    /// Scratch bytes of every node while it runs (the workspace rule's).
    #[getter]
    fn workspace<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        let g = &self.inner.graph;
        (0..g.num_nodes() as u32)
            .map(|v| g.workspace_of(v))
            .collect::<Vec<u64>>()
            .into_pyarray(py)
    }
    #[getter]
    fn tensor_peak_bytes(&self) -> u64 {
        let a = &self.inner;
        a.liveness.tensor_peak_bytes(&a.graph, &a.schedule)
    }
    #[getter]
    fn peak_position(&self) -> u32 {
        self.inner.liveness.peak_pos
    }
    #[getter]
    fn persistent_bytes(&self) -> u64 {
        self.inner.graph.persistent_bytes
    }
    #[getter]
    fn loss(&self) -> Option<String> {
        let g = &self.inner.graph;
        (g.loss != core::graph::NONE).then(|| g.tensor_name(g.loss))
    }
    /// Bytes in use while the op at each schedule position runs.
    #[getter]
    fn timeline<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.inner.liveness.timeline.clone().into_pyarray(py)
    }
    /// Node id (GraphDef position) at each schedule position.
    #[getter]
    fn order<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
        self.inner.schedule.order.clone().into_pyarray(py)
    }
    /// Phase of every node: 0 forward, 1 backward, 2 update, 3 other.
    #[getter]
    fn phase<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u8>> {
        let v: Vec<u8> = self.inner.graph.phase.iter().map(|&p| p as u8).collect();
        v.into_pyarray(py)
    }
    fn phase_counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for p in [Phase::Forward, Phase::Backward, Phase::Update, Phase::Other] {
            let c = self.inner.graph.phase.iter().filter(|&&q| q == p).count();
            d.set_item(p.name(), c)?;
        }
        Ok(d)
    }
    /// `(tensor, owner)` for every tensor whose buffer is another's (an
    /// output TensorFlow forwards its input's buffer into).
    fn forwarded(&self) -> Vec<(String, String)> {
        let g = &self.inner.graph;
        let owner = &self.inner.liveness.owner;
        (0..owner.len() as u32)
            .filter(|&t| owner[t as usize] != t)
            .map(|t| (g.tensor_name(t), g.tensor_name(owner[t as usize])))
            .collect()
    }

    /// The `k` largest tensors live at the peak: (name, bytes, dtype, shape, op).
    fn live_at_peak(&self, k: usize) -> Vec<(String, u64, String, Vec<i64>, String)> {
        let g = &self.inner.graph;
        self.inner
            .liveness
            .live_at_peak(g, k)
            .into_iter()
            .map(|t| {
                let tt = &g.tensors[t as usize];
                (
                    g.tensor_name(t),
                    tt.bytes,
                    tt.dtype.name().to_string(),
                    g.shape(t).to_vec(),
                    g.op_name(tt.node).to_string(),
                )
            })
            .collect()
    }
}

/// A control-flow node's body memory as Python states it: `(node,
/// scratch_bytes, [(output, branch, dtype, dims, count)])` (`core::body`).
type Body = (String, u64, Vec<(u32, u32, i64, Vec<i64>, u64)>);

/// The build options of every entry point: `workspace` names the kernels'
/// scratch rule (`core::workspace::WorkspaceRule::parse`; none when absent).
fn build_options(
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    separate_buffers: bool,
    workspace: Option<&str>,
    workspace_profile: Option<Vec<(String, u64)>>,
    bodies: Option<Vec<Body>>,
) -> core::Result<BuildOptions> {
    Ok(BuildOptions {
        loss,
        persistent_bytes,
        separate_buffers,
        workspace: match workspace {
            Some(w) => WorkspaceRule::parse(w)?,
            None => WorkspaceRule::None,
        },
        workspace_profile: workspace_profile.unwrap_or_default(),
        bodies: bodies
            .unwrap_or_default()
            .into_iter()
            .map(|(node, scratch_bytes, held)| core::body::BodyMemory {
                node,
                scratch_bytes,
                held: held
                    .into_iter()
                    .map(|(output, branch, dtype, dims, count)| core::body::Held {
                        output,
                        branch,
                        dtype,
                        dims,
                        count,
                    })
                    .collect(),
            })
            .collect(),
    })
}

/// Decodes a serialized GraphDef and analyses it.
#[pyfunction]
#[pyo3(signature = (data, loss=None, persistent_bytes=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn analyze(
    py: Python<'_>,
    data: &[u8],
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    separate_buffers: bool,
    workspace: Option<String>,
    workspace_profile: Option<Vec<(String, u64)>>,
    bodies: Option<Vec<Body>>,
) -> PyResult<CoreAnalysis> {
    let opts = build_options(
        loss,
        persistent_bytes,
        separate_buffers,
        workspace.as_deref(),
        workspace_profile,
        bodies,
    )
    .map_err(|e| errors::to_py(py, e))?;
    let inner = run(py, move || core::analyze(data, &opts))?;
    Ok(CoreAnalysis { inner })
}

/// A planned step: the report as JSON and both predicted timelines.
#[pyclass(module = "hybridplan._core", frozen)]
struct CorePlan {
    report_json: String,
    timelines: [(Vec<f64>, Vec<u64>); 2],
    /// Planned step's stream events: kind (0 op, 1 clone, 2 swap-out, 3 swap-in), start, end.
    events: (Vec<u8>, Vec<f64>, Vec<f64>),
}

#[pymethods]
impl CorePlan {
    /// The plan report (decisions, figures) as a JSON string.
    #[getter]
    fn report_json(&self) -> &str {
        &self.report_json
    }
    /// (times in s, bytes in use) of the original (`which=0`) or planned (`which=1`) step.
    /// Stream events of the planned step: (kind, start s, end s) arrays.
    #[allow(clippy::type_complexity)]
    fn events<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        Bound<'py, PyArray1<u8>>,
        Bound<'py, PyArray1<f64>>,
        Bound<'py, PyArray1<f64>>,
    ) {
        let (k, s, e) = &self.events;
        (
            k.clone().into_pyarray(py),
            s.clone().into_pyarray(py),
            e.clone().into_pyarray(py),
        )
    }
    fn timeline<'py>(
        &self,
        py: Python<'py>,
        which: usize,
    ) -> (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<u64>>) {
        let (t, b) = &self.timelines[which.min(1)];
        (t.clone().into_pyarray(py), b.clone().into_pyarray(py))
    }
}

fn split_events(ev: &[SimEvent]) -> (Vec<u8>, Vec<f64>, Vec<f64>) {
    let kind = |k: EventKind| match k {
        EventKind::Op => 0u8,
        EventKind::Clone => 1,
        EventKind::SwapOut => 2,
        EventKind::SwapIn => 3,
    };
    let mut out = (
        Vec::with_capacity(ev.len()),
        Vec::with_capacity(ev.len()),
        Vec::with_capacity(ev.len()),
    );
    for e in ev {
        out.0.push(kind(e.kind));
        out.1.push(e.start_s);
        out.2.push(e.end_s);
    }
    out
}

fn split_timeline(tl: &[(f64, u64)]) -> (Vec<f64>, Vec<u64>) {
    tl.iter().copied().unzip()
}

/// Plans a serialized GraphDef under a budget.
#[pyfunction]
#[pyo3(signature = (data, budget, strategy="hybrid", device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, min_bytes=65536, profile=None, tflms=None, select=None, separate_buffers=false, workspace=None, workspace_profile=None, host_budget=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn plan(
    py: Python<'_>,
    data: &[u8],
    budget: u64,
    strategy: &str,
    device: &str,
    device_json: Option<String>,
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    min_bytes: u64,
    profile: Option<Vec<(u32, f64)>>,
    tflms: Option<(u32, u32, u32)>,
    select: Option<[Vec<String>; 4]>,
    separate_buffers: bool,
    workspace: Option<String>,
    workspace_profile: Option<Vec<(String, u64)>>,
    host_budget: Option<u64>,
    bodies: Option<Vec<Body>>,
) -> PyResult<CorePlan> {
    let build = build_options(
        loss,
        persistent_bytes,
        separate_buffers,
        workspace.as_deref(),
        workspace_profile,
        bodies,
    )
    .map_err(|e| errors::to_py(py, e))?;
    let strategy = strategy.to_string();
    let device = device.to_string();
    let profile = profile.unwrap_or_default();
    let out = run(py, move || {
        let dev = device_of(&device, device_json.as_deref())?;
        let tflms = tflms.map(|(threshold, ahead, groupby)| TflmsParams {
            threshold,
            ahead,
            groupby,
            min_bytes,
        });
        let opts = PlanOptions {
            strategy: strategy.parse()?,
            budget,
            min_bytes,
            tflms,
            selection: select
                .map(
                    |[include_scopes, exclude_scopes, include_types, exclude_types]| Selection {
                        include_scopes,
                        exclude_scopes,
                        include_types,
                        exclude_types,
                    },
                )
                .unwrap_or_default(),
            host_budget: host_budget.unwrap_or(u64::MAX),
            ..PlanOptions::default()
        };
        let (_, o) = core::api::plan_bytes(data, &build, &dev, &opts, &profile)?;
        let json = serde_json::to_string(&o.report).map_err(|e| {
            core::PlanError::InvalidArgument(format!("cannot serialise the report: {e}"))
        })?;
        Ok(CorePlan {
            report_json: json,
            timelines: [
                split_timeline(&o.original.timeline),
                split_timeline(&o.planned.timeline),
            ],
            events: split_events(&o.planned.events),
        })
    })?;
    Ok(out)
}

/// The JSON of a device preset.
#[pyfunction]
fn device_preset(py: Python<'_>, name: &str) -> PyResult<String> {
    let name = name.to_string();
    run(py, move || {
        let d = core::device::preset(&name)?;
        serde_json::to_string(&d).map_err(|e| core::PlanError::InvalidArgument(e.to_string()))
    })
}

/// Names of the device presets.
#[pyfunction]
fn device_presets() -> Vec<String> {
    core::device::preset_names()
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Serialized GraphDef of a synthetic training step of about `nodes` nodes
/// (`core::synth::checked_graphdef`: arguments out of range are errors).
#[pyfunction]
#[pyo3(signature = (nodes, kind="mixed", batch=8, size=32, channels=64))]
fn synthetic_graphdef<'py>(
    py: Python<'py>,
    nodes: usize,
    kind: &str,
    batch: i64,
    size: i64,
    channels: i64,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    let kind = kind.to_string();
    let bytes = run(py, move || {
        core::synth::checked_graphdef(&kind, nodes, batch, size, channels)
    })?;
    Ok(pyo3::types::PyBytes::new(py, &bytes))
}

fn device_of(device: &str, device_json: Option<&str>) -> core::Result<core::device::DeviceModel> {
    match device_json {
        Some(j) => core::device::from_json(j),
        None => core::device::preset(device),
    }
}

fn json_error(e: serde_json::Error) -> core::PlanError {
    core::PlanError::InvalidArgument(format!("cannot serialise to JSON: {e}"))
}

/// The planning problem of a serialized GraphDef as JSON (`core::export::problem`).
#[pyfunction]
#[pyo3(signature = (data, device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, min_bytes=65536, profile=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn export_problem(
    py: Python<'_>,
    data: &[u8],
    device: &str,
    device_json: Option<String>,
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    min_bytes: u64,
    profile: Option<Vec<(u32, f64)>>,
    separate_buffers: bool,
    workspace: Option<String>,
    workspace_profile: Option<Vec<(String, u64)>>,
    bodies: Option<Vec<Body>>,
) -> PyResult<String> {
    let build = build_options(
        loss,
        persistent_bytes,
        separate_buffers,
        workspace.as_deref(),
        workspace_profile,
        bodies,
    )
    .map_err(|e| errors::to_py(py, e))?;
    let device = device.to_string();
    let profile = profile.unwrap_or_default();
    run(py, move || {
        let dev = device_of(&device, device_json.as_deref())?;
        let a = core::analyze(data, &build)?;
        serde_json::to_string(&core::export::problem(&a, &dev, min_bytes, &profile)?)
            .map_err(json_error)
    })
}

/// Simulates a plan given as JSON (the core's plan format) and reports it
/// as a plan of `strategy` under `budget` (`core::export::evaluate`).
#[pyfunction]
#[pyo3(signature = (data, plan_json, budget, strategy, device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, profile=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn simulate_plan(
    py: Python<'_>,
    data: &[u8],
    plan_json: &str,
    budget: u64,
    strategy: &str,
    device: &str,
    device_json: Option<String>,
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    profile: Option<Vec<(u32, f64)>>,
    separate_buffers: bool,
    workspace: Option<String>,
    workspace_profile: Option<Vec<(String, u64)>>,
    bodies: Option<Vec<Body>>,
) -> PyResult<CorePlan> {
    let build = build_options(
        loss,
        persistent_bytes,
        separate_buffers,
        workspace.as_deref(),
        workspace_profile,
        bodies,
    )
    .map_err(|e| errors::to_py(py, e))?;
    let (device, strategy) = (device.to_string(), strategy.to_string());
    let plan_json = plan_json.to_string();
    let profile = profile.unwrap_or_default();
    run(py, move || {
        let dev = device_of(&device, device_json.as_deref())?;
        let a = core::analyze(data, &build)?;
        let plan = core::export::plan_from_json(&plan_json)?;
        let e = core::export::evaluate(&a, &dev, &plan, &profile, budget, &strategy)?;
        Ok(CorePlan {
            report_json: serde_json::to_string(&e.report).map_err(json_error)?,
            timelines: [
                split_timeline(&e.original.timeline),
                split_timeline(&e.planned.timeline),
            ],
            events: split_events(&e.planned.events),
        })
    })
}

/// The replay program of a plan, given as its report JSON, as JSON
/// (`core::replay::replay_json`).
#[pyfunction]
#[pyo3(signature = (data, report_json, device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, profile=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn replay(
    py: Python<'_>,
    data: &[u8],
    report_json: &str,
    device: &str,
    device_json: Option<String>,
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    profile: Option<Vec<(u32, f64)>>,
    separate_buffers: bool,
    workspace: Option<String>,
    workspace_profile: Option<Vec<(String, u64)>>,
    bodies: Option<Vec<Body>>,
) -> PyResult<String> {
    let build = build_options(
        loss,
        persistent_bytes,
        separate_buffers,
        workspace.as_deref(),
        workspace_profile,
        bodies,
    )
    .map_err(|e| errors::to_py(py, e))?;
    let device = device.to_string();
    let report_json = report_json.to_string();
    let profile = profile.unwrap_or_default();
    run(py, move || {
        let dev = device_of(&device, device_json.as_deref())?;
        core::replay::replay_json(data, &build, &dev, &report_json, &profile)
    })
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CoreAnalysis>()?;
    m.add_class::<CorePlan>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(device_preset, m)?)?;
    m.add_function(wrap_pyfunction!(device_presets, m)?)?;
    m.add_function(wrap_pyfunction!(synthetic_graphdef, m)?)?;
    m.add_function(wrap_pyfunction!(export_problem, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_plan, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add("REPLAY_VERSION", core::replay::VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
