//! Unit tests of the namespace: operations, restarts, renames, names, paging.

use super::*;

fn user() -> Caller {
    Caller::new(1000, 100)
}

/// Opens the store at `db` with its root directory handed to [`user`].
fn open_owned(db: &Path, servers: u16) -> Namespace {
    let namespace = Namespace::open_store(db, servers, 65536).unwrap();
    namespace
        .chown(&Caller::root(), "/", Some(1000), Some(100))
        .unwrap();
    namespace
}

fn create(namespace: &Namespace, path: &str) -> u64 {
    match namespace
        .plan_create(
            &user(),
            &Create {
                path: path.to_owned(),
                mode: 0o644,
                exclusive: true,
                ..Create::default()
            },
        )
        .unwrap()
    {
        CreatePlan::New(handle, inode) => {
            namespace
                .commit_create(&user(), path, handle, &inode, true)
                .unwrap()
                .0
        }
        CreatePlan::Existing(..) => panic!("{path} exists"),
    }
}

#[test]
fn namespace_operations_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("meta.redb");
    let file;
    let namespace_id;
    {
        let namespace = open_owned(&db, 4);
        namespace_id = namespace.namespace_id();
        assert_ne!(namespace_id, 0);
        namespace.mkdir(&user(), "/a", 0o755).unwrap();
        file = create(&namespace, "/a/f");
        let (_, inode) = namespace.lookup(&Caller::root(), "/a/f").unwrap();
        assert_eq!(inode.servers.len(), 4);
        assert_eq!(inode.uid, 1000);
        assert_eq!(namespace.lookup(&Caller::root(), "/a").unwrap().1.nlink, 2);
        assert_eq!(namespace.lookup(&Caller::root(), "/").unwrap().1.nlink, 3);
        assert_eq!(
            namespace
                .remove(&Caller::root(), "/a", true)
                .unwrap_err()
                .code,
            ErrorCode::NotEmpty
        );
        assert_eq!(
            namespace.mkdir(&user(), "/a/f/x", 0o755).unwrap_err().code,
            ErrorCode::NotDirectory
        );
        assert_eq!(
            namespace.mkdir(&user(), "/b", 0o17777).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        namespace.rename(&Caller::root(), "/a/f", "/g").unwrap();
        assert_eq!(
            namespace.lookup(&Caller::root(), "/a/f").unwrap_err().code,
            ErrorCode::NotFound
        );
    }
    let namespace = Namespace::open_store(&db, 4, 65536).unwrap();
    assert_eq!(namespace.lookup(&Caller::root(), "/g").unwrap().0, file);
    // The namespace keeps its id; another store has another.
    assert_eq!(namespace.namespace_id(), namespace_id);
    let other = Namespace::open_store(&dir.path().join("other.redb"), 4, 65536).unwrap();
    assert_ne!(other.namespace_id(), namespace_id);
    let listing = namespace.readdir(&Caller::root(), "/", "").unwrap();
    let names: Vec<_> = listing
        .entries
        .iter()
        .map(|entry| entry.name.as_str())
        .collect();
    assert_eq!(names, ["a", "g"]);
    assert!(
        create(&namespace, "/h") > file,
        "handles are not reused after a restart"
    );
    assert_eq!(
        namespace.remove(&Caller::root(), "/g", false).unwrap().0,
        file
    );
    namespace.remove(&Caller::root(), "/a", true).unwrap();
    assert_eq!(namespace.inode_count().unwrap(), 2);
    drop(namespace);
    let err = Namespace::open_store(&db, 3, 65536).unwrap_err();
    assert!(err.message.contains("--servers 4"), "{}", err.message);
}

