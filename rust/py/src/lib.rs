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

/// A graph with its schedule and liveness (the core's `Analysis`), and the
/// kernels' scratch rule it was built with. Every planning function takes
/// one in place of the GraphDef bytes, so that a caller that plans, exports
/// or simulates one graph several times decodes it once.
#[pyclass(module = "hybridplan._core", frozen)]
struct CoreAnalysis {
    inner: core::Analysis,
    workspace: Option<String>,
}

#[pymethods]
impl CoreAnalysis {
    /// The same graph with one buffer per output (`separate_buffers`) or
    /// TensorFlow's in-place forwarding: scheduled and analysed again, not
    /// decoded again (the flag is the build's last step, `build::finish`).
    fn with_separate_buffers(&self, py: Python<'_>, separate_buffers: bool) -> PyResult<Self> {
        let mut graph = self.inner.graph.clone();
        graph.separate_buffers = separate_buffers;
        let inner = run(py, move || core::analyze_graph(graph))?;
        Ok(CoreAnalysis {
            inner,
            workspace: self.workspace.clone(),
        })
    }
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
    /// Per-node facts from the core's op table (`core::facts::node_facts`):
    /// a dict of arrays by node id, `kernel_class` a list.
    fn node_facts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = core::facts::node_facts(&self.inner);
        let d = PyDict::new(py);
        let (lo, hi): (Vec<u32>, Vec<u32>) = f.forward_slots.iter().copied().unzip();
        d.set_item("flops", f.flops.into_pyarray(py))?;
        d.set_item("aliased_input", f.aliased_input.into_pyarray(py))?;
        d.set_item("forward_output", f.forward_output.into_pyarray(py))?;
        d.set_item("forward_slot_start", lo.into_pyarray(py))?;
        d.set_item("forward_slot_end", hi.into_pyarray(py))?;
        d.set_item("collective", f.collective.into_pyarray(py))?;
        d.set_item("takes_handle", f.takes_handle.into_pyarray(py))?;
        d.set_item("never_clone", f.never_clone.into_pyarray(py))?;
        d.set_item("kernel_class", f.kernel_class)?;
        d.set_item("workspace", f.workspace.into_pyarray(py))?;
        Ok(d)
    }
    /// Per-tensor facts with the liveness of the schedule
    /// (`core::facts::tensor_facts`): a dict of arrays by tensor id.
    fn tensor_facts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = core::facts::tensor_facts(&self.inner);
        let d = PyDict::new(py);
        d.set_item("node", f.node.into_pyarray(py))?;
        d.set_item("index", f.index.into_pyarray(py))?;
        d.set_item("dtype", f.dtype.into_pyarray(py))?;
        d.set_item("bytes", f.bytes.into_pyarray(py))?;
        d.set_item("value_bytes", f.value_bytes.into_pyarray(py))?;
        d.set_item("owner", f.owner.into_pyarray(py))?;
        d.set_item("written_into", f.written_into.into_pyarray(py))?;
        d.set_item("produce", f.produce.into_pyarray(py))?;
        d.set_item("last_use", f.last_use.into_pyarray(py))?;
        d.set_item("buffer_end", f.buffer_end.into_pyarray(py))?;
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

/// A loop accumulator that can be kept on the host, as Python states it:
/// `(forward loop, output, gradient loop, input, dtype, dims, count,
/// shared_with, forward_scratch, gradient_scratch)` (`core::hosting`).
type Accumulator = (
    String,
    u32,
    String,
    u32,
    i64,
    Vec<i64>,
    u64,
    Option<u32>,
    u64,
    u64,
);

/// The build options every function that reads a graph takes, as Python
/// passes them; `workspace` names the kernels' scratch rule
/// (`core::workspace::WorkspaceRule::parse`; none when absent).
struct BuildArgs {
    loss: Option<String>,
    persistent_bytes: Option<u64>,
    separate_buffers: bool,
    workspace: Option<String>,
    workspace_profile: Option<Vec<(String, u64)>>,
    bodies: Option<Vec<Body>>,
    hosting: Option<Vec<Accumulator>>,
}

