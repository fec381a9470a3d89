//! File commands: `ls`, `stat`, `mkdir`, `rm`, `mv`, `put`, `get`, `sync`, `chmod`, `chown`.
//!
//! Each opens a client from the cluster file, does one thing, and prints what it did: for
//! people (sizes as `1.5 MiB`, times as UTC dates), or with `--json` (`ls`, `stat`) as one
//! JSON value with exact bytes and RFC 3339 times. `put` and `get` stream in
//! `COPY_CHUNK_BYTES` pieces so memory stays bounded for any file size, with a progress bar
//! when standard error is a terminal.
//! `put` never writes its target in place: it fills a temporary file in the same directory,
//! flushes it, and renames it over the target, so the target holds the old bytes or all the
//! new ones. New files and directories (`create`, `mkdir`, `put`) take the mode given with
//! `--mode` as it is, else `0666`/`0777` less the caller's umask, as `touch` and `mkdir` would.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::interrupts::interrupted;
use std::time::Instant;

use serde::Serialize;
use tessera_client::umask::{NEW_DIRECTORY_MODE, NEW_FILE_MODE};
use tessera_client::Attr;
use tessera_client::{
    Client, ClientError, ClusterConfig, CreateOptions, ErrorCode, FileKind, ObjectLeft, OpenMode,
};
use tessera_proto::limits::NAME_BYTES_MAX;
use thiserror::Error;

use tessera_cluster::ClusterArg;

use tessera_cluster::outln;
use tessera_cluster::{human, progress};

/// Bytes moved per call by `put` and `get`.
const COPY_CHUNK_BYTES: usize = 8 << 20;

