//! The `local` backend against real server processes: data moved one-sidedly by the servers
//! (`process_vm_readv`/`process_vm_writev`) for every mechanism the transfer policy has,
//! checked byte for byte against a plain buffer; large requests pipelined; a bad memory
//! descriptor answered with an error naming the segment; and the fallback to TCP.

#![allow(
    clippy::too_many_lines,
    reason = "tests have no length budget (make tidy counts production code only)"
)]

mod common;

use std::io::{IoSlice, IoSliceMut};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{bytes, Cluster};
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode, Mechanism, OpenMode, Piece,
    TransferPolicy,
};
use tessera_proto::{RemoteAccess, RemoteEndpoint, RemoteMemory, RemoteSegment, StoragePlan};

/// Scattered memory (100-byte slices with 28-byte gaps) to scattered file pieces over four
/// servers, for each policy; every byte is read back through a different policy too.
#[test]
fn every_mechanism_moves_the_same_bytes_one_sidedly() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    let mut file = client
        .create(
            "/local",
            &CreateOptions {
                stripe_unit_bytes: 4096,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    file.set_storage_plan(StoragePlan::PerPiece);
    let pieces: Vec<Piece> = (0..256u64)
        .map(|i| Piece::new(i * 700 + (i % 3) * 11, 100))
        .collect();
    let policies = [
        TransferPolicy::Auto,
        TransferPolicy::Force(Mechanism::Pack),
        TransferPolicy::Force(Mechanism::Gather),
        TransferPolicy::Force(Mechanism::Multiple),
        TransferPolicy::Force(Mechanism::Inline),
        TransferPolicy::Force(Mechanism::Eager),
    ];
    for (round, policy) in policies.into_iter().enumerate() {
        let source = bytes(round as u64 + 1, 256 * 128);
        let memory: Vec<IoSlice<'_>> = source
            .chunks(128)
            .map(|chunk| IoSlice::new(&chunk[..100]))
            .collect();
        file.set_transfer_policy(policy);
        let report = file.write_list(&memory, &pieces).unwrap();
        assert_eq!(report.bytes, 25_600, "{policy:?}");
        // 6400 bytes a server: the model sends such small requests through the eager buffer
        // (one-sided for the server, one copy by the client).
        let one_sided = policy != TransferPolicy::Force(Mechanism::Inline);
        assert_eq!(
            report.one_sided,
            if one_sided { report.requests } else { 0 },
            "{policy:?}: {report:?}"
        );
        // Only requests are sent: one-sidedly no frame carries data.
        assert_eq!(report.messages_sent, report.requests, "{policy:?}");
        if matches!(
            policy,
            TransferPolicy::Force(Mechanism::Pack | Mechanism::Eager) | TransferPolicy::Auto
        ) {
            assert_eq!(report.bytes_copied, 25_600, "{policy:?}");
        } else if policy == TransferPolicy::Force(Mechanism::Gather) {
            assert_eq!(report.bytes_copied, 0);
        }
        // Read back through the next policy, into scattered memory.
        file.set_transfer_policy(policies[(round + 1) % policies.len()]);
        let mut back = vec![0u8; 256 * 128];
        let mut slices: Vec<IoSliceMut<'_>> = back
            .chunks_mut(128)
            .map(|chunk| IoSliceMut::new(&mut chunk[..100]))
            .collect();
        file.read_list(&mut slices, &pieces).unwrap();
        for (index, (got, want)) in back.chunks(128).zip(source.chunks(128)).enumerate() {
            assert_eq!(&got[..100], &want[..100], "{policy:?}: slice {index}");
            assert!(got[100..].iter().all(|&b| b == 0), "gap {index} written");
        }
    }
}

/// A 12 MiB request is served in 1 MiB units, pulling and storing at once; the data and the
/// file size come out whole, and a read pushes it back the same way.
#[test]
fn large_requests_are_pipelined_and_whole() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let mut file = client
        .create(
            "/big",
            &CreateOptions {
                stripe_unit_bytes: 8 << 20,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    let data = bytes(77, 12 << 20);
    let memory: Vec<IoSlice<'_>> = data.chunks(64 << 10).map(IoSlice::new).collect();
    let report = file
        .write_list(&memory, &[Piece::new(0, 12 << 20)])
        .unwrap();
    assert_eq!(report.one_sided, report.requests);
    assert_eq!(file.stat().unwrap().size, 12 << 20);
    // Read back through buffers (a forced plan: storage calls pipelined with pushes) and
    // from the mapping (the server's own plan).
    for plan in [StoragePlan::PerPiece, StoragePlan::Auto] {
        file.set_storage_plan(plan);
        let before = stats_of(&client);
        let mut back = vec![0u8; 12 << 20];
        let mut slices: Vec<IoSliceMut<'_>> =
            back.chunks_mut(48 << 10).map(IoSliceMut::new).collect();
        let report = file
            .read_list(&mut slices, &[Piece::new(0, 12 << 20)])
            .unwrap();
        assert_eq!(report.one_sided, report.requests);
        assert!(back == data, "read-back differs ({plan:?})");
        let after = stats_of(&client);
        let mapped = after.0 - before.0;
        let calls = after.1 - before.1;
        if plan == StoragePlan::Auto {
            assert_eq!((mapped, calls), (report.requests, 0), "{plan:?}");
        } else {
            assert_eq!(mapped, 0, "{plan:?}");
            // At least one storage call per 1 MiB unit.
            assert!(calls >= 12, "{plan:?}: {calls} calls");
        }
    }
}

/// (mapped reads, storage calls of reads) summed over every server.
fn stats_of(client: &Client) -> (u64, u64) {
    (0..client.server_count())
        .map(|index| client.server_stats(index).unwrap().reads)
        .fold((0, 0), |(mapped, calls), reads| {
            (mapped + reads.mapped, calls + reads.calls)
        })
}

/// A read left to the server is pushed from a mapping of the object: unsorted and
/// overlapping pieces come back in request order, bytes past the end of the object are
/// zeros, pieces far apart are served by one request, and no storage call is made.
#[test]
fn reads_are_pushed_from_a_mapping_of_the_object() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let mut file = client.create("/mapped", &CreateOptions::default()).unwrap();
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    let data = bytes(5, 300_000);
    file.write_list(&[IoSlice::new(&data)], &[Piece::new(0, 300_000)])
        .unwrap();
    let pieces = [
        Piece::new(250_000, 70_000), // runs 20 000 bytes past the end
        Piece::new(10, 5000),
        Piece::new(4000, 3000), // overlaps the one before
        Piece::new(299_999, 1),
        Piece::new(1_000_000, 100), // wholly past the end
    ];
    let mut expected = Vec::new();
    for piece in &pieces {
        for offset in piece.offset..piece.offset + piece.length {
            let offset = usize::try_from(offset).unwrap();
            expected.push(data.get(offset).copied().unwrap_or(0));
        }
    }
    let before = stats_of(&client);
    let mut back = vec![0xEEu8; (expected.len() / 900 + 1) * 1000];
    // Slices of 900 bytes with 100-byte gaps, the last one cut to what the pieces want.
    let wanted: usize = expected.len();
    let mut used: Vec<IoSliceMut<'_>> = Vec::new();
    let mut taken = 0;
    for chunk in back.chunks_mut(1000) {
        if taken >= wanted {
            break;
        }
        let length = (wanted - taken).min(900);
        taken += length;
        used.push(IoSliceMut::new(&mut chunk[..length]));
    }
    let report = file.read_list(&mut used, &pieces).unwrap();
    assert_eq!(report.requests, 1);
    assert_eq!(report.one_sided, 1);
    assert_eq!(report.bytes, wanted as u64);
    let mut got = Vec::new();
    for chunk in back.chunks(1000) {
        got.extend_from_slice(&chunk[..900.min(wanted - got.len()).min(chunk.len())]);
        if got.len() == wanted {
            break;
        }
    }
    assert!(got == expected, "mapped read differs from the model");
    // The gaps of the client's memory stayed untouched.
    assert!(back[900..1000].iter().all(|&byte| byte == 0xEE));
    let after = stats_of(&client);
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 0));
}

