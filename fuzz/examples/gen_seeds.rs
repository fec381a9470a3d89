//! Writes the seed inputs of the fuzz targets: `seeds/frame/*`, `seeds/bodies/*`,
//! `seeds/datatype/*` and `seeds/handshake/*`.
//!
//! Run from anywhere with `cargo run --manifest-path fuzz/Cargo.toml --example gen-seeds`;
//! the files are rewritten in place (names are stable, so a rerun changes nothing unless the
//! encodings changed).

use std::fs;
use std::path::Path;

use tessera_dtype::{wire, Datatype, Distribution, Order};

/// Encoded datatypes of every node kind and constructor, small and valid, so that the
/// `datatype` target starts from well-formed tables and mutates their fields.
fn datatype_seeds() -> Vec<(String, Vec<u8>)> {
    let byte = Datatype::byte();
    let double = Datatype::bytes(8).expect("8 bytes");
    let vector = Datatype::vector(4, 2, -3, &double).expect("vector");
    let indexed = Datatype::indexed(&[2, 0, 1], &[3, 9, -1], &double).expect("indexed");
    let structure = Datatype::structure(
        &[1, 2, 1],
        &[0, 8, 40],
        &[
            Datatype::bytes(4).expect("int"),
            double.clone(),
            vector.clone(),
        ],
    )
    .expect("struct");
    let types = [
        ("bytes", Datatype::bytes(3).expect("bytes")),
        (
            "empty-struct",
            Datatype::structure(&[], &[], &[]).expect("empty struct"),
        ),
        (
            "contiguous",
            Datatype::contiguous(5, &double).expect("contiguous"),
        ),
        ("vector-negative-stride", vector.clone()),
        (
            "hvector-zero-stride",
            Datatype::hvector(3, 1, 0, &byte).expect("hvector"),
        ),
        ("indexed", indexed.clone()),
        (
            "hindexed-block",
            Datatype::hindexed_block(2, &[100, 0, 7], &byte).expect("hindexed block"),
        ),
        ("struct", structure.clone()),
        (
            "resized-negative-lb",
            Datatype::resized(-16, 8, &structure).expect("resized"),
        ),
        (
            "subarray-c",
            Datatype::subarray(&[8, 6], &[3, 2], &[2, 1], Order::C, &double).expect("subarray"),
        ),
        (
            "subarray-fortran",
            Datatype::subarray(&[4, 5, 3], &[2, 2, 2], &[1, 0, 1], Order::Fortran, &indexed)
                .expect("subarray"),
        ),
        (
            "darray-block-cyclic",
            Datatype::darray(
                6,
                4,
                &[10, 9],
                &[Distribution::Block(None), Distribution::Cyclic(Some(2))],
                &[2, 3],
                Order::C,
                &double,
            )
            .expect("darray"),
        ),
        (
            "darray-none-fortran",
            Datatype::darray(
                2,
                1,
                &[4, 7],
                &[Distribution::None, Distribution::Cyclic(None)],
                &[1, 2],
                Order::Fortran,
                &vector,
            )
            .expect("darray"),
        ),
        (
            "shared-children",
            Datatype::structure(
                &[1, 1, 3],
                &[0, 64, -64],
                &[vector.clone(), vector, structure],
            )
            .expect("struct"),
        ),
    ];
    types
        .into_iter()
        .map(|(name, datatype)| {
            let bytes = wire::encode(&datatype).expect("seed types encode");
            (name.to_owned(), bytes)
        })
        .collect()
}

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    for (target, seeds) in [
        ("frame", tessera_fuzz::frame_seeds()),
        ("bodies", tessera_fuzz::body_seeds()),
        ("datatype", datatype_seeds()),
        ("handshake", tessera_fuzz::handshake_seeds()),
    ] {
        let dir = root.join(target);
        fs::create_dir_all(&dir)?;
        for (name, bytes) in &seeds {
            fs::write(dir.join(format!("{name}.bin")), bytes)?;
        }
        println!("{}: {} seeds", dir.display(), seeds.len());
    }
    Ok(())
}