/// A command that takes one path.
#[derive(Debug, clap::Args)]
pub struct PathArgs {
    /// Path in Tessera.
    path: String,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `stat`.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// Path in Tessera.
    path: String,
    /// Print one JSON object (exact bytes, RFC 3339 UTC times and ns).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Directory in Tessera.
    #[arg(default_value = "/")]
    path: String,
    /// Show attributes (computes file sizes).
    #[arg(short, long)]
    long: bool,
    /// Print one JSON array of entries with their attributes (as `-l`, sizes in bytes).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `mkdir`.
#[derive(Debug, clap::Args)]
pub struct MkdirArgs {
    /// Directory to create.
    path: String,
    /// Permission bits, in octal (755 or 0755), stored as given, as `mkdir -m` does.
    /// Default: 777 less the umask.
    #[arg(long)]
    mode: Option<String>,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `mv`.
#[derive(Debug, clap::Args)]
pub struct MvArgs {
    /// Existing path.
    source: String,
    /// New path.
    target: String,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `put`.
#[derive(Debug, clap::Args)]
pub struct PutArgs {
    /// Local file to copy (a regular file or a pipe), or `-` for standard input.
    local: PathBuf,
    /// Destination path in Tessera. An existing file there is replaced at the end, in one
    /// rename, by a new file holding the whole input.
    path: String,
    /// Stripe unit of the new file, in bytes (4096, 64k, 1m).
    #[arg(long, value_parser = tessera_client::layouts::parse_stripe_unit, default_value_t = tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT)]
    stripe_unit: u64,
    /// Unit of the iods' unified caches for the new file (4k to 64k, a power of two); 0
    /// (default): the stripe unit where it is smaller than 64k, else the iods' default.
    #[arg(long, value_parser = tessera_client::layouts::parse_cache_unit, default_value_t = 0)]
    cache_unit: u32,
    /// Permission bits of the new file, in octal (644 or 0644), stored as given. Default:
    /// those of the file it replaces, else 666 less the umask.
    #[arg(long)]
    mode: Option<String>,
    /// Report success without waiting for the iods to flush the data to stable storage.
    #[arg(long)]
    no_sync: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Path of the new file.
    path: String,
    /// Physical layout: `stripe[:UNIT[:SERVERS]]`, `columns:ROW_BYTES[:SERVERS]`,
    /// `rows:ROW_BYTES:ROWS[:SERVERS]` or `blocks:ROW_BYTES:ROWS:P:Q` (see docs/LAYOUTS.md).
    #[arg(long, default_value = "stripe")]
    layout: String,
    /// Permission bits, in octal (644 or 0644), stored as given. Default: 666 less the
    /// umask.
    #[arg(long)]
    mode: Option<String>,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `chmod`.
#[derive(Debug, clap::Args)]
pub struct ChmodArgs {
    /// New permission bits, in octal: 640, 0640, 1777 (sticky), 2750 (setgid).
    mode: String,
    /// Path in Tessera.
    path: String,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `chown`.
#[derive(Debug, clap::Args)]
pub struct ChownArgs {
    /// New owner and group as numbers: `UID`, `UID:GID`, or `:GID` for the group alone.
    owner: String,
    /// Path in Tessera.
    path: String,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Path in Tessera.
    path: String,
    /// Local file to write (a regular file, a pipe, `/dev/null`), or `-` for standard output.
    local: PathBuf,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Why a file command failed: each message names the command and the Tessera path or local
/// file involved.
#[derive(Debug, Error)]
pub enum FilesError {
    /// The cluster file is missing or malformed (`--cluster`, `$TESSERA_CLUSTER`).
    #[error(transparent)]
    Cluster(ClientError),
    /// The client or a server refused a call on `path`.
    #[error("{command} {}: {source}", printable_name(path))]
    Refused {
        /// The command.
        command: &'static str,
        /// The Tessera path.
        path: String,
        /// Why.
        source: ClientError,
    },
    /// A signal (SIGINT, SIGTERM, SIGHUP) ended a `put`; its temporary file is removed.
    #[error("put {path}: interrupted by signal {signal}; nothing was written to {path}")]
    Interrupted {
        /// The target.
        path: String,
        /// The signal's number.
        signal: i32,
    },
    /// Flushing the new file of a `put` failed.
    #[error("put {path}: sync: {source}")]
    Sync {
        /// The target.
        path: String,
        /// Why.
        source: ClientError,
    },
    /// An argument is malformed (a mode, an owner, a layout, a target that names no file), or
    /// the target is a directory where a file is needed.
    #[error("{command} {path}: {detail}")]
    Argument {
        /// The command.
        command: &'static str,
        /// The Tessera path.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// A local file could not be opened, read or written.
    #[error("{command}: {doing} {local}: {source}")]
    Local {
        /// The command.
        command: &'static str,
        /// What failed ("cannot read", "writing", ...).
        doing: &'static str,
        /// The local file ("stdout" for standard output).
        local: String,
        /// Why.
        source: std::io::Error,
    },
    /// The source of a `put` is neither a regular file nor a pipe.
    #[error("put: {local} {why}")]
    NotAFile {
        /// The local file.
        local: String,
        /// What it is instead.
        why: &'static str,
    },
    /// The JSON output could not be made.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// A `mode` that is not octal permission bits.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("mode {0:?} is not octal permission bits (0 to 7777, e.g. 640 or 0640)")]
pub struct BadMode(String);

/// An owner that is not `UID`, `UID:GID` or `:GID` in numbers.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BadOwner {
    /// A part is not a number, or is the reserved "unchanged" id.
    #[error("{what} {part:?} in {text:?} is not a number below {max} (names are not looked up)", max = tessera_proto::CHOWN_UNCHANGED)]
    NotANumber {
        /// "uid" or "gid".
        what: &'static str,
        /// The part.
        part: String,
        /// The whole owner.
        text: String,
    },
    /// Neither part is given.
    #[error("owner {0:?} names neither a uid nor a gid (UID[:GID] or :GID)")]
    Neither(String),
}

fn refused(command: &'static str, path: &str) -> impl FnOnce(ClientError) -> FilesError {
    let path = path.to_owned();
    move |source| FilesError::Refused {
        command,
        path,
        source,
    }
}

fn argument(command: &'static str, path: &str) -> impl FnOnce(String) -> FilesError {
    let path = path.to_owned();
    move |detail| FilesError::Argument {
        command,
        path,
        detail,
    }
}

/// Opens a client of the cluster named by `--cluster` or `$TESSERA_CLUSTER`.
pub fn client(arg: &ClusterArg) -> Result<Client, FilesError> {
    let config = match &arg.cluster {
        Some(path) => ClusterConfig::load(path),
        None => ClusterConfig::from_env(),
    }
    .map_err(FilesError::Cluster)?;
    Ok(Client::new(
        &config,
        &tessera_client::ClientOptions::default(),
    ))
}

/// Parses permission bits written in octal (`640`, `0640`), at most `0o7777`.
/// The mode a new file or directory gets: `given` as it is (as `mkdir -m` and `install -m`
/// take theirs), else `default` less the caller's umask (as `mkdir` and `touch` do).
fn mode_or_umasked(given: Option<&str>, default: u32) -> Result<u32, BadMode> {
    given.map_or_else(|| Ok(tessera_client::umask::apply(default)), parse_mode)
}

fn parse_mode(text: &str) -> Result<u32, BadMode> {
    let digits_ok = !text.is_empty() && text.bytes().all(|byte| (b'0'..=b'7').contains(&byte));
    match u32::from_str_radix(text, 8) {
        Ok(mode) if digits_ok && mode <= 0o7777 => Ok(mode),
        _ => Err(BadMode(text.to_owned())),
    }
}

/// Parses `UID`, `UID:GID` or `:GID` (numbers) into the ids to set.
fn parse_owner(text: &str) -> Result<(Option<u32>, Option<u32>), BadOwner> {
    let id = |part: &str, what: &'static str| -> Result<Option<u32>, BadOwner> {
        if part.is_empty() {
            return Ok(None);
        }
        match part.parse::<u32>() {
            Ok(id) if id != tessera_proto::CHOWN_UNCHANGED => Ok(Some(id)),
            _ => Err(BadOwner::NotANumber {
                what,
                part: part.to_owned(),
                text: text.to_owned(),
            }),
        }
    };
    let (uid, gid) = match text.split_once(':') {
        Some((uid, gid)) => (id(uid, "uid")?, id(gid, "gid")?),
        None => (id(text, "uid")?, None),
    };
    if uid.is_none() && gid.is_none() {
        return Err(BadOwner::Neither(text.to_owned()));
    }
    Ok((uid, gid))
}

/// A name as `ls` prints it: control characters (stored by an older mds, which accepted
/// them) are escaped, so a name cannot break the listing into lines or drive the terminal.
fn printable_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn mib_s(bytes: u64, started: Instant) -> f64 {
    let mib = bytes as f64 / f64::from(1u32 << 20);
    mib / started.elapsed().as_secs_f64().max(1e-9)
}

/// A path's attributes as `stat --json` and `ls --json` write them: exact bytes, times as
/// RFC 3339 UTC and as ns since the epoch. The field names are stable.
#[derive(Debug, Serialize)]
struct AttrJson {
    path: String,
    kind: &'static str,
    /// `None` when it could not be computed (`size_error` says why).
    size_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size_error: Option<String>,
    /// Permission bits as a number, and in octal as `ls` shows them.
    mode: u32,
    mode_octal: String,
    uid: u32,
    gid: u32,
    handle: u64,
    nlink: u32,
    atime: String,
    atime_ns: u64,
    mtime: String,
    mtime_ns: u64,
    ctime: String,
    ctime_ns: u64,
    /// The layout as `stat` describes it; `None` for a directory.
    layout: Option<String>,
}

impl AttrJson {
    fn new(path: String, attr: &Attr, size: Result<u64, ClientError>) -> Self {
        let (size_bytes, size_error) = match size {
            Ok(bytes) => (Some(bytes), None),
            Err(why) => (None, Some(why.to_string())),
        };
        Self {
            path,
            kind: kind_name(attr.kind),
            size_bytes,
            size_error,
            mode: attr.mode,
            mode_octal: format!("{:04o}", attr.mode),
            uid: attr.uid,
            gid: attr.gid,
            handle: attr.handle,
            nlink: attr.nlink,
            atime: human::rfc3339(attr.atime_ns),
            atime_ns: attr.atime_ns,
            mtime: human::rfc3339(attr.mtime_ns),
            mtime_ns: attr.mtime_ns,
            ctime: human::rfc3339(attr.ctime_ns),
            ctime_ns: attr.ctime_ns,
            layout: attr.layout.as_ref().map(tessera_proto::Layout::describe),
        }
    }
}

/// One entry of `ls --json`.
#[derive(Debug, Serialize)]
struct EntryJson {
    name: String,
    #[serde(flatten)]
    attr: AttrJson,
}

fn kind_name(kind: FileKind) -> &'static str {
    if kind == FileKind::Directory {
        "directory"
    } else {
        "file"
    }
}

/// Prints `value` as pretty JSON on standard output.
pub fn print_json(value: &impl Serialize) -> Result<(), serde_json::Error> {
    let text = serde_json::to_string_pretty(value)?;
    outln!("{text}");
    Ok(())
}

/// `tessera ls`. With `-l` (or `--json`), an entry whose size cannot be computed (an iod
/// down, an object missing) is still listed, with `?` for its size (`null` and a
/// `size_error` in JSON) and a warning naming the reason; an entry removed while listing is
/// left out.
pub fn ls(args: &LsArgs) -> Result<(), FilesError> {
    let client = client(&args.cluster)?;
    let entries = client
        .readdir(&args.path)
        .map_err(refused("ls", &args.path))?;
    let mut listed = Vec::new();
    for entry in entries {
        let suffix = if entry.kind == FileKind::Directory {
            "/"
        } else {
            ""
        };
        if !(args.long || args.json) {
            outln!("{}{suffix}", printable_name(&entry.name));
            continue;
        }
        let full = format!("{}/{}", args.path.trim_end_matches('/'), entry.name);
        let (attr, size) = match client.stat(&full) {
            Ok(attr) => (attr.clone(), Ok(attr.size)),
            Err(stat_error) => match client.lookup(&full) {
                // The name resolves but its size does not: list it, size unknown.
                Ok(attr) => {
                    eprintln!("tessera: warning: ls {full}: size unknown: {stat_error}");
                    (attr, Err(stat_error))
                }
                Err(err) if err.code() == Some(ErrorCode::NotFound) => continue,
                Err(err) => return Err(refused("ls", &full)(err)),
            },
        };
        if args.json {
            listed.push(EntryJson {
                name: entry.name,
                attr: AttrJson::new(full, &attr, size),
            });
            continue;
        }
        outln!(
            "{:04o} {:>6} {:>6} {:>9} {}{suffix}",
            attr.mode,
            attr.uid,
            attr.gid,
            size.map_or_else(|_| "?".to_owned(), human::size),
            printable_name(&entry.name)
        );
    }
    if args.json {
        print_json(&listed)?;
    }
    Ok(())
}

/// `tessera stat`.
pub fn stat(args: &StatArgs) -> Result<(), FilesError> {
    let client = client(&args.cluster)?;
    let attr = client
        .stat(&args.path)
        .map_err(refused("stat", &args.path))?;
    if args.json {
        return Ok(print_json(&AttrJson::new(
            args.path.clone(),
            &attr,
            Ok(attr.size),
        ))?);
    }
    outln!("path:    {}", args.path);
    outln!("kind:    {}", kind_name(attr.kind));
    outln!("size:    {} ({} bytes)", human::size(attr.size), attr.size);
    outln!("mode:    {:04o}", attr.mode);
    outln!("owner:   {}:{}", attr.uid, attr.gid);
    outln!("handle:  {:#x}", attr.handle);
    outln!("nlink:   {}", attr.nlink);
    outln!("mtime:   {}", human::utc_time(attr.mtime_ns));
    if let Some(layout) = attr.layout {
        outln!("layout:  {}", layout.describe());
    }
    Ok(())
}

/// `tessera create`: an empty file with the given layout; fails if the name exists.
pub fn create(args: &CreateArgs) -> Result<(), FilesError> {
    let client = client(&args.cluster)?;
    let servers = u16::try_from(client.server_count()).unwrap_or(u16::MAX);
    let mut options = tessera_client::layouts::parse(&args.layout, servers)
        .map_err(argument("create", &args.path))?;
    options.mode = mode_or_umasked(args.mode.as_deref(), NEW_FILE_MODE)
        .map_err(|why| argument("create", &args.path)(why.to_string()))?;
    options.exclusive = true;
    let file = client
        .create(&args.path, &options)
        .map_err(refused("create", &args.path))?;
    outln!("{}: {}", args.path, file.layout().describe());
    Ok(())
}

/// `tessera mkdir`.
pub fn mkdir(args: &MkdirArgs) -> Result<(), FilesError> {
    let mode = mode_or_umasked(args.mode.as_deref(), NEW_DIRECTORY_MODE)
        .map_err(|why| argument("mkdir", &args.path)(why.to_string()))?;
    client(&args.cluster)?
        .mkdir(&args.path, mode)
        .map_err(refused("mkdir", &args.path))?;
    Ok(())
}

/// `tessera rm`: a file, or an empty directory. The kind comes from the namespace alone
/// (no iod is asked), so a file whose iod is down or whose object is missing is removed
/// too; each object left behind is named in a warning, and the command still succeeds
/// (the iod's next orphan sweep removes what is left).
pub fn rm(args: &PathArgs) -> Result<(), FilesError> {
    let client = client(&args.cluster)?;
    let attr = client
        .lookup(&args.path)
        .map_err(refused("rm", &args.path))?;
    if attr.kind == FileKind::Directory {
        return client.rmdir(&args.path).map_err(refused("rm", &args.path));
    }
    let left = client
        .unlink_reporting(&args.path)
        .map_err(refused("rm", &args.path))?;
    for object in left {
        eprintln!(
            "tessera: warning: rm {}: {}",
            args.path,
            describe_left(&object)
        );
    }
    Ok(())
}

/// One line on an object an unlink could not remove.
fn describe_left(object: &ObjectLeft) -> String {
    let server = object.server;
    match object.error.code {
        ErrorCode::UnknownHandle => {
            format!(
                "iod {server} had no object for it (already missing): {}",
                object.error.message
            )
        }
        _ => format!(
            "object left behind on iod {server} (removed at that iod's next start): {}",
            object.error.message
        ),
    }
}

/// `tessera mv`.
pub fn mv(args: &MvArgs) -> Result<(), FilesError> {
    client(&args.cluster)?
        .rename(&args.source, &args.target)
        .map_err(refused("mv", &args.source))
}

/// `tessera chmod`.
pub fn chmod(args: &ChmodArgs) -> Result<(), FilesError> {
    let mode =
        parse_mode(&args.mode).map_err(|why| argument("chmod", &args.path)(why.to_string()))?;
    client(&args.cluster)?
        .chmod(&args.path, mode)
        .map_err(refused("chmod", &args.path))?;
    Ok(())
}

/// `tessera chown`.
pub fn chown(args: &ChownArgs) -> Result<(), FilesError> {
    let (uid, gid) =
        parse_owner(&args.owner).map_err(|why| argument("chown", &args.path)(why.to_string()))?;
    client(&args.cluster)?
        .chown(&args.path, uid, gid)
        .map_err(refused("chown", &args.path))?;
    Ok(())
}

/// Whether standard input was closed when the process started (`tessera put - F <&-`). Rust's
/// runtime puts `/dev/null` on a closed standard descriptor before `main`, so `put -` would
/// read nothing and replace `F` with an empty file; this is set before that, by
/// [`note_closed_stdin`] from `.init_array`.
static STDIN_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

extern "C" fn note_closed_stdin() {
    // SAFETY: `fcntl(F_GETFD)` only asks whether descriptor 0 is open; it touches no memory.
    let closed = unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_GETFD) } == -1;
    STDIN_CLOSED_AT_START.store(closed, Ordering::Relaxed);
}

/// Runs [`note_closed_stdin`] before `main`, as the C runtime runs every `.init_array` entry
/// before the Rust runtime starts.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDIN: extern "C" fn() = note_closed_stdin;

/// `-`: standard input for `put`, standard output for `get`.
fn is_standard_stream(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Opens the source of a `put`: standard input, or a local regular file or pipe. Checked
/// before anything in Tessera is touched. Also returns the size of a regular file (for the
/// progress bar).
fn open_source(local: &Path) -> Result<(Box<dyn Read>, Option<u64>), FilesError> {
    if is_standard_stream(local) {
        if STDIN_CLOSED_AT_START.load(Ordering::Relaxed) {
            // As `cat <&-` fails: an empty input would quietly replace the target.
            return Err(FilesError::Local {
                command: "put",
                doing: "cannot read",
                local: "stdin".to_owned(),
                source: std::io::Error::from_raw_os_error(libc::EBADF),
            });
        }
        return Ok((Box::new(std::io::stdin().lock()), None));
    }
    let shown = local.display().to_string();
    let unreadable = |source| FilesError::Local {
        command: "put",
        doing: "cannot read",
        local: shown.clone(),
        source,
    };
    let metadata = fs::metadata(local).map_err(unreadable)?;
    let kind = metadata.file_type();
    if kind.is_dir() {
        return Err(FilesError::NotAFile {
            local: shown,
            why: "is a directory; put copies one file",
        });
    }
    if !kind.is_file() && !kind.is_fifo() {
        return Err(FilesError::NotAFile {
            local: shown,
            why: "is not a regular file or a pipe",
        });
    }
    let file = fs::File::open(local).map_err(unreadable)?;
    Ok((Box::new(file), kind.is_file().then_some(metadata.len())))
}

/// Fills `buffer` from `source` as far as it goes; returns how many bytes it holds (fewer
/// than its length only at the end of the input).
fn fill(
    source: &mut dyn Read,
    buffer: &mut [u8],
    local: &Path,
    target: &str,
) -> Result<usize, FilesError> {
    let mut filled = 0;
    while filled < buffer.len() {
        match source.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {
                if let Some(signal) = interrupted() {
                    return Err(FilesError::Interrupted {
                        path: target.to_owned(),
                        signal,
                    });
                }
            }
            Err(source) => {
                return Err(FilesError::Local {
                    command: "put",
                    doing: "reading",
                    local: local.display().to_string(),
                    source,
                })
            }
        }
    }
    Ok(filled)
}

/// Splits a Tessera path into its parent directory (with its trailing `/`) and its last name.
fn split_target(path: &str) -> Option<(&str, &str)> {
    let trimmed = path.trim_end_matches('/');
    let slash = trimmed.rfind('/')?;
    let name = &trimmed[slash + 1..];
    (!name.is_empty()).then(|| (&trimmed[..=slash], name))
}

/// A random number for temporary names, from the kernel (the clock if that fails).
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`, which we own.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(got) == Ok(bytes.len()) {
        u64::from_ne_bytes(bytes)
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the low bits are the random ones"
        )]
        let low = nanos as u64;
        low
    }
}

/// The temporary name a put writes before it renames over `parent``name`:
/// `.NAME.put-PID-RANDOM` in the same directory, with `NAME` shortened (on a character
/// boundary) so that the whole stays within `NAME_BYTES_MAX`.
fn temporary_path(parent: &str, name: &str, random: u64) -> String {
    let suffix = format!(".put-{}-{random:016x}", std::process::id());
    let room = NAME_BYTES_MAX - 1 - suffix.len();
    let mut end = name.len().min(room);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{parent}.{}{suffix}", &name[..end])
}

/// A put's temporary file: removed when dropped unless the rename over the target took it.
struct Temporary<'a> {
    client: &'a Client,
    path: String,
    renamed: bool,
}

impl Drop for Temporary<'_> {
    fn drop(&mut self) {
        if !self.renamed {
            if let Err(err) = self.client.unlink(&self.path) {
                eprintln!(
                    "tessera: put: cannot remove the temporary {}: {err}",
                    self.path
                );
            }
        }
    }
}

/// `tessera put`: checks and reads the source first, writes a temporary file beside the
/// target, flushes it (unless `--no-sync`), then renames it over the target. A failed put
/// leaves the target as it was and removes its temporary file; of two puts to one path, the
/// later rename wins whole.
pub fn put(args: &PutArgs) -> Result<(), FilesError> {
    let result = put_through_temporary(args);
    if let Some(signal) = interrupted() {
        // The temporary file is gone (dropped above): say why, then die of the signal, as
        // the caller (a shell, a job's time limit) expects.
        let error = FilesError::Interrupted {
            path: args.path.clone(),
            signal,
        };
        eprintln!("tessera: {error}");
        crate::interrupts::die_of(signal);
    }
    result
}

fn put_through_temporary(args: &PutArgs) -> Result<(), FilesError> {
    let mode = args
        .mode
        .as_deref()
        .map(parse_mode)
        .transpose()
        .map_err(|why| argument("put", &args.path)(why.to_string()))?;
    let Some((parent, name)) = split_target(&args.path) else {
        return Err(argument("put", &args.path)(
            "the target names no file (an absolute path such as /dir/name)".to_owned(),
        ));
    };
    if args.path.ends_with('/') {
        // As `cp FILE dir/` fails when `dir` is not a directory: never a file called `dir`.
        return Err(argument("put", &args.path)(
            "not a directory: a path ending in '/' names a directory, not a file".to_owned(),
        ));
    }
    let (mut source, source_bytes) = open_source(&args.local)?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    // The first chunk is read before Tessera is touched: a source that cannot be read fails
    // here, with nothing made.
    let mut filled = fill(&mut *source, &mut buffer, &args.local, &args.path)?;
    let client = client(&args.cluster)?;
    let started = Instant::now();
    let replaced = match client.lookup(&args.path) {
        Ok(attr) if attr.kind == FileKind::Directory => {
            return Err(argument("put", &args.path)("is a directory".to_owned()));
        }
        Ok(attr) => Some(attr),
        Err(err) if err.code() == Some(ErrorCode::NotFound) => None,
        Err(err) => return Err(refused("put", &args.path)(err)),
    };
    let mode = mode
        .or(replaced.as_ref().map(|attr| attr.mode & 0o7777))
        .unwrap_or_else(|| tessera_client::umask::apply(NEW_FILE_MODE));
    let options = CreateOptions {
        stripe_unit_bytes: args.stripe_unit,
        cache_unit_bytes: args.cache_unit,
        mode,
        exclusive: true,
        ..CreateOptions::default()
    };
    // From here a signal is caught, so the temporary file is removed before the process ends.
    crate::interrupts::catch();
    let mut temporary = Temporary {
        client: &client,
        path: temporary_path(parent, name, random_u64()),
        renamed: false,
    };
    let file = match client.create(&temporary.path, &options) {
        Ok(file) => file,
        Err(err) => {
            // Nothing was made (an exclusive create that failed), so nothing to remove. The
            // server's message names the temporary file: the user is told of the directory.
            temporary.renamed = true;
            let why = match err.code() {
                Some(ErrorCode::NotFound) => format!("no such directory: {parent}"),
                Some(ErrorCode::NotDirectory) => format!("not a directory on the way to {parent}"),
                Some(ErrorCode::PermissionDenied) => {
                    format!("permission denied: cannot create a file in {parent}")
                }
                _ => return Err(refused("put", &args.path)(err)),
            };
            return Err(argument("put", &args.path)(why));
        }
    };
    let mut offset = 0u64;
    let mut requests = 0;
    let bar = progress::copy(source_bytes, &format!("put {}", args.path));
    while filled > 0 {
        if let Some(signal) = interrupted() {
            bar.finish_and_clear();
            return Err(FilesError::Interrupted {
                path: args.path.clone(),
                signal,
            });
        }
        let report = file
            .write_at(offset, &buffer[..filled])
            .map_err(refused("put", &args.path))?;
        requests += report.requests;
        offset += filled as u64;
        bar.set_position(offset);
        filled = fill(&mut *source, &mut buffer, &args.local, &args.path)?;
    }
    bar.finish_and_clear();
    if !args.no_sync {
        file.sync().map_err(|source| FilesError::Sync {
            path: args.path.clone(),
            source,
        })?;
    }
    if let Some(signal) = interrupted() {
        return Err(FilesError::Interrupted {
            path: args.path.clone(),
            signal,
        });
    }
    client
        .rename(&temporary.path, &args.path)
        .map_err(refused("put", &args.path))?;
    temporary.renamed = true;
    let source_name = if is_standard_stream(&args.local) {
        "stdin".to_owned()
    } else {
        args.local.display().to_string()
    };
    outln!(
        "put {source_name} -> {}: {offset} bytes ({}), {requests} requests, {}, {:.1} MiB/s{}",
        args.path,
        human::size(offset),
        human::duration(started.elapsed()),
        mib_s(offset, started),
        if args.no_sync { " (not synced)" } else { "" }
    );
    Ok(())
}

/// Where `get` writes: standard output, or a local file.
enum Sink {
    Stdout(std::io::StdoutLock<'static>),
    File(fs::File),
}

impl Sink {
    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Stdout(out) => out.write_all(data),
            Self::File(file) => file.write_all(data),
        }
    }

    /// Flushes to the reader, and a regular file to stable storage (a pipe or a device such
    /// as `/dev/null` has nothing to sync).
    fn finish(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(out) => out.flush(),
            Self::File(file) if file.metadata()?.is_file() => file.sync_all(),
            Self::File(_) => Ok(()),
        }
    }
}

/// `tessera get`: the local file is opened only once the Tessera file is open and its size
/// known. A reader of standard output that goes away ends the command quietly.
pub fn get(args: &GetArgs) -> Result<(), FilesError> {
    let client = client(&args.cluster)?;
    let started = Instant::now();
    let file = client
        .open(&args.path, OpenMode::ReadOnly)
        .map_err(refused("get", &args.path))?;
    let size = file.stat().map_err(refused("get", &args.path))?.size;
    let to_stdout = is_standard_stream(&args.local);
    let target = if to_stdout {
        "stdout".to_owned()
    } else {
        args.local.display().to_string()
    };
    let mut sink = if to_stdout {
        Sink::Stdout(std::io::stdout().lock())
    } else {
        Sink::File(
            fs::File::create(&args.local).map_err(|source| FilesError::Local {
                command: "get",
                doing: "cannot write",
                local: target.clone(),
                source,
            })?,
        )
    };
    let written = |source: std::io::Error| {
        tessera_cluster::output::closed_stdout(&source);
        FilesError::Local {
            command: "get",
            doing: "writing",
            local: target.clone(),
            source,
        }
    };
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let mut offset = 0u64;
    let mut requests = 0;
    let bar = progress::copy(Some(size), &format!("get {}", args.path));
    while offset < size {
        let length = usize::try_from((size - offset).min(COPY_CHUNK_BYTES as u64))
            .expect("chunk fits usize");
        let report = file
            .read_at(offset, &mut buffer[..length])
            .map_err(refused("get", &args.path))?;
        requests += report.requests;
        sink.write_all(&buffer[..length]).map_err(written)?;
        offset += length as u64;
        bar.set_position(offset);
    }
    sink.finish().map_err(written)?;
    bar.finish_and_clear();
    let summary = format!(
        "get {} -> {target}: {size} bytes ({}), {requests} requests, {}, {:.1} MiB/s",
        args.path,
        human::size(size),
        human::duration(started.elapsed()),
        mib_s(size, started)
    );
    if to_stdout {
        // Standard output carries the data.
        eprintln!("{summary}");
    } else {
        outln!("{summary}");
    }
    Ok(())
}

/// `tessera sync`: flushes a file's data on every iod that holds it to stable storage. Any
/// right to the file is enough, as for `fsync(2)` on a file opened for reading.
pub fn sync(args: &PathArgs) -> Result<(), FilesError> {
    let client = client(&args.cluster)?;
    let file = client
        .open(&args.path, OpenMode::ReadOnly)
        .map_err(refused("sync", &args.path))?;
    file.sync().map_err(refused("sync", &args.path))?;
    outln!(
        "sync {}: flushed on {} servers",
        args.path,
        file.layout().servers().len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_up_to_7777() {
        assert_eq!(parse_mode("640"), Ok(0o640));
        assert_eq!(parse_mode("0640"), Ok(0o640));
        assert_eq!(parse_mode("1777"), Ok(0o1777));
        for bad in ["", "8", "64a", "-1", "+7", "17777", "0o640"] {
            let error = parse_mode(bad).unwrap_err().to_string();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn put_targets_and_temporary_names() {
        assert_eq!(split_target("/a/b"), Some(("/a/", "b")));
        assert_eq!(split_target("/b/"), Some(("/", "b")));
        assert_eq!(split_target("/"), None);
        assert_eq!(split_target("b"), None);
        let temporary = temporary_path("/a/", "b", 0xab);
        assert_eq!(
            temporary,
            format!("/a/.b.put-{}-{:016x}", std::process::id(), 0xab)
        );
        // A long name (here of two-byte characters) is shortened on a character boundary.
        let long = "\u{e9}".repeat(NAME_BYTES_MAX / 2);
        let temporary = temporary_path("/", &long, 1);
        let name = temporary.strip_prefix('/').unwrap();
        assert!(name.len() <= NAME_BYTES_MAX, "{}", name.len());
        assert!(name.starts_with(".\u{e9}\u{e9}"));
        assert_eq!(printable_name("a\nb\u{1b}[0m"), "a\\nb\\u{1b}[0m");
    }

    #[test]
    fn owners_are_numbers() {
        assert_eq!(parse_owner("1000"), Ok((Some(1000), None)));
        assert_eq!(parse_owner("1000:100"), Ok((Some(1000), Some(100))));
        assert_eq!(parse_owner(":100"), Ok((None, Some(100))));
        assert_eq!(parse_owner("1000:"), Ok((Some(1000), None)));
        assert!(parse_owner("alice")
            .unwrap_err()
            .to_string()
            .contains("\"alice\""));
        assert!(parse_owner(":")
            .unwrap_err()
            .to_string()
            .contains("neither"));
        assert!(parse_owner("4294967295").is_err());
        assert!(parse_owner("1:2:3").is_err());
    }
}
