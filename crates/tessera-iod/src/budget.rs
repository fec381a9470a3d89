//! The iod's bulk-buffer budget and each user's share of it.
//!
//! Every request that holds data in a server buffer (a write's data as it arrives, a read's
//! before it is sent, a pipelined transfer's two units, a sieving chunk) first takes its bytes
//! from the budget: at most `IOD_BUFFER_BYTES_MAX` at once over all peers, and at most
//! `IOD_BUFFER_BYTES_PER_UID_MAX` of it for one uid (the uid its connection authenticated
//! as). A request waits for its bytes without holding a work slot
//! ([`ServerConnection::waiting`](tessera_net::server::ServerConnection::waiting)); so a user
//! whose requests stall (writes whose data never comes, reads whose replies are never read)
//! holds at most its share, and the others' requests find the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tessera_proto::limits::{IOD_BUFFER_BYTES_MAX, IOD_BUFFER_BYTES_PER_UID_MAX};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is counted in units of this many bytes.
const PERMIT_BYTES: u64 = 1024;

fn permits(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(PERMIT_BYTES)).expect("a budget fits u32 permits")
}

/// The budget and the shares of the uids that hold some of it now.
#[derive(Debug)]
pub struct BufferBudget {
    all: Arc<Semaphore>,
    shares: Mutex<HashMap<u32, Arc<Semaphore>>>,
}

impl Default for BufferBudget {
    fn default() -> Self {
        Self {
            all: Arc::new(Semaphore::new(permits(IOD_BUFFER_BYTES_MAX) as usize)),
            shares: Mutex::default(),
        }
    }
}

/// Bytes taken from the budget, given back on drop.
#[derive(Debug)]
pub struct Taken<'a> {
    budget: &'a BufferBudget,
    uid: u32,
    share: Option<OwnedSemaphorePermit>,
    all: Option<OwnedSemaphorePermit>,
}

impl BufferBudget {
    /// Waits until `uid` may hold `bytes` more (within its share and the whole budget).
    pub async fn take(&self, uid: u32, bytes: u64) -> Taken<'_> {
        let wanted = permits(bytes.min(IOD_BUFFER_BYTES_PER_UID_MAX));
        let share = Arc::clone(
            self.shares
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(uid)
                .or_insert_with(|| {
                    Arc::new(Semaphore::new(
                        permits(IOD_BUFFER_BYTES_PER_UID_MAX) as usize
                    ))
                }),
        );
        // The share first: a uid at its share waits there, taking nothing of the rest.
        let share = share
            .acquire_many_owned(wanted)
            .await
            .expect("a share is never closed");
        let all = Arc::clone(&self.all)
            .acquire_many_owned(wanted)
            .await
            .expect("the budget is never closed");
        Taken {
            budget: self,
            uid,
            share: Some(share),
            all: Some(all),
        }
    }

    /// Uids that hold some of the budget now (for tests).
    pub fn holders(&self) -> usize {
        self.shares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        drop(self.all.take());
        drop(self.share.take());
        // A share nobody holds or waits for is forgotten, so the table holds only the uids
        // with requests in progress.
        let mut shares = self
            .budget
            .shares
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let idle = shares.get(&self.uid).is_some_and(|share| {
            Arc::strong_count(share) == 1
                && share.available_permits() == permits(IOD_BUFFER_BYTES_PER_UID_MAX) as usize
        });
        if idle {
            shares.remove(&self.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_uid_holds_at_most_its_share_and_the_others_find_the_rest() {
        let budget = BufferBudget::default();
        let mut held = Vec::new();
        let share = IOD_BUFFER_BYTES_PER_UID_MAX;
        for _ in 0..share / (16 << 20) {
            held.push(budget.take(2001, 16 << 20).await);
        }
        // The uid's next request waits, another uid's does not.
        let more = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budget.take(2001, 16 << 20),
        )
        .await;
        assert!(more.is_err(), "a uid past its share was served");
        let other = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budget.take(2002, 16 << 20),
        )
        .await
        .expect("another uid finds the rest of the budget");
        assert_eq!(budget.holders(), 2);
        drop(other);
        assert_eq!(budget.holders(), 1, "an idle share is forgotten");
        held.pop();
        let again = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budget.take(2001, 16 << 20),
        )
        .await;
        assert!(again.is_ok(), "a released share serves its uid again");
        drop(again);
        held.clear();
        assert_eq!(budget.holders(), 0);
    }
}
