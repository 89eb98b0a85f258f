//! Live intervals of every tensor and the device memory timeline.
//!
//! # The model
//! A tensor's buffer is allocated when its producer runs and freed after the
//! last op that reads it (or reads an alias of it: `Identity`, `Reshape`...
//! share their input's buffer, see `opkind::aliased_input`; an element-wise
//! op that is the last reader of its input writes its output into that
//! buffer, see `inplace`). A tensor nobody reads lives while its producer
//! runs. `timeline[p]` is the persistent bytes
//! plus every buffer live while the op at position `p` runs (its inputs and
//! its outputs together) plus that op's kernel scratch
//! ([`crate::workspace`], `Graph::workspace`), held only while it runs.
//!
//! # Complexity
//! O(N + T + E) time and O(T + N) memory.

use crate::graph::{big_vec_of, Graph, NONE};
use crate::schedule::Schedule;

/// Live intervals and the memory timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Liveness {
    /// Position at which each tensor is produced.
    pub produce: Vec<u32>,
    /// Last position at which each tensor's buffer is needed.
    pub last_use: Vec<u32>,
    /// The tensor that owns each tensor's buffer (itself unless an alias).
    pub owner: Vec<u32>,
    /// For an owner whose op wrote it in place into an input's buffer
    /// ([`crate::inplace`]), that buffer's owner; else [`NONE`]. The
    /// timeline counts such a tensor in the buffer it went into, which
    /// lives until `buffer_end`. (`owner` and `last_use` stay per tensor:
    /// what a plan may swap or clone.)
    pub written_into: Vec<u32>,
    /// Last position at which each buffer (an owner not written in place)
    /// is needed, outputs written into it included.
    pub buffer_end: Vec<u32>,
    /// Bytes in use while the op at each position runs (persistent included).
    pub timeline: Vec<u64>,
    pub peak_bytes: u64,
    /// First position at which the peak is reached.
    pub peak_pos: u32,
}

/// Computes liveness for a schedule.
///
/// Every pass but the memory timeline's runs in tensor order, reading the
/// tensor records once, front to back: the owners are the roots of the
/// alias chains (what a pass in schedule order would give, an alias being
/// produced after the tensor it aliases), and an owner's last use is the
/// largest of its own and its aliases' (a maximum: any order gives it).
pub fn liveness(g: &Graph, s: &Schedule) -> Liveness {
    let nt = g.num_tensors();
    let mut produce = big_vec_of(nt, 0u32);
    let mut last_use = big_vec_of(nt, 0u32);
    let mut owner = big_vec_of(nt, NONE);
    let mut path = Vec::new();
    for (t, tt) in g.tensors.iter().enumerate() {
        let p = s.pos[tt.node as usize];
        produce[t] = p;
        last_use[t] = g
            .consumers(t as u32)
            .iter()
            .map(|&c| s.pos[c as usize])
            .max()
            .unwrap_or(p)
            .max(p);
        if owner[t] == NONE {
            resolve_owner(g, &mut owner, &mut path, t as u32);
        }
    }
    // Aliases extend their owner's life. An owner is no alias, so the
    // last uses read here are final.
    for t in 0..nt {
        let o = owner[t] as usize;
        if o != t {
            last_use[o] = last_use[o].max(last_use[t]);
        }
    }
    let (written_into, buffer_end) = forward_in_place(g, s, &owner, &last_use);
    let timeline = memory_timeline(g, s, &written_into, &produce, &buffer_end, true);
    let (peak_pos, peak_bytes) =
        timeline
            .iter()
            .enumerate()
            .fold(
                (0u32, 0u64),
                |(bp, bb), (p, &b)| if b > bb { (p as u32, b) } else { (bp, bb) },
            );
    Liveness {
        produce,
        last_use,
        owner,
        written_into,
        buffer_end,
        timeline,
        peak_bytes,
        peak_pos,
    }
}