impl BuildArgs {
    /// Whether any option differs from its default.
    fn given(&self) -> bool {
        self.loss.is_some()
            || self.persistent_bytes.is_some()
            || self.separate_buffers
            || self.workspace.is_some()
            || self.workspace_profile.is_some()
            || self.bodies.is_some()
            || self.hosting.is_some()
    }

    /// The core's build options.
    ///
    /// # Errors
    /// [`core::PlanError::InvalidArgument`] for an unknown workspace rule.
    fn options(self) -> core::Result<BuildOptions> {
        Ok(BuildOptions {
            loss: self.loss,
            persistent_bytes: self.persistent_bytes,
            separate_buffers: self.separate_buffers,
            workspace: match self.workspace.as_deref() {
                Some(w) => WorkspaceRule::parse(w)?,
                None => WorkspaceRule::None,
            },
            workspace_profile: self.workspace_profile.unwrap_or_default(),
            bodies: self
                .bodies
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
            hosting: self
                .hosting
                .unwrap_or_default()
                .into_iter()
                .map(accumulator)
                .collect(),
        })
    }
}

/// The core's statement of one accumulator.
fn accumulator(a: Accumulator) -> core::hosting::AccumulatorStatement {
    let (forward, output, gradient, input, dtype, dims, count, shared_with, fs, gs) = a;
    core::hosting::AccumulatorStatement {
        forward,
        output,
        gradient,
        input,
        dtype,
        dims,
        count,
        shared_with,
        forward_scratch: fs,
        gradient_scratch: gs,
    }
}

/// The device and op times every function that simulates takes: a preset
/// name or a device model's JSON, and measured op times (`(node, seconds)`).
struct ModelArgs {
    device: String,
    device_json: Option<String>,
    profile: Vec<(u32, f64)>,
}

impl ModelArgs {
    fn new(device: &str, device_json: Option<String>, profile: Option<Vec<(u32, f64)>>) -> Self {
        ModelArgs {
            device: device.to_string(),
            device_json,
            profile: profile.unwrap_or_default(),
        }
    }

    /// The device model: `device_json` when given, else the preset `device`.
    fn device(&self) -> core::Result<core::device::DeviceModel> {
        match &self.device_json {
            Some(j) => core::device::from_json(j),
            None => core::device::preset(&self.device),
        }
    }
}

/// Decodes a serialized GraphDef and analyses it.
#[pyfunction]
#[pyo3(signature = (data, loss=None, persistent_bytes=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None, hosting=None))]
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
    hosting: Option<Vec<Accumulator>>,
) -> PyResult<CoreAnalysis> {
    let build = BuildArgs {
        loss,
        persistent_bytes,
        separate_buffers,
        workspace: workspace.clone(),
        workspace_profile,
        bodies,
        hosting,
    };
    let inner = run(py, move || core::analyze(data, &build.options()?))?;
    Ok(CoreAnalysis { inner, workspace })
}

/// The graph of a planning function: serialized GraphDef bytes, decoded and
/// analysed with the build options, or an analysis (`analyze`), which
/// already holds them; with the device and op times to plan it for. Made
/// with the GIL; checked and analysed in [`run`], where its errors are
/// mapped with the rest.
struct Source<'a> {
    graph: Given<'a>,
    build: BuildArgs,
    model: ModelArgs,
}