/// Datatype and view calls take the same one-sided path.
#[test]
fn datatype_calls_move_one_sidedly() {
    use tessera_client::dtype::{Datatype, Order};
    let cluster = Cluster::start(3);
    let client = cluster.client();
    let mut file = client.create("/typed", &CreateOptions::default()).unwrap();
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    let byte = Datatype::byte();
    // Every other 512-byte block of a 256 KiB region.
    let filetype = Datatype::vector(256, 512, 1024, &byte).unwrap();
    let memtype = Datatype::subarray(&[512, 512], &[256, 512], &[0, 0], Order::C, &byte).unwrap();
    let data = bytes(5, 512 * 512);
    let report = file
        .write_type(&data, &memtype, 1, &filetype, 4096)
        .unwrap();
    assert!(
        report.one_sided > 0 && report.one_sided == report.requests,
        "{report:?}"
    );
    let mut back = vec![0u8; 512 * 512];
    file.read_type(&mut back, &memtype, 1, &filetype, 4096)
        .unwrap();
    assert_eq!(&back[..256 * 512], &data[..256 * 512]);
    assert!(back[256 * 512..].iter().all(|&b| b == 0));
}

/// A descriptor that points at memory the client does not have is answered with an error
/// naming the segment, and the connection stays usable.
#[test]
fn an_unmapped_client_segment_is_named_in_the_error() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let file = client.create("/bad", &CreateOptions::default()).unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let socket = config.iods[0].local.clone().expect("a local socket");
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    common::authenticate(&mut stream, &cluster.signer()).unwrap();
    let capability = file.capability().unwrap();
    let good = [9u8; 64];
    let memory = RemoteMemory {
        access: RemoteAccess::Process,
        endpoint: RemoteEndpoint::default(),
        segments_per_call: 0,
        segments: vec![
            RemoteSegment {
                address: good.as_ptr() as u64,
                length: 64,
                key: 0,
            },
            // The first page is never mapped.
            RemoteSegment {
                address: 16,
                length: 64,
                key: 0,
            },
        ],
    };
    let error = common::refused_write(&mut stream, (file.handle(), capability), 128, &memory, 7);
    assert_eq!(error.code, ErrorCode::BadAddress, "{}", error.message);
    assert!(error.message.contains("segment 1"), "{}", error.message);
    std::hint::black_box(&good);
    // Nothing of the failed write reached the file, and the file is still served.
    assert_eq!(file.stat().unwrap().size, 0);
}

