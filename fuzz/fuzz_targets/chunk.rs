//! The fuzz target `chunk`: its check is `fuzz/checks/chunk.rs`.
#![no_main]

#[path = "../checks/chunk.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
