//! One worker process (`tessera worker`): it prepares each task of a group (opens the file,
//! builds its buffers, declares a view), runs the timed calls when told `go`, and verifies
//! what it read outside the timing, answering the parent with a [`StepResult`] per task.

use std::io::{IoSlice, IoSliceMut};
use std::time::Instant;

use tessera_client::plan::Plan;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, Datatype, File, IoReport, Layout, OpenMode, Piece,
    SieveOptions, TransferPolicy, View,
};
use tessera_proto::access::{server_share, MatchedView};
use tessera_proto::limits::MESSAGE_BULK_BYTES_MAX;
use tessera_proto::{DeclareView, FileType, StoragePlan, Wire};

use super::pattern::{
    Access, ArrayMethod, Pattern, LIST_OFFSET_BYTES_PER_PIECE, VIEW_OFFSET_BYTES_PER_REQUEST,
};
use super::{receive, send, CacheCounts, CacheTask, Message, StepResult, Task, WorkerArgs};

struct Prepared {
    task: Task,
    client: Client,
    via: Via,
    file: File,
    buffer: Vec<u8>,
    access: Access,
    /// The declared view of a `view` step.
    view: Option<View>,
    /// Offset bytes and servers (cluster indices) of one list call of a matrix access.
    list_plan: Option<(u64, Vec<u16>)>,
    declare_bytes: u64,
    declare_seconds: f64,
}

/// How a step moves its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    List(TransferPolicy),
    View,
    /// One request per file piece.
    Multiple,
    /// Client-side data sieving.
    Sieve,
    /// `read_at` calls through the client cache ([`Task::cache`]).
    Cached,
}

/// How a step moves its data, and the storage plan it asks the servers for.
pub(super) fn via(task: &Task) -> Result<(Via, StoragePlan), String> {
    let unknown = |name: &str| format!("unknown method {name} for {:?}", task.pattern);
    if task.cache.is_some() {
        return if task.write || task.pattern.typed() {
            Err("a cache step reads a region (an interleaved pattern of one piece)".to_owned())
        } else {
            Ok((Via::Cached, StoragePlan::Auto))
        };
    }
    match (&task.pattern, task.method.as_str()) {
        (Pattern::Matrix { .. }, "list") => {
            Ok((Via::List(TransferPolicy::Auto), StoragePlan::Auto))
        }
        (Pattern::Matrix { .. }, "view") => Ok((Via::View, StoragePlan::Auto)),
        (Pattern::Array { .. }, name) => {
            let method = ArrayMethod::from_name(name).ok_or_else(|| unknown(name))?;
            let via = match method {
                ArrayMethod::Multiple => Via::Multiple,
                ArrayMethod::Sieve => Via::Sieve,
                ArrayMethod::List | ArrayMethod::ListAds => Via::List(TransferPolicy::Auto),
            };
            Ok((via, method.storage_plan()))
        }
        (_, name) => TransferPolicy::from_name(name)
            .map(|policy| (Via::List(policy), StoragePlan::Auto))
            .ok_or_else(|| unknown(name)),
    }
}

/// Bytes of the `DeclareView` frames of `view` (header and body, one per server).
fn declare_bytes(file: &File, view: &View, filetype: &Datatype) -> u64 {
    view.positions()
        .iter()
        .map(|&position| {
            let declare = DeclareView {
                handle: file.handle(),
                capability: file.capability().unwrap_or_default(),
                view_id: view.id(),
                file: FileType {
                    layout: file.layout().clone(),
                    position: u16::try_from(position).expect("positions are below servers_max"),
                    filetype: filetype.clone(),
                    displacement: 0,
                },
            };
            (tessera_proto::limits::HEADER_BYTES + declare.to_body().len()) as u64
        })
        .sum()
}

fn list_call(
    file: &File,
    buffer: &mut [u8],
    access: &Access,
    write: bool,
) -> Result<IoReport, String> {
    io_call(
        file,
        buffer,
        access,
        write,
        Via::List(file.transfer_policy()),
    )
}

