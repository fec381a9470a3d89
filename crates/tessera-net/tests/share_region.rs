//! Shared regions reach a server as descriptors passed with `SCM_RIGHTS`, against a real
//! server loop (`serve_with_local`) on a real Unix socket: only a sealed, read-write memfd
//! of the declared size with every page allocated is mapped, every other descriptor is refused with its reason and the
//! server goes on serving that connection and others; a descriptor on any other frame, or
//! two on one, closes that connection only; a client `Connection` shares its eager buffer
//! and arenas and stays correct when the server unmaps a region it still counts as shared.

#![allow(clippy::cast_possible_truncation)] // offsets of a few KiB

use std::ffi::CString;
use std::fs::File;
use std::io::{IoSlice, IoSliceMut, Read, Write as _};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tessera_net::local::arena::Arena;
use tessera_net::local::policy::Transfer;
use tessera_net::local::scm::send_with_descriptors;
use tessera_net::server::{serve_with_local, ConnectionError, Incoming, ServerConnection, Service};
use tessera_net::{Connection, PieceData, PieceDataMut};
use tessera_proto::limits::{HEADER_BYTES, SHARED_REGIONS_PER_CONNECTION_MAX};
use tessera_proto::{
    Capability, Empty, ErrorCode, Header, IoReply, Opcode, Piece, PingReply, Read as ReadRequest,
    RemoteAccess, RemoteError, RemoteMemory, RemoteProbe, RemoteProbeReply, ShareRegion,
    StoragePlan, TransferMode, Wire, Write,
};

/// A server that maps shared regions and serves writes and reads from them into one
/// in-memory "file", and probes by `process_vm_readv`.
#[derive(Debug, Default)]
struct RegionService {
    file: Mutex<Vec<u8>>,
    /// Requests that named a shared region (looked up or not).
    shared_requests: Mutex<u64>,
}

impl RegionService {
    async fn serve(
        &self,
        mut request: Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = request.header;
        match request.opcode {
            Opcode::Ping => {
                let reply = PingReply::default();
                connection.reply(&header, &reply, &[]).await
            }
            Opcode::ShareRegion => {
                let ShareRegion { key, bytes } = request.decode()?;
                match connection.share_region(key, bytes, request.descriptor.take()) {
                    Ok(()) => connection.reply(&header, &Empty {}, &[]).await,
                    Err(error) => connection.reply_error(&header, &error).await,
                }
            }
            Opcode::RemoteProbe => {
                let descriptor = connection.read_bulk(&header).await?;
                let memory = RemoteMemory::from_body(&descriptor).unwrap();
                let mut token = [0u8; 8];
                let pid = connection.peer_pid().unwrap();
                tessera_net::local::rma::pull(pid, &memory.segments, 0, &mut token).unwrap();
                let reply = RemoteProbeReply {
                    token: u64::from_le_bytes(token),
                };
                connection.reply(&header, &reply, &[]).await
            }
            Opcode::Write | Opcode::Read => {
                let write = request.opcode == Opcode::Write;
                let (handle, pieces) = if write {
                    let request: Write = request.decode()?;
                    (request.handle, request.pieces)
                } else {
                    let request: ReadRequest = request.decode()?;
                    (request.handle, request.pieces)
                };
                let descriptor = connection.read_bulk(&header).await?;
                let memory = RemoteMemory::from_body(&descriptor).unwrap();
                assert_eq!(memory.access, RemoteAccess::Shared);
                *self.shared_requests.lock().unwrap() += 1;
                // Handle 0 is refused before the region is looked up (as a real server
                // refuses a bad request before it reaches the client's memory).
                if handle == 0 {
                    let error = RemoteError::new(ErrorCode::UnknownHandle, "handle 0");
                    return connection.reply_error(&header, &error).await;
                }
                let region = match connection.shared_region(memory.segments[0].key) {
                    Ok(region) => region,
                    Err(error) => return connection.reply_error(&header, &error).await,
                };
                let total = {
                    let mut file = self.file.lock().unwrap();
                    let mut total = 0;
                    let mut cursor = pieces[0].offset as usize;
                    for segment in &memory.segments {
                        let length = segment.length as usize;
                        if file.len() < cursor + length {
                            file.resize(cursor + length, 0);
                        }
                        if write {
                            // SAFETY: the bytes are copied out at once; the client waits for the reply.
                            let bytes =
                                unsafe { region.bytes(segment.address, segment.length) }.unwrap();
                            file[cursor..cursor + length].copy_from_slice(bytes);
                        } else {
                            // SAFETY: this request is the only one using the region.
                            let bytes =
                                unsafe { region.bytes_mut(segment.address, segment.length) }
                                    .unwrap();
                            bytes.copy_from_slice(&file[cursor..cursor + length]);
                        }
                        cursor += length;
                        total += segment.length;
                    }
                    total
                };
                let reply = IoReply {
                    bytes: total,
                    ..IoReply::default()
                };
                connection.reply(&header, &reply, &[]).await
            }
            other => {
                let error = RemoteError::new(ErrorCode::Protocol, format!("{other:?}"));
                connection.reply_error(&header, &error).await
            }
        }
    }
}

