//! Runs the GraphDef decoder and its test oracle, the reference route
//! (`reference::agree`), on every `.pb` file given (or found in the
//! directories given) and prints how many both accept, both reject, and
//! where they disagree; exits with an error on any disagreement.
//!
//!     cargo run --release -p hybridplan-core --example decoder_oracle -- DIR_OR_FILE ...
//!
//! Made for corpora written by other generators, such as the mutated steps
//! of the structure-aware fuzzer (`fuzz_structured.py`).

use std::path::{Path, PathBuf};

use hybridplan_core::build::BuildOptions;
use hybridplan_core::reference::agree;

fn files(p: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        entries.sort();
        for e in entries {
            files(&e, out)?;
        }
    } else if p.extension().is_some_and(|e| e == "pb") {
        out.push(p.to_path_buf());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut paths = Vec::new();
    for arg in std::env::args().skip(1) {
        files(Path::new(&arg), &mut paths)?;
    }
    let (mut accepted, mut rejected, mut differ) = (0usize, 0usize, 0usize);
    for p in &paths {
        let bytes = std::fs::read(p)?;
        match agree(&bytes, &BuildOptions::default()) {
            Ok(Some(_)) => accepted += 1,
            Ok(None) => rejected += 1,
            Err(e) => {
                differ += 1;
                println!("{}: {e}", p.display());
            }
        }
    }
    println!(
        "{} files: {accepted} accepted by both, {rejected} rejected by both, {differ} disagreements",
        paths.len()
    );
    if differ > 0 {
        return Err(format!("{differ} disagreements").into());
    }
    Ok(())
}