enum Given<'a> {
    Analysis(&'a CoreAnalysis),
    Bytes(&'a [u8]),
    /// Neither: the Python type's name, for the error.
    Other(String),
}

impl<'a> Source<'a> {
    fn new(data: &'a Bound<'_, PyAny>, build: BuildArgs, model: ModelArgs) -> Self {
        let graph = if let Ok(a) = data.cast::<CoreAnalysis>() {
            Given::Analysis(a.get())
        } else if let Ok(b) = data.cast::<pyo3::types::PyBytes>() {
            Given::Bytes(b.as_bytes())
        } else {
            Given::Other(
                data.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
            )
        };
        Source {
            graph,
            build,
            model,
        }
    }

    /// The scratch rule the graph is analysed with (the report names it).
    fn workspace(&self) -> Option<String> {
        match &self.graph {
            Given::Analysis(a) => a.workspace.clone(),
            _ => self.build.workspace.clone(),
        }
    }

    /// Runs `f` on the analysis (made here from the bytes, or given), the
    /// device model and the op times.
    ///
    /// # Errors
    /// [`core::PlanError::InvalidArgument`] for a graph of another type,
    /// build options given with an analysis or an unknown device; any error
    /// of `analyze` and `f`.
    fn with<T>(
        self,
        f: impl FnOnce(&core::Analysis, &core::device::DeviceModel, &[(u32, f64)]) -> core::Result<T>,
    ) -> core::Result<T> {
        match self.graph {
            Given::Analysis(_) if self.build.given() => Err(core::PlanError::InvalidArgument(
                "the graph is an analysis, which holds its build options: give loss, persistent_bytes, separate_buffers, workspace, workspace_profile, bodies and hosting to analyze() instead".into(),
            )),
            Given::Analysis(a) => f(&a.inner, &self.model.device()?, &self.model.profile),
            Given::Bytes(b) => {
                // The device before the decode: a wrong name fails at once.
                let dev = self.model.device()?;
                let a = core::analyze(b, &self.build.options()?)?;
                f(&a, &dev, &self.model.profile)
            }
            Given::Other(t) => Err(core::PlanError::InvalidArgument(format!(
                "the graph must be serialized GraphDef bytes or an analysis from analyze(), got {t}"
            ))),
        }
    }
}

/// A planned step: the report (the plan schema, `core::schema`) and both
/// predicted timelines.
#[pyclass(module = "hybridplan._core", frozen)]
struct CorePlan {
    report: core::schema::PlanReport,
    /// The report's JSON, written when first asked for.
    report_json: std::sync::OnceLock<String>,
    /// The plan's swaps as the write-back takes them (`write_swaps` given
    /// this plan), made when first asked for: `plan` alone never needs them.
    swaps: std::sync::OnceLock<Vec<core::writeback::Swap>>,
    timelines: [(Vec<f64>, Vec<u64>); 2],
    /// Planned step's stream events: kind (0 op, 1 clone, 2 swap-out, 3 swap-in), start, end.
    events: (Vec<u8>, Vec<f64>, Vec<f64>),
}

#[pymethods]
impl CorePlan {
    /// The plan report (decisions, figures) as a JSON string.
    #[getter]
    fn report_json(&self, py: Python<'_>) -> PyResult<&str> {
        if let Some(json) = self.report_json.get() {
            return Ok(json);
        }
        let json =
            serde_json::to_string(&self.report).map_err(|e| errors::to_py(py, json_error(e)))?;
        Ok(self.report_json.get_or_init(|| json))
    }
    /// The plan report as a dict of the plan schema (`PlanReport` in the stub).
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.report_json(py)?;
        py.import("json")?.call_method1("loads", (json,))
    }
    /// The numbers of swaps, recomputes and hosted loop accumulators.
    fn counts(&self) -> (usize, usize, usize) {
        let r = &self.report;
        (
            r.swaps.len(),
            r.recomputes.len(),
            r.hosted_accumulators.len(),
        )
    }
    /// The report's `recomputes` and `hosted_accumulators` as a dict: what the
    /// rewrite reads besides the swaps, which `write_swaps` takes from this plan.
    fn rest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let part =
            |v: Result<String, serde_json::Error>| v.map_err(|e| errors::to_py(py, json_error(e)));
        let json = format!(
            r#"{{"recomputes":{},"hosted_accumulators":{}}}"#,
            part(serde_json::to_string(&self.report.recomputes))?,
            part(serde_json::to_string(&self.report.hosted_accumulators))?,
        );
        py.import("json")?.call_method1("loads", (json,))
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

impl CorePlan {
    /// The report, with the scratch rule planned with, and the simulations
    /// (the report's JSON and the write-back's swaps are made when first
    /// asked for).
    fn of(
        mut report: core::schema::PlanReport,
        workspace: Option<String>,
        original: &core::simulate::SimResult,
        planned: &core::simulate::SimResult,
    ) -> Self {
        report.workspace = workspace;
        CorePlan {
            swaps: std::sync::OnceLock::new(),
            report,
            report_json: std::sync::OnceLock::new(),
            timelines: [
                split_timeline(&original.timeline),
                split_timeline(&planned.timeline),
            ],
            events: split_events(&planned.events),
        }
    }
}

/// Plans a graph (serialized GraphDef bytes or an analysis) under a budget.
#[pyfunction]
#[pyo3(signature = (data, budget, strategy="hybrid", device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, min_bytes=65536, profile=None, tflms=None, select=None, separate_buffers=false, workspace=None, workspace_profile=None, host_budget=None, bodies=None, hosting=None))]
#[allow(clippy::too_many_arguments)]
fn plan(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
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
    hosting: Option<Vec<Accumulator>>,
) -> PyResult<CorePlan> {
    let build = BuildArgs {
        loss,
        persistent_bytes,
        separate_buffers,
        workspace,
        workspace_profile,
        bodies,
        hosting,
    };
    let src = Source::new(data, build, ModelArgs::new(device, device_json, profile));
    let workspace = src.workspace();
    let strategy = strategy.to_string();
    run(py, move || {
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
        let o = src.with(|a, dev, profile| core::api::plan_analysis(a, dev, &opts, profile))?;
        Ok(CorePlan::of(o.report, workspace, &o.original, &o.planned))
    })
}

/// Reads a saved plan's JSON: the plan schema of this core's version, or a
/// typed error (`PlanVersionError` for another version: re-plan).
#[pyfunction]
fn load_plan<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let text = text.to_string();
    let json = run(py, move || {
        let r = core::schema::PlanReport::from_json(&text)?;
        serde_json::to_string(&r).map_err(json_error)
    })?;
    py.import("json")?.call_method1("loads", (json,))
}

