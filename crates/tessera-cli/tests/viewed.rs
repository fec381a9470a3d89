//! `ViewedFile` (MPI-style accesses: a view plus a memory type, by any of the five methods)
//! and `SharedPointer` against a real cluster: every method puts the bytes where a byte model
//! of the view says, reads them back, and leaves the memory type's holes alone; concurrent
//! `fetch_add`s from several clients never lose or overlap a reservation.

mod common;

use std::collections::BTreeMap;

use common::Cluster;
use tessera_client::{CreateOptions, Datatype, Method, SharedPointer, ViewedFile};

const METHODS: [Method; 6] = [
    Method::Auto,
    Method::Multiple,
    Method::Sieve,
    Method::List,
    Method::Datatype,
    Method::View,
];

/// File types with holes, each with lower bound 0 and room for 4 interleaved processes.
fn file_types() -> Vec<(&'static str, Datatype)> {
    let int = Datatype::bytes(4).unwrap();
    let vector = Datatype::vector(4, 2, 8, &int).unwrap();
    let indexed = Datatype::indexed(&[1, 2, 3], &[0, 2, 5], &int).unwrap();
    let structure = Datatype::structure(
        &[1, 2],
        &[0, 12],
        &[int.clone(), Datatype::bytes(2).unwrap()],
    )
    .unwrap();
    let subarray = Datatype::subarray(
        &[8, 8],
        &[4, 4],
        &[4, 0],
        tessera_client::dtype::Order::C,
        &int,
    )
    .unwrap();
    vec![
        ("vector", Datatype::resized(0, 128, &vector).unwrap()),
        ("indexed", Datatype::resized(0, 96, &indexed).unwrap()),
        ("struct", Datatype::resized(0, 40, &structure).unwrap()),
        ("subarray", subarray),
    ]
}

/// The model of an access: file byte -> value, from the memory type's runs over `memory`
/// paired with the view's runs from view byte `offset`.
fn model_write(
    model: &mut BTreeMap<u64, u8>,
    filetype: &Datatype,
    displacement: u64,
    offset: u64,
    memory: &[u8],
    memtype: &Datatype,
    count: u64,
) {
    let total = memtype.size() * count;
    let bytes: Vec<u8> = memtype
        .runs(0, 0, total)
        .unwrap()
        .flat_map(|run| {
            let start = usize::try_from(run.offset).unwrap();
            memory[start..start + usize::try_from(run.length).unwrap()].to_vec()
        })
        .collect();
    let places: Vec<u64> = filetype
        .runs(i64::try_from(displacement).unwrap(), offset, offset + total)
        .unwrap()
        .flat_map(|run| {
            let start = u64::try_from(run.offset).unwrap();
            start..start + run.length
        })
        .collect();
    assert_eq!(bytes.len(), places.len());
    for (place, byte) in places.into_iter().zip(bytes) {
        model.insert(place, byte);
    }
}

#[test]
fn every_method_puts_bytes_where_the_view_says_and_reads_them_back() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    // Every other 3-byte group of a buffer: noncontiguous memory.
    let memtype = Datatype::resized(0, 6, &Datatype::bytes(3).unwrap()).unwrap();
    for (name, filetype) in file_types() {
        for method in METHODS {
            let path = format!("/viewed-{name}-{}", method.name());
            let options = CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            };
            let mut viewed = ViewedFile::new(client.create(&path, &options).unwrap());
            viewed.set_method(method);
            let displacement = 20;
            viewed.set_view(displacement, &filetype).unwrap();
            assert_eq!(
                viewed.effective_method(),
                if method == Method::Auto {
                    Method::View
                } else {
                    method
                }
            );
            let mut model = BTreeMap::new();
            // An access from view byte 0, and one starting inside an instance.
            let accesses: [(u64, u64, u8); 2] = [(0, 37, 1), (filetype.size() * 3 + 5, 11, 101)];
            for &(offset, count, salt) in &accesses {
                let memory: Vec<u8> = (0..count * 6)
                    .map(|k| u8::try_from((k + u64::from(salt)) % 251).unwrap())
                    .collect();
                let report = viewed.write(offset, &memory, &memtype, count).unwrap();
                // Sieving moves the holes inside its chunks too.
                if method == Method::Sieve {
                    assert!(report.bytes >= count * 3, "{path}: bytes written");
                } else {
                    assert_eq!(report.bytes, count * 3, "{path}: bytes written");
                }
                model_write(
                    &mut model,
                    &filetype,
                    displacement,
                    offset,
                    &memory,
                    &memtype,
                    count,
                );
                let mut back = vec![0xEE_u8; memory.len()];
                viewed.read(offset, &mut back, &memtype, count).unwrap();
                for (k, (&got, &sent)) in back.iter().zip(&memory).enumerate() {
                    let expected = if k % 6 < 3 { sent } else { 0xEE };
                    assert_eq!(got, expected, "{path}: memory byte {k} read back");
                }
            }
            let end = model.keys().next_back().unwrap() + 1;
            let mut whole = vec![0u8; usize::try_from(end).unwrap()];
            viewed.file().read_at(0, &mut whole).unwrap();
            for (place, &byte) in whole.iter().enumerate() {
                let expected = model.get(&(place as u64)).copied().unwrap_or(0);
                assert_eq!(byte, expected, "{path}: file byte {place}");
            }
            assert_eq!(viewed.file().stat().unwrap().size, end, "{path}: size");
            viewed.close().unwrap();
        }
    }
}

