//! Which ops the planners may touch: include and exclude lists of name
//! scopes and op types, as TensorFlow Large Model Support offered them.
//!
//! # The rule
//! A scope matches a node whose name equals it or starts with it followed by
//! `/` (so `model/block1` matches `model/block1/conv` but not
//! `model/block10/conv`); a trailing `/` in the scope is ignored. A type
//! matches a node whose op type equals it. A node is *selected* when the
//! include lists are both empty or one of their entries matches it, and no
//! entry of the exclude lists matches it.
//!
//! A swap may be planned only for a tensor whose producer is selected; a
//! recompute only for a sub-graph whose nodes are all selected. Ops that are
//! never recomputed (stateful, random, variable reads) stay so whatever the
//! lists say.
//!
//! An entry that matches no node is an error (a typo would otherwise leave
//! the planner silently without candidates).
//!
//! # Complexity
//! O(N * P * L): N nodes, P entries, L the length of a name.

use crate::error::{PlanError, Result};
use crate::graph::Graph;

/// Include and exclude lists (all empty: every op is selected).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub include_scopes: Vec<String>,
    pub exclude_scopes: Vec<String>,
    pub include_types: Vec<String>,
    pub exclude_types: Vec<String>,
}

impl Selection {
    pub(crate) fn is_empty(&self) -> bool {
        self.include_scopes.is_empty()
            && self.exclude_scopes.is_empty()
            && self.include_types.is_empty()
            && self.exclude_types.is_empty()
    }

    /// Per node: may the planners swap its outputs or recompute it?
    /// `None` when the selection is empty (everything selected).
    ///
    /// # Errors
    /// [`PlanError::InvalidArgument`] for an empty entry, an entry that
    /// matches no node, or an entry both included and excluded.
    pub(crate) fn mask(&self, g: &Graph) -> Result<Option<Vec<bool>>> {
        if self.is_empty() {
            return Ok(None);
        }
        let lists = [
            ("include_scopes", &self.include_scopes, true),
            ("exclude_scopes", &self.exclude_scopes, true),
            ("include_types", &self.include_types, false),
            ("exclude_types", &self.exclude_types, false),
        ];
        for (what, list, _) in lists {
            if let Some(e) = list.iter().find(|e| e.trim_end_matches('/').is_empty()) {
                return Err(PlanError::InvalidArgument(format!(
                    "{what} has an empty entry {e:?}: give a name scope or op type"
                )));
            }
        }
        for (a, b) in [
            (&self.include_scopes, &self.exclude_scopes),
            (&self.include_types, &self.exclude_types),
        ] {
            let norm = |e: &String| e.trim_end_matches('/').to_string();
            if let Some(both) = a.iter().find(|e| b.iter().any(|f| norm(f) == norm(e))) {
                return Err(PlanError::InvalidArgument(format!(
                    "'{both}' is both included and excluded: conflicting options, drop one"
                )));
            }
        }
        let mut hits = lists.map(|(_, list, _)| vec![false; list.len()]);
        let include_any = !self.include_scopes.is_empty() || !self.include_types.is_empty();
        let mut mask = vec![false; g.num_nodes()];
        for (v, m) in mask.iter_mut().enumerate() {
            let name: &str = g.nodes[v].name.as_ref();
            let op = g.op_name(v as u32);
            let mut matched = [false; 4];
            for (k, (_, list, is_scope)) in lists.iter().enumerate() {
                for (i, e) in list.iter().enumerate() {
                    let hit = if *is_scope {
                        in_scope(name, e)
                    } else {
                        op == e
                    };
                    if hit {
                        hits[k][i] = true;
                        matched[k] = true;
                    }
                }
            }
            let included = !include_any || matched[0] || matched[2];
            *m = included && !matched[1] && !matched[3];
        }
        for (k, (what, list, is_scope)) in lists.iter().enumerate() {
            if let Some(i) = hits[k].iter().position(|h| !h) {
                let hint = if *is_scope {
                    "scopes match node names at '/' boundaries, e.g. 'model/block1'"
                } else {
                    "types are op names such as 'Conv2D' or 'MatMul'"
                };
                return Err(PlanError::InvalidArgument(format!(
                    "{what} entry '{}' matches no node of the graph ({hint})",
                    list[i]
                )));
            }
        }
        Ok(Some(mask))
    }
}

/// Is `name` the scope `scope` or inside it?
fn in_scope(name: &str, scope: &str) -> bool {
    let scope = scope.trim_end_matches('/');
    name.strip_prefix(scope)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, BuildOptions, NodeSpec};

    fn graph() -> Graph {
        let spec = |name, op, inputs: &[&'static str]| NodeSpec::test(name, op, inputs, &[4, 4]);
        build(
            &[
                spec("m/block1/conv", "Conv2D", &[]),
                spec("m/block1/relu", "Relu", &["m/block1/conv"]),
                spec("m/block10/conv", "Conv2D", &["m/block1/relu"]),
                spec("m/head", "MatMul", &["m/block10/conv"]),
            ],
            &BuildOptions::default(),
        )
        .unwrap()
    }

    fn sel(is: &[&str], es: &[&str], it: &[&str], et: &[&str]) -> Selection {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Selection {
            include_scopes: v(is),
            exclude_scopes: v(es),
            include_types: v(it),
            exclude_types: v(et),
        }
    }

    #[test]
    fn scopes_match_at_slash_boundaries() {
        assert!(in_scope("m/block1/conv", "m/block1"));
        assert!(in_scope("m/block1/conv", "m/block1/"));
        assert!(in_scope("m/block1", "m/block1"));
        assert!(!in_scope("m/block10/conv", "m/block1"));
        assert!(!in_scope("xm/block1/conv", "m/block1"));
    }

    #[test]
    fn include_then_exclude() {
        let g = graph();
        assert_eq!(Selection::default().mask(&g).unwrap(), None);
        let m = sel(&["m/block1"], &[], &[], &[]).mask(&g).unwrap().unwrap();
        assert_eq!(m, vec![true, true, false, false]);
        let m = sel(&[], &[], &["Conv2D"], &[]).mask(&g).unwrap().unwrap();
        assert_eq!(m, vec![true, false, true, false]);
        let m = sel(&["m"], &["m/block1"], &[], &["MatMul"])
            .mask(&g)
            .unwrap()
            .unwrap();
        assert_eq!(m, vec![false, false, true, false]);
        // Either include list admits a node.
        let m = sel(&["m/head"], &[], &["Relu"], &[])
            .mask(&g)
            .unwrap()
            .unwrap();
        assert_eq!(m, vec![false, true, false, true]);
    }

    #[test]
    fn bad_entries_are_errors() {
        let g = graph();
        for (s, needle) in [
            (sel(&["nope"], &[], &[], &[]), "matches no node"),
            (sel(&[], &[], &[], &["Conv3D"]), "matches no node"),
            (sel(&["m/"], &["m"], &[], &[]), "both included and excluded"),
            (
                sel(&[], &[], &["Relu"], &["Relu"]),
                "both included and excluded",
            ),
            (sel(&[""], &[], &[], &[]), "empty entry"),
        ] {
            match s.mask(&g) {
                Err(PlanError::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
