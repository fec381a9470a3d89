//! What a caller chooses before any call: the client's tunables ([`ClientOptions`], with the
//! environment variables that set their defaults), how a file is made ([`CreateOptions`]) and
//! what it is opened for ([`OpenMode`]). A leaf: the client, its files and the fabric read
//! these, and this module reads none of them.

use std::time::Duration;

use tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT;
use tessera_proto::Datatype;

/// Environment variable overriding the default timeout, in milliseconds.
pub const TIMEOUT_ENV: &str = "TESSERA_TIMEOUT_MS";

/// Tunables of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How long to wait to connect to, send to or hear from a server before naming it in an
    /// error (default 30 s, or `$TESSERA_TIMEOUT_MS`).
    pub timeout: Duration,
    /// Reach servers on this host through their Unix sockets and move data one-sidedly
    /// (the `local` backend) where the cluster file names a socket (default true; false
    /// with `$TESSERA_TRANSPORT=tcp`).
    pub local: bool,
    /// Bytes of the client cache: contiguous reads (`File::read_at`) keep 64 KiB blocks
    /// under read leases from the iods (docs/SEMANTICS.md §3.2); `Some(0)` for none. `None`
    /// (the default unless `$TESSERA_CLIENT_CACHE` gives one, with k/m/g): the cluster file's
    /// `[client] cache`, else none.
    pub cache_bytes: Option<u64>,
    /// What the client cache does with the clean blocks it evicts (`$TESSERA_CLIENT_DEMOTE`:
    /// `off`, `eager` or `buffered`; docs/ARCHITECTURE.md §2.8). `None`: the cluster file's
    /// `[client] demote`, else off.
    pub demote: Option<DemoteMode>,
    /// Whether the client cache buffers small writes under write leases and sends them as
    /// one list write per iod (docs/SEMANTICS.md §3.3). `None` (the default unless
    /// `$TESSERA_CLIENT_WRITE_BACK` is `on` or `off`): the cluster file's `[client]
    /// write_back`, else off. Needs a client cache ([`ClientOptions::cache_bytes`]).
    pub write_back: Option<bool>,
    /// How long to wait for each reply on the CPU before blocking (default
    /// [`REPLY_SPIN_DEFAULT`], or `$TESSERA_REPLY_SPIN_US` microseconds; zero blocks at once;
    /// at most `tessera_net::REPLY_SPIN_MAX`). A small request's round trip is shorter than
    /// the wake-up of an idle CPU (docs/ARCHITECTURE.md §2.9); the wait yields its CPU to any
    /// other thread ready on it.
    pub reply_spin: Duration,
}

/// The default [`ClientOptions::reply_spin`]: longer than a small request's round trip on
/// loopback, short beside any transfer that takes longer.
pub const REPLY_SPIN_DEFAULT: Duration = Duration::from_micros(50);

/// The environment variable that sets [`ClientOptions::write_back`]: `on` or `off`.
pub const CLIENT_WRITE_BACK_ENV: &str = "TESSERA_CLIENT_WRITE_BACK";

/// The environment variable that sets [`ClientOptions::reply_spin`], in microseconds.
pub const REPLY_SPIN_ENV: &str = "TESSERA_REPLY_SPIN_US";

/// What a client cache does with a block it evicts (DEMOTE, to the iod's unified cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DemoteMode {
    /// Drops it.
    #[default]
    Off,
    /// Sends it to its iod at once, one `Demote` per block.
    Eager,
    /// Keeps it in a small DEMOTE buffer (a read finds it there); when half the buffer is
    /// full, offers the batch's blocks to their iods, then sends the wanted ones, one `Demote`
    /// per iod.
    Buffered,
}

impl std::str::FromStr for DemoteMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "off" => Ok(Self::Off),
            "eager" => Ok(Self::Eager),
            "buffered" => Ok(Self::Buffered),
            other => Err(format!(
                "demote mode {other:?}: give off, eager or buffered"
            )),
        }
    }
}

/// The environment variable that sets [`ClientOptions::demote`].
pub const CLIENT_DEMOTE_ENV: &str = "TESSERA_CLIENT_DEMOTE";

