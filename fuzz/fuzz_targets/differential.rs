//! Every matcher against the naive oracle; see `check_differential`.
#![no_main]

#[path = "../src/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|case: checks::Case| checks::check_differential(&case));
