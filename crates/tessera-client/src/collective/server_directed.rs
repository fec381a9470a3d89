//! Server-directed collective I/O (seed 004, ECIO): each process sends its own share of the
//! access straight to the servers, and each server merges the processes' parts.
//!
//! 1. Each process plans its access as datatype I/O would ([`Plan::from_runs_capped`]): one
//!    request per involved server carrying its view's file type and its stream range, its
//!    requests kept to `collective_bytes_max / (2 · processes)` bytes so that every
//!    participant's part of a round fits the server's limit at once.
//! 2. One allgather carries rank 0's freshly drawn collective id and every process's request
//!    count per server. From it every process computes, for each server and request round,
//!    how many participants the server must wait for.
//! 3. Every process sends its requests (`WriteCollective` / `ReadCollective`) with the tag
//!    (id, round, rank, participants, wait) and its data, round by round as any datatype call
//!    does. The server answers once the last participant of the round has arrived and the
//!    merged runs are in storage (or read), so the data crosses the network once.
//!
//! A collective with more participants on one server than `collective_participants_max`
//! (every process computes the same counts, so all decide alike) runs as two-phase instead.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use tessera_proto::limits::{COLLECTIVE_BYTES_MAX, COLLECTIVE_PARTICIPANTS_MAX};
use tessera_proto::{CollectiveTag, ReadCollective, WriteCollective};

use super::{agree, two_phase, Access, CollectiveOptions, Communicator, Reader, Writer};
use crate::access::{memory_slices, memory_slices_mut, ViewedFile};
use crate::error::ClientError;
use crate::file::IoReport;
use crate::plan::{Plan, RequestPlan};
use crate::typed::piece_count;

/// A fresh collective id (rank 0 draws it for the group).
fn draw_id() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos()),
    );
    hasher.finish()
}

/// The plan of this process's access, checked.
fn plan(
    viewed: &ViewedFile,
    access: &Access<'_>,
    processes: usize,
    options: &CollectiveOptions,
) -> Result<Plan, ClientError> {
    let (total, end) = access.range(viewed)?;
    if total == 0 {
        return Ok(Plan::default());
    }
    crate::encodable::check_encodable("file type", viewed.filetype())?;
    let cap = options
        .request_bytes_max
        .unwrap_or(COLLECTIVE_BYTES_MAX / (2 * processes as u64));
    let runs = viewed.pieces(access.offset, end)?;
    Ok(viewed.file().plan_typed(access.offset, runs, cap))
}

/// What the group agreed: the id, and the participants of each (server position, round).
struct Agreement {
    id: u64,
    /// `participants[position][round]`.
    participants: Vec<Vec<u32>>,
}

impl Agreement {
    fn tag(&self, plan: &Plan, planned: &RequestPlan, rank: usize, wait_ms: u32) -> CollectiveTag {
        let round = plan
            .requests
            .iter()
            .take_while(|request| !std::ptr::eq(*request, planned))
            .filter(|request| request.server_position == planned.server_position)
            .count();
        CollectiveTag {
            id: self.id,
            round: u32::try_from(round).expect("rounds fit u32"),
            rank: u32::try_from(rank).expect("ranks fit u32"),
            participants: self.participants[planned.server_position][round],
            wait_ms,
        }
    }