impl Service for RegionService {
    fn name(&self) -> String {
        "region test server".to_owned()
    }

    fn handle<'a>(
        &'a self,
        request: Incoming,
        connection: &'a mut ServerConnection,
    ) -> impl std::future::Future<Output = Result<(), ConnectionError>> + Send + 'a {
        self.serve(request, connection)
    }
}

/// A server on a Unix socket in a temporary directory, served by a runtime on its own
/// thread until the test ends.
struct Server {
    _directory: tempfile::TempDir,
    socket: PathBuf,
    tcp: String,
    service: Arc<RegionService>,
    signer: tessera_auth::KeySigner,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    fn start() -> Self {
        let directory = tempfile::tempdir().unwrap();
        let socket = directory.path().join("iod.sock");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let service = Arc::new(RegionService::default());
        let (tcp, local) = runtime.block_on(async {
            (
                tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
                tokio::net::UnixListener::bind(&socket).unwrap(),
            )
        });
        let address = tcp.local_addr().unwrap().to_string();
        let key = tessera_auth::ClusterKey::from_bytes([0x5A; 32]);
        let auth = Arc::new(tessera_auth::ServerAuth::new(
            key.clone(),
            tessera_proto::ROLE_IOD,
            0,
        ));
        runtime.spawn(serve_with_local(
            tcp,
            Some(local),
            service.clone(),
            auth,
            std::future::pending(),
        ));
        Self {
            _directory: directory,
            socket,
            tcp: address,
            service,
            signer: tessera_auth::KeySigner::process(key),
            _runtime: runtime,
        }
    }

    /// A raw connection that has passed the handshake.
    fn raw(&self) -> UnixStream {
        use tessera_auth::Authenticator;
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let challenge =
            tessera_proto::Challenge::from_body(&reply(&mut stream, 0).unwrap()).unwrap();
        let (hello, _) = self.signer.hello(&challenge).unwrap();
        stream
            .write_all(&frame(Opcode::Hello, 1, &hello.to_body(), &[]))
            .unwrap();
        reply(&mut stream, 1).expect("the handshake passes");
        stream
    }

    fn connect(&self) -> Connection {
        let connection = Connection::connect_local(
            "region test server",
            &self.socket,
            &self.tcp,
            Duration::from_secs(10),
            &self.signer,
            None,
        )
        .unwrap();
        assert!(connection.one_sided(), "the probe must pass in-process");
        connection
    }
}

/// A frame: header and body.
fn frame(opcode: Opcode, request_id: u64, body: &[u8], bulk: &[u8]) -> Vec<u8> {
    let mut bytes = Header {
        opcode: opcode as u8,
        flags: 0,
        request_id,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes: u32::try_from(bulk.len()).unwrap(),
    }
    .encode()
    .to_vec();
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(bulk);
    bytes
}

/// The reply to `request_id`: its body, or the error.
fn reply(stream: &mut UnixStream, request_id: u64) -> Result<Vec<u8>, RemoteError> {
    let mut bytes = [0u8; HEADER_BYTES];
    stream.read_exact(&mut bytes).unwrap();
    let header = Header::decode(&bytes).unwrap();
    assert_eq!(header.request_id, request_id);
    let mut body = vec![0u8; header.body_bytes as usize];
    stream.read_exact(&mut body).unwrap();
    if header.is_error() {
        Err(RemoteError::from_body(&body).unwrap())
    } else {
        Ok(body)
    }
}

