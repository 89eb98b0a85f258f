//! Device models: what one accelerator computes per second, how fast its
//! memory is, how large it is, and the link that carries swaps to the host.
//!
//! A model is plain data ([`DeviceModel`]): pick a named preset with
//! [`preset`], or read a user-defined one from JSON with [`from_json`] (every
//! field required; the Python side turns TOML or keyword arguments into the
//! same JSON object).
//!
//! # The presets and the source of every figure
//!
//! Compute and memory figures are the vendors' datasheet peaks (dense, no
//! sparsity); `flops_f16` is the FP16/BF16 tensor-core peak, `flops_f32` the
//! FP32 CUDA-core peak (with TF32 enabled, float32 matmuls and convolutions
//! on Ampere and later run up to ~8x faster: put the TF32 figure in
//! `flops_f32` of a user-defined model to model that), `flops_int` the INT32
//! CUDA-core rate. Link figures are **measured** copy-engine bandwidths of
//! large pinned copies, not the rated ones. `memory_bytes` is the nominal
//! capacity (the usable size is a few hundred MiB less).
//!
//! | preset | figure | value | source |
//! |---|---|---|---|
//! | v100-nvlink2 | f32 / f16 TC / f64 / int32 | 15.7 / 125 / 7.8 / 15.7 T/s | NVIDIA Tesla V100 datasheet (SXM2); Volta whitepaper (INT32 = FP32 lanes) |
//! | v100-nvlink2 | HBM2 bandwidth, size | 900 GB/s, 32 GiB | V100 datasheet |
//! | v100-nvlink2 | h2d = d2h | 68 GB/s | IBM's measurement on the 4-GPU AC922 (POWER9, 3 NVLink 2.0 bricks per GPU, 75 GB/s rated) reported in The Next Platform, "NVLink Shines on POWER9 for AI and HPC Tests", 2017-12-15 (45.9 GB/s on the 6-GPU model with 2 bricks). Issue #3 points to Li et al., "Evaluating Modern GPU Interconnect", arXiv:1903.04611 (Summit) for ~60-70 GB/s; that figure was not re-checked here |
//! | v100-nvlink2 | duplex | 0.9 | assumption: NVLink has separate lanes per direction (150 GB/s bidirectional rated); not measured here |
//! | a100-pcie4 | f32 / f16 TC / f64 / int32 | 19.5 / 312 / 9.7 / 19.5 T/s | NVIDIA A100 datasheet (SXM4 80GB, host link PCIe Gen4 x16) |
//! | a100-pcie4 | HBM2e bandwidth, size | 2039 GB/s, 80 GiB | A100 datasheet |
//! | a100-pcie4 | h2d / d2h | 24.8 / 25 GB/s | nvbandwidth `host_to_device_memcpy_ce` on 8x A100-SXM4-80GB, PCIe 4.0 x16 (NVIDIA developer forum, "Asymmetric PCIe bandwidth in bidirectional transfers") |
//! | a100-pcie4 | duplex | 0.7 | same thread, bidirectional run: D2H kept ~24 GB/s, H2D fell to ~11 GB/s: (24 + 11) / (25 + 25) |
//! | h100-pcie5 | f32 / f16 TC / f64 / int32 | 67 / 989.5 / 34 / 33.5 T/s | NVIDIA H100 datasheet (SXM5 80GB, host link PCIe Gen5 x16); INT32 at half the FP32 lanes (Hopper whitepaper) |
//! | h100-pcie5 | HBM3 bandwidth, size | 3350 GB/s, 80 GiB | H100 datasheet |
//! | h100-pcie5 | h2d / d2h | 35 / 50 GB/s | measured figures given in the project's issue #3 (PCIe Gen5 x16, 64 GB/s rated) |
//! | h100-pcie5 | duplex | 0.7 | assumption: the PCIe Gen4 measurement above |
//! | h200-pcie5 | compute | as h100-pcie5 | NVIDIA H200 datasheet (SXM, same Hopper GPU) |
//! | h200-pcie5 | HBM3e bandwidth, size | 4800 GB/s, 141 GiB | H200 datasheet |
//! | h200-pcie5 | link | as h100-pcie5 | same PCIe Gen5 x16 host interface |
//! | gh200-c2c | compute | as h100-pcie5 | NVIDIA GH200 datasheet |
//! | gh200-c2c | HBM3 bandwidth, size | 4000 GB/s, 96 GiB | GH200 datasheet (96 GB HBM3 model) |
//! | gh200-c2c | h2d / d2h | 375 / 297 GB/s | Schieffer et al., "Harnessing Integrated CPU-GPU System Memory for HPC: a first look into Grace Hopper", ICPP 2024 (NVLink-C2C, 450 GB/s per direction rated) |
//! | gh200-c2c | duplex | 0.8 | assumption: the same paper reports 672 GB/s for both directions together against 900 GB/s rated; no concurrent figure |
//! | all GPUs | launch overhead | 5 us | assumption: TensorFlow executor dispatch plus `cudaLaunchKernel`, typical order of magnitude |
//! | all GPUs | kernels | `gpu` | cuDNN convolutions: scratch by `TF_CUDNN_WORKSPACE_LIMIT_IN_MB` (`crate::workspace`) |
//! | cpu | kernels | `cpu` | TensorFlow's CPU kernels, oneDNN on or off as the running TensorFlow decides |
//! | all GPUs | link latency | 10 us (2 us on C2C) | assumption: `cudaMemcpyAsync` setup of a copy-engine transfer, typical order of magnitude |
//! | cpu | f32 / f16 / f64 / int32 | 150 / 83 / 30 / 19 G/s | measured here: TensorFlow 2.21 `MatMul` 2048x2048 (int32 1024x1024), 2 threads, best of 3 (`bfloat16` 83, `float16` 135: the lower taken) |
//! | cpu | memory bandwidth | 13 GB/s | measured here: numpy `copyto` of 64 MiB, read + write bytes per second (an `Add` gives the same) |
//! | cpu | memory | 23.5 GiB | `MemTotal` of this machine |
//! | cpu | h2d = d2h | 6.8 GB/s | measured here: TensorFlow `DeepCopy` of 64 MiB between two logical CPU devices (6.9 GB/s), numpy `copyto` (6.7 GB/s) |
//! | cpu | duplex | 0.54 | measured here: two concurrent 64 MiB copies each run at 0.54x of one alone |
//! | cpu | launch overhead, latency | 0.35 us, 1 us | measured here: a chain of 2000 tiny TensorFlow ops; a 16-byte copy 0.5 us plus one op |
//!
//! The `cpu` preset stands for the development machine (a 2-core x86 KVM
//! guest with AVX-512, 23.5 GiB) when two logical CPU devices play device
//! and host. How it was calibrated: each figure is the best of 3-7 runs of
//! the named operation, timed with `time.perf_counter` in
//! `/work/venv/bin/python` (TensorFlow 2.21, numpy with OpenBLAS); rates are
//! bytes or operations divided by the best time. Rerun them on another
//! machine and write a user-defined model.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{PlanError, Result};

