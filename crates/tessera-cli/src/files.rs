//! File commands: `ls`, `stat`, `mkdir`, `rm`, `mv`, `put`, `get`, `chmod`, `chown`.
//!
//! Each opens a client from the cluster file, does one thing, and prints what it did. `put`
//! and `get` stream in `COPY_CHUNK_BYTES` pieces so memory stays bounded for any file size.

use std::fs;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use tessera_client::{
    Client, ClientError, ClusterConfig, CreateOptions, ErrorCode, FileKind, ObjectLeft, OpenMode,
};

use crate::ClusterArg;

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

/// Arguments of `ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Directory in Tessera.
    #[arg(default_value = "/")]
    path: String,
    /// Show attributes (computes file sizes).
    #[arg(short, long)]
    long: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `mkdir`.
#[derive(Debug, clap::Args)]
pub struct MkdirArgs {
    /// Directory to create.
    path: String,
    /// Permission bits, in octal (755 or 0755; stored as given, no umask).
    #[arg(long, default_value = "755")]
    mode: String,
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
    /// Local file to copy.
    local: PathBuf,
    /// Destination path in Tessera (replaced if it exists).
    path: String,
    /// Stripe unit of a new file, in bytes.
    #[arg(long, default_value_t = tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT)]
    stripe_unit: u64,
    /// Permission bits of a new file, in octal (644 or 0644; no umask). An existing file
    /// keeps its own.
    #[arg(long, default_value = "644")]
    mode: String,
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
    /// Permission bits, in octal (644 or 0644; stored as given, no umask).
    #[arg(long, default_value = "644")]
    mode: String,
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
    /// Local file to write.
    local: PathBuf,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Opens a client of the cluster named by `--cluster` or `$TESSERA_CLUSTER`.
pub fn client(arg: &ClusterArg) -> Result<Client, String> {
    let config = match &arg.cluster {
        Some(path) => ClusterConfig::load(path),
        None => ClusterConfig::from_env(),
    }
    .map_err(|err| err.to_string())?;
    Ok(Client::new(
        &config,
        &tessera_client::ClientOptions::default(),
    ))
}

/// Parses permission bits written in octal (`640`, `0640`), at most `0o7777`.
fn parse_mode(text: &str) -> Result<u32, String> {
    let digits_ok = !text.is_empty() && text.bytes().all(|byte| (b'0'..=b'7').contains(&byte));
    match u32::from_str_radix(text, 8) {
        Ok(mode) if digits_ok && mode <= 0o7777 => Ok(mode),
        _ => Err(format!(
            "mode {text:?} is not octal permission bits (0 to 7777, e.g. 640 or 0640)"
        )),
    }
}

/// Parses `UID`, `UID:GID` or `:GID` (numbers) into the ids to set.
fn parse_owner(text: &str) -> Result<(Option<u32>, Option<u32>), String> {
    let id = |part: &str, what: &str| -> Result<Option<u32>, String> {
        if part.is_empty() {
            return Ok(None);
        }
        match part.parse::<u32>() {
            Ok(id) if id != tessera_proto::CHOWN_UNCHANGED => Ok(Some(id)),
            _ => Err(format!(
                "{what} {part:?} in {text:?} is not a number below {} (names are not looked up)",
                tessera_proto::CHOWN_UNCHANGED
            )),
        }
    };
    let (uid, gid) = match text.split_once(':') {
        Some((uid, gid)) => (id(uid, "uid")?, id(gid, "gid")?),
        None => (id(text, "uid")?, None),
    };
    if uid.is_none() && gid.is_none() {
        return Err(format!(
            "owner {text:?} names neither a uid nor a gid (UID[:GID] or :GID)"
        ));
    }
    Ok((uid, gid))
}

fn failed(command: &str, path: &str, err: &ClientError) -> String {
    format!("{command} {path}: {err}")
}

fn mib_s(bytes: u64, started: Instant) -> f64 {
    let mib = bytes as f64 / f64::from(1u32 << 20);
    mib / started.elapsed().as_secs_f64().max(1e-9)
}

/// `tessera ls`. With `-l`, an entry whose size cannot be computed (an iod down, an object
/// missing) is still listed, with `?` for its size and a warning naming the reason; an entry
/// removed while listing is left out.
pub fn ls(args: &LsArgs) -> Result<(), String> {
    let client = client(&args.cluster)?;
    let entries = client
        .readdir(&args.path)
        .map_err(|err| failed("ls", &args.path, &err))?;
    for entry in entries {
        let suffix = if entry.kind == FileKind::Directory {
            "/"
        } else {
            ""
        };
        if args.long {
            let full = format!("{}/{}", args.path.trim_end_matches('/'), entry.name);
            let (attr, size) = match client.stat(&full) {
                Ok(attr) => {
                    let size = attr.size.to_string();
                    (attr, size)
                }
                Err(stat_error) => match client.lookup(&full) {
                    // The name resolves but its size does not: list it, size unknown.
                    Ok(attr) => {
                        eprintln!("tessera: warning: ls {full}: size unknown: {stat_error}");
                        (attr, "?".to_owned())
                    }
                    Err(err) if err.code() == Some(ErrorCode::NotFound) => continue,
                    Err(err) => return Err(failed("ls", &full, &err)),
                },
            };
            println!(
                "{:04o} {:>6} {:>6} {:>14} {}{suffix}",
                attr.mode, attr.uid, attr.gid, size, entry.name
            );
        } else {
            println!("{}{suffix}", entry.name);
        }
    }
    Ok(())
}

/// `tessera stat`.
pub fn stat(args: &PathArgs) -> Result<(), String> {
    let client = client(&args.cluster)?;
    let attr = client
        .stat(&args.path)
        .map_err(|err| failed("stat", &args.path, &err))?;
    println!("path:    {}", args.path);
    println!(
        "kind:    {}",
        if attr.kind == FileKind::Directory {
            "directory"
        } else {
            "file"
        }
    );
    println!("size:    {}", attr.size);
    println!("mode:    {:04o}", attr.mode);
    println!("owner:   {}:{}", attr.uid, attr.gid);
    println!("handle:  {:#x}", attr.handle);
    println!("nlink:   {}", attr.nlink);
    println!("mtime:   {} ns", attr.mtime_ns);
    if let Some(layout) = attr.layout {
        println!("layout:  {}", layout.describe());
    }
    Ok(())
}

/// `tessera create`: an empty file with the given layout; fails if the name exists.
pub fn create(args: &CreateArgs) -> Result<(), String> {
    let client = client(&args.cluster)?;
    let servers = u16::try_from(client.server_count()).unwrap_or(u16::MAX);
    let mut options = tessera_client::layouts::parse(&args.layout, servers)
        .map_err(|why| format!("create {}: {why}", args.path))?;
    options.mode = parse_mode(&args.mode).map_err(|why| format!("create {}: {why}", args.path))?;
    options.exclusive = true;
    let file = client
        .create(&args.path, &options)
        .map_err(|err| failed("create", &args.path, &err))?;
    println!("{}: {}", args.path, file.layout().describe());
    Ok(())
}

/// `tessera mkdir`.
pub fn mkdir(args: &MkdirArgs) -> Result<(), String> {
    let mode = parse_mode(&args.mode).map_err(|why| format!("mkdir {}: {why}", args.path))?;
    client(&args.cluster)?
        .mkdir(&args.path, mode)
        .map_err(|err| failed("mkdir", &args.path, &err))?;
    Ok(())
}

/// `tessera rm`: a file, or an empty directory. The kind comes from the namespace alone
/// (no iod is asked), so a file whose iod is down or whose object is missing is removed
/// too; each object left behind is named in a warning, and the command still succeeds
/// (the iod's next orphan sweep removes what is left).
pub fn rm(args: &PathArgs) -> Result<(), String> {
    let client = client(&args.cluster)?;
    let attr = client
        .lookup(&args.path)
        .map_err(|err| failed("rm", &args.path, &err))?;
    if attr.kind == FileKind::Directory {
        return client
            .rmdir(&args.path)
            .map_err(|err| failed("rm", &args.path, &err));
    }
    let left = client
        .unlink_reporting(&args.path)
        .map_err(|err| failed("rm", &args.path, &err))?;
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
pub fn mv(args: &MvArgs) -> Result<(), String> {
    client(&args.cluster)?
        .rename(&args.source, &args.target)
        .map_err(|err| failed("mv", &args.source, &err))
}

/// `tessera chmod`.
pub fn chmod(args: &ChmodArgs) -> Result<(), String> {
    let mode = parse_mode(&args.mode).map_err(|why| format!("chmod {}: {why}", args.path))?;
    client(&args.cluster)?
        .chmod(&args.path, mode)
        .map_err(|err| failed("chmod", &args.path, &err))?;
    Ok(())
}

/// `tessera chown`.
pub fn chown(args: &ChownArgs) -> Result<(), String> {
    let (uid, gid) =
        parse_owner(&args.owner).map_err(|why| format!("chown {}: {why}", args.path))?;
    client(&args.cluster)?
        .chown(&args.path, uid, gid)
        .map_err(|err| failed("chown", &args.path, &err))?;
    Ok(())
}

/// `tessera put`.
pub fn put(args: &PutArgs) -> Result<(), String> {
    let mode = parse_mode(&args.mode).map_err(|why| format!("put {}: {why}", args.path))?;
    let client = client(&args.cluster)?;
    let mut local = fs::File::open(&args.local)
        .map_err(|err| format!("put: cannot read {}: {err}", args.local.display()))?;
    let started = Instant::now();
    let options = CreateOptions {
        stripe_unit_bytes: args.stripe_unit,
        mode,
        ..CreateOptions::default()
    };
    let file = client
        .create(&args.path, &options)
        .map_err(|err| failed("put", &args.path, &err))?;
    client
        .truncate(&args.path, 0)
        .map_err(|err| failed("put", &args.path, &err))?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let mut offset = 0u64;
    let mut requests = 0;
    loop {
        let mut filled = 0;
        while filled < buffer.len() {
            match local.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(format!("put: reading {}: {err}", args.local.display())),
            }
        }
        if filled == 0 {
            break;
        }
        let report = file
            .write_at(offset, &buffer[..filled])
            .map_err(|err| failed("put", &args.path, &err))?;
        requests += report.requests;
        offset += filled as u64;
    }
    println!(
        "put {} -> {}: {offset} bytes, {requests} requests, {:.1} MiB/s",
        args.local.display(),
        args.path,
        mib_s(offset, started)
    );
    Ok(())
}

/// `tessera get`.
pub fn get(args: &GetArgs) -> Result<(), String> {
    let client = client(&args.cluster)?;
    let started = Instant::now();
    let file = client
        .open(&args.path, OpenMode::ReadOnly)
        .map_err(|err| failed("get", &args.path, &err))?;
    let size = file
        .stat()
        .map_err(|err| failed("get", &args.path, &err))?
        .size;
    let mut local = fs::File::create(&args.local)
        .map_err(|err| format!("get: cannot write {}: {err}", args.local.display()))?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let mut offset = 0u64;
    let mut requests = 0;
    while offset < size {
        let length = usize::try_from((size - offset).min(COPY_CHUNK_BYTES as u64))
            .expect("chunk fits usize");
        let report = file
            .read_at(offset, &mut buffer[..length])
            .map_err(|err| failed("get", &args.path, &err))?;
        requests += report.requests;
        local
            .write_all(&buffer[..length])
            .map_err(|err| format!("get: writing {}: {err}", args.local.display()))?;
        offset += length as u64;
    }
    local
        .sync_all()
        .map_err(|err| format!("get: writing {}: {err}", args.local.display()))?;
    println!(
        "get {} -> {}: {size} bytes, {requests} requests, {:.1} MiB/s",
        args.path,
        args.local.display(),
        mib_s(size, started)
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
            let error = parse_mode(bad).unwrap_err();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn owners_are_numbers() {
        assert_eq!(parse_owner("1000"), Ok((Some(1000), None)));
        assert_eq!(parse_owner("1000:100"), Ok((Some(1000), Some(100))));
        assert_eq!(parse_owner(":100"), Ok((None, Some(100))));
        assert_eq!(parse_owner("1000:"), Ok((Some(1000), None)));
        assert!(parse_owner("alice").unwrap_err().contains("\"alice\""));
        assert!(parse_owner(":").unwrap_err().contains("neither"));
        assert!(parse_owner("4294967295").is_err());
        assert!(parse_owner("1:2:3").is_err());
    }
}