/// In-place forwarding ([`crate::inplace`]) in schedule order: the owner
/// each owner was written into (or [`NONE`]) and every buffer's last use,
/// outputs written into it included. A buffer written into was made before
/// any of its readers ran, when its own decision was taken, so it is never
/// itself written into later: one lookup finds a tensor's buffer.
/// O(N + E + T).
fn forward_in_place(
    g: &Graph,
    s: &Schedule,
    owner: &[u32],
    last_use: &[u32],
) -> (Vec<u32>, Vec<u32>) {
    let table = crate::inplace::table(g);
    let mut into = big_vec_of(owner.len(), NONE);
    let mut end = last_use.to_vec();
    for (p, &v) in s.order.iter().enumerate() {
        let Some((f, out)) = crate::inplace::of_node(g, &table, v) else {
            continue;
        };
        if owner[out as usize] != out {
            continue;
        }
        let ins = g.inputs(v);
        let buffer = |into: &[u32], t: u32| {
            let o = owner[t as usize];
            match into[o as usize] {
                NONE => o,
                b => b,
            }
        };
        for slot in f.slots(ins.len()) {
            let r = buffer(&into, ins[slot]);
            let rt = &g.tensors[r as usize];
            if crate::inplace::pinned(g, rt.node)
                || end[r as usize] != p as u32
                || rt.bytes != g.tensors[out as usize].bytes
                || !crate::inplace::fits(g, v, slot, out)
                || ins.iter().filter(|&&t| buffer(&into, t) == r).count() != 1
            {
                continue;
            }
            into[out as usize] = r;
            end[r as usize] = end[out as usize];
            break;
        }
    }
    (into, end)
}

/// Sets the owner of `t` (the root of its alias chain) and of every tensor
/// on the chain up to one already resolved, `owner` being [`NONE`] where
/// unresolved. Each tensor is resolved once: O(1) amortised. The chains
/// end (an alias reads an input of its op, and the graph has a schedule).
fn resolve_owner(g: &Graph, owner: &mut [u32], path: &mut Vec<u32>, t: u32) {
    path.clear();
    let mut x = t;
    let root = loop {
        let o = owner[x as usize];
        if o != NONE {
            break o;
        }
        let a = g.tensors[x as usize].alias_of;
        // The bound only matters for a graph that has no schedule.
        if a == NONE || path.len() == owner.len() {
            break x;
        }
        path.push(x);
        x = a;
    };
    owner[x as usize] = root;
    for &y in path.iter() {
        owner[y as usize] = root;
    }
}

/// Difference-array sweep over the buffers (owners not written into
/// another's, `written_into[t] == NONE`): + bytes at produce, - bytes after
/// the buffer's last use.
/// The differences are kept as `i64` in the buffer that becomes the
/// timeline (one array of `len + 1` words); a graph whose differences do not
/// fit (sizes near 2^63 bytes) is summed in `i128` instead. The running sum
/// is exact and clamped to `0..=u64::MAX`.
pub(crate) fn memory_timeline(
    g: &Graph,
    s: &Schedule,
    written_into: &[u32],
    produce: &[u32],
    last_use: &[u32],
    with_workspace: bool,
) -> Vec<u64> {
    let len = s.order.len();
    let ws: &[u64] = if with_workspace { &g.workspace } else { &[] };
    // (first position, position after the last use, bytes) of every buffer,
    // then each op's scratch over its own position.
    let spans = g
        .tensors
        .iter()
        .enumerate()
        .filter(|&(t, tt)| tt.bytes > 0 && written_into[t] == NONE)
        .map(|(t, tt)| (produce[t] as usize, last_use[t] as usize + 1, tt.bytes))
        .chain(
            ws.iter()
                .enumerate()
                .filter(|&(_, &b)| b > 0)
                .map(|(v, &b)| (s.pos[v] as usize, s.pos[v] as usize + 1, b)),
        );
    let Some(delta) = deltas_i64(spans.clone(), len) else {
        return memory_timeline_wide(g, spans, len);
    };
    let mut timeline = delta;
    let mut cur: i128 = i128::from(g.persistent_bytes);
    for d in &mut timeline {
        cur += i128::from(*d as i64);
        *d = cur.clamp(0, i128::from(u64::MAX)) as u64;
    }
    timeline.truncate(len);
    timeline
}

/// The differences as `i64` (stored as their two's complement in `u64`),
/// or `None` if one does not fit.
fn deltas_i64(spans: impl Iterator<Item = (usize, usize, u64)>, len: usize) -> Option<Vec<u64>> {
    let mut delta = big_vec_of(len + 1, 0u64);
    for (from, to, bytes) in spans {
        let b = i64::try_from(bytes).ok()?;
        let at = &mut delta[from];
        *at = (*at as i64).checked_add(b)? as u64;
        let at = &mut delta[to];
        *at = (*at as i64).checked_sub(b)? as u64;
    }
    Some(delta)
}

/// [`memory_timeline`] with `i128` differences.
fn memory_timeline_wide(
    g: &Graph,
    spans: impl Iterator<Item = (usize, usize, u64)>,
    len: usize,
) -> Vec<u64> {
    let mut delta = vec![0i128; len + 1];
    for (from, to, bytes) in spans {
        delta[from] += i128::from(bytes);
        delta[to] -= i128::from(bytes);
    }
    let mut cur: i128 = i128::from(g.persistent_bytes);
    delta[..len]
        .iter()
        .map(|d| {
            cur += d;
            cur.clamp(0, i128::from(u64::MAX)) as u64
        })
        .collect()
}