    fn most_participants(&self) -> u32 {
        self.participants
            .iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// Exchanges the id and the request counts (or any process's error).
fn agreement(
    viewed: &ViewedFile,
    communicator: &dyn Communicator,
    plan: &Result<Plan, ClientError>,
) -> Result<Agreement, ClientError> {
    let positions = viewed.file().layout().servers().len();
    let local = match plan {
        Ok(plan) => {
            let mut counts = vec![0u32; positions];
            for request in &plan.requests {
                counts[request.server_position] += 1;
            }
            let mut writer = Writer::default();
            writer.u64(if communicator.rank() == 0 {
                draw_id()
            } else {
                0
            });
            writer.u32(u32::try_from(positions).expect("servers_max fits u32"));
            for count in counts {
                writer.u32(count);
            }
            Ok(writer.0)
        }
        Err(error) => Err(ClientError::Collective(error.to_string())),
    };
    let all = agree(communicator, local)?;
    let mut id = 0;
    let mut participants: Vec<Vec<u32>> = vec![Vec::new(); positions];
    for (rank, message) in all.iter().enumerate() {
        let mut reader = Reader::new(message, rank);
        let drawn = reader.u64()?;
        if rank == 0 {
            id = drawn;
        }
        let theirs = reader.u32()? as usize;
        if theirs != positions {
            return Err(ClientError::Collective(format!(
                "rank {rank} sees {theirs} servers in the file's layout, this process {positions}"
            )));
        }
        for rounds in &mut participants {
            let count = reader.u32()? as usize;
            if rounds.len() < count {
                rounds.resize(count, 0);
            }
            for round in rounds.iter_mut().take(count) {
                *round += 1;
            }
        }
    }
    Ok(Agreement { id, participants })
}

pub(crate) fn write(
    viewed: &mut ViewedFile,
    communicator: &dyn Communicator,
    options: &CollectiveOptions,
    access: &Access<'_>,
    memory: &[u8],
) -> Result<IoReport, ClientError> {
    let planned = plan(viewed, access, communicator.size(), options).and_then(|plan| {
        memory_slices(memory, access.memtype, access.count)?;
        Ok(plan)
    });
    let agreement = match agreement(viewed, communicator, &planned) {
        Ok(agreement) => agreement,
        Err(error) => return Err(planned.err().unwrap_or(error)),
    };
    let plan = planned?;
    if agreement.most_participants() > COLLECTIVE_PARTICIPANTS_MAX {
        return two_phase::write(viewed, communicator, options, access, memory);
    }
    if plan.requests.is_empty() {
        return Ok(IoReport::default());
    }
    let file = viewed.file();
    let filetype = viewed.filetype().clone();
    let displacement = viewed.displacement();
    let rank = communicator.rank();
    let slices = memory_slices(memory, access.memtype, access.count)?;
    let capability = file.capability()?;
    file.send_writes(&plan, slices, |planned, mode| WriteCollective {
        handle: file.handle(),
        capability: capability.clone(),
        mode,
        storage: file.storage_plan(),
        file: file.file_type(planned.server_position, &filetype, displacement),
        start: planned.stream.0,
        end: planned.stream.1,
        ranges: planned.stream_ranges(),
        pieces: piece_count(planned),
        collective: agreement.tag(&plan, planned, rank, options.wait_ms),
    })
}

pub(crate) fn read(
    viewed: &mut ViewedFile,
    communicator: &dyn Communicator,
    options: &CollectiveOptions,
    access: &Access<'_>,
    memory: &mut [u8],
) -> Result<IoReport, ClientError> {
    let planned = plan(viewed, access, communicator.size(), options).and_then(|plan| {
        memory_slices_mut(memory, access.memtype, access.count)?;
        Ok(plan)
    });
    let agreement = match agreement(viewed, communicator, &planned) {
        Ok(agreement) => agreement,
        Err(error) => return Err(planned.err().unwrap_or(error)),
    };
    let plan = planned?;
    if agreement.most_participants() > COLLECTIVE_PARTICIPANTS_MAX {
        return two_phase::read(viewed, communicator, options, access, memory);
    }
    if plan.requests.is_empty() {
        return Ok(IoReport::default());
    }
    let file = viewed.file();
    let filetype = viewed.filetype().clone();
    let displacement = viewed.displacement();
    let rank = communicator.rank();
    let slices = memory_slices_mut(memory, access.memtype, access.count)?;
    let capability = file.capability()?;
    file.send_reads(&plan, slices, |planned, mode| ReadCollective {
        handle: file.handle(),
        capability: capability.clone(),
        mode,
        storage: file.storage_plan(),
        file: file.file_type(planned.server_position, &filetype, displacement),
        start: planned.stream.0,
        end: planned.stream.1,
        ranges: planned.stream_ranges(),
        collective: agreement.tag(&plan, planned, rank, options.wait_ms),
    })
}
