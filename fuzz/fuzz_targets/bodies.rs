//! Arbitrary bytes as one message body: the first byte selects the type (one of
//! `tessera_fuzz::BODY_KINDS`), the rest is decoded as that type's body. See
//! `tessera_fuzz::fuzz_body` for the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tessera_fuzz::fuzz_body(data);
});
