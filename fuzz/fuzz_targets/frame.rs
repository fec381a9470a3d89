//! Arbitrary bytes as a received frame: the 24-byte header, then the body it announces,
//! decoded as the request, reply or error body its opcode and flags call for. See
//! `tessera_fuzz::fuzz_frame` for the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tessera_fuzz::fuzz_frame(data);
});