/// One call of `access` by `via` (a list call for [`Via::View`], whose calls are made on
/// the view).
fn io_call(
    file: &File,
    buffer: &mut [u8],
    access: &Access,
    write: bool,
    via: Via,
) -> Result<IoReport, String> {
    if write {
        let memory: Vec<IoSlice<'_>> = access
            .memory
            .iter()
            .map(|&(start, length)| IoSlice::new(&buffer[start..start + length]))
            .collect();
        match via {
            Via::Multiple => file.write_multiple(&memory, &access.file),
            Via::Sieve => file.write_sieve(&memory, &access.file, &SieveOptions::default()),
            Via::List(_) | Via::View | Via::Cached => file.write_list(&memory, &access.file),
        }
    } else {
        let mut memory: Vec<IoSliceMut<'_>> = Vec::with_capacity(access.memory.len());
        let mut rest: &mut [u8] = buffer;
        let mut consumed = 0;
        for &(start, length) in &access.memory {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
            let (piece, tail) = tail.split_at_mut(length);
            memory.push(IoSliceMut::new(piece));
            rest = tail;
            consumed = start + length;
        }
        match via {
            Via::Multiple => file.read_multiple(&mut memory, &access.file),
            Via::Sieve => file.read_sieve(&mut memory, &access.file, &SieveOptions::default()),
            Via::List(_) | Via::View | Via::Cached => file.read_list(&mut memory, &access.file),
        }
    }
    .map_err(|err| err.to_string())
}

/// One byte of a matrix access on every server the access reaches: a list call of these
/// opens the connections the timed calls will use, at a cost independent of the access size.
/// (The memory of a matrix access is one buffer in stream order.)
pub(super) fn warm_up_access(layout: &Layout, access: &Access) -> Access {
    debug_assert_eq!(access.memory, [(0, access.buffer_bytes)]);
    let mut seen = vec![false; layout.servers().len()];
    let mut warm_up = Access {
        buffer_bytes: access.buffer_bytes,
        memory: Vec::new(),
        file: Vec::new(),
    };
    let mut stream = 0u64;
    for piece in &access.file {
        for segment in layout.map(piece.offset, piece.length) {
            if !std::mem::replace(&mut seen[segment.server_position], true) {
                let at = stream + (segment.logical_offset - piece.offset);
                warm_up
                    .memory
                    .push((usize::try_from(at).expect("inside the buffer"), 1));
                warm_up.file.push(Piece::new(segment.logical_offset, 1));
            }
        }
        stream += piece.length;
        if seen.iter().all(|&seen| seen) {
            break;
        }
    }
    warm_up
}

fn prepare(task: Task) -> Result<Prepared, String> {
    let config = ClusterConfig::load(&task.cluster).map_err(|err| err.to_string())?;
    // A `tcp:` method prefix reaches the servers by TCP even on their host.
    let (method, tcp) = match task.method.strip_prefix("tcp:") {
        Some(method) => (method.to_owned(), true),
        None => (task.method.clone(), false),
    };
    let mut options = ClientOptions::default();
    options.local &= !tcp;
    if let Some(cache) = &task.cache {
        options.cache_bytes = Some(cache.cache_bytes);
        options.demote = Some(cache.demote.parse()?);
    }
    let client = Client::new(&config, &options);
    let task = Task { method, ..task };
    let (via, storage_plan) = via(&task)?;
    let mode = match (task.write, via) {
        // A sieving write reads the chunks it modifies; a caching reader demotes only blocks
        // of files it may write.
        (true, Via::Sieve) | (false, Via::Cached) => OpenMode::ReadWrite,
        (true, _) => OpenMode::WriteOnly,
        (false, _) => OpenMode::ReadOnly,
    };
    let mut file = client
        .open(&task.path, mode)
        .map_err(|err| err.to_string())?;
    if let Via::List(method) = via {
        file.set_transfer_policy(method);
    }
    file.set_storage_plan(storage_plan);
    let access = task.pattern.try_access()?;
    // Gaps hold a sentinel so a read that writes outside its pieces is caught.
    let mut buffer = vec![0xA5u8; access.buffer_bytes];
    if task.write {
        let mut stream = access
            .memory
            .iter()
            .flat_map(|&(start, length)| start..start + length);
        for piece in &access.file {
            for offset in piece.offset..piece.offset + piece.length {
                let index = stream.next().expect("memory and file totals match");
                buffer[index] = task.pattern.byte_at(offset, task.generation);
            }
        }
    }
    let mut prepared = Prepared {
        task,
        client,
        via,
        file,
        buffer,
        access,
        view: None,
        list_plan: None,
        declare_bytes: 0,
        declare_seconds: 0.0,
    };
    if let Some(cache) = prepared.task.cache.clone() {
        for _ in 0..cache.warm_passes {
            cached_pass(
                &prepared.file,
                &mut prepared.buffer,
                &prepared.access,
                &cache,
            )?;
        }
    }
    // The client is new, so its connections are opened by its first call: one untimed call
    // opens those the timed calls will use (a view step's or not, so a bound measured with
    // list calls pays for no handshake the view does not).
    let one_buffer = prepared.access.memory == [(0, prepared.access.buffer_bytes)];
    if one_buffer && prepared.via != Via::Cached {
        let write = prepared.task.write;
        let warm_up = warm_up_access(prepared.file.layout(), &prepared.access);
        list_call(&prepared.file, &mut prepared.buffer, &warm_up, write)
            .map_err(|err| format!("warm-up call: {err}"))?;
        if !write {
            prepared.buffer.fill(0xA5);
        }
    }
    if let Some(filetype) = prepared.task.pattern.filetype()? {
        prepare_typed(&mut prepared, &filetype)?;
    }
    Ok(prepared)
}

