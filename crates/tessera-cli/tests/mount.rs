//! `tessera mount` (issue 21): ordinary programs on a FUSE mount of a real cluster. Every
//! test mounts a fresh two-iod cluster, works through the mount with coreutils, Python or
//! several processes, and checks the bytes both through the mount and with a direct client,
//! so a test passes only if the data reached Tessera. Mounting needs root and /dev/fuse; a
//! test that cannot mount says so and fails under `CI=true`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::mount::Mounted;
use common::{bytes, tessera, Cluster};

/// A user with no other rights.
const ALICE: u32 = 2101;
/// Another user, in group `STAFF`.
const BOB: u32 = 2102;
/// A group Bob is in, Alice is not.
const STAFF: u32 = 3100;

/// Runs `program ARGS`, asserting success; returns stdout.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `command` with `sh -c` as `uid` (gid = uid, supplementary `groups`); returns
/// (success, stderr).
fn sh_as(uid: u32, groups: &[u32], command: &str) -> (bool, String) {
    let (success, _, stderr) = sh_as_output(uid, groups, command);
    (success, stderr)
}

/// [`sh_as`], also returning what the command printed: (success, stdout, stderr).
fn sh_as_output(uid: u32, groups: &[u32], command: &str) -> (bool, String, String) {
    let mut setpriv = Command::new("setpriv");
    setpriv
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"));
    if groups.is_empty() {
        setpriv.arg("--clear-groups");
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        setpriv.arg(format!("--groups={}", list.join(",")));
    }
    let output = setpriv.args(["sh", "-c", command]).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn coreutils_work_byte_for_byte() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("source");
    // Not a multiple of any block size used below, nor of the 64 KiB stripe unit.
    let data = bytes(21, 3_000_017);
    std::fs::write(&source, &data).unwrap();

    // cp in, and the bytes are in Tessera.
    let copied = mount.path("copied");
    run("cp", &[source.to_str().unwrap(), copied.to_str().unwrap()]);
    assert_eq!(mount.direct("/copied"), data);
    assert_eq!(std::fs::read(&copied).unwrap(), data);

    // dd with odd block sizes, both ways.
    let written = mount.path("dd-written");
    run(
        "dd",
        &[
            &format!("if={}", source.display()),
            &format!("of={}", written.display()),
            "bs=7777",
            "status=none",
        ],
    );
    assert_eq!(mount.direct("/dd-written"), data);
    let back = local.path().join("back");
    run(
        "dd",
        &[
            &format!("if={}", written.display()),
            &format!("of={}", back.display()),
            "bs=12345",
            "status=none",
        ],
    );
    assert_eq!(std::fs::read(&back).unwrap(), data);

    // mkdir, cp -r, mv of a file and of a directory, rm -r.
    let tree = mount.path("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::fs::write(tree.join("a/b/leaf"), b"leaf bytes").unwrap();
    run(
        "cp",
        &[
            "-r",
            tree.to_str().unwrap(),
            mount.path("tree2").to_str().unwrap(),
        ],
    );
    assert_eq!(mount.direct("/tree2/a/b/leaf"), b"leaf bytes");
    run(
        "mv",
        &[
            mount.path("tree2/a").to_str().unwrap(),
            mount.path("moved").to_str().unwrap(),
        ],
    );
    run(
        "mv",
        &[
            mount.path("moved/b/leaf").to_str().unwrap(),
            mount.path("moved/leaf2").to_str().unwrap(),
        ],
    );
    assert_eq!(
        std::fs::read(mount.path("moved/leaf2")).unwrap(),
        b"leaf bytes"
    );
    assert_eq!(mount.direct("/moved/leaf2"), b"leaf bytes");
    assert!(!mount.path("tree2/a").exists());
    run("rm", &["-r", tree.to_str().unwrap()]);
    assert!(!tree.exists());
    assert!(mount.cluster.client().stat("/tree").is_err());

    // ls -l shows names, sizes and modes as Tessera has them.
    let listing = run("ls", &["-l", mount.dir.path().to_str().unwrap()]);
    assert!(
        listing.contains(" 3000017 ") && listing.contains("copied") && listing.contains("moved"),
        "{listing}"
    );
    assert!(listing.contains("-rw-r--r--"), "{listing}");

    // truncate: grow (zeros) and shrink.
    run("truncate", &["-s", "3100000", copied.to_str().unwrap()]);
    let mut grown = data.clone();
    grown.resize(3_100_000, 0);
    assert_eq!(std::fs::read(&copied).unwrap(), grown);
    assert_eq!(mount.direct("/copied"), grown);
    run("truncate", &["-s", "1000", copied.to_str().unwrap()]);
    assert_eq!(std::fs::read(&copied).unwrap(), &data[..1000]);
    assert_eq!(mount.cluster.client().stat("/copied").unwrap().size, 1000);

    // chmod, seen by stat(1) and by Tessera.
    run("chmod", &["640", copied.to_str().unwrap()]);
    assert_eq!(
        run("stat", &["-c", "%a", copied.to_str().unwrap()]).trim(),
        "640"
    );
    assert_eq!(mount.cluster.client().stat("/copied").unwrap().mode, 0o640);

    // A file a direct client writes is read through the mount.
    let client = mount.cluster.client();
    let direct = client
        .create("/direct", &tessera_client::CreateOptions::default())
        .unwrap();
    direct.write_at(0, &data[..70_000]).unwrap();
    assert_eq!(
        std::fs::read(mount.path("direct")).unwrap(),
        &data[..70_000]
    );

    // The mount's readahead was raised from the kernel's 128 KiB to 1 MiB.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let point = mount.dir.path().to_str().unwrap();
    let device = mountinfo
        .lines()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .find(|fields| fields[4] == point)
        .map(|fields| fields[2].to_owned())
        .unwrap();
    let readahead = std::fs::read_to_string(format!("/sys/class/bdi/{device}/read_ahead_kb"));
    assert_eq!(readahead.unwrap().trim(), "1024");

    // df sees the iods' space.
    let df = run("df", &["-P", mount.dir.path().to_str().unwrap()]);
    assert!(df.contains("tessera"), "{df}");
    // df -i reads the namespace's inodes: used as many as the mds holds, far from full.
    let inodes = mount.cluster.client().mds_stats().unwrap().inodes;
    let df = run("df", &["-P", "-i", mount.dir.path().to_str().unwrap()]);
    let fields: Vec<&str> = df.lines().nth(1).unwrap().split_whitespace().collect();
    // Filesystem Inodes IUsed IFree IUse% Mounted-on
    assert_eq!(fields[2].parse::<u64>().unwrap(), inodes, "{df}");
    assert!(fields[3].parse::<u64>().unwrap() > 0, "{df}");
    assert_ne!(fields[4], "100%", "{df}");
}

#[test]
fn numpy_and_h5py_through_the_mount() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let python = "/usr/bin/python3";
    let probe = Command::new(python)
        .args(["-c", "import numpy, h5py"])
        .output();
    if !probe.is_ok_and(|output| output.status.success()) {
        common::not_run::ignored_at_run_time(
            "/usr/bin/python3 with numpy and h5py is missing (apt: python3-numpy python3-h5py)",
        );
        return;
    }
    let script = format!(
        r"
import numpy as np, h5py
root = '{root}'
a = np.arange(1_000_003, dtype=np.float64) * 1.5
a.tofile(root + '/array')
b = np.fromfile(root + '/array', dtype=np.float64)
assert b.shape == a.shape and (a == b).all(), 'fromfile differs'
grid = np.arange(300 * 170, dtype=np.int32).reshape(300, 170)
with h5py.File(root + '/data.h5', 'w') as f:
    f.create_dataset('grid', data=grid, chunks=(64, 64))
    f['grid'].attrs['units'] = 'm'
with h5py.File(root + '/data.h5', 'r') as f:
    assert (f['grid'][:] == grid).all(), 'h5py read differs'
    assert (f['grid'][100:200, 33:77] == grid[100:200, 33:77]).all()
    assert f['grid'].attrs['units'] == 'm'
print('ok')
",
        root = mount.dir.path().display()
    );
    assert_eq!(run(python, &["-c", &script]).trim(), "ok");
    // The array's bytes are in Tessera as NumPy wrote them (little-endian doubles).
    let direct = mount.direct("/array");
    assert_eq!(direct.len(), 1_000_003 * 8);
    let last = f64::from_le_bytes(direct[direct.len() - 8..].try_into().unwrap());
    assert!((last - 1_000_002.0 * 1.5).abs() < f64::EPSILON);
    // The HDF5 signature starts the file.
    assert_eq!(&mount.direct("/data.h5")[..8], b"\x89HDF\r\n\x1a\n");
}

