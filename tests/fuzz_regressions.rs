//! Replays the fuzz corpus and every crash found so far (fuzz/corpus/, fuzz/regressions/)
//! through the fuzz targets' checks, so a fixed crash stays fixed without running a fuzzer.
//! `FUZZ_CORPUS_EXTRA=DIR` adds `DIR/<target>/` too: `make leak-check` replays the corpus that
//! the fuzz runs grew (target/fuzz-corpus/) under valgrind.

#[cfg(feature = "arrow")]
#[path = "../fuzz/src/arrow_checks.rs"]
mod arrow_checks;
#[path = "../fuzz/src/checks.rs"]
mod checks;

use std::path::Path;

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut dirs = vec![root.join("corpus"), root.join("regressions")];
    if let Some(extra) = std::env::var_os("FUZZ_CORPUS_EXTRA") {
        dirs.push(extra.into());
    }
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir.join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if entry.path().is_file() && !hidden {
                out.push(std::fs::read(entry.path()).expect("corpus file"));
            }
        }
    }
    out
}

#[test]
fn parse_corpus_and_regressions_hold() {
    let all = inputs("parse");
    assert!(!all.is_empty(), "the parse corpus is empty");
    for data in all {
        checks::check_parse(&data);
    }
}

#[test]
fn differential_corpus_and_regressions_hold() {
    let all = inputs("differential");
    assert!(!all.is_empty(), "the differential corpus is empty");
    for data in all {
        checks::check_differential_bytes(&data);
    }
}

#[cfg(feature = "arrow")]
#[test]
fn arrow_corpus_and_regressions_hold() {
    let all = inputs("arrow");
    assert!(!all.is_empty(), "the arrow corpus is empty");
    for data in all {
        arrow_checks::check_arrow_bytes(&data);
    }
}