/// Plans the list call's offset bytes, and declares the view of a `view` step (timed on its
/// own).
fn prepare_typed(prepared: &mut Prepared, filetype: &Datatype) -> Result<(), String> {
    let layout = prepared.file.layout();
    let plan = Plan::new(layout, &prepared.access.file);
    let offset_bytes = plan
        .requests
        .iter()
        .map(|request| request.pieces.len() as u64 * LIST_OFFSET_BYTES_PER_PIECE)
        .sum();
    let servers = plan
        .server_positions()
        .into_iter()
        .map(|position| layout.servers()[position])
        .collect();
    prepared.list_plan = Some((offset_bytes, servers));
    if prepared.via == Via::View {
        let started = Instant::now();
        let view = prepared
            .file
            .set_view(0, filetype)
            .map_err(|err| format!("set_view: {err}"))?;
        prepared.declare_seconds = started.elapsed().as_secs_f64();
        prepared.declare_bytes = declare_bytes(&prepared.file, &view, filetype);
        prepared.view = Some(view);
    }
    Ok(())
}

fn verify(prepared: &Prepared) -> bool {
    let mut in_piece = vec![false; prepared.buffer.len()];
    let mut stream = prepared
        .access
        .memory
        .iter()
        .flat_map(|&(start, length)| start..start + length);
    for piece in &prepared.access.file {
        for offset in piece.offset..piece.offset + piece.length {
            let index = stream.next().expect("memory and file totals match");
            in_piece[index] = true;
            if prepared.buffer[index]
                != prepared
                    .task
                    .pattern
                    .byte_at(offset, prepared.task.generation)
            {
                return false;
            }
        }
    }
    prepared
        .buffer
        .iter()
        .zip(&in_piece)
        .all(|(&byte, &inside)| inside || byte == 0xA5)
}

/// One walk of a cache step: `read_at` calls of `call_bytes` over the access's file pieces,
/// each into its place in the buffer.
fn cached_pass(
    file: &File,
    buffer: &mut [u8],
    access: &Access,
    cache: &CacheTask,
) -> Result<IoReport, String> {
    let call = usize::try_from(cache.call_bytes.max(1)).map_err(|_| "call_bytes")?;
    let mut total = IoReport::default();
    for (piece, &(start, length)) in access.file.iter().zip(&access.memory) {
        for (index, chunk) in buffer[start..start + length].chunks_mut(call).enumerate() {
            let offset = piece.offset + (index * call) as u64;
            total += file
                .read_at(offset, chunk)
                .map_err(|err| format!("read at {offset}: {err}"))?;
        }
    }
    Ok(total)
}

/// One timed call of a step (with its `sync`).
fn call(prepared: &mut Prepared) -> Result<IoReport, String> {
    let write = prepared.task.write;
    let report = match &prepared.view {
        None if prepared.via == Via::Cached => {
            let cache = prepared.task.cache.as_ref().expect("a cache step");
            cached_pass(
                &prepared.file,
                &mut prepared.buffer,
                &prepared.access,
                cache,
            )?
        }
        Some(view) if write => view
            .write_at(0, &prepared.buffer)
            .map_err(|err| err.to_string())?,
        Some(view) => view
            .read_at(0, &mut prepared.buffer)
            .map_err(|err| err.to_string())?,
        None => io_call(
            &prepared.file,
            &mut prepared.buffer,
            &prepared.access,
            write,
            prepared.via,
        )?,
    };
    if write && prepared.task.sync {
        prepared.file.sync().map_err(|err| format!("sync: {err}"))?;
    }
    Ok(report)
}