/// Shared regions reach the iod only as sealed memfds passed with `SCM_RIGHTS`: a tmpfs
/// file, an `O_PATH` or read-only descriptor, an unsealed memfd or one smaller than declared
/// is refused with its reason and nothing is written; a key never shared on the connection
/// is `UnknownRegion`; bytes outside a shared buffer are refused by name; a descriptor on a
/// write closes that connection only. A forced eager request larger than the buffer packs.
#[test]
fn shared_regions_are_checked_and_large_eager_requests_pack() {
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let mut file = client.create("/eager", &CreateOptions::default()).unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let socket = config.iods[0].local.clone().expect("a local socket");
    let signer = cluster.signer();
    let connect = || {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        common::authenticate(&mut stream, &signer).unwrap();
        stream
    };
    let mut stream = connect();
    let capability = file.capability().unwrap();
    let eager = tessera_net::local::eager::EagerBuffer::new().unwrap();
    let reopen = |flags: i32| {
        let path = format!("/proc/self/fd/{}\0", eager.descriptor().as_raw_fd());
        // SAFETY: a NUL-terminated path and valid flags; the result is checked.
        let raw = unsafe { libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC) };
        assert!(raw >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: a descriptor just opened and owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(raw) }
    };
    let shm = tempfile::tempfile_in("/dev/shm").expect("a tmpfs at /dev/shm");
    shm.set_len(4096).unwrap();
    let readonly = reopen(libc::O_RDONLY);
    let path_only = reopen(libc::O_PATH);
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(raw >= 0);
    // SAFETY: a descriptor just made and owned by nothing else.
    let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
    std::fs::File::from(unsealed.try_clone().unwrap())
        .set_len(4096)
        .unwrap();
    let eager_bytes = eager.len() as u64;
    let refusals = [
        (shm.as_fd(), 4096, "F_SEAL_SHRINK"),
        (readonly.as_fd(), eager_bytes, "read-only"),
        (path_only.as_fd(), eager_bytes, "O_PATH"),
        (unsealed.as_fd(), 4096, "F_SEAL_SHRINK"),
        (eager.descriptor(), eager_bytes - 1, "declared"),
    ];
    let mut request_id = 0;
    for (index, (descriptor, bytes, reason)) in refusals.into_iter().enumerate() {
        let key = 0x51 + index as u64;
        request_id += 1;
        let error =
            common::share_region(&mut stream, key, bytes, &[descriptor], request_id).unwrap_err();
        assert_eq!(
            error.code,
            ErrorCode::RemoteAccessRefused,
            "{}",
            error.message
        );
        assert!(error.message.contains(reason), "{}", error.message);
        assert!(
            error.message.contains(&format!("{key:#x}")),
            "{}",
            error.message
        );
        // Nothing is mapped under the key, and the connection is served on.
        let memory = RemoteMemory {
            access: RemoteAccess::Shared,
            endpoint: RemoteEndpoint::default(),
            segments_per_call: 0,
            segments: vec![RemoteSegment {
                address: 0,
                length: 100,
                key,
            }],
        };
        request_id += 1;
        let target = (file.handle(), capability.clone());
        let error = common::refused_write(&mut stream, target, 100, &memory, request_id);
        assert_eq!(error.code, ErrorCode::UnknownRegion, "{}", error.message);
    }
    // The real buffer, shared properly, but bytes outside it are asked for.
    request_id += 1;
    common::share_region(
        &mut stream,
        eager.key(),
        eager_bytes,
        &[eager.descriptor()],
        request_id,
    )
    .unwrap();
    let memory = RemoteMemory {
        access: RemoteAccess::Shared,
        endpoint: RemoteEndpoint::default(),
        segments_per_call: 0,
        segments: vec![RemoteSegment {
            address: 65_000,
            length: 1000,
            key: eager.key(),
        }],
    };
    request_id += 1;
    let target = (file.handle(), capability.clone());
    let error = common::refused_write(&mut stream, target, 1000, &memory, request_id);
    assert_eq!(error.code, ErrorCode::BadAddress, "{}", error.message);
    assert!(error.message.contains("outside"), "{}", error.message);
    // A descriptor attached to a write closes that connection, and only that one.
    let mut stray = connect();
    {
        use std::io::Read;
        use tessera_proto::{Header, Opcode, Wire};
        let write = tessera_proto::Write {
            handle: file.handle(),
            capability: tessera_proto::Capability::default(),
            mode: tessera_proto::TransferMode::Remote,
            storage: StoragePlan::Auto,
            pieces: vec![Piece::new(0, 100)],
        };
        let memory = RemoteMemory {
            segments: vec![RemoteSegment {
                address: 0,
                length: 100,
                key: eager.key(),
            }],
            ..memory.clone()
        };
        let (body, bulk) = (write.to_body(), memory.to_body());
        let mut frame = Header {
            opcode: Opcode::Write as u8,
            flags: 0,
            request_id: 1,
            body_bytes: u32::try_from(body.len()).unwrap(),
            bulk_bytes: u32::try_from(bulk.len()).unwrap(),
        }
        .encode()
        .to_vec();
        frame.extend_from_slice(&body);
        frame.extend_from_slice(&bulk);
        tessera_net::local::scm::send_with_descriptors(
            stray.as_fd(),
            &frame,
            &[eager.descriptor()],
        )
        .unwrap();
        let mut rest = Vec::new();
        // The error reply, then the end of the stream (or a reset: the server left the
        // frame's body unread).
        let _ = stray.read_to_end(&mut rest);
        let text = String::from_utf8_lossy(&rest);
        assert!(text.contains("only ShareRegion carries one"), "{text}");
    }
    request_id += 1;
    common::share_region(
        &mut stream,
        0x99,
        eager_bytes,
        &[eager.descriptor()],
        request_id,
    )
    .unwrap();
    assert_eq!(file.stat().unwrap().size, 0);
    // Forced eager, 1 MiB in 16 slices: more than the buffer holds, so it packs.
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Eager));
    let data = bytes(3, 1 << 20);
    let memory: Vec<IoSlice<'_>> = data.chunks(64 << 10).map(IoSlice::new).collect();
    let report = file.write_list(&memory, &[Piece::new(0, 1 << 20)]).unwrap();
    assert_eq!(report.one_sided, report.requests);
    assert_eq!(report.bytes_copied, 1 << 20);
    let mut back = vec![0u8; 1 << 20];
    file.read_list(&mut [IoSliceMut::new(&mut back)], &[Piece::new(0, 1 << 20)])
        .unwrap();
    assert!(back == data);
}

/// A cluster file naming a socket that is not there: the client uses TCP and says so.
#[test]
fn a_missing_socket_falls_back_to_tcp() {
    let cluster = Cluster::start(2);
    let mut config = ClusterConfig::load(&cluster.file()).unwrap();
    for iod in &mut config.iods {
        iod.local = Some(cluster.path().join("run").join("nowhere.sock"));
    }
    let client = Client::new(&config, &ClientOptions::default());
    let mut file = client
        .create("/fallback", &CreateOptions::default())
        .unwrap();
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    let data = bytes(3, 300_000);
    let report = file.write_at(0, &data).unwrap();
    assert_eq!(report.one_sided, 0);
    let file = client.open("/fallback", OpenMode::ReadOnly).unwrap();
    let mut back = vec![0u8; 300_000];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data);
}
