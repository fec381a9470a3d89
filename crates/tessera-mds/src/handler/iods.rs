//! The mds's calls to its iods: one request to one iod, the same request to many at once, and
//! the check that each iod is the server expected at its address, over any of its pools.

use tessera_net::{NetError, Pool};
use tessera_proto::{ErrorCode, RemoteError, Request};

use super::net_error;

/// [`Inner::check_servers`] over `pool`.
pub(super) fn check_servers_on(pool: &Pool, servers: &[u16]) -> Result<(), (u16, NetError)> {
    for &server in servers {
        let index = usize::from(server);
        if index >= pool.peers().len() {
            return Err((
                server,
                NetError::Remote {
                    peer: format!("iod {server}"),
                    error: RemoteError::new(
                        ErrorCode::Internal,
                        format!("layout names iod {server}, which the cluster lacks"),
                    ),
                },
            ));
        }
        pool.lease(index)
            .map(drop)
            .map_err(|error| (server, error))?;
    }
    Ok(())
}

/// One request to iod `server` over `pool`.
pub(super) fn iod_call_on<R: Request>(
    pool: &Pool,
    server: u16,
    request: &R,
) -> Result<R::Reply, RemoteError> {
    let index = usize::from(server);
    if index >= pool.peers().len() {
        return Err(RemoteError::new(
            ErrorCode::Internal,
            format!("layout names iod {server}, which the cluster lacks"),
        ));
    }
    pool.with(index, |connection| connection.call(request))
        .map_err(net_error)
}

/// [`Inner::iod_call_each`] over `pool`.
pub(super) fn iod_call_each_on<R: Request>(
    pool: &Pool,
    servers: &[u16],
    request_for: impl Fn(u16) -> R,
) -> Vec<Result<R::Reply, RemoteError>> {
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.sort_by_key(|&position| servers[position]);
    let distinct = order
        .windows(2)
        .all(|pair| servers[pair[0]] != servers[pair[1]]);
    let known = servers
        .iter()
        .all(|&server| usize::from(server) < pool.peers().len());
    if !distinct || !known {
        // Not a layout the mds makes: one at a time, each error named by `iod_call`.
        return servers
            .iter()
            .map(|&server| iod_call_on(pool, server, &request_for(server)))
            .collect();
    }
    let requests: Vec<R> = order
        .iter()
        .map(|&position| request_for(servers[position]))
        .collect();
    let calls: Vec<(usize, &R)> = order
        .iter()
        .zip(&requests)
        .map(|(&position, request)| (usize::from(servers[position]), request))
        .collect();
    let mut replies: Vec<Option<Result<R::Reply, RemoteError>>> =
        servers.iter().map(|_| None).collect();
    for (&position, reply) in order.iter().zip(pool.call_each(&calls)) {
        replies[position] = Some(reply.map_err(net_error));
    }
    replies
        .into_iter()
        .map(|reply| reply.expect("every server of the call answered or failed"))
        .collect()
}

/// The servers whose reply was a success, and the others with their errors, in the order of
/// `servers`.
pub(super) fn split_replies<T>(
    servers: &[u16],
    replies: Vec<Result<T, RemoteError>>,
) -> (Vec<u16>, Vec<(u16, RemoteError)>) {
    let mut made = Vec::new();
    let mut refused = Vec::new();
    for (&server, reply) in servers.iter().zip(replies) {
        match reply {
            Ok(_) => made.push(server),
            Err(error) => refused.push((server, error)),
        }
    }
    (made, refused)
}