/// Runs a worker's group: alone, its one task's calls back to back, timed as one block;
/// together, the members take turns call by call, in an order shuffled anew each round (the
/// same in every process, [`crate::report::turn_order`]), and each member's seconds are the sum of
/// its own calls. So every member meets the same moments of the machine, and a ratio
/// between two members is not a ratio between two moments.
fn run_group(group: &mut [Prepared]) -> Result<Vec<StepResult>, String> {
    let mut totals = vec![IoReport::default(); group.len()];
    let mut seconds = vec![0.0f64; group.len()];
    let counts_before: Vec<CacheCounts> = group
        .iter()
        .map(|prepared| CacheCounts::of(prepared.client.cache_stats()))
        .collect();
    if let [prepared] = group {
        let started = Instant::now();
        for _ in 0..prepared.task.iterations {
            totals[0] += call(prepared)?;
        }
        seconds[0] = started.elapsed().as_secs_f64();
    } else {
        let rounds = group
            .iter()
            .map(|prepared| prepared.task.iterations)
            .max()
            .unwrap_or(0);
        for round in 0..rounds {
            for member in crate::report::turn_order(round as usize, group.len()) {
                let prepared = &mut group[member];
                if round >= prepared.task.iterations {
                    continue;
                }
                let started = Instant::now();
                totals[member] += call(prepared)?;
                seconds[member] += started.elapsed().as_secs_f64();
            }
        }
    }
    group
        .iter()
        .zip(totals)
        .zip(seconds)
        .zip(counts_before)
        .map(|(((prepared, total), seconds), before)| step_result(prepared, total, seconds, before))
        .collect()
}

/// What a worker reports of `prepared`'s timed calls (`total` over them, in `seconds`).
fn step_result(
    prepared: &Prepared,
    total: IoReport,
    seconds: f64,
    counts_before: CacheCounts,
) -> Result<StepResult, String> {
    let (plan_seconds, server_walk_seconds) = match &prepared.view {
        Some(_) => view_phases(prepared)?,
        None => (0.0, 0.0),
    };
    let cache = prepared
        .task
        .cache
        .as_ref()
        .map(|_| CacheCounts::of(prepared.client.cache_stats()).since(counts_before));
    // A typed or cache step checks its data only at `Check`, once every process is done, so
    // no process verifies on a core another one still needs for its timed calls.
    let deferred = prepared.task.pattern.typed() || prepared.via == Via::Cached;
    let verified = prepared.task.write || (!deferred && verify(prepared));
    let calls = u64::from(prepared.task.iterations.max(1));
    // A view call over the whole share reaches the servers its list call would.
    let (list_offset_bytes, servers) = prepared.list_plan.clone().unwrap_or_default();
    let offset_bytes = if prepared.view.is_some() {
        total.requests / calls * VIEW_OFFSET_BYTES_PER_REQUEST
    } else {
        list_offset_bytes
    };
    Ok(StepResult {
        seconds,
        requests: total.requests,
        messages: total.messages_sent,
        storage_pieces: total.storage_pieces,
        storage_bytes: total.storage_bytes,
        sieved: total.sieved,
        locks: total.locks,
        bytes: total.bytes,
        one_sided: total.one_sided,
        bytes_copied: total.bytes_copied,
        memory_pieces: prepared.access.memory.len() as u64,
        file_pieces: prepared.access.file.len() as u64,
        access_bytes: prepared.access.file.iter().map(|piece| piece.length).sum(),
        verified,
        error: None,
        offset_bytes,
        servers,
        declare_bytes: prepared.declare_bytes,
        declare_seconds: prepared.declare_seconds,
        plan_seconds,
        server_walk_seconds,
        send_seconds: total.send_ns as f64 * 1e-9,
        reply_seconds: total.reply_ns as f64 * 1e-9,
        cache,
    })
}