/// A device and its link to the host. Units: FLOP/s, bytes/s, bytes, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceModel {
    pub name: String,
    /// FP32 (and complex64) operations per second.
    pub flops_f32: f64,
    /// FP16 / BF16 / FP8 operations per second (tensor cores where present).
    pub flops_f16: f64,
    /// FP64 (and complex128) operations per second.
    pub flops_f64: f64,
    /// Integer and boolean operations per second.
    pub flops_int: f64,
    /// Device memory bandwidth, bytes per second.
    pub mem_bandwidth: f64,
    /// Device memory size, bytes.
    pub memory_bytes: u64,
    /// Fixed cost of every op that runs a kernel, seconds.
    pub launch_overhead_s: f64,
    /// Measured host-to-device copy bandwidth, bytes per second.
    pub h2d_bandwidth: f64,
    /// Measured device-to-host copy bandwidth, bytes per second.
    pub d2h_bandwidth: f64,
    /// Fixed cost of every transfer, seconds.
    pub link_latency_s: f64,
    /// Fraction of its own bandwidth each direction keeps while the other
    /// direction also moves data (1.0: full duplex).
    pub duplex_factor: f64,
    /// Which kernels run the step, and so the scratch each op holds
    /// ([`crate::workspace`]): `"cpu"` (TensorFlow's CPU kernels as the
    /// running TensorFlow picks them, oneDNN on or off: the Python side asks
    /// it), `"gpu"` (cuDNN, with `TF_CUDNN_WORKSPACE_LIMIT_IN_MB` where set),
    /// or a workspace rule by name ([`crate::workspace::WorkspaceRule::parse`]).
    /// Optional in JSON: `"gpu"`.
    #[serde(default = "gpu_kernels")]
    pub kernels: String,
}

fn gpu_kernels() -> String {
    "gpu".into()
}

/// Least rate (operations or bytes per second) a device model may give.
pub(crate) const MIN_RATE: f64 = 1.0;
/// Largest launch overhead or link latency, seconds.
pub(crate) const MAX_TIME_S: f64 = 1e6;
/// Least duplex factor.
pub(crate) const MIN_DUPLEX: f64 = 0.01;

