//! The native column's worker (`tessera mpiio-worker`): it reads one [`Step`] per case from
//! its standard input, makes the same calls as the MPI program through `tessera-client`
//! (`File::write_at`/`read_at`, a `ViewedFile` with the strided view, `write_all`/`read_all`
//! over a [`SocketCommunicator`]), checks every word it reads back, and its rank 0 answers the
//! group's [`Outcome`] as one JSON line.

use std::io::{BufRead, Read as _, Write};
use std::time::Instant;

use tessera_client::collective::SOCKET_WAIT_DEFAULT;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CollectiveOptions, Communicator, Datatype, OpenMode,
    SocketCommunicator, ViewedFile,
};

use super::command::{value, Figures, Outcome, Step};
use super::{WorkerArgs, CASES_MAX, CHECK_CHUNK_BYTES, LINE_BYTES_MAX};

#[allow(clippy::needless_pass_by_value)] // used as `map_err(fail)`
fn fail(err: tessera_client::ClientError) -> String {
    err.to_string()
}

/// Runs one native worker: joins the group, opens the file, then runs the cases its standard
/// input names until `quit` or the end of the input.
pub fn run_worker(args: &WorkerArgs) -> Result<(), String> {
    let group = SocketCommunicator::join(
        &args.meeting,
        args.rank,
        args.processes,
        SOCKET_WAIT_DEFAULT,
    )
    .map_err(fail)?;
    let config = ClusterConfig::load(&args.cluster).map_err(fail)?;
    let client = Client::new(&config, &ClientOptions::default());
    let file = client
        .open(&args.path, OpenMode::ReadWrite)
        .map_err(|err| format!("open {}: {err}", args.path))?;
    let mut viewed = ViewedFile::new(file);
    let mut input = std::io::stdin().lock();
    let mut buffers = (Vec::new(), Vec::new());
    for _ in 0..CASES_MAX {
        let mut line = String::new();
        (&mut input)
            .take(LINE_BYTES_MAX as u64)
            .read_line(&mut line)
            .map_err(|err| format!("mpiio worker {}: {err}", args.rank))?;
        if line.is_empty() {
            break;
        }
        // Every rank must be told the same (as the program checks).
        let lines = group.allgather(line.as_bytes()).map_err(fail)?;
        if lines.iter().any(|other| other != line.as_bytes()) {
            return Err(format!(
                "mpiio worker {}: the workers were given different commands",
                args.rank
            ));
        }
        let Some(command) = Step::parse(&line)? else {
            break;
        };
        let outcome = run_case(args, &client, &group, &mut viewed, &command, &mut buffers)?;
        if let Some(outcome) = outcome {
            let mut stdout = std::io::stdout().lock();
            writeln!(
                stdout,
                "{}",
                serde_json::to_string(&outcome).map_err(|err| err.to_string())?
            )
            .and_then(|()| stdout.flush())
            .map_err(|err| format!("mpiio worker 0: {err}"))?;
        }
    }
    viewed.close().map_err(fail)
}

/// One case on one worker: set-up, the timed writes, the timed reads, the check; rank 0
/// returns the group's outcome.
fn run_case(
    args: &WorkerArgs,
    client: &Client,
    group: &SocketCommunicator,
    viewed: &mut ViewedFile,
    command: &Step,
    buffers: &mut (Vec<u8>, Vec<u8>),
) -> Result<Option<Outcome>, String> {
    let processes = args.processes as u64;
    let rank = args.rank as u64;
    let (data, back) = buffers;
    prepare(viewed, command, processes, rank, data, back)?;
    if rank == 0 {
        client.truncate(&args.path, 0).map_err(fail)?;
    }
    let options = CollectiveOptions::default();
    group.barrier().map_err(fail)?;
    let started = Instant::now();
    group.barrier().map_err(fail)?;
    let barrier_seconds = started.elapsed().as_secs_f64();
    let (write_seconds, written) =
        timed_writes(viewed, group, &options, command, processes, rank, data)?;
    back.fill(0);
    let (read_seconds, read) =
        timed_reads(viewed, group, &options, command, processes, rank, back)?;

    // Outside the timing: every word, the size, and (CHECK) which rank's data lies where.
    let mut wrong = count_wrong_words(command, processes, rank, data, back);
    let total = command.process_bytes() * processes;
    if rank == 0 {
        let size = viewed.file().stat().map_err(fail)?.size;
        if size != total {
            eprintln!("mpiio worker 0: the file holds {size} bytes, {total} expected");
            wrong += 1;
        }
    }
    if command.check {
        wrong += check_layout(viewed, command, processes, rank, total)?;
    }
    let mine = Mine {
        write_seconds,
        read_seconds,
        wrong,
        written,
        read,
        barrier_seconds,
    };
    let all = group.allgather(&mine.to_bytes()).map_err(fail)?;
    if rank != 0 {
        return Ok(None);
    }
    gathered_outcome(command, processes, total, &all, viewed, &options).map(Some)
}