/// Repetitions of each phase [`view_phases`] times (the fastest is kept).
const PHASE_REPETITIONS: usize = 3;

/// Times, outside the timed calls, two phases of one view call of the whole share: the
/// client's planning (the file type's runs over the layout) and each server's type walk of
/// its request (`server_share`, as the iod runs it); the slowest server's walk is kept, since
/// the servers walk at once. A view that matches a pattern layout is planned and shared
/// without a walk on either side (`MatchedView`), as the client and iod do; its match was
/// found once, when the view was declared. The rest of a call is transfer, storage and reply.
fn view_phases(prepared: &Prepared) -> Result<(f64, f64), String> {
    let Some(filetype) = prepared.task.pattern.filetype()? else {
        return Ok((0.0, 0.0));
    };
    let layout = prepared.file.layout();
    let total = filetype.size();
    let matched = MatchedView::of(layout, &filetype, 0);
    let bulk_max = u64::from(MESSAGE_BULK_BYTES_MAX);
    let mut plan_seconds = f64::INFINITY;
    let mut plan = None;
    for _ in 0..PHASE_REPETITIONS {
        let started = Instant::now();
        if let Some(matched) = matched {
            plan = Some(Plan::matched(matched, 0, total, bulk_max));
            plan_seconds = plan_seconds.min(started.elapsed().as_secs_f64());
            continue;
        }
        let runs = filetype
            .runs(0, 0, total)
            .map_err(|err| format!("view phases: {err}"))?
            .map(|run| {
                Piece::new(
                    u64::try_from(run.offset).expect("matrix types start at byte 0"),
                    run.length,
                )
            });
        // As a view call plans it when no piece travels in a frame of its own.
        let made = Plan::counted_from_runs(layout, 0, runs, bulk_max);
        plan_seconds = plan_seconds.min(started.elapsed().as_secs_f64());
        plan = Some(made);
    }
    let plan = plan.expect("at least one repetition");
    let mut walk_seconds = 0.0f64;
    for request in &plan.requests {
        let file = FileType {
            layout: layout.clone(),
            position: u16::try_from(request.server_position)
                .map_err(|_| "a server position over u16".to_owned())?,
            filetype: filetype.clone(),
            displacement: 0,
        };
        let mut best = f64::INFINITY;
        for _ in 0..PHASE_REPETITIONS {
            let started = Instant::now();
            let (start, end) = request.stream;
            let share = match matched {
                Some(matched) => matched.share(&file, start, end),
                None => server_share(&file, start, end, &request.stream_ranges()),
            }
            .map_err(|err| format!("view phases: {err}"))?;
            std::hint::black_box(&share);
            best = best.min(started.elapsed().as_secs_f64());
        }
        walk_seconds = walk_seconds.max(best);
    }
    Ok((plan_seconds, walk_seconds))
}

/// The untimed end of a step: verifies a read and releases the view.
fn check(prepared: &mut Prepared) -> Result<bool, String> {
    let verified = prepared.task.write || verify(prepared);
    if let Some(view) = prepared.view.take() {
        view.release()
            .map_err(|err| format!("releasing the view: {err}"))?;
    }
    Ok(verified)
}

/// The worker side: serve steps until the parent closes standard input.
pub fn run(args: &WorkerArgs) -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut output = std::io::stdout();
    let mut group: Vec<Prepared> = Vec::new();
    let failed = |err: String| Message::Failed(format!("worker {}: {err}", args.rank));
    while let Some(message) = receive(&mut input)? {
        let reply = match message {
            Message::Prepare(tasks) => {
                // The previous group's clients close their connections first.
                group.clear();
                match tasks.into_iter().map(prepare).collect() {
                    Ok(ready) => {
                        group = ready;
                        Message::Ready
                    }
                    Err(err) => failed(err),
                }
            }
            Message::Go if group.is_empty() => failed("go before prepare".to_owned()),
            Message::Go => run_group(&mut group).map_or_else(failed, Message::Done),
            Message::Check if group.is_empty() => failed("check before prepare".to_owned()),
            Message::Check => group
                .iter_mut()
                .map(check)
                .collect::<Result<_, _>>()
                .map_or_else(failed, Message::Checked),
            other => Message::Failed(format!("worker {}: unexpected {other:?}", args.rank)),
        };
        send(&mut output, &reply)?;
    }
    Ok(())
}