const GB: f64 = 1e9;
const T: f64 = 1e12;
const GIB: u64 = 1 << 30;

/// Names of the presets, in a fixed order.
pub fn preset_names() -> &'static [&'static str] {
    &[
        "v100-nvlink2",
        "a100-pcie4",
        "h100-pcie5",
        "h200-pcie5",
        "gh200-c2c",
        "cpu",
    ]
}

/// The named preset (see the module table for every figure's source).
///
/// # Errors
/// [`PlanError::InvalidArgument`] for an unknown name, listing the presets.
///
/// # Example
/// ```
/// let d = hybridplan_core::device::preset("a100-pcie4").unwrap();
/// assert!(d.h2d_bandwidth < 32e9);
/// ```
pub fn preset(name: &str) -> Result<DeviceModel> {
    let hopper = |name: &str, bw: f64, mem: u64, h2d: f64, d2h: f64, lat: f64, dup: f64| {
        gpu(name, [67.0 * T, 989.5 * T, 34.0 * T, 33.5 * T], bw, mem).link(h2d, d2h, lat, dup)
    };
    let d = match name {
        "v100-nvlink2" => gpu(name, [15.7 * T, 125.0 * T, 7.8 * T, 15.7 * T], 900.0 * GB, 32)
            .link(68.0 * GB, 68.0 * GB, 10e-6, 0.9),
        "a100-pcie4" => gpu(name, [19.5 * T, 312.0 * T, 9.7 * T, 19.5 * T], 2039.0 * GB, 80)
            .link(24.8 * GB, 25.0 * GB, 10e-6, 0.7),
        "h100-pcie5" => hopper(name, 3350.0 * GB, 80, 35.0 * GB, 50.0 * GB, 10e-6, 0.7),
        "h200-pcie5" => hopper(name, 4800.0 * GB, 141, 35.0 * GB, 50.0 * GB, 10e-6, 0.7),
        "gh200-c2c" => hopper(name, 4000.0 * GB, 96, 375.0 * GB, 297.0 * GB, 2e-6, 0.8),
        "cpu" => cpu(),
        _ => {
            return Err(PlanError::InvalidArgument(format!(
                "unknown device preset '{name}': choose one of {}, or pass a device model (JSON object with every field of DeviceModel)",
                preset_names().join(", ")
            )))
        }
    };
    Ok(d)
}

fn gpu(name: &str, flops: [f64; 4], mem_bandwidth: f64, gib: u64) -> DeviceModel {
    DeviceModel {
        name: name.into(),
        flops_f32: flops[0],
        flops_f16: flops[1],
        flops_f64: flops[2],
        flops_int: flops[3],
        mem_bandwidth,
        memory_bytes: gib * GIB,
        launch_overhead_s: 5e-6,
        h2d_bandwidth: 0.0,
        d2h_bandwidth: 0.0,
        link_latency_s: 0.0,
        duplex_factor: 1.0,
        kernels: gpu_kernels(),
    }
}

fn cpu() -> DeviceModel {
    DeviceModel {
        name: "cpu".into(),
        flops_f32: 150.0e9,
        flops_f16: 83.0e9,
        flops_f64: 30.0e9,
        flops_int: 19.0e9,
        mem_bandwidth: 13.0 * GB,
        memory_bytes: 24_684_084 * 1024,
        launch_overhead_s: 0.35e-6,
        h2d_bandwidth: 6.8 * GB,
        d2h_bandwidth: 6.8 * GB,
        link_latency_s: 1e-6,
        duplex_factor: 0.54,
        kernels: "cpu".into(),
    }
}

impl DeviceModel {
    fn link(mut self, h2d: f64, d2h: f64, latency: f64, duplex: f64) -> Self {
        self.h2d_bandwidth = h2d;
        self.d2h_bandwidth = d2h;
        self.link_latency_s = latency;
        self.duplex_factor = duplex;
        self
    }

    /// Operations per second for ops computing in `dtype`: FP32 and
    /// complex64 use `flops_f32`; FP16, BF16 and FP8 `flops_f16`; FP64 and
    /// complex128 `flops_f64`; everything else `flops_int`.
    pub(crate) fn flops_per_s(&self, dtype: DType) -> f64 {
        match dtype.0 {
            1 | 8 => self.flops_f32,
            14 | 19 | 24..=28 => self.flops_f16,
            2 | 18 => self.flops_f64,
            _ => self.flops_int,
        }
    }

