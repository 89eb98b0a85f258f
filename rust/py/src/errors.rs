//! The one place where core errors become Python exceptions.
//!
//! Classes live in `hybridplan.errors` (pure Python, so users can catch them
//! without the extension loaded); this module looks them up and raises.

use hybridplan_core::PlanError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Maps a core error onto its `hybridplan.errors` class.
pub fn to_py(py: Python<'_>, e: PlanError) -> PyErr {
    let msg = e.to_string();
    let (class, extra): (&str, Option<(u64, u64, String)>) = match &e {
        PlanError::Decode(_) | PlanError::InvalidGraph(_) | PlanError::Cycle { .. } => {
            ("InvalidGraphError", None)
        }
        PlanError::UnknownShape { .. } => ("ShapeError", None),
        PlanError::Unsupported { .. } | PlanError::NoBackward { .. } => {
            ("UnsupportedGraphError", None)
        }
        PlanError::Budget {
            budget,
            best_peak,
            strategy,
            ..
        } => ("BudgetError", Some((*budget, *best_peak, strategy.clone()))),
        PlanError::HostBudget {
            host_budget,
            best_host_peak,
            ..
        } => (
            "HostBudgetError",
            Some((*host_budget, *best_host_peak, "host".to_string())),
        ),
        PlanError::InvalidArgument(_) | PlanError::Hosting { .. } => ("InvalidArgumentError", None),
        PlanError::PlanVersion { .. } => ("PlanVersionError", None),
    };
    raise(py, class, &msg, extra)
}

/// A panic in the core becomes a `HybridplanError` carrying its message.
pub fn panic_to_py(py: Python<'_>, payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let msg = format!(
        "internal error in the hybridplan core ({what}); please report it with the input graph"
    );
    raise(py, "HybridplanError", &msg, None)
}

fn raise(py: Python<'_>, class: &str, msg: &str, extra: Option<(u64, u64, String)>) -> PyErr {
    let built = (|| -> PyResult<PyErr> {
        let cls = py.import("hybridplan.errors")?.getattr(class)?;
        let inst = match extra {
            Some((budget, best, strategy)) => cls.call1(PyTuple::new(
                py,
                [
                    msg.into_pyobject(py)?.into_any(),
                    budget.into_pyobject(py)?.into_any(),
                    best.into_pyobject(py)?.into_any(),
                    strategy.into_pyobject(py)?.into_any(),
                ],
            )?)?,
            None => cls.call1((msg,))?,
        };
        Ok(PyErr::from_value(inst))
    })();
    built.unwrap_or_else(|e| e)
}
