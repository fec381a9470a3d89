//! RLIMIT_MEMLOCK refusals are reported as such, naming the limit.
//!
//! This machine runs the tests as root, whose CAP_IPC_LOCK lifts the limit. Capabilities are
//! per thread on Linux, so the test drops CAP_IPC_LOCK from the effective set of one thread of
//! its own (the others keep it), lowers the process's RLIMIT_MEMLOCK, and registers from that
//! thread. Where the thread cannot read or change its capabilities the test is ignored at run
//! time (and fails under `CI=true`).

use tessera_testing as not_run;

use tessera_reg::mapping::AnonymousMapping;
use tessera_reg::{page_bytes, PinRegistrar, RegError, Registrar};

const CAP_IPC_LOCK: u32 = 14;
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Removes CAP_IPC_LOCK from this thread's effective set; false if it cannot.
fn drop_ipc_lock() -> bool {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two CapData structs (version 3) into `data`, which holds two.
    let read = unsafe {
        libc::syscall(
            libc::SYS_capget,
            std::ptr::addr_of_mut!(header),
            data.as_mut_ptr(),
        )
    };
    if read != 0 {
        return false;
    }
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    // SAFETY: capset reads the header and two CapData structs we own; it changes only the
    // calling thread's capabilities.
    let written = unsafe {
        libc::syscall(
            libc::SYS_capset,
            std::ptr::addr_of_mut!(header),
            data.as_ptr(),
        )
    };
    written == 0
}

fn set_memlock(bytes: u64) -> libc::rlimit {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    unsafe {
        assert_eq!(
            libc::getrlimit(libc::RLIMIT_MEMLOCK, std::ptr::addr_of_mut!(old)),
            0
        );
        let new = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: old.rlim_max,
        };
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_MEMLOCK, std::ptr::addr_of!(new)),
            0
        );
    }
    old
}

#[test]
fn memlock_limit_refusals_name_the_limit() {
    let outcome = std::thread::spawn(|| {
        if !drop_ipc_lock() {
            return None;
        }
        let mapping = AnonymousMapping::new(256).unwrap();
        let registrar = PinRegistrar::new();
        let old = set_memlock(64 << 10);
        let too_much = registrar.register(mapping.segment());
        set_memlock(0);
        let none_allowed =
            registrar.register(tessera_reg::Segment::new(mapping.address(), page_bytes()));
        // SAFETY: restores the limit read above.
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, std::ptr::addr_of!(old)) };
        Some((too_much, none_allowed, registrar.live()))
    })
    .join()
    .unwrap();
    let Some((too_much, none_allowed, live)) = outcome else {
        not_run::ignored_at_run_time("this thread cannot read or change its capabilities");
        return;
    };
    match too_much {
        Err(RegError::MemlockLimit { limit, source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOMEM));
            assert!(limit.contains("65536 bytes"), "{limit}");
        }
        other => panic!("expected MemlockLimit (ENOMEM), got {other:?}"),
    }
    match none_allowed {
        Err(err @ RegError::MemlockLimit { .. }) => {
            let message = err.to_string();
            assert!(message.contains("RLIMIT_MEMLOCK"), "{message}");
            assert!(message.contains("CAP_IPC_LOCK"), "{message}");
            let RegError::MemlockLimit { source, .. } = err else {
                unreachable!()
            };
            assert_eq!(source.raw_os_error(), Some(libc::EPERM));
        }
        other => panic!("expected MemlockLimit (EPERM), got {other:?}"),
    }
    assert_eq!(live, 0, "a refused registration is not live");
}