/// Sends a `ShareRegion` with `descriptors` attached in one `sendmsg`.
fn share(
    stream: &mut UnixStream,
    request_id: u64,
    key: u64,
    bytes: u64,
    descriptors: &[std::os::fd::BorrowedFd<'_>],
) -> Result<Vec<u8>, RemoteError> {
    let body = ShareRegion { key, bytes }.to_body();
    let bytes = frame(Opcode::ShareRegion, request_id, &body, &[]);
    let sent = send_with_descriptors(stream.as_fd(), &bytes, descriptors).unwrap();
    assert_eq!(sent, bytes.len());
    reply(stream, request_id)
}

/// The server closed `stream`: the end of the stream, or a reset where the server left
/// bytes of the refused frame unread.
fn assert_closed(stream: &mut UnixStream) {
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "{} bytes after the error", rest.len()),
        Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}"),
    }
}

fn ping(stream: &mut UnixStream, request_id: u64) {
    stream
        .write_all(&frame(Opcode::Ping, request_id, &[], &[]))
        .unwrap();
    let body = reply(stream, request_id).unwrap();
    PingReply::from_body(&body).unwrap();
}

/// Reads `token`-sized bytes at `offset` of region `key` with a shared-access write and a
/// read back (the test server's file is shared by all connections).
fn roundtrip(stream: &mut UnixStream, request_id: u64, key: u64) -> Result<(), RemoteError> {
    let write = Write {
        handle: 1,
        capability: Capability::default(),
        mode: TransferMode::Remote,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(0, 8)],
    };
    let memory = RemoteMemory {
        access: RemoteAccess::Shared,
        segments: vec![tessera_proto::RemoteSegment {
            address: 0,
            length: 8,
            key,
        }],
        ..RemoteMemory::default()
    };
    let body = write.to_body();
    let descriptor = memory.to_body();
    stream
        .write_all(&frame(Opcode::Write, request_id, &body, &descriptor))
        .unwrap();
    reply(stream, request_id).map(drop)
}

/// A memfd of `bytes` bytes, every page allocated (as a client allocates its regions),
/// with `seals`.
fn memfd(name: &str, bytes: u64, seals: i32) -> OwnedFd {
    let fd = sparse_memfd(name, bytes, 0);
    // SAFETY: fallocate on a descriptor owned here, inside its size.
    let allocated = unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, bytes.try_into().unwrap()) };
    assert_eq!(allocated, 0);
    if seals != 0 {
        // SAFETY: fcntl on a descriptor owned here.
        let added = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        assert_eq!(added, 0);
    }
    fd
}

/// A memfd of `bytes` bytes with no page allocated, with `seals`.
fn sparse_memfd(name: &str, bytes: u64, seals: i32) -> OwnedFd {
    let name = CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(raw >= 0);
    // SAFETY: a descriptor just made and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    File::from(fd.try_clone().unwrap()).set_len(bytes).unwrap();
    if seals != 0 {
        // SAFETY: fcntl on a descriptor owned here.
        let added = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        assert_eq!(added, 0);
    }
    fd
}

