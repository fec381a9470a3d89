//! The `ofi` registrar under `tessera-reg`'s registry: a client registers its scattered pieces
//! through the registry (OGR grouping, FMRD cache, `fi_mr_reg` underneath), a server on another
//! endpoint writes into them and reads them back using only what a control message would carry
//! (endpoint name, region, key, piece addresses), and the client's memory is checked byte by
//! byte. The client keeps its endpoint progressing with a `ProgressThread`.

#![cfg(feature = "ofi")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{pieces, Rng, PROVIDERS};
use tessera_ofi::{Access, Domain, OfiRegistrar, ProgressThread, RemoteIov};
use tessera_reg::{Caching, Grouping, Policy, Registrar, Registry, Segment};

/// Pieces of the client's buffer.
const PIECES: usize = 500;

#[test]
fn registry_over_ofi_serves_server_initiated_transfers() {
    for (provider, node) in PROVIDERS {
        let client_domain = Domain::open(provider, node).expect("client domain");
        let client = Arc::new(client_domain.endpoint().expect("client endpoint"));
        let progress = ProgressThread::spawn(Arc::clone(&client)).expect("progress thread");
        let registrar = Arc::new(OfiRegistrar::new(client_domain.clone(), Access::ALL));
        let registry = Registry::new(registrar.clone(), Policy::new(Grouping::Ogr, Caching::Fmrd))
            .expect("registry");

        let mut rng = Rng::new(11);
        let (layout, size) = pieces(&mut rng, PIECES, 100, 5000);
        let mut buffer = vec![0_u8; size];
        let base = buffer.as_mut_ptr() as usize;
        let segments: Vec<Segment> = layout
            .iter()
            .map(|piece| Segment::new(base + piece.offset, piece.length))
            .collect();
        let registration = registry.acquire(&segments).expect("acquire");
        assert!(
            registration.registrations() < PIECES / 10,
            "{provider}: OGR grouped {PIECES} pieces into {} registrations",
            registration.registrations()
        );
        // What the control message carries: name, and per piece (region, key, address, length).
        let name = client.name().to_vec();
        let advertised: Vec<_> = registration
            .covers()
            .iter()
            .map(|cover| (OfiRegistrar::cover_region(cover), cover.segment))
            .collect();

        let server_domain = Domain::open(provider, node).expect("server domain");
        let server = server_domain.endpoint().expect("server endpoint");
        server
            .set_completion_timeout(Duration::from_secs(20))
            .expect("timeout");
        let peer = server.insert_peer(&name).expect("insert client");
        let remote: Vec<RemoteIov> = advertised
            .iter()
            .enumerate()
            .map(|(index, (region, segment))| {
                region.iov(
                    index,
                    segment.address as u64,
                    segment.length as u64,
                    server_domain.addressing(),
                )
            })
            .collect::<Result<_, _>>()
            .expect("pieces inside their regions");
        let total: usize = layout.iter().map(|piece| piece.length).sum();
        let source: Vec<u8> = (0..total)
            .map(|index| u8::try_from(index % 251).expect("below 251") ^ 0x3C)
            .collect();
        let counts = server
            .write_from(&peer, &[&source], None, &remote)
            .expect("server pushes");
        assert_eq!(counts.bytes, total as u64);
        // Taking the client's endpoint lock orders the provider's writes before our reads.
        client.progress().expect("client progress");
        let mut position = 0;
        for (index, piece) in layout.iter().enumerate() {
            assert_eq!(
                &buffer[piece.offset..piece.offset + piece.length],
                &source[position..position + piece.length],
                "{provider}: piece {index}"
            );
            position += piece.length;
        }
        let mut sink = vec![0_u8; total];
        server
            .read_into(&peer, &mut [&mut sink], None, &remote)
            .expect("server pulls");
        assert_eq!(sink, source, "{provider}: bytes pulled back");

        drop(registration);
        registry.clear().expect("clear the cache");
        registry.flush().expect("flush FMRD batches");
        let stats = registry.stats();
        assert_eq!(
            stats.registrations, stats.deregistrations,
            "{provider}: {stats:?}"
        );
        assert_eq!(registrar.live(), 0, "{provider}: every fi_mr_reg closed");
        progress.stop().expect("progress thread ended cleanly");
        drop(buffer);
    }
}

#[test]
fn registrar_calibrates_and_refuses_unknown_handles() {
    for (provider, node) in PROVIDERS {
        let domain = Domain::open(provider, node).expect("domain");
        let registrar = OfiRegistrar::calibrated(domain, Access::ALL).expect("calibrate");
        let cost = registrar.cost();
        assert!(cost.is_valid(), "{provider}: {cost:?}");
        eprintln!("{provider}: fi_mr_reg cost {cost:?}");
        let buffer = vec![0_u8; 8192];
        let handle = registrar.register(Segment::of(&buffer)).expect("register");
        assert_eq!(registrar.live(), 1);
        assert!(registrar.descriptor(&handle).is_some());
        let mut stale = handle.clone();
        stale.token += 1000;
        assert!(
            registrar.deregister(stale).is_err(),
            "{provider}: unknown token refused"
        );
        registrar.deregister(handle).expect("deregister");
        assert_eq!(registrar.live(), 0);
    }
}