/// The JSON of a device preset.
#[pyfunction]
fn device_preset(py: Python<'_>, name: &str) -> PyResult<String> {
    let name = name.to_string();
    run(py, move || {
        let d = core::device::preset(&name)?;
        serde_json::to_string(&d).map_err(json_error)
    })
}

/// A device model's JSON read as planning reads it (`core::device::from_json`:
/// every field present and known, each in range): the model's JSON, or the
/// typed error naming what is wrong.
#[pyfunction]
fn checked_device(py: Python<'_>, text: &str) -> PyResult<String> {
    let text = text.to_string();
    run(py, move || {
        let d = core::device::from_json(&text)?;
        serde_json::to_string(&d).map_err(json_error)
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

fn json_error(e: serde_json::Error) -> core::PlanError {
    core::PlanError::InvalidArgument(format!("cannot serialise to JSON: {e}"))
}

/// The planning problem of a graph (bytes or an analysis) as JSON (`core::export::problem`).
#[pyfunction]
#[pyo3(signature = (data, device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, min_bytes=65536, profile=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn export_problem(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
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
    let build = BuildArgs {
        loss,
        persistent_bytes,
        separate_buffers,
        workspace,
        workspace_profile,
        bodies,
        hosting: None,
    };
    let src = Source::new(data, build, ModelArgs::new(device, device_json, profile));
    run(py, move || {
        let p = src.with(|a, dev, profile| core::export::problem(a, dev, min_bytes, profile))?;
        serde_json::to_string(&p).map_err(json_error)
    })
}

/// Simulates a plan given as JSON (the core's plan format) and reports it
/// as a plan of `strategy` under `budget` (`core::export::evaluate`).
#[pyfunction]
#[pyo3(signature = (data, plan_json, budget, strategy, device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, profile=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn simulate_plan(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
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
    let build = BuildArgs {
        loss,
        persistent_bytes,
        separate_buffers,
        workspace,
        workspace_profile,
        bodies,
        hosting: None,
    };
    let src = Source::new(data, build, ModelArgs::new(device, device_json, profile));
    let workspace = src.workspace();
    let (plan_json, strategy) = (plan_json.to_string(), strategy.to_string());
    run(py, move || {
        let plan = core::export::plan_from_json(&plan_json)?;
        let e = src.with(|a, dev, profile| {
            core::export::evaluate(a, dev, &plan, profile, budget, &strategy)
        })?;
        Ok(CorePlan::of(e.report, workspace, &e.original, &e.planned))
    })
}

/// The replay program of a plan, given as its report JSON, as JSON
/// (`core::replay::replay_analysis_json`).
#[pyfunction]
#[pyo3(signature = (data, report_json, device="v100-nvlink2", device_json=None, loss=None, persistent_bytes=None, profile=None, separate_buffers=false, workspace=None, workspace_profile=None, bodies=None))]
#[allow(clippy::too_many_arguments)]
fn replay(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
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
    let build = BuildArgs {
        loss,
        persistent_bytes,
        separate_buffers,
        workspace,
        workspace_profile,
        bodies,
        hosting: None,
    };
    let src = Source::new(data, build, ModelArgs::new(device, device_json, profile));
    let report_json = report_json.to_string();
    run(py, move || {
        src.with(|a, dev, profile| {
            core::replay::replay_analysis_json(a, dev, &report_json, profile)
        })
    })
}

/// The core's dtype table: (code, name, bytes per element, is a handle).
#[pyfunction]
fn dtypes() -> Vec<(u8, &'static str, u64, bool)> {
    core::dtype::DType::all()
        .map(|t| (t.0, t.name(), t.size(), t.is_handle()))
        .collect()
}

/// The core's op table for one op type (`core::facts::op_type_facts`):
/// (collective, takes a handle, never recomputed by its kind, kernel class).
#[pyfunction]
fn op_facts(op: &str) -> (bool, bool, bool, Option<&'static str>) {
    let f = core::facts::op_type_facts(op);
    (
        f.collective,
        f.takes_handle,
        f.never_recompute,
        f.kernel_class,
    )
}

/// The core's op-type sets the Python layer matches nodes against
/// (`core::opkind`): kind -> op types, and for `list_adds_element` op type ->
/// the input that is the element.
#[pyfunction]
fn op_table<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    use core::opkind as k;
    let d = PyDict::new(py);
    let sets: [(&str, &[&str]); 21] = [
        ("accumulator_push", &k::ACCUMULATOR_PUSH),
        ("accumulator_pop", &k::ACCUMULATOR_POP),
        ("conditionals", &k::CONDITIONALS),
        ("loops", &k::ONE_OP_LOOPS),
        ("list_takes_element", &k::LIST_TAKES_ELEMENT),
        ("list_holds_input", &k::LIST_HOLDS_INPUT),
        ("list_new", &k::LIST_NEW),
        ("list_sums", &k::LIST_SUMS),
        ("optional_from_value", &k::OPTIONAL_FROM_VALUE),
        ("identities", &k::IDENTITIES),
        ("arguments", &k::ARGUMENTS),
        ("feeds", &k::FEEDS),
        ("less", &k::LESS),
        ("logical_and", &k::LOGICAL_AND),
        ("additions", &k::ADDITIONS),
        ("constants", &k::CONSTANTS),
        ("variable_reads", &k::VARIABLE_READS),
        ("transfers", &k::TRANSFERS),
        ("all_reduces", &k::ALL_REDUCES),
        ("runtime_plumbing", &k::RUNTIME_PLUMBING),
        ("replaces_one_node", &k::REPLACES_ONE_NODE),
    ];
    for (name, ops) in sets {
        d.set_item(name, ops.to_vec())?;
    }
    let adds = PyDict::new(py);
    for (op, slot) in k::LIST_ADDS_ELEMENT {
        adds.set_item(op, slot)?;
    }
    d.set_item("list_adds_element", adds)?;
    Ok(d)
}

