//! The fuzz target `rectilinear`: its check is `fuzz/checks/rectilinear.rs`.
#![no_main]

#[path = "../checks/rectilinear.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