#[test]
fn permissions_hold_for_each_caller() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let root = mount.dir.path().display().to_string();
    // Root's private file, and a shared directory.
    std::fs::write(mount.path("secret"), b"root only").unwrap();
    std::fs::set_permissions(mount.path("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(mount.path("shared")).unwrap();
    std::fs::set_permissions(mount.path("shared"), std::fs::Permissions::from_mode(0o777)).unwrap();

    // Alice cannot read root's file nor write in root's directory.
    let (ok, stderr) = sh_as(ALICE, &[], &format!("cat {root}/secret"));
    assert!(!ok && stderr.contains("Permission denied"), "{stderr}");
    let (ok, stderr) = sh_as(ALICE, &[], &format!("echo x > {root}/alice-at-root"));
    assert!(!ok && stderr.contains("Permission denied"), "{stderr}");
    assert!(mount.cluster.client().stat("/alice-at-root").is_err());

    // Alice makes a file she owns, readable by the group STAFF only.
    let (ok, stderr) = sh_as(
        ALICE,
        &[],
        &format!(
            "echo alice > {root}/shared/a && chgrp {STAFF} {root}/shared/a 2>/dev/null; chmod 640 {root}/shared/a"
        ),
    );
    assert!(ok, "{stderr}");
    let attr = mount.cluster.client().stat("/shared/a").unwrap();
    assert_eq!((attr.uid, attr.gid, attr.mode), (ALICE, ALICE, 0o640));
    // Alice is not in STAFF, so her chgrp to it was refused; root gives the file to STAFF.
    run(
        "chgrp",
        &[&STAFF.to_string(), mount.path("shared/a").to_str().unwrap()],
    );
    assert_eq!(mount.cluster.client().stat("/shared/a").unwrap().gid, STAFF);

    // Bob reads it through his group only with STAFF among his groups, and never writes it.
    let (ok, stderr) = sh_as(BOB, &[], &format!("cat {root}/shared/a"));
    assert!(!ok && stderr.contains("Permission denied"), "{stderr}");
    let (ok, stderr) = sh_as(BOB, &[STAFF], &format!("cat {root}/shared/a > /dev/null"));
    assert!(ok, "bob in staff: {stderr}");
    let (ok, stderr) = sh_as(BOB, &[STAFF], &format!("echo bob >> {root}/shared/a"));
    assert!(!ok && stderr.contains("Permission denied"), "{stderr}");
    // Bob may not chmod or chown Alice's file.
    let (ok, stderr) = sh_as(BOB, &[STAFF], &format!("chmod 666 {root}/shared/a"));
    assert!(!ok && stderr.contains("not permitted"), "{stderr}");
    let (ok, _) = sh_as(BOB, &[STAFF], &format!("chown {BOB} {root}/shared/a"));
    assert!(!ok);
    assert_eq!(mount.direct("/shared/a"), b"alice\n");
    let attr = mount.cluster.client().stat("/shared/a").unwrap();
    assert_eq!((attr.uid, attr.mode), (ALICE, 0o640));

    // Files made through the mount belong to their caller.
    let (ok, stderr) = sh_as(
        BOB,
        &[],
        &format!("mkdir {root}/shared/bob && echo b > {root}/shared/bob/f"),
    );
    assert!(ok, "{stderr}");
    let attr = mount.cluster.client().stat("/shared/bob/f").unwrap();
    assert_eq!((attr.uid, attr.gid), (BOB, BOB));
    // Alice cannot write in Bob's directory (0755 after the umask).
    let (ok, stderr) = sh_as(ALICE, &[], &format!("echo x > {root}/shared/bob/g"));
    assert!(!ok && stderr.contains("Permission denied"), "{stderr}");
}

/// Files and directories made through the mount take the caller's umask (the kernel passes
/// it with each create and mkdir), as on a local file system.
#[test]
fn files_made_through_the_mount_take_the_callers_umask() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let root = mount.dir.path().display().to_string();
    std::fs::create_dir(mount.path("shared")).unwrap();
    std::fs::set_permissions(mount.path("shared"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let client = mount.cluster.client();
    for (umask, directory, file) in [("077", 0o700, 0o600), ("022", 0o755, 0o644)] {
        let (ok, stderr) = sh_as(
            ALICE,
            &[],
            &format!(
                "umask {umask} && mkdir {root}/shared/d{umask} && echo x > {root}/shared/f{umask} \
                 && python3 -c 'import os; os.close(os.open(\"{root}/shared/o{umask}\", os.O_CREAT | os.O_WRONLY, 0o777))'"
            ),
        );
        assert!(ok, "umask {umask}: {stderr}");
        let modes: Vec<(u32, u32)> = ["d", "f", "o"]
            .iter()
            .map(|kind| {
                let attr = client.stat(&format!("/shared/{kind}{umask}")).unwrap();
                (attr.mode & 0o7777, attr.uid)
            })
            .collect();
        assert_eq!(
            modes,
            [
                (directory, ALICE),
                (file, ALICE),
                (0o777 & directory, ALICE)
            ],
            "umask {umask}"
        );
    }
}

/// What the kernel caches for one caller is not shown to another who may not see it: root
/// stats a file in its 0700 directory (its attributes and name now cached by the kernel),
/// then Alice, who has no search permission on that directory, tries every way to the file:
/// `stat`, `ls -l`, `cat`, and root's open descriptor through `/proc`. Each is refused with
/// EACCES and prints nothing of the file (size, mode, owner).
#[test]
fn the_kernel_cache_shows_nothing_to_a_user_without_search_permission() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let root = mount.dir.path().display().to_string();
    std::fs::create_dir(mount.path("private")).unwrap();
    std::fs::set_permissions(
        mount.path("private"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::fs::write(mount.path("private/file"), bytes(5, 12_345)).unwrap();
    std::fs::set_permissions(
        mount.path("private/file"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // Root holds the file open: its descriptor, seen through /proc, is one more way in.
    let held = std::fs::File::open(mount.path("private/file")).unwrap();
    let through_proc = format!("/proc/{}/fd/{}", std::process::id(), {
        use std::os::fd::AsRawFd;
        held.as_raw_fd()
    });
    let attempts = [
        format!("stat -c '%s %a %u %g' {root}/private/file"),
        format!("ls -ln {root}/private"),
        format!("ls -ln {root}/private/file"),
        format!("cat {root}/private/file"),
        format!("stat -L -c '%s %a %u %g' {through_proc}"),
        format!("cat {through_proc}"),
    ];
    // Each attempt right after root's own stat, so that root's attributes are in the cache
    // (the kernel keeps them for the mount's 1 s attribute TTL).
    for attempt in &attempts {
        let attr = std::fs::metadata(mount.path("private/file")).unwrap();
        assert_eq!(attr.len(), 12_345);
        let (ok, stdout, stderr) = sh_as_output(ALICE, &[], attempt);
        assert!(!ok, "{attempt}: alice succeeded: {stdout}");
        assert!(stderr.contains("Permission denied"), "{attempt}: {stderr}");
        assert!(
            stdout.is_empty() && !stderr.contains("12345") && !stderr.contains("644"),
            "{attempt}: alice learned something: {stdout} {stderr}"
        );
    }
    // Her own search of the directory shows an entry no more than an absent one does.
    let (_, _, stderr) = sh_as_output(ALICE, &[], &format!("stat {root}/private/absent"));
    assert!(stderr.contains("Permission denied"), "{stderr}");
    drop(held);
    // Root still sees it all.
    let attr = std::fs::metadata(mount.path("private/file")).unwrap();
    assert_eq!(
        (attr.len(), attr.permissions().mode() & 0o7777),
        (12_345, 0o644)
    );
}

/// Processes writing one file at once through the mount.
const WRITERS: usize = 4;
/// Each writer's range: 3 stripe units and a bit, so ranges share stripes and servers.
const RANGE_BYTES: usize = 200_003;

#[test]
fn four_processes_write_disjoint_ranges_of_one_file() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let local = tempfile::tempdir().unwrap();
    let target = mount.path("shared-file");
    std::fs::write(&target, b"").unwrap();
    let mut expected = Vec::new();
    let mut children = Vec::new();
    for writer in 0..WRITERS {
        let piece = bytes(100 + writer as u64, RANGE_BYTES);
        let source = local.path().join(format!("piece-{writer}"));
        std::fs::write(&source, &piece).unwrap();
        expected.extend_from_slice(&piece);
        // Each process writes its range in 4099-byte writes at byte offset writer × range.
        children.push(
            Command::new("dd")
                .arg(format!("if={}", source.display()))
                .arg(format!("of={}", target.display()))
                .args(["bs=4099", "oflag=seek_bytes", "conv=notrunc", "status=none"])
                .arg(format!("seek={}", writer * RANGE_BYTES))
                .spawn()
                .unwrap(),
        );
    }
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(mount.direct("/shared-file"), expected);
    assert_eq!(std::fs::read(&target).unwrap(), expected);
}

#[test]
fn the_mount_survives_an_iod_restart() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let data = bytes(7, 1_000_000);
    std::fs::write(mount.path("before"), &data).unwrap();
    // A file open across the restart.
    let mut open = std::fs::File::open(mount.path("before")).unwrap();

    mount.cluster.kill_iod(0);
    mount.cluster.restart_iod(0);

    // The open file reads on (the client reconnects to the new iod).
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut open, &mut read).unwrap();
    assert_eq!(read, data);
    // New opens, reads and writes work, and their bytes are in Tessera.
    assert_eq!(std::fs::read(mount.path("before")).unwrap(), data);
    std::fs::write(mount.path("after"), &data[..500_001]).unwrap();
    assert_eq!(mount.direct("/after"), &data[..500_001]);
    let listing = run("ls", &[mount.dir.path().to_str().unwrap()]);
    assert!(
        listing.contains("after") && listing.contains("before"),
        "{listing}"
    );
}

#[test]
fn mount_and_umount_refuse_what_they_cannot_do() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    let dir = mount.dir.path().to_str().unwrap();
    let again = tessera(&[
        "mount",
        dir,
        "--cluster",
        mount.cluster.file().to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already a Tessera mount"));
    let elsewhere = tempfile::tempdir().unwrap();
    let not_mounted = tessera(&["umount", elsewhere.path().to_str().unwrap()]);
    assert!(!not_mounted.status.success());
    assert!(String::from_utf8_lossy(&not_mounted.stderr).contains("is not a Tessera mount"));
    // A file open under the mount keeps it busy, and umount says so.
    let open = std::fs::File::open(mount.path(".")).unwrap();
    let busy = tessera(&["umount", dir]);
    assert!(!busy.status.success());
    assert!(String::from_utf8_lossy(&busy.stderr).contains("open under it"));
    drop(open);
    // No cluster answering: refused before anything is mounted.
    let stopped = Cluster::start(1);
    stopped.down();
    let target = tempfile::tempdir().unwrap();
    let refused = tessera(&[
        "mount",
        target.path().to_str().unwrap(),
        "--cluster",
        stopped.file().to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("does not answer"));
}

/// The pid of the mount daemon serving `dir` (its command line names the directory).
fn daemon_pid(dir: &Path) -> Option<i32> {
    let wanted = format!("mount\0{}\0--foreground", dir.display());
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let line = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&line)
                .contains(&wanted)
                .then_some(pid)
        })
}

#[test]
fn a_stopped_daemon_leaves_no_dead_mount() {
    let Some(mount) = Mounted::start() else {
        return;
    };
    std::fs::write(mount.path("kept"), b"still in Tessera").unwrap();
    let pid = daemon_pid(mount.dir.path()).expect("the mount daemon runs");
    // SAFETY: signalling the mount daemon this test started; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    common::wait_gone(pid, "the mount daemon, sent SIGTERM,");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(mount.dir.path().to_str().unwrap()),
        "{mountinfo}"
    );
    // The directory is a plain empty directory again; the file is in Tessera.
    assert_eq!(std::fs::read_dir(mount.dir.path()).unwrap().count(), 0);
    assert_eq!(mount.direct("/kept"), b"still in Tessera");
}