/// The op types that call a library function (`core::opkind::FUNCTION_CALLS`).
#[pyfunction]
fn function_call_ops() -> Vec<&'static str> {
    core::opkind::FUNCTION_CALLS.to_vec()
}

/// Whether some node of the serialized GraphDef `data` has one of the op types
/// `ops` (`core::opscan::has_node_op`; true also for bytes it cannot read).
#[pyfunction]
fn has_node_op(py: Python<'_>, data: &[u8], ops: Vec<String>) -> PyResult<bool> {
    run(py, move || {
        let ops: Vec<&str> = ops.iter().map(String::as_str).collect();
        Ok(core::opscan::has_node_op(data, &ops))
    })
}

/// For each group of op types, whether some node of the serialized GraphDef
/// `data` has one of them (`core::opscan::has_node_ops`: one walk of the bytes;
/// all true for bytes it cannot read).
#[pyfunction]
fn has_node_ops(py: Python<'_>, data: &[u8], groups: Vec<Vec<String>>) -> PyResult<Vec<bool>> {
    run(py, move || {
        let groups: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.iter().map(String::as_str).collect())
            .collect();
        let groups: Vec<&[&str]> = groups.iter().map(Vec::as_slice).collect();
        Ok(core::opscan::has_node_ops(data, &groups))
    })
}