impl Liveness {
    /// The peak of the tensors alone: the timeline without the kernels'
    /// scratch (persistent bytes included). O(N + T).
    pub fn tensor_peak_bytes(&self, g: &Graph, s: &Schedule) -> u64 {
        if g.workspace.is_empty() {
            return self.peak_bytes;
        }
        memory_timeline(
            g,
            s,
            &self.written_into,
            &self.produce,
            &self.buffer_end,
            false,
        )
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// The `k` largest tensors live at the peak, largest first (ties by id).
    ///
    /// # Complexity
    /// O(T log k).
    pub fn live_at_peak(&self, g: &Graph, k: usize) -> Vec<u32> {
        self.live_at(g, self.peak_pos, k)
    }

    /// The `k` largest buffers live at position `p` (by their owners).
    pub fn live_at(&self, g: &Graph, p: u32, k: usize) -> Vec<u32> {
        let mut live: Vec<u32> = (0..g.num_tensors() as u32)
            .filter(|&t| {
                let i = t as usize;
                g.tensors[i].bytes > 0
                    && self.written_into[i] == NONE
                    && self.produce[i] <= p
                    && p <= self.buffer_end[i]
            })
            .collect();
        live.sort_by(|&a, &b| {
            g.tensors[b as usize]
                .bytes
                .cmp(&g.tensors[a as usize].bytes)
                .then(a.cmp(&b))
        });
        live.truncate(k);
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec, OutSpec, Shape};
    use crate::dtype::DType;

    /// The narrow and wide timelines of a -> b -> c (c reads a and b), each
    /// output a float tensor of `dims`, or of `bytes` each when given (set
    /// after the build, which refuses a step of 2^63 bytes or more).
    fn timelines(dims: Vec<i64>, bytes: Option<u64>) -> (Vec<u64>, Vec<u64>) {
        let out = || {
            vec![OutSpec {
                dtype: Some(DType::FLOAT),
                shape: Shape(Some(dims.clone())),
            }]
        };
        let node = |name, inputs| NodeSpec {
            name,
            op: "Relu",
            device: "",
            inputs,
            outputs: out(),
            calls_function: false,
        };
        let specs = [
            node("a", vec![]),
            node("b", vec!["a"]),
            node("c", vec!["a", "b"]),
        ];
        let mut g = build(&specs, &BuildOptions::default()).unwrap();
        if let Some(b) = bytes {
            for t in &mut g.tensors {
                t.bytes = b;
                t.value_bytes = b;
            }
        }
        let s = crate::schedule::schedule(&g).unwrap();
        let l = liveness(&g, &s);
        let n = s.order.len();
        let spans = (0..g.num_tensors())
            .filter(|&t| g.tensors[t].bytes > 0 && l.written_into[t] == NONE)
            .map(|t| {
                (
                    l.produce[t] as usize,
                    l.buffer_end[t] as usize + 1,
                    g.tensors[t].bytes,
                )
            });
        let wide = memory_timeline_wide(&g, spans, n);
        (l.timeline, wide)
    }

    #[test]
    fn narrow_and_wide_sums_agree() {
        let (narrow, wide) = timelines(vec![3, 5], None);
        assert_eq!(narrow, wide);
        assert_eq!(narrow, vec![60, 120, 180]);
        // 2^63 bytes each (set after the build, which refuses them), past i64,
        // and sums past u64 (clamped): the wide sum.
        let (huge, wide) = timelines(vec![3, 5], Some(1 << 63));
        assert_eq!(huge, wide);
        assert_eq!(huge[2], u64::MAX);
        // 2^59 floats: 2^61 bytes each, three live at once: 1.5 x 2^62.
        let (huge, wide) = timelines(vec![1 << 59], None);
        assert_eq!(huge, wide);
        assert_eq!(huge[2], 3 << 61);
        // 2^61 floats (2^63 bytes each): the builder refuses the graph before
        // any sum could pass 2^64 (`build::check_total_bytes`).
        let out = vec![OutSpec {
            dtype: Some(DType::FLOAT),
            shape: Shape(Some(vec![1 << 61])),
        }];
        let spec = NodeSpec {
            name: "a",
            op: "Relu",
            device: "",
            inputs: vec![],
            outputs: out,
            calls_function: false,
        };
        let err = build(&[spec], &BuildOptions::default()).unwrap_err();
        assert!(err.to_string().contains("past the 2^63 bytes"), "{err}");
    }
}