/// The environment variable that sets [`ClientOptions::cache_bytes`].
pub const CLIENT_CACHE_ENV: &str = "TESSERA_CLIENT_CACHE";

/// The environment variable that chooses the transport: `tcp` or `local` (the default).
pub const TRANSPORT_ENV: &str = "TESSERA_TRANSPORT";

impl Default for ClientOptions {
    fn default() -> Self {
        let timeout_ms = std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(30_000);
        let local = std::env::var(TRANSPORT_ENV).map_or(true, |value| value != "tcp");
        let cache_bytes = std::env::var(CLIENT_CACHE_ENV).ok().and_then(|value| {
            crate::size::parse_bytes(&value)
                .inspect_err(|err| tracing::warn!("${CLIENT_CACHE_ENV}={value:?} ignored: {err}"))
                .ok()
        });
        let demote = std::env::var(CLIENT_DEMOTE_ENV).ok().and_then(|value| {
            value
                .parse()
                .inspect_err(|err| tracing::warn!("${CLIENT_DEMOTE_ENV}={value:?} ignored: {err}"))
                .ok()
        });
        let write_back =
            std::env::var(CLIENT_WRITE_BACK_ENV)
                .ok()
                .and_then(|value| match value.as_str() {
                    "on" | "1" | "true" => Some(true),
                    "off" | "0" | "false" => Some(false),
                    _ => {
                        tracing::warn!(
                            "${CLIENT_WRITE_BACK_ENV}={value:?} ignored: give on or off"
                        );
                        None
                    }
                });
        let reply_spin = std::env::var(REPLY_SPIN_ENV)
            .ok()
            .map_or(REPLY_SPIN_DEFAULT, |value| match value.parse::<u64>() {
                Ok(us) => Duration::from_micros(us).min(tessera_net::REPLY_SPIN_MAX),
                Err(err) => {
                    tracing::warn!("${REPLY_SPIN_ENV}={value:?} ignored: {err}");
                    REPLY_SPIN_DEFAULT
                }
            });
        Self {
            timeout: Duration::from_millis(timeout_ms),
            local,
            cache_bytes,
            demote,
            write_back,
            reply_spin,
        }
    }
}

/// How to create a file.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Permission bits.
    pub mode: u32,
    /// Fail if the name exists (otherwise the existing file is opened).
    pub exclusive: bool,
    /// Stripe unit in bytes (default 64 KiB).
    pub stripe_unit_bytes: u64,
    /// Servers to stripe over; 0 means all of them.
    pub server_count: u16,
    /// A pattern layout instead of stripes: one datatype per server, each with lower bound
    /// 0 and the same extent (the period), together covering each period once
    /// (see `tessera_proto::PatternLayout`). Empty for stripes.
    pub pattern: Vec<Datatype>,
    /// Unit of the iods' unified caches for the file: a power of two from 4 KiB to 64 KiB
    /// (`limits::CACHE_UNIT_BYTES_MIN`..=`MAX`); 0 (default) lets the mds choose: the
    /// stripe unit where it is smaller than 64 KiB, else the iods' default.
    pub cache_unit_bytes: u32,
}

impl Default for CreateOptions {
    fn default() -> Self {
        Self {
            mode: 0o644,
            exclusive: false,
            stripe_unit_bytes: STRIPE_UNIT_BYTES_DEFAULT,
            server_count: 0,
            pattern: Vec::new(),
            cache_unit_bytes: 0,
        }
    }
}

/// What a file is open for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Reads only.
    ReadOnly,
    /// Writes only.
    WriteOnly,
    /// Reads and writes.
    ReadWrite,
}

impl OpenMode {
    /// The rights asked of the mds: (read, write).
    pub(crate) fn rights(self) -> (bool, bool) {
        match self {
            Self::ReadOnly => (true, false),
            Self::WriteOnly => (false, true),
            Self::ReadWrite => (true, true),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::ReadOnly => "reading only",
            Self::WriteOnly => "writing only",
            Self::ReadWrite => "reading and writing",
        }
    }
}