/// A node index of a hand-written or saved plan, as the Python writer takes
/// it (`_Writer.index`): anything `int()` takes; else its `repr`.
fn plan_index(v: &Bound<'_, PyAny>) -> core::writeback::Ix {
    use core::writeback::Ix;
    let repr = || v.repr().map(|r| r.to_string()).unwrap_or_default();
    let int = if v.is_instance_of::<pyo3::types::PyInt>() {
        Ok(v.clone())
    } else {
        v.py().get_type::<pyo3::types::PyInt>().call1((v,))
    };
    match int {
        Ok(i) => match i.extract::<i64>() {
            Ok(x) => Ix::Int(x),
            Err(_) => Ix::Out(i.to_string()),
        },
        Err(_) => Ix::Bad(repr()),
    }
}

/// The node indices of a list of them; `what` names it in the error.
fn plan_indices(
    v: Option<Bound<'_, PyAny>>,
    what: impl FnOnce() -> String,
) -> PyResult<Vec<core::writeback::Ix>> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let Ok(items) = v.try_iter() else {
        let got = v.repr().map(|r| r.to_string()).unwrap_or_default();
        let msg = format!("{} must be a list of node indices, got {got}", what());
        return Err(errors::to_py(v.py(), core::PlanError::InvalidArgument(msg)));
    };
    items.map(|x| Ok(plan_index(&x?))).collect()
}

/// `d[k]`, or None where `d` has no `k`.
fn field<'py>(d: &Bound<'py, PyAny>, k: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(d) = d.cast::<PyDict>() {
        return d.get_item(k); // a dict (every plan the core wrote): no ABC check
    }
    let m = d.cast::<pyo3::types::PyMapping>()?;
    if m.contains(k)? {
        Ok(Some(m.get_item(k)?))
    } else {
        Ok(None)
    }
}

/// The plan's swaps (dicts of the plan schema, checked by `_args.rewrite_spec`).
fn plan_swaps(swaps: &Bound<'_, PyAny>) -> PyResult<Vec<core::writeback::Swap>> {
    use core::writeback::{Swap, SwapIn};
    let mut out = Vec::new();
    for (i, s) in swaps.try_iter()?.enumerate() {
        let s = s?;
        let output = match field(&s, "output")? {
            None => 0,
            Some(o) => o
                .py()
                .get_type::<pyo3::types::PyInt>()
                .call1((&o,))
                .and_then(|o| o.extract::<i64>())
                .map_err(|_| {
                    errors::to_py(
                        s.py(),
                        core::PlanError::InvalidArgument(format!(
                            "swaps[{i}].output must be an output index (an integer), got {}",
                            o.repr().map(|r| r.to_string()).unwrap_or_default()
                        )),
                    )
                })?,
        };
        let gate = match field(&s, "gate")? {
            Some(g) if !g.is_none() => Some(plan_index(&field(&g, "node")?.unwrap_or(g))),
            _ => None,
        };
        let mut ins = Vec::new();
        if let Some(list) = field(&s, "ins")? {
            for (j, e) in list.try_iter()?.enumerate() {
                let e = e?;
                let at = || format!("swaps[{i}].ins[{j}]");
                ins.push(SwapIn {
                    trigger: plan_index(&field(&e, "trigger")?.unwrap_or(e.clone())),
                    follows: field(&e, "follows")?.map_or(Ok(false), |f| f.is_truthy())?,
                    consumers: plan_indices(field(&e, "consumers")?, || at() + ".consumers")?,
                    clone_consumers: plan_indices(field(&e, "clone_consumers")?, || {
                        at() + ".clone_consumers"
                    })?,
                });
            }
        }
        out.push(Swap {
            node: plan_index(&field(&s, "node")?.unwrap_or(s.clone())),
            output,
            after: field(&s, "after")?.map(|a| plan_index(&a)),
            gate,
            ins,
        });
    }
    Ok(out)
}