    /// Checks that every figure is finite and in a range where no step's
    /// time can overflow: rates at least [`MIN_RATE`] per second, times
    /// in `[0, MAX_TIME_S]` seconds, the duplex factor in
    /// `[MIN_DUPLEX, 1]`. With these bounds an op of a graph of u64 bytes
    /// (at most 2^131 FLOPs: a `MatMul` of two 2^65-element operands) takes
    /// under 10^40 s and a copy under 10^22 s, so 2^32 of each sum to a
    /// finite step time; a rate of 10^-300 would make one op infinite.
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] naming the field, its value and the
    /// valid range.
    pub(crate) fn validate(&self) -> Result<()> {
        let rates = [
            ("flops_f32", self.flops_f32),
            ("flops_f16", self.flops_f16),
            ("flops_f64", self.flops_f64),
            ("flops_int", self.flops_int),
            ("mem_bandwidth", self.mem_bandwidth),
            ("h2d_bandwidth", self.h2d_bandwidth),
            ("d2h_bandwidth", self.d2h_bandwidth),
        ];
        for (field, v) in rates {
            if !(v.is_finite() && v >= MIN_RATE) {
                return Err(self.bad(field, v, "a finite rate of at least 1 per second"));
            }
        }
        for (field, v) in [
            ("launch_overhead_s", self.launch_overhead_s),
            ("link_latency_s", self.link_latency_s),
        ] {
            if !(v.is_finite() && (0.0..=MAX_TIME_S).contains(&v)) {
                return Err(self.bad(field, v, "a time in seconds in [0, 1e6]"));
            }
        }
        let d = self.duplex_factor;
        if !((MIN_DUPLEX..=1.0).contains(&d)) {
            return Err(self.bad("duplex_factor", d, "a fraction in [0.01, 1]"));
        }
        if !matches!(self.kernels.as_str(), "cpu" | "gpu") {
            crate::workspace::WorkspaceRule::parse(&self.kernels).map_err(|e| {
                PlanError::InvalidArgument(format!(
                    "device model '{}': field kernels is '{}', it must be 'cpu', 'gpu' or a \
                     workspace rule ({e})",
                    self.name, self.kernels
                ))
            })?;
        }
        Ok(())
    }

    fn bad(&self, field: &str, v: f64, want: &str) -> PlanError {
        PlanError::InvalidArgument(format!(
            "device model '{}': field {field} is {v:?}, it must be {want} (out of that range a \
             step's predicted time can overflow to infinity or mean nothing)",
            self.name
        ))
    }
}

/// Reads a user-defined model from a JSON object with every field of
/// [`DeviceModel`] (`kernels` optional), and validates it.
///
/// # Errors
/// [`PlanError::InvalidArgument`] naming a missing, unknown or ill-typed
/// field, or a value out of range.
///
/// # Example
/// ```
/// use hybridplan_core::device::{from_json, preset};
/// let json = serde_json::to_string(&preset("cpu").unwrap()).unwrap();
/// assert_eq!(from_json(&json).unwrap(), preset("cpu").unwrap());
/// assert!(from_json("{\"name\": \"x\"}").unwrap_err().to_string().contains("flops_f32"));
/// ```
pub fn from_json(text: &str) -> Result<DeviceModel> {
    let d: DeviceModel = serde_json::from_str(text).map_err(|e| {
        PlanError::InvalidArgument(format!(
            "device model: {e}; every field is required: {}",
            FIELDS.join(", ")
        ))
    })?;
    d.validate()?;
    Ok(d)
}

