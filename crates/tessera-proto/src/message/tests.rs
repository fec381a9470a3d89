//! Encode tests of every message: round trips, byte layouts checked against docs/PROTOCOL.md, and hostile bodies.

use super::*;
use crate::error::{ErrorCode, RemoteError};
use crate::layout::StripeLayout;
use crate::limits::{ERROR_MESSAGE_BYTES_MAX, MAC_BYTES};

fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(value: &T) -> Vec<u8> {
    let body = value.to_body();
    assert_eq!(&T::from_body(&body).unwrap(), value);
    body
}

#[test]
fn write_body_layout_matches_protocol_doc() {
    let write = Write {
        handle: 0x0102,
        capability: Capability(vec![0xAA]),
        mode: TransferMode::Multiple,
        storage: StoragePlan::Sieve,
        pieces: vec![Piece::new(8, 16)],
    };
    let body = round_trip(&write);
    // handle u64 | capability u32 len + bytes | mode u8 | storage u8 | count u32 |
    // (offset u64, length u64)*
    assert_eq!(body.len(), 8 + 4 + 1 + 1 + 1 + 4 + 16);
    assert_eq!(&body[0..8], &0x0102u64.to_le_bytes());
    assert_eq!(&body[8..13], &[1, 0, 0, 0, 0xAA]);
    assert_eq!(body[13], 3);
    assert_eq!(body[14], 3);
    assert_eq!(&body[15..19], &1u32.to_le_bytes());
    assert_eq!(&body[19..27], &8u64.to_le_bytes());
}

