//! The command line the parent sends every process of a column for one case ([`Step`]), the
//! word each process writes at a file offset ([`value`]), and the JSON line rank 0 answers
//! ([`Outcome`], with the client's [`Figures`] from the native workers). Both the MPI program
//! (`mpiio/bench/mpiio.c`) and the native workers speak this grammar.

use serde::{Deserialize, Serialize};
use tessera_client::IoReport;

use super::{GENERATIONS, PROCESS_BYTES_MAX};

/// A parsed command line (the program's grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) collective: bool,
    pub(super) strided: bool,
    pub(super) transfer: u64,
    pub(super) segments: u64,
    pub(super) block: u64,
    pub(super) generation: u64,
    pub(super) check: bool,
}

impl Step {
    pub(super) fn line(&self) -> String {
        format!(
            "run {} {} {} {} {} {} {}\n",
            if self.collective {
                "collective"
            } else {
                "independent"
            },
            if self.strided {
                "strided"
            } else {
                "contiguous"
            },
            self.transfer,
            self.segments,
            self.block,
            self.generation,
            u8::from(self.check)
        )
    }

    /// Parses a line: `Ok(None)` for `quit`.
    pub(super) fn parse(line: &str) -> Result<Option<Self>, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"quit") {
            return Ok(None);
        }
        let bad = || {
            format!("bad command {line:?}: expected `run ACCESS PATTERN TRANSFER SEGMENTS BLOCK GENERATION CHECK` or `quit`")
        };
        if words.len() != 8 || words[0] != "run" {
            return Err(bad());
        }
        let number = |word: &str| word.parse::<u64>().map_err(|_| bad());
        let command = Self {
            collective: match words[1] {
                "independent" => false,
                "collective" => true,
                _ => return Err(bad()),
            },
            strided: match words[2] {
                "contiguous" => false,
                "strided" => true,
                _ => return Err(bad()),
            },
            transfer: number(words[3])?,
            segments: number(words[4])?,
            block: number(words[5])?,
            generation: number(words[6])?,
            check: number(words[7])? != 0,
        };
        let process_bytes = command.transfer.checked_mul(command.segments);
        if command.transfer == 0
            || !command.transfer.is_multiple_of(8)
            || command.segments == 0
            || process_bytes.is_none_or(|bytes| bytes > PROCESS_BYTES_MAX)
            || command.generation >= GENERATIONS
            || (command.strided
                && (command.block == 0
                    || !command.block.is_multiple_of(8)
                    || !command.transfer.is_multiple_of(command.block)))
        {
            return Err(format!(
                "{}: transfer must be a multiple of 8, transfer x segments at most {PROCESS_BYTES_MAX} (PROCESS_BYTES_MAX), the block a multiple of 8 dividing the transfer, the generation below {GENERATIONS}",
                bad()
            ));
        }
        Ok(Some(command))
    }

    pub(super) fn process_bytes(&self) -> u64 {
        self.transfer * self.segments
    }

    /// The file offset of byte `position` of rank `rank`'s stream.
    pub(super) fn file_offset(&self, processes: u64, rank: u64, position: u64) -> u64 {
        let unit = if self.strided {
            self.block
        } else {
            self.transfer
        };
        (position / unit * processes + rank) * unit + position % unit
    }

    /// The rank whose data lies at file offset `offset`.
    pub(super) fn owner(&self, processes: u64, offset: u64) -> u64 {
        let unit = if self.strided {
            self.block
        } else {
            self.transfer
        };
        offset / unit % processes
    }

    /// The offset a call `segment` passes (file bytes for contiguous, view bytes for strided).
    pub(super) fn call_offset(&self, processes: u64, rank: u64, segment: u64) -> u64 {
        if self.strided {
            segment * self.transfer
        } else {
            (segment * processes + rank) * self.transfer
        }
    }
}

/// The word at file offset `offset` written by `writer` in `generation` (as `value` in
/// mpiio.c).
pub(super) fn value(offset: u64, writer: u64, generation: u64) -> u64 {
    ((offset >> 3) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((writer + 1) << 56)
        ^ (generation << 40)
}

/// What rank 0 of a column answers for one case (the program's line; the workers add the
/// client's figures).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Outcome {
    pub(super) access: String,
    pub(super) pattern: String,
    pub(super) transfer_bytes: u64,
    pub(super) segments: u64,
    pub(super) block_bytes: u64,
    pub(super) processes: u32,
    pub(super) generation: u64,
    /// Bytes every process together moved in one phase.
    pub(super) bytes: u64,
    pub(super) write_seconds: f64,
    pub(super) read_seconds: f64,
    /// One barrier alone (each timed phase ends with one).
    pub(super) barrier_seconds: f64,
    pub(super) layout_checked: bool,
    pub(super) errors: u64,
    pub(super) verified: bool,
    #[serde(default)]
    pub(super) tessera_method: String,
    #[serde(default)]
    pub(super) tessera_coll: String,
    #[serde(default)]
    pub(super) romio_cb_write: String,
    #[serde(default)]
    pub(super) romio_ds_write: String,
    /// The client's figures of every process's writes and reads (workers only).
    #[serde(default)]
    pub(super) write_report: Option<Figures>,
    #[serde(default)]
    pub(super) read_report: Option<Figures>,
}

/// The figures of [`IoReport`] the rows keep, summed over the processes and calls.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(super) struct Figures {
    pub(super) requests: u64,
    pub(super) storage_pieces: u64,
    pub(super) one_sided: u64,
    pub(super) bytes_copied: u64,
}

impl Figures {
    pub(super) fn of(report: &IoReport) -> Self {
        Self {
            requests: report.requests,
            storage_pieces: report.storage_pieces,
            one_sided: report.one_sided,
            bytes_copied: report.bytes_copied,
        }
    }

    pub(super) fn to_bytes(self) -> Vec<u8> {
        [
            self.requests,
            self.storage_pieces,
            self.one_sided,
            self.bytes_copied,
        ]
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
    }

    pub(super) fn from_bytes(bytes: &[u8]) -> Self {
        let word = |index: usize| {
            u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
        };
        Self {
            requests: word(0),
            storage_pieces: word(1),
            one_sided: word(2),
            bytes_copied: word(3),
        }
    }

    pub(super) fn add(&mut self, other: Self) {
        self.requests += other.requests;
        self.storage_pieces += other.storage_pieces;
        self.one_sided += other.one_sided;
        self.bytes_copied += other.bytes_copied;
    }
}