fn reopen(fd: &OwnedFd, flags: i32) -> OwnedFd {
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    // SAFETY: a NUL-terminated path and valid flags; the result is checked.
    let raw = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    assert!(raw >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just opened and owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

const SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

#[test]
fn only_sealed_read_write_memfds_of_the_declared_size_are_mapped() {
    let server = Server::start();
    let mut stream = server.raw();
    let mut other = server.raw();
    let good = memfd("good", 4096, SEALS);
    let plain = tempfile::tempfile().unwrap();
    plain.set_len(4096).unwrap();
    let shm = tempfile::tempfile_in("/dev/shm").expect("a tmpfs at /dev/shm");
    shm.set_len(4096).unwrap();
    let readonly = reopen(&good, libc::O_RDONLY);
    let path_only = reopen(&good, libc::O_PATH);
    let unsealed = memfd("unsealed", 4096, 0);
    let sparse = sparse_memfd("sparse", 4096, SEALS);
    let cases: [(&str, std::os::fd::BorrowedFd<'_>, u64, &str); 7] = [
        ("a plain file", plain.as_fd(), 4096, "not a memfd"),
        ("a tmpfs file by path", shm.as_fd(), 4096, "F_SEAL_SHRINK"),
        ("a read-only memfd", readonly.as_fd(), 4096, "read-only"),
        ("an O_PATH descriptor", path_only.as_fd(), 4096, "O_PATH"),
        ("an unsealed memfd", unsealed.as_fd(), 4096, "F_SEAL_SHRINK"),
        ("a memfd with holes", sparse.as_fd(), 4096, "holes"),
        (
            "a region smaller than declared",
            good.as_fd(),
            8192,
            "not the 8192 declared",
        ),
    ];
    let mut request_id = 0;
    for (index, (what, descriptor, bytes, reason)) in cases.into_iter().enumerate() {
        let key = 0x100 + index as u64;
        request_id += 1;
        let error = share(&mut stream, request_id, key, bytes, &[descriptor]).unwrap_err();
        assert_eq!(
            error.code,
            ErrorCode::RemoteAccessRefused,
            "{what}: {error:?}"
        );
        assert!(error.message.contains(reason), "{what}: {}", error.message);
        assert!(
            error.message.contains(&format!("{key:#x}")),
            "{what}: {}",
            error.message
        );
        // Nothing was mapped under the key; the same connection and another go on.
        request_id += 1;
        let error = roundtrip(&mut stream, request_id, key).unwrap_err();
        assert_eq!(error.code, ErrorCode::UnknownRegion, "{what}");
        request_id += 1;
        ping(&mut stream, request_id);
        ping(&mut other, request_id);
    }
    // No descriptor at all.
    request_id += 1;
    let error = share(&mut stream, request_id, 0x200, 4096, &[]).unwrap_err();
    assert_eq!(error.code, ErrorCode::RemoteAccessRefused);
    assert!(error.message.contains("no descriptor"), "{}", error.message);
    // The good one is mapped, and requests move its bytes.
    request_id += 1;
    share(&mut stream, request_id, 0x300, 4096, &[good.as_fd()]).unwrap();
    let client = File::from(good.try_clone().unwrap());
    std::os::unix::fs::FileExt::write_all_at(&client, b"memfd ok", 0).unwrap();
    request_id += 1;
    roundtrip(&mut stream, request_id, 0x300).unwrap();
    assert_eq!(&server.service.file.lock().unwrap()[..8], b"memfd ok");
    // A key shared on one connection means nothing on another.
    let error = roundtrip(&mut other, 99, 0x300).unwrap_err();
    assert_eq!(error.code, ErrorCode::UnknownRegion);
    assert!(error.message.contains("0x300"), "{}", error.message);
}

#[test]
fn a_stray_descriptor_or_two_close_that_connection_only() {
    let server = Server::start();
    let good = memfd("good", 4096, SEALS);
    let another = memfd("another", 4096, SEALS);
    let mut bystander = server.raw();
    ping(&mut bystander, 1);

    // Two descriptors with one ShareRegion.
    let mut stream = server.raw();
    let error = share(&mut stream, 1, 0x10, 4096, &[good.as_fd(), another.as_fd()]).unwrap_err();
    assert_eq!(error.code, ErrorCode::Protocol);
    assert!(error.message.contains("2 descriptors"), "{}", error.message);
    assert_closed(&mut stream);

    // A descriptor with a Ping.
    let mut stream = server.raw();
    let bytes = frame(Opcode::Ping, 7, &[], &[]);
    send_with_descriptors(stream.as_fd(), &bytes, &[good.as_fd()]).unwrap();
    let error = reply(&mut stream, 7).unwrap_err();
    assert_eq!(error.code, ErrorCode::Protocol);
    assert!(
        error.message.contains("only ShareRegion"),
        "{}",
        error.message
    );
    assert_closed(&mut stream);

    // A descriptor with a request that carries bulk (a write's memory descriptor).
    let mut stream = server.raw();
    share(&mut stream, 1, 0x20, 4096, &[good.as_fd()]).unwrap();
    let write = Write {
        handle: 1,
        capability: Capability::default(),
        mode: TransferMode::Remote,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(0, 8)],
    };
    let memory = RemoteMemory {
        access: RemoteAccess::Shared,
        segments: vec![tessera_proto::RemoteSegment {
            address: 0,
            length: 8,
            key: 0x20,
        }],
        ..RemoteMemory::default()
    };
    let bytes = frame(Opcode::Write, 2, &write.to_body(), &memory.to_body());
    send_with_descriptors(stream.as_fd(), &bytes, &[another.as_fd()]).unwrap();
    let error = reply(&mut stream, 2).unwrap_err();
    assert!(error.message.contains("Write"), "{}", error.message);
    assert_closed(&mut stream);
    assert_eq!(*server.service.shared_requests.lock().unwrap(), 0);

    // The bystander and new connections are served.
    ping(&mut bystander, 2);
    let mut fresh = server.raw();
    share(&mut fresh, 1, 0x30, 4096, &[good.as_fd()]).unwrap();
    roundtrip(&mut fresh, 2, 0x30).unwrap();
}

#[test]
fn the_least_recently_used_region_is_unmapped_past_the_limit() {
    let server = Server::start();
    let mut stream = server.raw();
    let regions: Vec<OwnedFd> = (0..=SHARED_REGIONS_PER_CONNECTION_MAX)
        .map(|index| memfd(&format!("r{index}"), 4096, SEALS))
        .collect();
    let mut request_id = 0;
    for (key, region) in regions
        .iter()
        .enumerate()
        .take(SHARED_REGIONS_PER_CONNECTION_MAX)
    {
        request_id += 1;
        share(
            &mut stream,
            request_id,
            key as u64 + 1,
            4096,
            &[region.as_fd()],
        )
        .unwrap();
    }
    // Key 1 is used, so key 2 is now the least recently used; one more region unmaps it.
    request_id += 1;
    roundtrip(&mut stream, request_id, 1).unwrap();
    request_id += 1;
    let last = &regions[SHARED_REGIONS_PER_CONNECTION_MAX];
    share(&mut stream, request_id, 100, 4096, &[last.as_fd()]).unwrap();
    request_id += 1;
    assert_eq!(
        roundtrip(&mut stream, request_id, 2).unwrap_err().code,
        ErrorCode::UnknownRegion
    );
    for key in [1, 3, 100] {
        request_id += 1;
        roundtrip(&mut stream, request_id, key).unwrap();
    }
}

/// Writes `data` (which lies in an arena) at `offset` through `connection`, one-sidedly.
fn write_arena(connection: &mut Connection, handle: u64, offset: u64, data: &[u8]) -> IoReply {
    let write = Write {
        handle,
        capability: Capability::default(),
        mode: TransferMode::Remote,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(offset, data.len() as u64)],
    };
    let transfer = Transfer::Remote {
        pack: false,
        segments_per_call: 0,
    };
    let piece_data = PieceData {
        slices: vec![IoSlice::new(data)],
        piece_ends: vec![1],
    };
    connection
        .send_write(&write, transfer, &piece_data)
        .unwrap();
    match connection.recv_write() {
        Ok((reply, _)) => reply,
        Err(_) if handle == 0 => IoReply::default(),
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn a_connection_shares_its_regions_and_shares_again_what_the_server_unmapped() {
    let server = Server::start();
    let mut connection = server.connect();
    // The eager buffer was shared at connect; an eager write and read move the right bytes.
    let data = b"through the eager buffer".to_vec();
    let write = Write {
        handle: 1,
        capability: Capability::default(),
        mode: TransferMode::Remote,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(0, data.len() as u64)],
    };
    let piece_data = PieceData {
        slices: vec![IoSlice::new(&data)],
        piece_ends: vec![1],
    };
    let counts = connection
        .send_write(&write, Transfer::Eager, &piece_data)
        .unwrap();
    assert_eq!(
        counts.bytes_copied,
        data.len() as u64,
        "one copy into the buffer"
    );
    connection.recv_write().unwrap();
    assert_eq!(
        &server.service.file.lock().unwrap()[..data.len()],
        &data[..]
    );
    let read = ReadRequest {
        handle: 1,
        capability: Capability::default(),
        mode: TransferMode::Remote,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(0, data.len() as u64)],
    };
    let mut back = vec![0u8; data.len()];
    let mut destination = PieceDataMut {
        slices: vec![IoSliceMut::new(&mut back)],
        piece_ends: vec![1],
    };
    connection
        .send_read(&read, Transfer::Eager, &mut destination)
        .unwrap();
    connection
        .recv_data(Transfer::Eager, &read.pieces, &mut destination)
        .unwrap();
    drop(destination);
    assert_eq!(back, data);

    // As many arenas as the server keeps: the eager buffer goes, as on the server.
    let mut arenas: Vec<Arena> = (0..=SHARED_REGIONS_PER_CONNECTION_MAX)
        .map(|_| Arena::new(4096).unwrap())
        .collect();
    for (index, arena) in arenas.iter_mut().enumerate() {
        arena.as_mut_slice()[..8].copy_from_slice(&(index as u64).to_le_bytes());
    }
    for (index, arena) in arenas
        .iter()
        .enumerate()
        .take(SHARED_REGIONS_PER_CONNECTION_MAX)
    {
        let reply = write_arena(
            &mut connection,
            1,
            1000 + index as u64 * 8,
            &arena.as_slice()[..8],
        );
        assert_eq!(reply.bytes, 8);
    }
    // Arena 0 is named by a request the server refuses before it looks the region up: the
    // connection counts arena 0 as used, the server does not, and the two tables' orders
    // part. The next new arena unmaps arena 0 on the server and arena 1 in the connection.
    write_arena(&mut connection, 0, 1000, &arenas[0].as_slice()[..8]);
    let last = SHARED_REGIONS_PER_CONNECTION_MAX;
    write_arena(
        &mut connection,
        1,
        1000 + last as u64 * 8,
        &arenas[last].as_slice()[..8],
    );
    // Arena 0 again: the server answers UnknownRegion, and the connection shares it again
    // and sends the write once more, within the same call.
    *server.service.shared_requests.lock().unwrap() = 0;
    arenas[0].as_mut_slice()[..8].copy_from_slice(b"arena 0!");
    let reply = write_arena(&mut connection, 1, 1000, &arenas[0].as_slice()[..8]);
    assert_eq!(reply.bytes, 8);
    assert_eq!(
        *server.service.shared_requests.lock().unwrap(),
        2,
        "sent twice"
    );
    // And the eager buffer, unmapped by the arenas, is shared again before its next use.
    let counts = connection
        .send_write(&write, Transfer::Eager, &piece_data)
        .unwrap();
    assert_eq!(counts.messages_sent, 1);
    connection.recv_write().unwrap();
    assert_eq!(*server.service.shared_requests.lock().unwrap(), 3, "once");
    let file = server.service.file.lock().unwrap();
    assert_eq!(&file[1000..1008], b"arena 0!");
    assert_eq!(&file[1008..1016], &1u64.to_le_bytes());
    assert_eq!(
        &file[1000 + last * 8..1008 + last * 8],
        &(last as u64).to_le_bytes()
    );
    assert_eq!(&file[..data.len()], &data[..]);
    drop(file);
    // Another connection shares the same arena on its own.
    let mut connection2 = server.connect();
    write_arena(&mut connection2, 1, 100, &arenas[0].as_slice()[..8]);
    assert_eq!(&server.service.file.lock().unwrap()[100..108], b"arena 0!");
}

#[test]
fn a_probe_request_never_carries_a_descriptor() {
    // The probe is an ordinary frame; a raw client that attaches a memfd to it is refused.
    let server = Server::start();
    let mut stream = server.raw();
    let good = memfd("good", 4096, SEALS);
    let token = 7u64.to_le_bytes();
    let memory = RemoteMemory {
        access: RemoteAccess::Process,
        segments: vec![tessera_proto::RemoteSegment {
            address: token.as_ptr() as u64,
            length: 8,
            key: 0,
        }],
        ..RemoteMemory::default()
    };
    let bytes = frame(
        Opcode::RemoteProbe,
        1,
        &RemoteProbe {}.to_body(),
        &memory.to_body(),
    );
    send_with_descriptors(stream.as_fd(), &bytes, &[good.as_fd()]).unwrap();
    let error = reply(&mut stream, 1).unwrap_err();
    assert!(error.message.contains("RemoteProbe"), "{}", error.message);
}