/// `touch -d`, `cp -p` and `tar x` set times through the mount (utimensat); the mds keeps
/// them, `stat` shows them until the data next changes, and a user may set "now" on a file
/// they may write but not a time of their choosing on one they do not own.
#[test]
fn times_set_by_touch_cp_and_tar_are_kept() {
    use std::os::unix::fs::MetadataExt;

    let Some(mount) = Mounted::start() else {
        return;
    };
    let stamped = mount.path("stamped");
    std::fs::write(&stamped, b"some bytes").unwrap();
    run(
        "touch",
        &["-d", "2001-02-03 04:05:06 UTC", stamped.to_str().unwrap()],
    );
    let meta = std::fs::metadata(&stamped).unwrap();
    assert_eq!(meta.mtime(), 981_173_106, "mtime of touch -d");
    assert_eq!(meta.atime(), 981_173_106, "atime of touch -d");
    // A direct client sees the same.
    let attr = mount.cluster.client().stat("/stamped").unwrap();
    assert_eq!(attr.mtime_ns, 981_173_106_000_000_000);

    // cp -p carries the times to a new file, tar x to a tree.
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("old");
    std::fs::write(&source, b"old bytes").unwrap();
    run(
        "touch",
        &["-d", "1999-12-31 23:59:59 UTC", source.to_str().unwrap()],
    );
    let copied = mount.path("copied");
    run(
        "cp",
        &["-p", source.to_str().unwrap(), copied.to_str().unwrap()],
    );
    assert_eq!(std::fs::metadata(&copied).unwrap().mtime(), 946_684_799);
    let archive = local.path().join("tree.tar");
    run(
        "tar",
        &[
            "-cf",
            archive.to_str().unwrap(),
            "-C",
            local.path().to_str().unwrap(),
            "old",
        ],
    );
    let unpacked = mount.path("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    run(
        "tar",
        &[
            "-xf",
            archive.to_str().unwrap(),
            "-C",
            unpacked.to_str().unwrap(),
        ],
    );
    let entry = unpacked.join("old");
    assert_eq!(std::fs::read(&entry).unwrap(), b"old bytes");
    assert_eq!(
        std::fs::metadata(&entry).unwrap().mtime(),
        946_684_799,
        "tar x kept the mtime"
    );

    // A later write moves the mtime on.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&stamped)
        .and_then(|mut file| std::io::Write::write_all(&mut file, b" more"))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100)); // past the kernel's ATTR_TTL
    assert!(std::fs::metadata(&stamped).unwrap().mtime() > 1_700_000_000);

    // Another user: "now" on a file they may write, never a time of their choosing, and
    // nothing on a file they may not write.
    std::fs::set_permissions(&stamped, std::fs::Permissions::from_mode(0o666)).unwrap();
    let path = stamped.to_str().unwrap();
    let (ok, stderr) = sh_as(ALICE, &[], &format!("touch {path}"));
    assert!(ok, "touch (now) by a user who may write: {stderr}");
    let (ok, stderr) = sh_as(ALICE, &[], &format!("touch -d '2001-01-01 UTC' {path}"));
    assert!(!ok && stderr.contains("not permitted"), "{stderr}");
    std::fs::set_permissions(&stamped, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, stderr) = sh_as(ALICE, &[], &format!("touch {path}"));
    assert!(!ok && stderr.contains("denied"), "{stderr}");
}