/// A truncate or stat racing an unlink finds the handle gone: `UnknownHandle`, which the
/// handler turns into `NotFound` for the path (never `Internal`).
#[test]
fn a_removed_file_s_handle_is_unknown_to_get_and_touch() {
    let dir = tempfile::tempdir().unwrap();
    let namespace = open_owned(&dir.path().join("m.redb"), 1);
    let file = create(&namespace, "/f");
    assert!(namespace.touch(file).is_ok());
    namespace.remove(&Caller::root(), "/f", false).unwrap();
    assert_eq!(
        namespace.get(file).unwrap_err().code,
        ErrorCode::UnknownHandle
    );
    let error = namespace.touch(file).unwrap_err();
    assert_eq!(error.code, ErrorCode::UnknownHandle, "{}", error.message);
}

#[test]
fn rename_refuses_moving_a_directory_into_itself() {
    let dir = tempfile::tempdir().unwrap();
    let namespace = open_owned(&dir.path().join("m.redb"), 1);
    namespace.mkdir(&user(), "/d", 0o755).unwrap();
    namespace.mkdir(&user(), "/d/e", 0o755).unwrap();
    assert_eq!(
        namespace
            .rename(&Caller::root(), "/d", "/d/e/x")
            .unwrap_err()
            .code,
        ErrorCode::InvalidArgument
    );
    namespace.rename(&Caller::root(), "/d/e", "/e").unwrap();
    assert_eq!(namespace.lookup(&Caller::root(), "/").unwrap().1.nlink, 4);
    assert_eq!(namespace.lookup(&Caller::root(), "/d").unwrap().1.nlink, 2);
}

#[test]
fn new_names_with_control_characters_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let namespace = open_owned(&dir.path().join("m.redb"), 1);
    namespace.mkdir(&user(), "/d", 0o755).unwrap();
    create(&namespace, "/d/plain");
    let create_plan = |path: &str| {
        namespace.plan_create(
            &user(),
            &Create {
                path: path.to_owned(),
                mode: 0o644,
                exclusive: true,
                ..Create::default()
            },
        )
    };
    let CreatePlan::New(handle, inode) = create_plan("/d/template").unwrap() else {
        panic!("/d/template exists");
    };
    for bad in ["a\nb", "\u{1b}[31mred", "tab\there", "del\u{7f}", "\u{1}"] {
        let path = format!("/d/{bad}");
        let Err(refused) = create_plan(&path) else {
            panic!("create of {path:?} was planned");
        };
        let errors = [
            namespace.mkdir(&user(), &path, 0o755).unwrap_err(),
            refused,
            namespace
                .commit_create(&user(), &path, handle, &inode, false)
                .unwrap_err(),
            namespace.rename(&user(), "/d/plain", &path).unwrap_err(),
        ];
        for error in errors {
            assert_eq!(error.code, ErrorCode::InvalidArgument, "{}", error.message);
            assert!(
                error.message.contains(&bad.escape_debug().to_string()),
                "{}",
                error.message
            );
            assert!(
                !error.message.contains(bad),
                "raw name in {}",
                error.message
            );
        }
    }
    // Nothing was made, and the moved file is where it was.
    let names: Vec<String> = namespace
        .readdir(&Caller::root(), "/d", "")
        .unwrap()
        .entries
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    assert_eq!(names, ["plain"]);
    // Printable non-ASCII names stay allowed.
    namespace
        .mkdir(&user(), "/d/caf\u{e9} \u{2603}", 0o755)
        .unwrap();
}

#[test]
fn readdir_pages_through_large_directories() {
    let dir = tempfile::tempdir().unwrap();
    let namespace = open_owned(&dir.path().join("m.redb"), 1);
    let total = READDIR_ENTRIES_MAX as usize + 5;
    for i in 0..total {
        namespace
            .mkdir(&user(), &format!("/d{i:05}"), 0o755)
            .unwrap();
    }
    let first = namespace.readdir(&Caller::root(), "/", "").unwrap();
    assert!(first.more);
    assert_eq!(first.entries.len(), READDIR_ENTRIES_MAX as usize);
    let second = namespace
        .readdir(&Caller::root(), "/", &first.entries.last().unwrap().name)
        .unwrap();
    assert!(!second.more);
    assert_eq!(second.entries.len(), 5);
}
