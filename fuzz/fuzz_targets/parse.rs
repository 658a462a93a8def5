//! Pattern and topic parsing in every dialect; see `check_parse`.
#![no_main]

#[path = "../src/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_parse(data));
