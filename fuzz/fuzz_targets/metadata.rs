//! The fuzz target `metadata`: its check is `fuzz/checks/metadata.rs`.
#![no_main]

#[path = "../checks/metadata.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