#[test]
fn collective_bodies_are_the_type_bodies_plus_a_tag() {
    let tag = CollectiveTag {
        id: 0x0102_0304_0506_0708,
        round: 2,
        rank: 3,
        participants: 4,
        wait_ms: 500,
    };
    let tag_body = round_trip(&tag);
    // id u64 | round u32 | rank u32 | participants u32 | wait_ms u32
    assert_eq!(tag_body.len(), 24);
    assert_eq!(&tag_body[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(&tag_body[20..24], &500u32.to_le_bytes());
    let typed = WriteType {
        handle: 9,
        end: 64,
        pieces: 1,
        ..WriteType::default()
    };
    let collective = WriteCollective {
        handle: 9,
        capability: Capability::default(),
        mode: typed.mode,
        storage: typed.storage,
        file: typed.file.clone(),
        start: 0,
        end: 64,
        ranges: Vec::new(),
        pieces: 1,
        collective: tag.clone(),
    };
    let body = round_trip(&collective);
    assert_eq!(body, [typed.to_body(), tag_body.clone()].concat());
    let read = ReadCollective {
        handle: 9,
        capability: Capability::default(),
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        file: FileType::default(),
        start: 0,
        end: 64,
        ranges: Vec::new(),
        collective: tag,
    };
    let read_type = ReadType {
        handle: 9,
        end: 64,
        ..ReadType::default()
    };
    assert_eq!(round_trip(&read), [read_type.to_body(), tag_body].concat());
}

#[test]
fn attr_and_readdir_round_trip() {
    let attr = Attr {
        handle: 7,
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 2,
        size: 3,
        atime_ns: 4,
        mtime_ns: 5,
        ctime_ns: 6,
        nlink: 1,
        layout: Some(StripeLayout::new(65536, vec![2, 0, 1]).unwrap().into()),
    };
    round_trip(&attr);
    round_trip(&ReaddirReply {
        entries: vec![DirEntry {
            name: "a".into(),
            handle: 3,
            kind: FileKind::Directory,
        }],
        more: true,
    });
    round_trip(&RemoteError::new(ErrorCode::NotFound, "no such path: /x"));
}

#[test]
fn credentials_layout_matches_protocol_doc() {
    let credentials = Credentials {
        principal: Principal::User,
        uid: 7,
        gid: 8,
        groups: vec![9, 10],
        host: "h1".into(),
        expires_s: 0x0102,
        mac: Mac([0xEE; MAC_BYTES]),
    };
    let body = round_trip(&credentials);
    // principal u8 | uid u32 | gid u32 | count u32 + groups | host u32 len + bytes |
    // expires_s u64 | mac [32]: C = 57 + 4g + h
    assert_eq!(body.len(), 57 + 4 * 2 + 2);
    assert_eq!(body[0], 1);
    assert_eq!(&body[1..5], &7u32.to_le_bytes());
    assert_eq!(&body[9..13], &2u32.to_le_bytes());
    assert_eq!(&body[21..27], &[2, 0, 0, 0, b'h', b'1']);
    assert_eq!(&body[27..35], &0x0102u64.to_le_bytes());
    assert_eq!(&body[35..], &[0xEE; MAC_BYTES]);
    assert_eq!(credentials.signed_bytes(), body[..35].to_vec());
}

#[test]
fn chmod_and_chown_layouts_match_protocol_doc() {
    let credentials = Credentials {
        uid: 7,
        gid: 8,
        ..Credentials::default()
    };
    let c = credentials.to_body().len();
    assert_eq!(c, 57);
    let chmod = Chmod {
        credentials: credentials.clone(),
        path: "/a".into(),
        mode: 0o1777,
    };
    let body = round_trip(&chmod);
    // credentials C | path u32 len + bytes | mode u32
    assert_eq!(body.len(), c + 4 + 2 + 4);
    assert_eq!(&body[c..c + 6], &[2, 0, 0, 0, b'/', b'a']);
    assert_eq!(&body[c + 6..c + 10], &0o1777u32.to_le_bytes());
    assert_eq!(Opcode::from_u8(0x1C), Ok(Opcode::Chmod));
    let chown = Chown {
        credentials,
        path: "/a".into(),
        uid: CHOWN_UNCHANGED,
        gid: 100,
    };
    let body = round_trip(&chown);
    // credentials C | path u32 len + bytes | new uid u32 | new gid u32
    assert_eq!(body.len(), c + 4 + 2 + 8);
    assert_eq!(&body[c + 6..c + 10], &u32::MAX.to_le_bytes());
    assert_eq!(&body[c + 10..c + 14], &100u32.to_le_bytes());
    assert_eq!(Opcode::from_u8(0x1D), Ok(Opcode::Chown));
}

#[test]
fn renew_layout_matches_protocol_doc() {
    let credentials = Credentials::default();
    let c = credentials.to_body().len();
    let renew = Renew {
        credentials,
        handle: 0x0A0B,
        capability: Capability(vec![0xCC; 62]),
        read: true,
        write: false,
    };
    let body = round_trip(&renew);
    // credentials C | handle u64 | capability u32 len + bytes | read u8 | write u8
    assert_eq!(body.len(), c + 14 + 62);
    assert_eq!(&body[c..c + 8], &0x0A0Bu64.to_le_bytes());
    assert_eq!(&body[c + 8..c + 12], &62u32.to_le_bytes());
    assert_eq!(&body[c + 12..c + 74], &[0xCC; 62]);
    assert_eq!(&body[c + 74..], &[1, 0]);
    assert_eq!(Opcode::from_u8(0x1F), Ok(Opcode::Renew));
}

#[test]
fn object_life_cycle_layouts_match_protocol_doc() {
    // handle u64 | namespace u64 | cache_unit_bytes u32
    let body = round_trip(&ObjectCreate {
        handle: 5,
        namespace: 0xA1,
        cache_unit_bytes: 4096,
    });
    assert_eq!(body.len(), 20);
    assert_eq!(&body[8..16], &0xA1u64.to_le_bytes());
    assert_eq!(&body[16..], &4096u32.to_le_bytes());
    // handle u64 | namespace u64
    let body = round_trip(&ObjectRemove {
        handle: 5,
        namespace: 0xA1,
    });
    assert_eq!(body.len(), 16);
    assert_eq!(&body[8..], &0xA1u64.to_le_bytes());
    // handle u64 | namespace u64 | size u64
    let body = round_trip(&ObjectTruncate {
        handle: 5,
        namespace: 0xA1,
        size: 7,
    });
    assert_eq!(body.len(), 24);
    assert_eq!(&body[8..16], &0xA1u64.to_le_bytes());
    assert_eq!(&body[16..], &7u64.to_le_bytes());
    // namespace u64 | live count u32 | live u64 × l
    let body = round_trip(&HandlesLiveReply {
        namespace: 0xA1,
        live: vec![2, 3],
    });
    assert_eq!(body.len(), 12 + 16);
    assert_eq!(&body[..8], &0xA1u64.to_le_bytes());
    assert_eq!(&body[8..12], &2u32.to_le_bytes());
}

#[test]
fn ping_reply_and_no_space_match_protocol_doc() {
    // PROTOCOL.md §5.2 PingReply: role u8, server_index u16, pid u32, objects u64,
    // store_state u8: 16 bytes.
    let ping = PingReply {
        role: ROLE_MDS,
        server_index: 0,
        pid: 42,
        objects: 7,
        store_state: STORE_NO_SPACE,
    };
    let body = round_trip(&ping);
    assert_eq!(body.len(), 16);
    assert_eq!(body[15], 1);
    // PROTOCOL.md §4 error codes: NoSpace is 19.
    let error = RemoteError::new(
        ErrorCode::NoSpace,
        "no space left on the metadata server's disk (/m)",
    );
    assert_eq!(error.to_body()[..2], 19u16.to_le_bytes());
    assert_eq!(ErrorCode::from_u16(19), Ok(ErrorCode::NoSpace));
    assert_eq!(
        error.to_string(),
        "no space left on the metadata server's disk (/m)"
    );
}

#[test]
fn share_region_body_matches_protocol_doc() {
    // PROTOCOL.md §5.2 ShareRegion: key u64, bytes u64, 16 bytes; opcode 0x42.
    let share = ShareRegion {
        key: SHARED_KEY_ARENA | 5,
        bytes: 1 << 20,
    };
    let body = round_trip(&share);
    assert_eq!(body.len(), 16);
    assert_eq!(&body[..8], &(SHARED_KEY_ARENA | 5).to_le_bytes());
    assert_eq!(&body[8..], &(1u64 << 20).to_le_bytes());
    assert_eq!(Opcode::from_u8(0x42).unwrap(), Opcode::ShareRegion);
    assert_eq!(ShareRegion::OPCODE as u8, 0x42);
    let error = RemoteError::new(ErrorCode::UnknownRegion, "shared region 0x5");
    assert_eq!(error.to_body()[..2], 18u16.to_le_bytes());
    round_trip(&error);
}

#[test]
fn every_opcode_has_one_byte_and_one_name() {
    let mut names = std::collections::HashSet::new();
    for opcode in Opcode::ALL {
        assert_eq!(Opcode::from_u8(opcode as u8), Ok(opcode));
        assert!(names.insert(opcode.name()), "{opcode:?}");
    }
    let known = (0..=u8::MAX)
        .filter(|&byte| Opcode::from_u8(byte).is_ok())
        .count();
    assert_eq!(known, Opcode::ALL.len());
}

#[test]
fn statfs_bodies_match_protocol_doc() {
    // PROTOCOL.md §5.2 Statfs: an empty body; the reply is six u64, 48 bytes.
    assert!(round_trip(&Statfs {}).is_empty());
    let reply = StatfsReply {
        total_bytes: 1 << 40,
        free_bytes: 3,
        available_bytes: 2,
        objects: 7,
        object_bytes: 5,
        object_allocated_bytes: 4096,
    };
    let body = round_trip(&reply);
    assert_eq!(body.len(), 48);
    assert_eq!(&body[..8], &(1u64 << 40).to_le_bytes());
    assert_eq!(&body[40..], &4096u64.to_le_bytes());
    assert_eq!(Statfs::OPCODE as u8, 0x43);
}

#[test]
fn refuses_trailing_bytes_and_unknown_opcodes() {
    let mut body = Ping {}.to_body();
    body.push(0);
    assert!(matches!(
        Ping::from_body(&body),
        Err(WireError::TrailingBytes { count: 1 })
    ));
    assert!(matches!(
        Opcode::from_u8(0xEE),
        Err(WireError::UnknownOpcode { opcode: 0xEE })
    ));
}

#[test]
fn long_error_messages_are_cut_at_the_limit() {
    let error = RemoteError::new(ErrorCode::Io, "é".repeat(ERROR_MESSAGE_BYTES_MAX));
    let decoded = RemoteError::from_body(&error.to_body()).unwrap();
    assert!(decoded.message.len() <= ERROR_MESSAGE_BYTES_MAX);
}
