//! Every permission rule of the namespace, as a table of (caller, call, expected outcome) over
//! one fixed tree, plus the rules whose effect is more than an allow/deny: the error message,
//! the stored owner and mode, setgid clearing, root squash, and a create whose parent changed
//! between plan and commit. Each refusal must leave the whole namespace unchanged.

use super::inode::InodeBeforeSetTimes;
use super::*;
use crate::access::{Owner, NOBODY};

fn root() -> Caller {
    Caller::root()
}
/// Owner of most of the tree; group 100.
fn alice() -> Caller {
    Caller::new(1000, 100)
}
/// Alice's group mate.
fn bob() -> Caller {
    Caller::new(1001, 100)
}
/// Primary group 200, supplementary group 300.
fn carol() -> Caller {
    Caller {
        uid: 1002,
        gid: 200,
        groups: vec![300],
    }
}
/// In no group of the tree: always "other".
fn eve() -> Caller {
    Caller::new(1003, 400)
}

/// One namespace call, its arguments fixed.
#[derive(Debug, Clone, Copy)]
enum Op {
    Lookup(&'static str),
    Readdir(&'static str),
    /// An exclusive create.
    Create(&'static str),
    /// A non-exclusive create (of an existing file: an open for reading and writing).
    CreateOrOpen(&'static str),
    Mkdir(&'static str),
    Unlink(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    /// What the mds checks for a truncate: the path opened for writing.
    Truncate(&'static str),
    Open(&'static str, bool, bool),
    Chmod(&'static str, u32),
    Chown(&'static str, Option<u32>, Option<u32>),
    /// `SetTimes` with (atime, mtime): ns, `TIME_NOW` or `TIME_OMIT`.
    SetTimes(&'static str, u64, u64),
}

fn create(
    namespace: &Namespace,
    caller: &Caller,
    path: &str,
    mode: u32,
    exclusive: bool,
) -> Result<(u64, Inode), RemoteError> {
    let request = Create {
        path: path.to_owned(),
        mode,
        exclusive,
        ..Create::default()
    };
    match namespace.plan_create(caller, &request)? {
        CreatePlan::Existing(handle, inode) => Ok((handle, inode)),
        CreatePlan::New(handle, inode) => namespace
            .commit_create(caller, path, handle, &inode, exclusive)
            .map(|(handle, inode, _)| (handle, inode)),
    }
}

fn run(namespace: &Namespace, caller: &Caller, op: Op) -> Result<(), RemoteError> {
    match op {
        Op::Lookup(path) => namespace.lookup(caller, path).map(drop),
        Op::Readdir(path) => namespace.readdir(caller, path, "").map(drop),
        Op::Create(path) => create(namespace, caller, path, 0o640, true).map(drop),
        Op::CreateOrOpen(path) => create(namespace, caller, path, 0o640, false).map(drop),
        Op::Mkdir(path) => namespace.mkdir(caller, path, 0o750).map(drop),
        Op::Unlink(path) => namespace.remove(caller, path, false).map(drop),
        Op::Rmdir(path) => namespace.remove(caller, path, true).map(drop),
        Op::Rename(source, target) => namespace.rename(caller, source, target).map(drop),
        Op::Truncate(path) => namespace.open_inode(caller, path, false, true).map(drop),
        Op::Open(path, read, write) => namespace.open(caller, path, read, write).map(drop),
        Op::Chmod(path, mode) => namespace.chmod(caller, path, mode).map(drop),
        Op::Chown(path, uid, gid) => namespace.chown(caller, path, uid, gid).map(drop),
        Op::SetTimes(path, atime, mtime) => {
            namespace.set_times(caller, path, atime, mtime).map(drop)
        }
    }
}

/// Builds the tree every case starts from, as root.
fn build_tree(namespace: &Namespace) {
    let r = root();
    let dir = |path: &str, mode: u32, uid: u32, gid: u32| {
        namespace.mkdir(&r, path, 0o700).unwrap();
        namespace.chown(&r, path, Some(uid), Some(gid)).unwrap();
        namespace.chmod(&r, path, mode).unwrap();
    };
    let file = |path: &str, mode: u32, uid: u32, gid: u32| {
        create(namespace, &r, path, 0o600, true).unwrap();
        namespace.chown(&r, path, Some(uid), Some(gid)).unwrap();
        namespace.chmod(&r, path, mode).unwrap();
    };
    namespace.chown(&r, "/", Some(0), Some(0)).unwrap();
    namespace.chmod(&r, "/", 0o755).unwrap();
    // Alice's directory: her group may read and search, not write.
    dir("/d", 0o755, 1000, 100);
    file("/d/f", 0o640, 1000, 100);
    dir("/d/sub", 0o755, 1000, 100);
    // Read-only even for its owner.
    dir("/ro", 0o555, 1000, 100);
    file("/ro/f", 0o666, 1000, 100);
    // No search for anyone but root.
    dir("/nx", 0o666, 1000, 100);
    file("/nx/f", 0o666, 1000, 100);
    // No read for anyone but root.
    dir("/nr", 0o333, 1000, 100);
    file("/nr/f", 0o666, 1000, 100);
    // /tmp-style sticky directories, owned by root and by bob.
    dir("/tmp", 0o1777, 0, 0);
    file("/tmp/a", 0o666, 1000, 100);
    dir("/tmp/ad", 0o777, 1000, 100);
    file("/tmp/b", 0o666, 1001, 100);
    dir("/bobtmp", 0o1777, 1001, 100);
    file("/bobtmp/a", 0o666, 1000, 100);
    // Group-only access: group 300 (carol's supplementary group), group 100 (a primary group).
    dir("/g", 0o070, 0, 300);
    file("/g/f", 0o060, 0, 300);
    file("/g/c", 0o644, 1002, 200);
    dir("/p", 0o070, 0, 100);
    file("/p/f", 0o060, 0, 100);
    // Other-only access.
    dir("/o", 0o007, 0, 0);
    file("/o/f", 0o006, 0, 0);
    // Owner class empty: alice is refused what her group may do.
    file("/own0", 0o077, 1000, 100);
    // A root directory inside a world-writable one.
    dir("/w", 0o777, 0, 0);
    dir("/w/rootdir", 0o755, 0, 0);
}

/// A fresh copy of the tree, in its own store.
struct Fixture {
    template: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let template = tempfile::tempdir().unwrap();
        let namespace =
            Namespace::open_store(&template.path().join("meta.redb"), 2, 65536).unwrap();
        build_tree(&namespace);
        Self { template }
    }

    fn copy(&self, root_squash: bool) -> (tempfile::TempDir, Namespace) {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("meta.redb");
        std::fs::copy(self.template.path().join("meta.redb"), &db).unwrap();
        let namespace = Namespace::open_store(&db, 2, 65536)
            .unwrap()
            .with_root_squash(root_squash);
        (dir, namespace)
    }
}

const DENIED: Option<ErrorCode> = Some(ErrorCode::PermissionDenied);
const OK: Option<ErrorCode> = None;

#[allow(clippy::too_many_lines)]
fn cases() -> Vec<(&'static str, Caller, Op, Option<ErrorCode>)> {
    use Op::*;
    vec![
        // Search on each directory of a path, for every path operation.
        (
            "lookup below a dir without x",
            eve(),
            Lookup("/nx/f"),
            DENIED,
        ),
        ("owner needs x too", alice(), Lookup("/nx/f"), DENIED),
        ("root searches any dir", root(), Lookup("/nx/f"), OK),
        (
            "the dir itself needs x only above",
            eve(),
            Lookup("/nx"),
            OK,
        ),
        ("readdir needs no x on the dir", eve(), Readdir("/nx"), OK),
        ("create below no-x", alice(), Create("/nx/new"), DENIED),
        ("mkdir below no-x", alice(), Mkdir("/nx/new"), DENIED),
        ("unlink below no-x", alice(), Unlink("/nx/f"), DENIED),
        (
            "rename from below no-x",
            alice(),
            Rename("/nx/f", "/d/x"),
            DENIED,
        ),
        ("rename into no-x", alice(), Rename("/d/f", "/nx/x"), DENIED),
        ("truncate below no-x", alice(), Truncate("/nx/f"), DENIED),
        ("open below no-x", eve(), Open("/nx/f", true, false), DENIED),
        ("chmod below no-x", alice(), Chmod("/nx/f", 0o600), DENIED),
        (
            "a deep path checks every level",
            eve(),
            Lookup("/g/f"),
            DENIED,
        ),
        // Read for readdir.
        ("readdir without r", alice(), Readdir("/nr"), DENIED),
        ("readdir by root", root(), Readdir("/nr"), OK),
        ("lookup in a dir without r", eve(), Lookup("/nr/f"), OK),
        ("readdir with r", eve(), Readdir("/d"), OK),
        (
            "readdir of a file",
            eve(),
            Readdir("/d/f"),
            Some(ErrorCode::NotDirectory),
        ),
        // Write and search on the parent.
        ("create: group has r-x", bob(), Create("/d/new"), DENIED),
        ("create: owner", alice(), Create("/d/new"), OK),
        ("create: root", root(), Create("/d/new"), OK),
        (
            "create: owner without w",
            alice(),
            Create("/ro/new"),
            DENIED,
        ),
        (
            "create: root in a read-only dir",
            root(),
            Create("/ro/new"),
            OK,
        ),
        (
            "create exclusive of an existing name",
            bob(),
            Create("/d/f"),
            Some(ErrorCode::Exists),
        ),
        ("mkdir: group has r-x", bob(), Mkdir("/d/new"), DENIED),
        ("mkdir: owner", alice(), Mkdir("/d/new"), OK),
        ("mkdir: owner without w", alice(), Mkdir("/ro/new"), DENIED),
        (
            "mkdir of an existing name",
            bob(),
            Mkdir("/d/sub"),
            Some(ErrorCode::Exists),
        ),
        ("unlink: group has r-x", bob(), Unlink("/d/f"), DENIED),
        ("unlink: owner", alice(), Unlink("/d/f"), OK),
        ("unlink: owner without w", alice(), Unlink("/ro/f"), DENIED),
        (
            "unlink of a missing name",
            bob(),
            Unlink("/d/none"),
            Some(ErrorCode::NotFound),
        ),
        ("rmdir: group has r-x", bob(), Rmdir("/d/sub"), DENIED),
        ("rmdir: owner", alice(), Rmdir("/d/sub"), OK),
        (
            "rename: source parent not writable",
            bob(),
            Rename("/d/f", "/tmp/x"),
            DENIED,
        ),
        (
            "rename: target parent not writable",
            bob(),
            Rename("/tmp/b", "/d/x"),
            DENIED,
        ),
        (
            "rename: target parent read-only",
            alice(),
            Rename("/d/f", "/ro/x"),
            DENIED,
        ),
        (
            "rename: both writable",
            alice(),
            Rename("/d/f", "/tmp/x"),
            OK,
        ),
        (
            "rename: own file out of sticky",
            alice(),
            Rename("/tmp/a", "/d/x"),
            OK,
        ),
        (
            "rename: dir to another parent needs w on it",
            alice(),
            Rename("/w/rootdir", "/tmp/rd"),
            DENIED,
        ),
        (
            "rename: dir within its parent",
            alice(),
            Rename("/w/rootdir", "/w/renamed"),
            OK,
        ),
        (
            "rename: own dir to another parent",
            alice(),
            Rename("/d/sub", "/tmp/sub"),
            OK,
        ),
        // The sticky bit.
        (
            "sticky: owner of the file removes it",
            alice(),
            Unlink("/tmp/a"),
            OK,
        ),
        (
            "sticky: another user may not",
            bob(),
            Unlink("/tmp/a"),
            DENIED,
        ),
        ("sticky: root may", root(), Unlink("/tmp/a"), OK),
        (
            "sticky: owner of the dir may",
            bob(),
            Unlink("/bobtmp/a"),
            OK,
        ),
        (
            "sticky: a stranger may not",
            eve(),
            Unlink("/bobtmp/a"),
            DENIED,
        ),
        (
            "sticky: rmdir by another user",
            bob(),
            Rmdir("/tmp/ad"),
            DENIED,
        ),
        ("sticky: rmdir by the owner", alice(), Rmdir("/tmp/ad"), OK),
        (
            "sticky: rename another's file",
            bob(),
            Rename("/tmp/a", "/tmp/z"),
            DENIED,
        ),
        (
            "sticky: replace another's file",
            bob(),
            Rename("/tmp/b", "/tmp/a"),
            DENIED,
        ),
        (
            "sticky: own file onto another's",
            alice(),
            Rename("/tmp/a", "/tmp/b"),
            DENIED,
        ),
        (
            "sticky: root replaces",
            root(),
            Rename("/tmp/a", "/tmp/b"),
            OK,
        ),
        (
            "sticky: create is not restricted",
            eve(),
            Create("/tmp/new"),
            OK,
        ),
        // Group bits, through the primary group and a supplementary one; other bits.
        (
            "supplementary group: search and open",
            carol(),
            Open("/g/f", true, true),
            OK,
        ),
        ("supplementary group: create", carol(), Create("/g/new"), OK),
        ("not in the group", eve(), Open("/g/f", true, false), DENIED),
        ("primary group: open", alice(), Open("/p/f", true, true), OK),
        ("primary group of another", carol(), Lookup("/p/f"), DENIED),
        ("other bits: open", eve(), Open("/o/f", true, true), OK),
        ("other bits: mkdir", eve(), Mkdir("/o/new"), OK),
        (
            "other bits do not apply to the group",
            bob(),
            Open("/o/f", true, false),
            OK,
        ),
        (
            "an empty owner class is not widened",
            alice(),
            Open("/own0", true, false),
            DENIED,
        ),
        ("while the group may", bob(), Open("/own0", true, true), OK),
        // Open against the file's bits.
        ("open: group may read", bob(), Open("/d/f", true, false), OK),
        (
            "open: group may not write",
            bob(),
            Open("/d/f", false, true),
            DENIED,
        ),
        (
            "open: other may not read",
            eve(),
            Open("/d/f", true, false),
            DENIED,
        ),
        (
            "open: owner reads and writes",
            alice(),
            Open("/d/f", true, true),
            OK,
        ),
        (
            "open: root ignores the bits",
            root(),
            Open("/own0", true, true),
            OK,
        ),
        (
            "open: a dir for write",
            root(),
            Open("/d", false, true),
            Some(ErrorCode::IsDirectory),
        ),
        ("open: a dir for read", alice(), Open("/d", true, false), OK),
        (
            "non-exclusive create of an existing file opens it rw",
            bob(),
            CreateOrOpen("/d/f"),
            DENIED,
        ),
        ("... which its owner may", alice(), CreateOrOpen("/d/f"), OK),
        ("... or a group with rw", carol(), CreateOrOpen("/g/f"), OK),
        // Truncate needs write on the file.
        ("truncate: group has r", bob(), Truncate("/d/f"), DENIED),
        ("truncate: owner", alice(), Truncate("/d/f"), OK),
        ("truncate: other with w", eve(), Truncate("/tmp/a"), OK),
        (
            "truncate: a dir",
            root(),
            Truncate("/d"),
            Some(ErrorCode::IsDirectory),
        ),
        // chmod: owner or root.
        ("chmod: owner", alice(), Chmod("/d/f", 0o600), OK),
        ("chmod: not the owner", bob(), Chmod("/d/f", 0o666), DENIED),
        (
            "chmod: other with rw on the file",
            eve(),
            Chmod("/tmp/a", 0o777),
            DENIED,
        ),
        ("chmod: root", root(), Chmod("/d/f", 0o666), OK),
        (
            "chmod: bad bits",
            alice(),
            Chmod("/d/f", 0o10000),
            Some(ErrorCode::InvalidArgument),
        ),
        // chown: root any; the owner only the group, to one of their own groups.
        (
            "chown: root gives away",
            root(),
            Chown("/d/f", Some(1001), None),
            OK,
        ),
        (
            "chown: owner may not give away",
            alice(),
            Chown("/d/f", Some(1001), None),
            DENIED,
        ),
        (
            "chown: owner to the same uid",
            alice(),
            Chown("/d/f", Some(1000), None),
            OK,
        ),
        (
            "chown: owner to a group not theirs",
            alice(),
            Chown("/d/f", None, Some(300)),
            DENIED,
        ),
        (
            "chown: owner to a supplementary group",
            carol(),
            Chown("/g/c", None, Some(300)),
            OK,
        ),
        (
            "chown: owner to their primary group",
            carol(),
            Chown("/g/c", None, Some(200)),
            OK,
        ),
        (
            "chown: not the owner, even to a group they are in",
            bob(),
            Chown("/d/f", None, Some(100)),
            DENIED,
        ),
        (
            "chown: a stranger",
            eve(),
            Chown("/tmp/a", None, Some(400)),
            DENIED,
        ),
        (
            "chown: root to any group",
            root(),
            Chown("/d/f", None, Some(12345)),
            OK,
        ),
        // utimensat(2): a time given needs the owner or root; "now" needs write permission.
        (
            "set times: the owner, to a given time",
            alice(),
            SetTimes("/d/f", 1_000_000_000, 2_000_000_000),
            OK,
        ),
        (
            "set times: a group member with write permission, to now",
            bob(),
            SetTimes("/tmp/a", TIME_NOW, TIME_NOW),
            OK,
        ),
        (
            "set times: with write permission but not the owner, to a given time",
            bob(),
            SetTimes("/tmp/a", TIME_OMIT, 5),
            DENIED,
        ),
        (
            "set times: a group member without write permission, to now",
            bob(),
            SetTimes("/d/f", TIME_NOW, TIME_NOW),
            DENIED,
        ),
        (
            "set times: a stranger, to now, on a file they may not write",
            eve(),
            SetTimes("/d/f", TIME_NOW, TIME_OMIT),
            DENIED,
        ),
        (
            "set times: search is needed on the way",
            eve(),
            SetTimes("/nx/f", TIME_NOW, TIME_NOW),
            DENIED,
        ),
        (
            "set times: root, to a given time",
            root(),
            SetTimes("/d/f", 7, 8),
            OK,
        ),
    ]
}

#[test]
fn set_times_stores_the_times_given_and_the_data_s_mtime_shows_after_a_later_write() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(false);
    let (handle, inode) = namespace
        .set_times(&alice(), "/d/f", 1_000_000_000, 2_000_000_000)
        .unwrap();
    assert_eq!(
        (inode.atime_ns, inode.mtime_ns),
        (1_000_000_000, 2_000_000_000)
    );
    assert!(inode.times_set_ns > 2_000_000_000);
    assert!(inode.ctime_ns >= inode.times_set_ns);
    let stored = namespace.get(handle).unwrap();
    assert_eq!(stored, inode);
    // Data written before the times were set does not hide them; data written after does.
    assert_eq!(
        stored.mtime_with_data(stored.times_set_ns - 1),
        2_000_000_000
    );
    assert_eq!(
        stored.mtime_with_data(stored.times_set_ns + 5),
        stored.times_set_ns + 5
    );
    // Omitted times stay; "now" is the mds's clock.
    let (_, again) = namespace
        .set_times(&alice(), "/d/f", TIME_OMIT, TIME_NOW)
        .unwrap();
    assert_eq!(again.atime_ns, 1_000_000_000);
    assert!(again.mtime_ns >= inode.times_set_ns);
}

#[test]
fn an_inode_stored_before_set_times_existed_still_reads() {
    let bytes = postcard::to_allocvec(&InodeBeforeSetTimes {
        kind: KIND_FILE,
        mode: 0o640,
        uid: 5,
        gid: 6,
        atime_ns: 1,
        mtime_ns: 2,
        ctime_ns: 3,
        nlink: 1,
        parent: ROOT_HANDLE,
        stripe_unit_bytes: 65536,
        servers: vec![1, 0],
        pattern: Vec::new(),
    })
    .unwrap();
    let inode = decode_inode(&bytes).unwrap();
    assert_eq!((inode.uid, inode.mtime_ns, inode.times_set_ns), (5, 2, 0));
    assert_eq!(inode.servers, vec![1, 0]);
    // And what is written now reads back whole.
    assert_eq!(decode_inode(&encode_inode(&inode).unwrap()).unwrap(), inode);
}

#[test]
fn every_rule_in_a_table() {
    let fixture = Fixture::new();
    let mut failures = Vec::new();
    for (name, caller, op, expected) in cases() {
        let (_dir, namespace) = fixture.copy(false);
        let before = namespace.snapshot();
        let outcome = run(&namespace, &caller, op);
        let got = outcome.as_ref().err().map(|error| error.code);
        if got != expected {
            failures.push(format!(
                "{name}: uid {} {op:?}: expected {expected:?}, got {outcome:?}",
                caller.uid
            ));
            continue;
        }
        if let Err(error) = outcome {
            if namespace.snapshot() != before {
                failures.push(format!(
                    "{name}: refused ({error:?}) but the namespace changed"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn refusals_name_the_path_and_the_missing_right() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(false);
    let message = |caller: Caller, op| run(&namespace, &caller, op).unwrap_err().message;
    assert_eq!(
        message(bob(), Op::Create("/d/new")),
        "permission denied: /d/new (needs write on /d)"
    );
    assert_eq!(
        message(eve(), Op::Lookup("/nx/f")),
        "permission denied: /nx/f (needs search on /nx)"
    );
    assert_eq!(
        message(eve(), Op::Lookup("/g/f")),
        "permission denied: /g/f (needs search on /g)"
    );
    assert_eq!(
        message(alice(), Op::Readdir("/nr")),
        "permission denied: /nr (needs read on /nr)"
    );
    assert_eq!(
        message(eve(), Op::Open("/d/f", true, true)),
        "permission denied: /d/f (needs read and write on /d/f)"
    );
    assert!(message(bob(), Op::Unlink("/tmp/a")).contains("/tmp is sticky"));
    assert!(message(bob(), Op::Chmod("/d/f", 0o600)).contains("only its owner, uid 1000"));
}

#[test]
fn new_entries_take_the_callers_ids_and_the_requested_mode() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(false);
    let (_, inode) = namespace.mkdir(&carol(), "/tmp/c", 0o2751).unwrap();
    assert_eq!((inode.uid, inode.gid, inode.mode), (1002, 200, 0o2751));
    let (_, inode) = create(&namespace, &carol(), "/tmp/c/f", 0o4600, true).unwrap();
    assert_eq!((inode.uid, inode.gid, inode.mode), (1002, 200, 0o4600));
    // No umask on the server: the bits are stored as asked.
    let (_, inode) = create(&namespace, &eve(), "/tmp/all", 0o777, true).unwrap();
    assert_eq!(inode.mode, 0o777);
}

#[test]
fn chmod_and_chown_clear_set_id_bits() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(false);
    // The owner keeps setgid on a file of their own group, loses it outside it.
    let (_, inode) = namespace.chmod(&alice(), "/d/f", 0o2750).unwrap();
    assert_eq!(inode.mode, 0o2750);
    namespace.chown(&root(), "/d/f", None, Some(300)).unwrap();
    let (_, inode) = namespace.chmod(&alice(), "/d/f", 0o2750).unwrap();
    assert_eq!(inode.mode, 0o750);
    // Root keeps it.
    let (_, inode) = namespace.chmod(&root(), "/d/f", 0o6755).unwrap();
    assert_eq!(inode.mode, 0o6755);
    // A change of group clears setuid and (group-executable) setgid, even by root.
    let (_, inode) = namespace.chown(&root(), "/d/f", None, Some(100)).unwrap();
    assert_eq!((inode.mode, inode.gid), (0o755, 100));
    // A directory keeps them.
    namespace.chmod(&root(), "/d/sub", 0o2755).unwrap();
    let (_, inode) = namespace.chown(&root(), "/d/sub", None, Some(300)).unwrap();
    assert_eq!(inode.mode, 0o2755);
}

#[test]
fn root_squash_treats_root_as_nobody() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(true);
    assert!(namespace.root_squash());
    let cases = [
        (Op::Lookup("/nx/f"), DENIED),
        (Op::Readdir("/nr"), DENIED),
        (Op::Create("/new"), DENIED),
        (Op::Open("/d/f", true, false), DENIED),
        (Op::Unlink("/tmp/a"), DENIED),
        (Op::Chmod("/d/f", 0o777), DENIED),
        (Op::Chown("/tmp/a", Some(0), None), DENIED),
        (Op::Open("/o/f", true, true), OK),
    ];
    for (op, expected) in cases {
        let before = namespace.snapshot();
        let outcome = run(&namespace, &root(), op);
        assert_eq!(
            outcome.as_ref().err().map(|error| error.code),
            expected,
            "{op:?}: {outcome:?}"
        );
        if outcome.is_err() {
            assert!(
                namespace.snapshot() == before,
                "{op:?} changed the namespace"
            );
        }
    }
    // What root makes belongs to nobody; other users are not squashed.
    let (_, inode) = namespace.mkdir(&root(), "/tmp/r", 0o755).unwrap();
    assert_eq!((inode.uid, inode.gid), (NOBODY, NOBODY));
    namespace.chmod(&alice(), "/d/f", 0o600).unwrap();
    // Without squash the same root may.
    let (_dir, plain) = fixture.copy(false);
    assert!(!plain.root_squash());
    assert_eq!(plain.lookup(&root(), "/nx/f").unwrap().1.uid, 1000);
}

/// A renewal by handle decides every open case of the table as the open by path does: the
/// search bits of each directory above the file count, not only the file's own bits. (Before,
/// eve renewed `/nx/f`, below a directory she may not search, and bob read alice's files
/// through directories closed to him.)
#[test]
fn a_renewal_by_handle_checks_what_an_open_by_path_checks() {
    let fixture = Fixture::new();
    // Handles are the same in every copy; this one finds them even under squash.
    let (_plain_dir, plain) = fixture.copy(false);
    let mut failures = Vec::new();
    for squash in [false, true] {
        let (_dir, namespace) = fixture.copy(squash);
        let mut compared = 0;
        let mut cases = cases();
        cases.push(("root", root(), Op::Open("/nx/f", true, true), OK));
        for (name, caller, op, _) in cases {
            let Op::Open(path, read, write) = op else {
                continue;
            };
            let by_path = namespace.open(&caller, path, read, write);
            let (handle, _) = plain.lookup(&root(), path).unwrap();
            let by_handle = namespace.open_handle(&caller, handle, read, write);
            let codes = (
                by_path.as_ref().err().map(|error| error.code),
                by_handle.as_ref().err().map(|error| error.code),
            );
            if codes.0 != codes.1 {
                failures.push(format!(
                    "{name} (squash {squash}): uid {} {op:?}: by path {by_path:?}, by handle {by_handle:?}",
                    caller.uid
                ));
            }
            compared += 1;
        }
        assert!(compared >= 16, "only {compared} open cases compared");
    }
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_renewal_sees_chmods_and_renames_since_the_open() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(false);
    let (below_nx, _) = namespace.lookup(&root(), "/nx/f").unwrap();
    let (nx, _) = namespace.lookup(&root(), "/nx").unwrap();
    let (alices, _) = namespace.lookup(&root(), "/d/f").unwrap();
    // The file's own bits (0666) would let eve in; the directory above it does not.
    let error = namespace
        .open_handle(&eve(), below_nx, true, false)
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::PermissionDenied);
    assert_eq!(
        error.message,
        format!(
            "permission denied: handle {below_nx:#x} (needs search on directory {nx:#x} above it)"
        )
    );
    let attr = namespace.open_handle(&bob(), alices, true, false).unwrap();
    assert_eq!((attr.handle, attr.uid, attr.mode), (alices, 1000, 0o640));
    let error = namespace
        .open_handle(&bob(), alices, true, true)
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::PermissionDenied);
    assert!(
        error.message.contains(&format!("{alices:#x}")),
        "{}",
        error.message
    );
    // A chmod of the directory since the open is honoured...
    namespace.chmod(&alice(), "/d", 0o700).unwrap();
    let error = namespace
        .open_handle(&bob(), alices, true, false)
        .unwrap_err();
    assert!(error.message.contains("needs search"), "{}", error.message);
    namespace.chmod(&alice(), "/d", 0o755).unwrap();
    namespace.open_handle(&bob(), alices, true, false).unwrap();
    // ...and so is one of the file.
    namespace.chmod(&alice(), "/d/f", 0o600).unwrap();
    assert_eq!(
        namespace
            .open_handle(&bob(), alices, true, false)
            .unwrap_err()
            .code,
        ErrorCode::PermissionDenied
    );
    // A rename moves the file under the directories of its new name.
    namespace.chmod(&alice(), "/d/f", 0o644).unwrap();
    namespace.open_handle(&eve(), alices, true, false).unwrap();
    namespace.rename(&root(), "/d/f", "/nx/moved").unwrap();
    for caller in [eve(), alice()] {
        let error = namespace
            .open_handle(&caller, alices, true, false)
            .unwrap_err();
        assert_eq!(
            error.message,
            format!("permission denied: handle {alices:#x} (needs search on directory {nx:#x} above it)")
        );
    }
    namespace.open_handle(&root(), alices, true, true).unwrap();
    // The root directory by handle has no directory above it.
    namespace
        .open_handle(&eve(), ROOT_HANDLE, true, false)
        .unwrap();
    assert_eq!(
        namespace
            .open_handle(&bob(), 0xdead, true, false)
            .unwrap_err()
            .code,
        ErrorCode::UnknownHandle
    );
}

#[test]
fn commit_create_checks_the_parent_again() {
    let fixture = Fixture::new();
    let (_dir, namespace) = fixture.copy(false);
    let request = Create {
        path: "/tmp/ad/late".to_owned(),
        mode: 0o644,
        exclusive: true,
        ..Create::default()
    };
    let CreatePlan::New(handle, inode) = namespace.plan_create(&bob(), &request).unwrap() else {
        panic!("/tmp/ad/late exists");
    };
    // Between the plan and the commit, alice takes write away from her directory.
    namespace.chmod(&alice(), "/tmp/ad", 0o755).unwrap();
    let before = namespace.snapshot();
    let error = namespace
        .commit_create(&bob(), "/tmp/ad/late", handle, &inode, true)
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::PermissionDenied);
    assert!(namespace.snapshot() == before);
}

/// Attributes of one inode of the chain `/a/b/f` in a generated case.
#[derive(Debug, Clone, Copy)]
struct Generated {
    mode: u32,
    uid: u32,
    gid: u32,
}

fn generated() -> impl proptest::strategy::Strategy<Value = Generated> {
    use proptest::prelude::*;
    (0u32..0o2000, 1000u32..1003, 100u32..103).prop_map(|(mode, uid, gid)| Generated {
        mode,
        uid,
        gid,
    })
}

/// What the reference says `caller` may do to the chain `/` (0755 root) → `a` → `b` → `f`.
fn expected(caller: &Caller, chain: [Generated; 3], op: usize) -> bool {
    use crate::access::tests::reference;
    let owner = |node: Generated, directory| Owner {
        mode: node.mode,
        uid: node.uid,
        gid: node.gid,
        directory,
    };
    let [a, b, f] = chain;
    let root_dir = Owner {
        mode: 0o755,
        uid: 0,
        gid: 0,
        directory: true,
    };
    let to_b = reference(caller, root_dir, 1) && reference(caller, owner(a, true), 1);
    let into_b = to_b && reference(caller, owner(b, true), 1);
    let sticky_ok =
        b.mode & 0o1000 == 0 || caller.uid == 0 || caller.uid == f.uid || caller.uid == b.uid;
    match op {
        0 => into_b,
        1 => into_b && reference(caller, owner(f, false), 4),
        2 => into_b && reference(caller, owner(f, false), 2),
        3 => to_b && reference(caller, owner(b, true), 4),
        4 => into_b && reference(caller, owner(b, true), 2),
        _ => into_b && reference(caller, owner(b, true), 2) && sticky_ok,
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Random modes and owners along a path, random callers and calls: the namespace allows
    /// exactly what the bit-by-bit reference allows, and a refusal changes nothing.
    #[test]
    fn a_random_chain_matches_the_reference(
        chain in proptest::array::uniform3(generated()),
        // Root, one of the three possible owners, or a stranger.
        uid in proptest::sample::select(vec![0u32, 1000, 1001, 1002, 1003]),
        gid in 100u32..103,
        supplementary in proptest::collection::vec(100u32..103, 0..2),
        op in 0usize..6,
    ) {
        let caller = Caller { uid, gid, groups: supplementary };
        let dir = tempfile::tempdir().unwrap();
        let namespace = Namespace::open_store(&dir.path().join("m.redb"), 1, 65536).unwrap();
        let r = root();
        namespace.chown(&r, "/", Some(0), Some(0)).unwrap();
        namespace.chmod(&r, "/", 0o755).unwrap();
        namespace.mkdir(&r, "/a", 0o700).unwrap();
        namespace.mkdir(&r, "/a/b", 0o700).unwrap();
        create(&namespace, &r, "/a/b/f", 0o600, true).unwrap();
        for (path, node) in ["/a/b/f", "/a/b", "/a"].into_iter().zip(chain.iter().rev()) {
            namespace.chown(&r, path, Some(node.uid), Some(node.gid)).unwrap();
            namespace.chmod(&r, path, node.mode).unwrap();
        }
        let before = namespace.snapshot();
        let outcome = match op {
            0 => namespace.lookup(&caller, "/a/b/f").map(drop),
            1 => namespace.open(&caller, "/a/b/f", true, false).map(drop),
            2 => namespace.open(&caller, "/a/b/f", false, true).map(drop),
            3 => namespace.readdir(&caller, "/a/b", "").map(drop),
            4 => create(&namespace, &caller, "/a/b/new", 0o644, true).map(drop),
            _ => namespace.remove(&caller, "/a/b/f", false).map(drop),
        };
        let allowed = expected(&caller, chain, op);
        match outcome {
            Ok(()) => proptest::prop_assert!(allowed, "op {op} allowed for {caller:?}"),
            Err(error) => {
                proptest::prop_assert!(!allowed, "op {op} refused for {caller:?}: {error:?}");
                proptest::prop_assert_eq!(error.code, ErrorCode::PermissionDenied);
                proptest::prop_assert!(namespace.snapshot() == before);
            }
        }
    }
}