/// Set-up of one case: this rank's data (the formula's word at each file offset it writes)
/// and room to read it back, and the view (a vector of blocks for strided, bytes otherwise).
fn prepare(
    viewed: &mut ViewedFile,
    command: &Step,
    processes: u64,
    rank: u64,
    data: &mut Vec<u8>,
    back: &mut Vec<u8>,
) -> Result<(), String> {
    let mine = command.process_bytes();
    let length = usize::try_from(mine).map_err(|err| err.to_string())?;
    data.resize(length, 0);
    back.resize(length, 0);
    for (index, word) in data.chunks_exact_mut(8).enumerate() {
        let offset = command.file_offset(processes, rank, index as u64 * 8);
        word.copy_from_slice(&value(offset, rank, command.generation).to_le_bytes());
    }
    let byte = Datatype::byte();
    if command.strided {
        let filetype = Datatype::vector(
            mine / command.block,
            command.block,
            i64::try_from(command.block * processes).map_err(|err| err.to_string())?,
            &byte,
        )
        .map_err(|err| err.to_string())?;
        viewed
            .set_view(rank * command.block, &filetype)
            .map_err(fail)?;
    } else {
        viewed.set_view(0, &byte).map_err(fail)?;
    }
    Ok(())
}

/// The timed write phase (barrier, every call, barrier): its seconds and the client's figures.
fn timed_writes(
    viewed: &mut ViewedFile,
    group: &SocketCommunicator,
    options: &CollectiveOptions,
    command: &Step,
    processes: u64,
    rank: u64,
    data: &[u8],
) -> Result<(f64, Figures), String> {
    let transfer = usize::try_from(command.transfer).map_err(|err| err.to_string())?;
    let byte = Datatype::byte();
    let mut written = Figures::default();
    group.barrier().map_err(fail)?;
    let started = Instant::now();
    for segment in 0..command.segments {
        let offset = command.call_offset(processes, rank, segment);
        let at = usize::try_from(segment).map_err(|err| err.to_string())? * transfer;
        let memory = &data[at..at + transfer];
        let report = match (command.collective, command.strided) {
            (true, _) => viewed.write_all(group, options, offset, memory, &byte, command.transfer),
            (false, true) => viewed.write(offset, memory, &byte, command.transfer),
            (false, false) => viewed.file().write_at(offset, memory),
        }
        .map_err(fail)?;
        written.add(Figures::of(&report));
    }
    group.barrier().map_err(fail)?;
    Ok((started.elapsed().as_secs_f64(), written))
}

/// The timed read phase into `back` (barrier, every call, barrier): its seconds and the
/// client's figures.
fn timed_reads(
    viewed: &mut ViewedFile,
    group: &SocketCommunicator,
    options: &CollectiveOptions,
    command: &Step,
    processes: u64,
    rank: u64,
    back: &mut [u8],
) -> Result<(f64, Figures), String> {
    let transfer = usize::try_from(command.transfer).map_err(|err| err.to_string())?;
    let byte = Datatype::byte();
    let mut read = Figures::default();
    group.barrier().map_err(fail)?;
    let started = Instant::now();
    for segment in 0..command.segments {
        let offset = command.call_offset(processes, rank, segment);
        let at = usize::try_from(segment).map_err(|err| err.to_string())? * transfer;
        let memory = &mut back[at..at + transfer];
        let report = match (command.collective, command.strided) {
            (true, _) => viewed.read_all(group, options, offset, memory, &byte, command.transfer),
            (false, true) => viewed.read(offset, memory, &byte, command.transfer),
            (false, false) => viewed.file().read_at(offset, memory),
        }
        .map_err(fail)?;
        read.add(Figures::of(&report));
    }
    group.barrier().map_err(fail)?;
    Ok((started.elapsed().as_secs_f64(), read))
}

