//! Arbitrary bytes as each message of the connection handshake and the agent (`Challenge`,
//! `Hello`, `Welcome`, `AgentSign`, `AgentSigned`), as a `Credentials`, and as the bytes of a
//! capability: what decodes must round-trip, a `Hello` is accepted exactly when its credential
//! and proof are genuine, and a capability is allowed exactly when its tag verifies. See
//! `tessera_fuzz::fuzz_handshake` for the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tessera_fuzz::fuzz_handshake(data);
});
