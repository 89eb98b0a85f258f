//! The GraphDef decoder against its test oracle, the reference route
//! (`reference::agree`): on the real TensorFlow fixture and the synthetic
//! corpus as they are, cut at every length, and with every byte's bit
//! flipped (one bit a byte, a different bit each byte; every 13th length
//! and byte unless built with `--release`), both give the same
//! graph or both an error (the same error, but for malformed bytes, which
//! each reports in its own words). And the decoder's own errors say what
//! is wrong and where.

use hybridplan_core::build::BuildOptions;
use hybridplan_core::graph_from_bytes;
use hybridplan_core::reference::agree;
use hybridplan_core::synth::{self, SynthKind, SynthSpec};
use hybridplan_core::PlanError;

const SMALL_CNN: &[u8] = include_bytes!("fixtures/small_cnn.pb");

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut out = vec![("small_cnn.pb".to_string(), SMALL_CNN.to_vec())];
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        if let Ok(b) = std::fs::read(&f) {
            out.push((f.display().to_string(), b));
        }
    }
    out
}

/// Counts (accepted, rejected) and panics on the first disagreement.
fn check(name: &str, bytes: &[u8], tally: &mut (usize, usize)) {
    match agree(bytes, &BuildOptions::default()) {
        Ok(Some(_)) => tally.0 += 1,
        Ok(None) => tally.1 += 1,
        Err(e) => panic!("{name}: {e}"),
    }
}

#[test]
fn fixtures_and_synthetic_graphs_are_decoded_as_the_reference_decodes_them() {
    let mut tally = (0, 0);
    for (name, bytes) in corpus() {
        check(&name, &bytes, &mut tally);
    }
    for kind in [
        SynthKind::Residual,
        SynthKind::Transformer,
        SynthKind::Mixed,
        SynthKind::Dag,
        SynthKind::Narrow,
    ] {
        let spec = SynthSpec {
            kind,
            blocks: synth::blocks_for_nodes(kind, 2000),
            ..SynthSpec::default()
        };
        check(kind.name(), &synth::graphdef(&spec), &mut tally);
    }
    assert_eq!(tally.1, 0, "every fixture is valid");
}

/// Every length and byte with `cargo test --release`; every 13th otherwise
/// (both decoders are slow unoptimised).
const STRIDE: usize = if cfg!(debug_assertions) { 13 } else { 1 };

#[test]
fn every_truncation_of_the_real_graph_gets_the_references_verdict() {
    let mut tally = (0, 0);
    for cut in (0..SMALL_CNN.len()).step_by(STRIDE) {
        check(&format!("cut at {cut}"), &SMALL_CNN[..cut], &mut tally);
    }
    // A cut between two nodes leaves a valid prefix graph (its inputs from
    // later nodes missing), so most cuts are errors, a few are not.
    assert!(tally.1 > SMALL_CNN.len() / STRIDE * 9 / 10, "{tally:?}");
}

#[test]
fn a_bit_flip_in_every_byte_of_the_real_graph_gets_the_references_verdict() {
    let mut tally = (0, 0);
    let mut bytes = SMALL_CNN.to_vec();
    for at in (0..bytes.len()).step_by(STRIDE) {
        let bit = 1u8 << (at * 5 % 8);
        bytes[at] ^= bit;
        check(&format!("bit {bit:#04x} of byte {at}"), &bytes, &mut tally);
        bytes[at] ^= bit;
    }
    // Most flips change a name, a shape or a dtype and leave a valid graph.
    assert!(tally.0 > 0 && tally.1 > 0, "{tally:?}");
}

fn decode_error(bytes: &[u8]) -> String {
    match graph_from_bytes(bytes, &BuildOptions::default()) {
        Err(e @ PlanError::Decode(_)) => e.to_string(),
        other => panic!("not a decode error: {other:?}"),
    }
}

/// The decoder's messages name the fault, the byte offset in the whole
/// input, the node (index and name) and the attribute, and what to pass.
#[test]
fn decode_errors_say_what_is_wrong_and_where() {
    // A cut file: the last node declares more bytes than are left.
    let cut = SMALL_CNN.len() - 40;
    let msg = decode_error(&SMALL_CNN[..cut]);
    assert!(
        msg.starts_with("malformed GraphDef bytes: after node "),
        "{msg}"
    );
    assert!(
        msg.contains("in the whole input (is the file cut short?) at byte "),
        "{msg}"
    );
    assert!(msg.contains(&format!(" of {cut}")), "{msg}");
    assert!(msg.contains("GraphDef.SerializeToString()"), "{msg}");

    // A name that is not UTF-8: node 1, at the byte where the name starts.
    let node = |name: &[u8], op: &[u8], attr: &[u8]| {
        let mut n = Vec::new();
        field(&mut n, 1, name);
        field(&mut n, 2, op);
        if !attr.is_empty() {
            field(&mut n, 5, attr);
        }
        let mut g = Vec::new();
        field(&mut g, 1, &n);
        g
    };
    let mut g = node(b"a", b"NoOp", b"");
    g.extend(node(b"b\xff", b"NoOp", b""));
    let msg = decode_error(&g);
    let want = "node 1 ('b\u{fffd}'): its name 'b\u{fffd}' is a string field that is not valid \
                UTF-8 at byte 15 of 23";
    assert!(msg.contains(want), "{msg}");

    // Fields of the wrong wire type, in the GraphDef and in a node.
    let msg = decode_error(&[0x0a, 0x03, 0x0a, 0x01, b'a', 0x10, 0x01]);
    let want =
        "GraphDef field 2 (library) has the wrong wire type 0 (is this a GraphDef?) at byte 6 of 7";
    assert!(msg.contains(want), "{msg}");
    let msg = decode_error(&[0x0a, 0x04, 0x0a, 0x01, b'a', 0x10]);
    let want = "node 0 ('a'): NodeDef field 2 (op) has the wrong wire type 0, not length-delimited at byte 6 of 6";
    assert!(msg.contains(want), "{msg}");

    // A shape in `_output_shapes` that declares more bytes than its list has.
    let mut list = Vec::new();
    list.extend_from_slice(&[0x3a, 0x09, 0x12, 0x02, 0x08, 0x04]);
    let mut value = Vec::new();
    field(&mut value, 1, &list);
    let mut attr = Vec::new();
    field(&mut attr, 1, b"_output_shapes");
    field(&mut attr, 2, &value);
    let mut g = node(b"x", b"Placeholder", &attr);
    let at = g.len() - 5;
    g.extend(node(b"y", b"NoOp", b""));
    let msg = decode_error(&g);
    let want = format!(
        "node 0 ('x'), attribute '_output_shapes': declared length 9 exceeds the bytes that \
         remain in its message at byte {at} of {}.",
        g.len()
    );
    assert!(msg.contains(&want), "{msg}");
}

fn field(out: &mut Vec<u8>, f: u8, payload: &[u8]) {
    out.push(f << 3 | 2);
    out.push(payload.len() as u8);
    out.extend_from_slice(payload);
}