/// The required fields of a device model, in declaration order (the
/// optional `kernels` follows them).
pub(crate) const FIELDS: [&str; 12] = [
    "name",
    "flops_f32",
    "flops_f16",
    "flops_f64",
    "flops_int",
    "mem_bandwidth",
    "memory_bytes",
    "launch_overhead_s",
    "h2d_bandwidth",
    "d2h_bandwidth",
    "link_latency_s",
    "duplex_factor",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_named() {
        for n in preset_names() {
            let d = preset(n).unwrap();
            d.validate().unwrap();
            assert_eq!(&d.name, n);
            assert!(d.h2d_bandwidth < d.mem_bandwidth);
            assert_eq!(d.kernels, if *n == "cpu" { "cpu" } else { "gpu" });
        }
    }

    #[test]
    fn measured_link_figures() {
        let a = preset("a100-pcie4").unwrap();
        assert!((24e9..=26e9).contains(&a.h2d_bandwidth));
        let h = preset("h100-pcie5").unwrap();
        assert_eq!((h.h2d_bandwidth, h.d2h_bandwidth), (35e9, 50e9));
        let c = preset("gh200-c2c").unwrap();
        assert!((c.h2d_bandwidth + c.d2h_bandwidth) / 2.0 > 330e9);
    }

    #[test]
    fn unknown_preset_lists_the_presets() {
        let e = preset("tpu").unwrap_err().to_string();
        assert!(e.contains("tpu") && e.contains("gh200-c2c") && e.contains("cpu"));
    }

    #[test]
    fn json_round_trip_and_field_errors() {
        let d = preset("v100-nvlink2").unwrap();
        let mut v = serde_json::to_value(&d).unwrap();
        assert_eq!(from_json(&v.to_string()).unwrap(), d);
        for f in FIELDS {
            let mut w = v.clone();
            w.as_object_mut().unwrap().remove(f);
            let e = from_json(&w.to_string()).unwrap_err();
            assert!(matches!(e, PlanError::InvalidArgument(_)));
            assert!(e.to_string().contains(&format!("`{f}`")), "{e}");
        }
        v["duplex_factor"] = 1.5.into();
        assert!(from_json(&v.to_string())
            .unwrap_err()
            .to_string()
            .contains("duplex_factor"));
        v["duplex_factor"] = 1.0.into();
        v["kernels"] = "tpu".into();
        let e = from_json(&v.to_string()).unwrap_err().to_string();
        assert!(e.contains("kernels") && e.contains("'tpu'"), "{e}");
        v["kernels"] = "cpu-eigen:2".into();
        assert_eq!(from_json(&v.to_string()).unwrap().kernels, "cpu-eigen:2");
        v.as_object_mut().unwrap().remove("kernels");
        assert_eq!(from_json(&v.to_string()).unwrap().kernels, "gpu");
        v["extra"] = 1.into();
        assert!(from_json(&v.to_string())
            .unwrap_err()
            .to_string()
            .contains("extra"));
    }

    #[test]
    fn figures_that_could_make_a_step_infinite_are_refused_naming_field_and_range() {
        let base = preset("a100-pcie4").unwrap();
        let set = |f: &str, v: f64| {
            let mut d = base.clone();
            *match f {
                "flops_f32" => &mut d.flops_f32,
                "flops_f16" => &mut d.flops_f16,
                "flops_f64" => &mut d.flops_f64,
                "flops_int" => &mut d.flops_int,
                "mem_bandwidth" => &mut d.mem_bandwidth,
                "h2d_bandwidth" => &mut d.h2d_bandwidth,
                "d2h_bandwidth" => &mut d.d2h_bandwidth,
                "launch_overhead_s" => &mut d.launch_overhead_s,
                "link_latency_s" => &mut d.link_latency_s,
                _ => &mut d.duplex_factor,
            } = v;
            d
        };
        let rates = FIELDS[1..6].iter().chain(&FIELDS[8..10]);
        for &f in rates {
            for v in [1e-300, 0.5, 0.0, -1.0, f64::INFINITY] {
                let e = set(f, v).validate().unwrap_err().to_string();
                assert!(e.contains(&format!("field {f} is {v:?}")), "{e}");
                assert!(e.contains("at least 1 per second"), "{e}");
            }
            set(f, MIN_RATE).validate().unwrap();
        }
        for f in ["launch_overhead_s", "link_latency_s"] {
            for v in [1e300, 1.5e6, -1e-9, f64::NAN] {
                let e = set(f, v).validate().unwrap_err().to_string();
                assert!(e.contains(f) && e.contains("in [0, 1e6]"), "{e}");
            }
            set(f, MAX_TIME_S).validate().unwrap();
        }
        for v in [1e-300, 0.005, 0.0, 1.5] {
            let e = set("duplex_factor", v).validate().unwrap_err().to_string();
            assert!(
                e.contains("duplex_factor") && e.contains("in [0.01, 1]"),
                "{e}"
            );
        }
        set("duplex_factor", MIN_DUPLEX).validate().unwrap();
    }

    #[test]
    fn dtype_classes() {
        let d = preset("v100-nvlink2").unwrap();
        assert_eq!(d.flops_per_s(DType::FLOAT), d.flops_f32);
        assert_eq!(d.flops_per_s(DType::HALF), d.flops_f16);
        assert_eq!(d.flops_per_s(DType::BFLOAT16), d.flops_f16);
        assert_eq!(d.flops_per_s(DType::DOUBLE), d.flops_f64);
        assert_eq!(d.flops_per_s(DType::INT32), d.flops_int);
    }
}
