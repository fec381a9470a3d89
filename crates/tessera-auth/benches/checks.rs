//! Criterion benchmarks of what security adds to the request path:
//!
//! - `capability/cached`: an iod's check of a capability its connection showed before (a
//!   62-byte comparison, then handle, rights, uid and expiry): what every data request pays;
//! - `capability/verify`: the first use of a capability on a connection (one HMAC-SHA-256);
//! - `credentials/verify`: the mds's check of a credential it has not seen on the connection;
//! - `handshake/accept`: the server's side of one connection's handshake.
//!
//! Run with `cargo bench -p tessera-auth --bench checks` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tessera_auth::handshake::{bind, credentials_for, hello_proof, verify_credentials};
use tessera_auth::{CapabilityCache, ClusterKey, Grant, Rights, ServerAuth};
use tessera_proto::{Hello, Principal};

fn checks(c: &mut Criterion) {
    let key = ClusterKey::from_bytes([0x42; 32]);
    let capability = Grant {
        handle: 7,
        rights: Rights::READ_WRITE,
        uid: 1000,
        expires_s: tessera_auth::now_s() + 3600,
        epoch: 1,
    }
    .sign(&key);
    let mut cache = CapabilityCache::default();
    c.bench_function("capability/cached", |b| {
        b.iter(|| {
            cache
                .check(
                    &key,
                    Principal::User,
                    1000,
                    black_box(&capability),
                    7,
                    Rights::WRITE,
                )
                .unwrap();
        });
    });
    c.bench_function("capability/verify", |b| {
        b.iter(|| Grant::verify(&key, black_box(&capability)).unwrap());
    });
    let credentials = credentials_for(
        &key,
        Principal::User,
        (1000, 100, vec![4, 24, 27]),
        Duration::from_hours(1),
    );
    c.bench_function("credentials/verify", |b| {
        b.iter(|| verify_credentials(&key, black_box(&credentials)).unwrap());
    });
    let server = ServerAuth::new(key.clone(), 2, 0);
    let challenge = server.challenge().unwrap();
    let binding = bind(&challenge).unwrap();
    let hello = Hello {
        proof: hello_proof(&key, &binding, &credentials),
        client_nonce: binding.client_nonce,
        credentials,
    };
    c.bench_function("handshake/accept", |b| {
        b.iter(|| server.accept(&challenge, black_box(&hello)).unwrap());
    });
}

criterion_group!(benches, checks);
criterion_main!(benches);