/// An op's signature from `sig_of(op)`: None for an op TensorFlow does not
/// know, else `(commutative, [(type_list_attr, type, type_attr,
/// number_attr)], {attr: (type, i, [types])})`.
fn op_sig(v: &Bound<'_, PyAny>) -> PyResult<Option<core::writeback::OpSig>> {
    use core::writeback::{AttrDefault, OpSig, OutArg};
    if v.is_none() {
        return Ok(None);
    }
    type Sig = (
        bool,
        Vec<(String, i64, String, String)>,
        std::collections::HashMap<String, (i64, i64, Vec<i64>)>,
    );
    let (commutative, outputs, defaults): Sig = v.extract()?;
    Ok(Some(OpSig {
        commutative,
        outputs: outputs
            .into_iter()
            .map(|(type_list_attr, fixed, type_attr, number_attr)| OutArg {
                type_list_attr,
                fixed,
                type_attr,
                number_attr,
            })
            .collect(),
        defaults: defaults
            .into_iter()
            .map(|(k, (type_, i, types))| (k, AttrDefault { type_, i, types }))
            .collect(),
    }))
}

/// Writes a plan's swaps into the serialized GraphDef `data`
/// (`core::writeback::write`): `swaps` is the plan schema's list of swap dicts,
/// or a `CorePlan`, whose swaps are taken as planned; `sig_of(op)` gives the signature of each op
/// the swaps name (see `op_sig`). Returns the new graph's bytes and what the
/// Python writer needs: (bytes, nodes, swap_out, swap_in, rewired, changed,
/// lost, gained, redirects).
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn write_swaps<'py>(
    py: Python<'py>,
    data: &[u8],
    swaps: &Bound<'py, PyAny>,
    sig_of: &Bound<'py, PyAny>,
    swap_out_op: String,
    swap_in_op: String,
    device: String,
    host: String,
    pin_consumers: bool,
    prefix: String,
) -> PyResult<(
    Bound<'py, pyo3::types::PyBytes>,
    usize,
    Vec<String>,
    Vec<String>,
    u64,
    PackedInputs<'py>,
    Vec<(String, u64)>,
    Vec<(String, u64)>,
    Vec<(u32, String, String, String)>,
)> {
    use core::writeback::{self as wb, NodeIndex, Target};
    let given;
    let swaps: &[wb::Swap] = match swaps.cast::<CorePlan>() {
        Ok(planned) => {
            let planned = planned.get();
            planned
                .swaps
                .get_or_init(|| planned.report.swaps.iter().map(Into::into).collect())
        }
        Err(_) => {
            given = plan_swaps(swaps)?;
            &given
        }
    };
    let index = run(py, || NodeIndex::new(data))?;
    let ops = run(py, || wb::ops_needed(&index, swaps))?;
    let mut sigs = wb::Sigs::default();
    for op in ops {
        if let Some(sig) = op_sig(&sig_of.call1((op.as_str(),))?)? {
            sigs.insert(op, sig);
        }
    }
    let target = Target {
        swap_out_op,
        swap_in_op,
        device,
        host,
        pin_consumers,
        prefix,
    };
    let w = run(py, || wb::write(&index, swaps, &sigs, &target))?;
    let graph = pyo3::types::PyBytes::new_with(py, w.graph.len(), |buf| {
        w.graph.write_to(buf);
        Ok(())
    })?;
    let changed = packed_inputs(py, w.changed);
    Ok((
        graph,
        w.nodes,
        w.swap_out,
        w.swap_in,
        w.rewired,
        changed,
        w.lost,
        w.gained,
        w.redirects,
    ))
}

