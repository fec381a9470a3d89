//! This server's share of a datatype access: the pieces of its objects that stream bytes
//! `[start, end)` of a file type touch. A view that matches a pattern layout, or repeats its
//! last range, needs no walk; a short walk runs on the async worker, a long one on a blocking
//! thread (it may visit millions of segments).

use std::sync::Arc;

use tessera_proto::access::{check_stream_ranges, server_share, server_share_within, Share};
use tessera_proto::{CollectiveTag, ErrorCode, FileType, Layout, Piece, RemoteError};

use super::INLINE_STORAGE_BYTES_MAX;
use crate::collective;
use crate::views::Declared;

/// A share of a file type without holes (the default view, a contiguous access) over a
/// striped file is found on the async worker when its range crosses at most this many stripe
/// units: the walk is one run cut at stripe boundaries, cheaper than the hop to a blocking
/// thread and back that every datatype write of more than 64 KiB paid.
const INLINE_DENSE_SHARE_SEGMENTS_MAX: u64 = 1024;

/// Most segments (of all servers) a datatype walk crosses inline before it is given up and
/// redone on a blocking thread: about 0.2 ms of walking here.
const INLINE_SHARE_SEGMENTS_MAX: u64 = 8192;

/// The share of a collective request: its tag checked, then its type walked.
pub(super) async fn collective(
    tag: &CollectiveTag,
    file: FileType,
    start: u64,
    end: u64,
    ranges: Vec<Piece>,
) -> Result<Share, RemoteError> {
    collective::check_tag(tag)?;
    find(Declared::of_type(file), start, end, ranges).await
}

/// Finds this server's share of a datatype range: without a walk for a view that matches
/// a pattern layout or whose last request was of the same range
/// ([`KeptShare`](crate::views::KeptShare)); otherwise by a walk.
pub(super) async fn find(
    view: Declared,
    start: u64,
    end: u64,
    ranges: Vec<Piece>,
) -> Result<Share, RemoteError> {
    let Declared {
        file,
        matched,
        kept,
    } = view;
    if let Some(matched) = matched {
        check_stream_ranges(&ranges, start, end)?;
        return matched.share(&file, start, end);
    }
    let Some(kept) = kept else {
        return walk(file, start, end, ranges).await;
    };
    if let Some(share) = kept.get(start, end, &ranges) {
        return Ok(share);
    }
    let key = ranges.clone();
    let share = walk(file, start, end, ranges).await?;
    kept.keep(start, end, &key, &share);
    Ok(share)
}

/// Walks `file` for this server's share of stream bytes `[start, end)`: inline when the
/// range is small, or not too large and the type has no holes; otherwise on a blocking
/// thread (the walk may visit millions of segments).
async fn walk(
    file: Arc<FileType>,
    start: u64,
    end: u64,
    ranges: Vec<Piece>,
) -> Result<Share, RemoteError> {
    let bytes = end.saturating_sub(start);
    let holes = !file.filetype.is_dense()
        || u64::try_from(file.filetype.extent()).ok() != Some(file.filetype.size());
    let few_segments = match &file.layout {
        Layout::Stripe(stripe) => {
            bytes / stripe.stripe_unit_bytes < INLINE_DENSE_SHARE_SEGMENTS_MAX
        }
        Layout::Pattern(_) => false,
    };
    if bytes <= INLINE_STORAGE_BYTES_MAX || (!holes && few_segments) {
        return server_share(&file, start, end, &ranges);
    }
    // Most walks are short whatever their bytes (a row per segment): try inline first,
    // since the hop to a blocking thread costs more than such a walk on a loaded host.
    if let Some(share) = server_share_within(&file, start, end, &ranges, INLINE_SHARE_SEGMENTS_MAX)?
    {
        return Ok(share);
    }
    tokio::task::spawn_blocking(move || server_share(&file, start, end, &ranges))
        .await
        .unwrap_or_else(|err| {
            Err(RemoteError::new(
                ErrorCode::Internal,
                format!("share walk failed: {err}"),
            ))
        })
}
