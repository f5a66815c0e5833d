//! A feed of created sessions kept in memory
//! ([`SessionStore::created_since`](harness::session::SessionStore::created_since)),
//! for the stores whose index lives in memory (the memory and log stores).

use harness::SessionId;
use harness::session::Created;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Positions from 1, one per creation, and the ids still in the feed by
/// position.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    last: u64,
    ids: BTreeMap<u64, SessionId>,
}

impl Feed {
    /// Adds a creation of `session`; its position.
    pub(crate) fn push(&mut self, session: SessionId) -> u64 {
        self.last += 1;
        self.ids.insert(self.last, session);
        self.last
    }

    /// Takes the creation at `position` out (the session is gone).
    pub(crate) fn remove(&mut self, position: u64) {
        self.ids.remove(&position);
    }

    /// The page after `since` (see the trait): from the start when `since`
    /// is past the end (another store's position).
    pub(crate) fn page(&self, since: Option<u64>, limit: usize) -> Created {
        let Some(since) = since else {
            return Created {
                sessions: Vec::new(),
                next: self.last,
            };
        };
        let since = if since > self.last { 0 } else { since };
        let mut page = Created {
            sessions: Vec::new(),
            next: since,
        };
        for (&position, id) in self
            .ids
            .range((Bound::Excluded(since), Bound::Unbounded))
            .take(limit)
        {
            page.next = position;
            page.sessions.push(id.clone());
        }
        page
    }
}