/// The words read back that differ from those written (the first few reported).
fn count_wrong_words(command: &Step, processes: u64, rank: u64, data: &[u8], back: &[u8]) -> u64 {
    let mut wrong = 0u64;
    for (index, (got, expected)) in back.chunks_exact(8).zip(data.chunks_exact(8)).enumerate() {
        if got != expected {
            if wrong < 5 {
                eprintln!(
                    "mpiio worker {rank}: read {:02x?} at file byte {}, expected {:02x?}",
                    got,
                    command.file_offset(processes, rank, index as u64 * 8),
                    expected
                );
            }
            wrong += 1;
        }
    }
    wrong
}

/// What one worker tells the others after a case (allgathered as 96 bytes).
struct Mine {
    write_seconds: f64,
    read_seconds: f64,
    wrong: u64,
    written: Figures,
    read: Figures,
    barrier_seconds: f64,
}

impl Mine {
    /// The wire form: write and read seconds, wrong words, write and read figures, barrier
    /// seconds (the offsets [`gathered_outcome`] reads).
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(96);
        bytes.extend_from_slice(&self.write_seconds.to_le_bytes());
        bytes.extend_from_slice(&self.read_seconds.to_le_bytes());
        bytes.extend_from_slice(&self.wrong.to_le_bytes());
        bytes.extend_from_slice(&self.written.to_bytes());
        bytes.extend_from_slice(&self.read.to_bytes());
        bytes.extend_from_slice(&self.barrier_seconds.to_le_bytes());
        bytes
    }
}

/// Rank 0's outcome of the group from every worker's [`Mine`]: the slowest process's
/// seconds, the errors and figures summed.
fn gathered_outcome(
    command: &Step,
    processes: u64,
    total: u64,
    all: &[Vec<u8>],
    viewed: &ViewedFile,
    options: &CollectiveOptions,
) -> Result<Outcome, String> {
    let float = |bytes: &[u8], at: usize| {
        f64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let (mut write_total, mut read_total) = (Figures::default(), Figures::default());
    let mut errors = 0;
    for one in all {
        errors += u64::from_le_bytes(one[16..24].try_into().expect("8 bytes"));
        write_total.add(Figures::from_bytes(&one[24..56]));
        read_total.add(Figures::from_bytes(&one[56..88]));
    }
    Ok(Outcome {
        access: if command.collective {
            "collective"
        } else {
            "independent"
        }
        .to_owned(),
        pattern: if command.strided {
            "strided"
        } else {
            "contiguous"
        }
        .to_owned(),
        transfer_bytes: command.transfer,
        segments: command.segments,
        block_bytes: if command.strided {
            command.block
        } else {
            command.transfer
        },
        processes: u32::try_from(processes).map_err(|err| err.to_string())?,
        generation: command.generation,
        bytes: total,
        write_seconds: all.iter().map(|one| float(one, 0)).fold(0.0, f64::max),
        read_seconds: all.iter().map(|one| float(one, 8)).fold(0.0, f64::max),
        barrier_seconds: all.iter().map(|one| float(one, 88)).fold(0.0, f64::max),
        layout_checked: command.check,
        errors,
        verified: errors == 0,
        tessera_method: viewed.effective_method().name().to_owned(),
        tessera_coll: options.method.name().to_owned(),
        romio_cb_write: String::new(),
        romio_ds_write: String::new(),
        write_report: Some(write_total),
        read_report: Some(read_total),
    })
}

/// Reads this rank's share of the whole file plainly and checks the owner of every word.
fn check_layout(
    viewed: &ViewedFile,
    command: &Step,
    processes: u64,
    rank: u64,
    total: u64,
) -> Result<u64, String> {
    let words = total / 8;
    let (first, last) = (
        words * rank / processes * 8,
        words * (rank + 1) / processes * 8,
    );
    let mut chunk = vec![0u8; usize::try_from(CHECK_CHUNK_BYTES).expect("small")];
    let mut wrong = 0;
    let mut from = first;
    while from < last {
        let length = (last - from).min(CHECK_CHUNK_BYTES);
        let part = &mut chunk[..usize::try_from(length).expect("small")];
        viewed.file().read_at(from, part).map_err(fail)?;
        for (index, got) in part.chunks_exact(8).enumerate() {
            let offset = from + index as u64 * 8;
            let owner = command.owner(processes, offset);
            if got != value(offset, owner, command.generation).to_le_bytes() {
                if wrong < 5 {
                    eprintln!(
                        "mpiio worker {rank}: layout check: file byte {offset} is not rank {owner}'s"
                    );
                }
                wrong += 1;
            }
        }
        from += length;
    }
    Ok(wrong)
}