/// The changed nodes' inputs before, for Python to read on demand
/// (`rewriting._Writer.took_swaps`): node ids ascending (as `Written::changed` lists them); per node, where its
/// inputs begin among all of them (one entry more, the end); per input,
/// where it begins in one string, in characters (one entry more); the
/// string. Four objects instead of a list and a `str` per input (at 64,000
/// swaps, a few hundred thousand of them, most never read).
type PackedInputs<'py> = (
    Bound<'py, PyArray1<u32>>,
    Bound<'py, PyArray1<u64>>,
    Bound<'py, PyArray1<u64>>,
    String,
);

fn packed_inputs<'py>(py: Python<'py>, changed: Vec<(u32, Vec<&str>)>) -> PackedInputs<'py> {
    let mut ids = Vec::with_capacity(changed.len());
    let mut first = Vec::with_capacity(changed.len() + 1);
    let mut bounds = vec![0u64];
    let mut text = String::new();
    let mut chars = 0u64;
    for (node, inputs) in &changed {
        ids.push(*node);
        first.push(bounds.len() as u64 - 1);
        for t in inputs {
            text.push_str(t);
            chars += if t.is_ascii() {
                t.len()
            } else {
                t.chars().count()
            } as u64;
            bounds.push(chars);
        }
    }
    first.push(bounds.len() as u64 - 1);
    (
        ids.into_pyarray(py),
        first.into_pyarray(py),
        bounds.into_pyarray(py),
        text,
    )
}

/// The name of a node standing for the tensors `producer + t` (`t` in
/// `targets`) among the commutative readers' inputs `siblings`
/// (`core::writeback::ranked`): the writer's clones and gates are named by the
/// rule that names the core's swap-ins.
#[pyfunction]
fn ranked(producer: &str, targets: Vec<String>, siblings: Vec<String>, tag: &str) -> String {
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let siblings: Vec<&str> = siblings.iter().map(String::as_str).collect();
    core::writeback::ranked(producer, &targets, &siblings, tag)
}

/// The planning strategies in report order: (name, one-line rule, swaps).
#[pyfunction]
fn strategies() -> Vec<(&'static str, &'static str, bool)> {
    core::plan::planner::Strategy::ALL
        .iter()
        .map(|s| (s.name(), s.rule(), s.swaps()))
        .collect()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CoreAnalysis>()?;
    m.add_class::<CorePlan>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(device_preset, m)?)?;
    m.add_function(wrap_pyfunction!(checked_device, m)?)?;
    m.add_function(wrap_pyfunction!(device_presets, m)?)?;
    m.add_function(wrap_pyfunction!(synthetic_graphdef, m)?)?;
    m.add_function(wrap_pyfunction!(export_problem, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_plan, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(strategies, m)?)?;
    m.add_function(wrap_pyfunction!(op_facts, m)?)?;
    m.add_function(wrap_pyfunction!(function_call_ops, m)?)?;
    m.add_function(wrap_pyfunction!(has_node_op, m)?)?;
    m.add_function(wrap_pyfunction!(has_node_ops, m)?)?;
    m.add_function(wrap_pyfunction!(op_table, m)?)?;
    m.add_function(wrap_pyfunction!(load_plan, m)?)?;
    m.add_function(wrap_pyfunction!(write_swaps, m)?)?;
    m.add_function(wrap_pyfunction!(ranked, m)?)?;
    m.add("PLAN_SCHEMA_VERSION", core::schema::PLAN_SCHEMA_VERSION)?;
    m.add("REPLAY_VERSION", core::replay::VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
