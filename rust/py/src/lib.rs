//! Thin PyO3 glue for hybridplan: each function converts its inputs, calls
//! one core function with the GIL released, and maps errors in `errors.rs`.
//! No algorithm lives here.

mod errors;

use std::panic::{catch_unwind, AssertUnwindSafe};

use hybridplan_core as core;
use hybridplan_core::build::BuildOptions;
use hybridplan_core::graph::Phase;
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

/// Decodes a serialized GraphDef and analyses it.
#[pyfunction]
#[pyo3(signature = (data, loss=None, persistent_bytes=None))]
fn analyze(
    py: Python<'_>,
    data: &[u8],
    loss: Option<String>,
    persistent_bytes: Option<u64>,
) -> PyResult<CoreAnalysis> {
    let opts = BuildOptions {
        loss,
        persistent_bytes,
    };
    let inner = run(py, move || core::analyze(data, &opts))?;
    Ok(CoreAnalysis { inner })
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CoreAnalysis>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
