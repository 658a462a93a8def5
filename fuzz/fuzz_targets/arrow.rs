//! `lookup_arrow` against the naive oracle; see `check_arrow`.
#![no_main]

#[path = "../src/arrow_checks.rs"]
mod arrow_checks;
#[path = "../src/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|case: arrow_checks::ArrowCase| arrow_checks::check_arrow(&case));
