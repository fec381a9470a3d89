//! Datatype and view I/O through real servers: a first end-to-end check.

mod common;

use common::Cluster;
use tessera_client::{CreateOptions, Datatype, StripeLayout, TransferMode};

#[test]
fn datatype_and_view_round_trip_on_stripes_and_patterns() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    let file = client
        .create(
            "/typed",
            &CreateOptions {
                stripe_unit_bytes: 64,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    // 32 rows of 64 bytes; columns 16..32 of every row.
    let columns = Datatype::subarray(
        &[32, 64],
        &[32, 16],
        &[0, 16],
        tessera_client::dtype::Order::C,
        &Datatype::byte(),
    )
    .unwrap();
    let data: Vec<u8> = (0..512u32).map(|i| (i % 251) as u8).collect();
    for mode in TransferMode::FRAMED {
        let mut file = file.clone();
        file.set_transfer_mode(mode);
        let report = file
            .write_type(&data, &Datatype::bytes(512).unwrap(), 1, &columns, 0)
            .unwrap();
        assert_eq!(report.bytes, 512);
        assert_eq!(report.requests, 4, "one request per server ({mode:?})");
        let mut back = vec![0u8; 512];
        file.read_type(&mut back, &Datatype::byte(), 512, &columns, 0)
            .unwrap();
        assert_eq!(back, data, "{mode:?}");
        let mut whole = vec![0u8; 2048];
        file.read_at(0, &mut whole).unwrap();
        for row in 0..32 {
            assert_eq!(
                &whole[row * 64 + 16..row * 64 + 32],
                &data[row * 16..row * 16 + 16]
            );
            assert!(whole[row * 64..row * 64 + 16].iter().all(|&b| b == 0));
        }
        let view = file.set_view(0, &columns).unwrap();
        let mut part = vec![0u8; 100];
        let report = view.read_at(7, &mut part).unwrap();
        assert_eq!(&part[..], &data[7..107]);
        assert!(report.requests <= 4);
        view.write_at(7, &[9u8; 100]).unwrap();
        view.read_at(0, &mut back).unwrap();
        assert_eq!(&back[7..107], &[9u8; 100][..]);
        view.write_at(0, &data).unwrap();
    }
    // The same columns on a matching (*,BLOCK) pattern layout: one piece per server.
    let column_block = |i: i64| {
        Datatype::resized(
            0,
            64,
            &Datatype::hindexed(&[16], &[i * 16], &Datatype::byte()).unwrap(),
        )
        .unwrap()
    };
    let patterned = client
        .create(
            "/patterned",
            &CreateOptions {
                pattern: (0..4).map(column_block).collect(),
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let view = patterned.set_view(0, &columns).unwrap();
    assert_eq!(view.positions(), &[1]);
    let report = view.write_at(0, &data).unwrap();
    assert_eq!((report.requests, report.storage_pieces), (1, 1));
    let mut back = vec![0u8; 512];
    view.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(patterned.stat().unwrap().size, 31 * 64 + 32);
    let _ = StripeLayout::new(64, vec![0]);
}