#[test]
fn byte_offsets_and_the_end_of_file_in_view_terms() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let mut viewed = ViewedFile::new(
        client
            .create("/offsets", &CreateOptions::default())
            .unwrap(),
    );
    assert_eq!(viewed.effective_method(), Method::Datatype);
    // 2 bytes of every 8, from byte 100.
    let filetype = Datatype::resized(0, 8, &Datatype::bytes(2).unwrap()).unwrap();
    viewed.set_view(100, &filetype).unwrap();
    assert_eq!(viewed.byte_offset(0).unwrap(), 100);
    assert_eq!(viewed.byte_offset(5).unwrap(), 100 + 2 * 8 + 1);
    // A file of 117 bytes ends inside instance 2 (bytes 116..118): 5 view bytes lie below.
    assert_eq!(viewed.view_bytes_below(117).unwrap(), 5);
    assert_eq!(viewed.view_bytes_below(50).unwrap(), 0);
    assert_eq!(viewed.view_bytes_below(124).unwrap(), 6);
    assert!(viewed.set_view(0, &Datatype::bytes(0).unwrap()).is_err());
    viewed.close().unwrap();
}

#[test]
fn concurrent_fetch_adds_never_lose_or_overlap_a_reservation() {
    let cluster = Cluster::start(2);
    let name = "feed-1234";
    let reservations: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4u64)
            .map(|worker| {
                let client = cluster.client();
                scope.spawn(move || {
                    let pointer = SharedPointer::open(&client, name).unwrap();
                    (0..20u64)
                        .map(|k| {
                            let delta = 1 + (worker * 7 + k * 3) % 11;
                            (pointer.fetch_add(delta).unwrap(), delta)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .collect()
    });
    let mut sorted = reservations.clone();
    sorted.sort_unstable();
    let mut next = 0;
    for (before, delta) in sorted {
        assert_eq!(
            before, next,
            "reservations tile the counter without gaps or overlaps"
        );
        next += delta;
    }
    let client = cluster.client();
    let pointer = SharedPointer::open(&client, name).unwrap();
    assert_eq!(pointer.load().unwrap(), next);
    pointer.store(7).unwrap();
    assert_eq!(pointer.fetch_add(3).unwrap(), 7);
    assert_eq!(pointer.load().unwrap(), 10);
    SharedPointer::remove(&client, name).unwrap();
    SharedPointer::remove(&client, name).unwrap();
    assert!(SharedPointer::open(&client, "bad/name").is_err());
    // A new pointer of the same name starts at 0 again.
    assert_eq!(
        SharedPointer::open(&client, name).unwrap().load().unwrap(),
        0
    );
}

/// A large contiguous access on the default view, as the MPI-IO library makes for
/// `MPI_File_write_at` of `MPI_BYTE` or `MPI_INT`, moves as one request and one storage piece
/// per server, with every method that sends whole ranges, and reads back whole. (That the
/// walk behind it takes one step, not one per element, is `tessera-dtype`'s
/// `tiling_types_are_one_unmerged_run_over_any_range`.)
#[test]
fn a_contiguous_access_moves_as_one_piece_per_server_with_every_range_method() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    let length: usize = 4 << 20;
    let data = common::bytes(11, length);
    for (memtype, count, what) in [
        (Datatype::byte(), length as u64, "bytes"),
        (Datatype::bytes(4).unwrap(), (length / 4) as u64, "ints"),
    ] {
        for method in [Method::Auto, Method::List, Method::Datatype, Method::View] {
            let path = format!("/contiguous-{what}-{}", method.name());
            let mut viewed = ViewedFile::new(
                client
                    .create(
                        &path,
                        &CreateOptions {
                            stripe_unit_bytes: 1 << 20,
                            ..CreateOptions::default()
                        },
                    )
                    .unwrap(),
            );
            viewed.set_method(method);
            let written = viewed.write(0, &data, &memtype, count).unwrap();
            // 4 MiB over four servers in 1 MiB stripe units: each server one unit.
            assert_eq!(
                (written.requests, written.storage_pieces, written.bytes),
                (4, 4, length as u64),
                "{path}: write"
            );
            let mut back = vec![0u8; length];
            let read = viewed.read(0, &mut back, &memtype, count).unwrap();
            assert_eq!(
                (read.requests, read.bytes),
                (4, length as u64),
                "{path}: read"
            );
            assert!(back == data, "{path}: the bytes read differ");
            viewed.close().unwrap();
        }
    }
}
