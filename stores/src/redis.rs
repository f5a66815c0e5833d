//! The Redis store.

use crate::clock::ServerClock;
use crate::record::{
    checkpoint_from_slice, checkpoint_to_vec, head_from_slice, head_to_vec, load_error,
};
use async_trait::async_trait;
use harness::SessionId;
use harness::session::{
    Checkpoint, Commit, Created, SCHEMA_VERSION, SessionPhase, SessionStore, StoreError, StoredRun,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Display};
use std::sync::Arc;
use std::time::Duration;

/// The key prefix unless told otherwise.
const DEFAULT_PREFIX: &str = "harness";
/// How long [`runnable`](SessionStore::runnable) hides the sessions it
/// returns from other callers, unless told otherwise.
const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(10);
/// How much longer than its head a finished session's log lives, so that a
/// reader who saw the head can still read the log.
const LOG_TTL_MARGIN_MS: u64 = 1_000;
/// The longest a finished session's keys are kept before they expire (1,000
/// years, in ms): a longer [`RedisOptions::finished_ttl`] is taken as this.
/// Redis keeps a key's expiry as ms since the epoch in a signed 64-bit
/// integer and refuses a `PEXPIRE` past it, and the commit script sets the
/// expiry after it has written the head: an unbounded TTL
/// (`Duration::MAX`) would fail a commit that had been applied.
const MAX_FINISHED_TTL_MS: u64 = 1_000 * 365 * 24 * 3_600 * 1_000;
/// Checkpoint fields read per `HMGET` in the log script.
const HMGET_CHUNK: usize = 500;

/// The commit: checks the stored head (readable, this schema version, this
/// session, the expected version) and applies head, removals, appends and
/// the indexes at once. Replies `{'ok'}`, `{'conflict', found}` (found: the
/// stored version, '' for none) or `{'unreadable', stored head}`.
///
/// KEYS: head, checkpoints, seqs, sessions, running, leases, claims, agents,
/// the agent's ready and waiting sets (see "Finding work" on
/// [`RedisStore`]), the sorted index of ids (see "Listing"), and the feed of
/// created sessions with its counter.
/// ARGV: id, expected ('' for none), head JSON, schema version, running
/// ('1'/'0'), updated_at, lease expiry ('' for none), head TTL ms ('0' for
/// none), log TTL ms, number of removals, the agent, the removed fields,
/// then pairs of appended field and checkpoint JSON.
///
/// Redis does not undo a script that fails part way, so every key's type
/// (and the feed's counter, an integer) is checked before anything is
/// written: a key of another type (an application's, a hand-made one)
/// fails the commit with nothing written, naming the key, where it would
/// have left a head without its indexes (a session no worker finds).
const COMMIT_LUA: &str = r"
local function check(first, last, kinds)
  for i = first, last do
    local t = redis.call('TYPE', KEYS[i]).ok
    if t ~= 'none' and t ~= kinds[i] then
      return redis.error_reply('key ' .. KEYS[i] .. ' holds a ' .. t .. ', not a ' .. kinds[i] ..
        '; nothing was written')
    end
  end
  return nil
end
local kinds = {'string', 'hash', 'zset', 'set', 'zset', 'hash', 'hash', 'hash', 'zset', 'zset',
  'zset', 'zset', 'string'}
local bad = check(1, 11, kinds)
if bad then return bad end
local cur = redis.call('GET', KEYS[1])
local found = ''
if cur then
  local ok, doc = pcall(cjson.decode, cur)
  if not ok or type(doc) ~= 'table' or doc.schema_version ~= tonumber(ARGV[4])
      or doc.session_id ~= ARGV[1] or type(doc.version) ~= 'number' then
    return {'unreadable', cur}
  end
  found = string.format('%.0f', doc.version)
end
if found ~= ARGV[2] then
  return {'conflict', found}
end
-- The feed of created sessions is written by a creation only: a key of
-- it that cannot be written fails creations, never the commits of
-- sessions under way.
if found == '' then
  bad = check(12, 13, kinds)
  if bad then return bad end
  local counter = redis.call('GET', KEYS[13])
  if counter and not string.match(counter, '^%d+$') then
    return redis.error_reply('key ' .. KEYS[13] .. ' holds ' .. string.format('%q', counter) ..
      ', not a count; nothing was written')
  end
end
redis.call('ZADD', KEYS[11], 0, ARGV[1])
if found == '' then
  redis.call('ZADD', KEYS[12], redis.call('INCR', KEYS[13]), ARGV[1])
end
local i = 12
for _ = 1, tonumber(ARGV[10]) do
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('ZREM', KEYS[3], ARGV[i])
  i = i + 1
end
while i < #ARGV do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[3], 0, ARGV[i])
  i = i + 2
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[1])
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[5], ARGV[6], ARGV[1])
  redis.call('HSET', KEYS[8], ARGV[1], ARGV[11])
  if ARGV[7] ~= '' then
    redis.call('ZREM', KEYS[9], ARGV[1])
    redis.call('ZADD', KEYS[10], ARGV[7], ARGV[1])
  else
    redis.call('ZREM', KEYS[10], ARGV[1])
    redis.call('ZADD', KEYS[9], ARGV[6], ARGV[1])
  end
else
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[8], ARGV[1])
  redis.call('ZREM', KEYS[9], ARGV[1])
  redis.call('ZREM', KEYS[10], ARGV[1])
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[6], ARGV[1], ARGV[7])
else
  redis.call('HDEL', KEYS[6], ARGV[1])
end
redis.call('HDEL', KEYS[7], ARGV[1])
if ARGV[8] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  redis.call('PEXPIRE', KEYS[2], ARGV[9])
  redis.call('PEXPIRE', KEYS[3], ARGV[9])
else
  redis.call('PERSIST', KEYS[2])
  redis.call('PERSIST', KEYS[3])
end
return {'ok'}
";

/// The log from a seq: pairs of field and checkpoint JSON, in seq order
/// ('' for a field the index lists and the hash lacks).
///
/// KEYS: checkpoints, seqs. ARGV: the first field, the chunk size.
const CHECKPOINTS_LUA: &str = r"
local fields = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. ARGV[1], '+')
local out = {}
local chunk = tonumber(ARGV[2])
for i = 1, #fields, chunk do
  local part = {}
  for j = i, math.min(i + chunk - 1, #fields) do
    part[#part + 1] = fields[j]
  end
  local docs = redis.call('HMGET', KEYS[1], unpack(part))
  for k = 1, #part do
    out[#out + 1] = part[k]
    out[#out + 1] = docs[k] or ''
  end
end
return out
";

/// The sessions whose head exists; forgets the ids of expired ones (in both
/// indexes of ids) unless ARGV[2] is '0'.
///
/// KEYS: sessions, ids, created. ARGV: the prefix, forget ('1'/'0').
const SESSIONS_LUA: &str = r"
for i, kind in pairs({[1] = 'set', [2] = 'zset', [3] = 'zset'}) do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('key ' .. KEYS[i] .. ' holds a ' .. t .. ', not a ' .. kind)
  end
end
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. ':{' .. id .. '}:head') == 1 then
    out[#out + 1] = id
  elseif ARGV[2] == '1' then
    redis.call('SREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
  end
end
return out
";

/// The `SSCAN` count of each step that builds `P:ids` from `P:sessions`,
/// one step per call until the index is built (see [`PAGE_LUA`]).
const IDS_BUILD_PER_CALL: usize = 4_096;
/// The `SSCAN` count of the step of `P:sessions` re-indexed into `P:ids` at
/// each call once it is built: what finds the sessions an older version of
/// this store wrote meanwhile (a rolling deploy).
const IDS_REINDEX_PER_CALL: usize = 64;

/// A page of session ids from the sorted index `P:ids` (every score 0, so
/// members sort by their bytes): those from the bound ARGV[3] on
/// (`ZRANGEBYLEX` syntax) that start with ARGV[2], whose head exists, at
/// most ARGV[4]. An id whose head is gone (expired) is skipped, and a
/// writer (ARGV[5] = '1') forgets it in both indexes and the feed of
/// created sessions.
///
/// Sessions written before the index existed are in `P:sessions` only: a
/// writer builds the index from it by steps of ARGV[6] ids (`SSCAN`, its
/// cursor in KEYS[4]) and replies `{'unbuilt', {}}` until the step that
/// ends the scan, which sets the marker KEYS[3]; a reader replies
/// `{'unbuilt', {}}` while the marker is absent. Once built, each writer's
/// call re-indexes ARGV[7] ids of `P:sessions`, round and round.
///
/// KEYS: ids, sessions, marker, cursor, created. ARGV: key prefix, id prefix, lower
/// bound, limit, writer, build step, re-index step. Replies `{'page', ids}`
/// or `{'unbuilt', {}}`.
const PAGE_LUA: &str = r"
for i, kind in pairs({[1] = 'zset', [2] = 'set', [5] = 'zset'}) do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('key ' .. KEYS[i] .. ' holds a ' .. t .. ', not a ' .. kind)
  end
end
local writer = ARGV[5] == '1'
local function index(count)
  local scan = redis.call('SSCAN', KEYS[2], redis.call('GET', KEYS[4]) or '0', 'COUNT', count)
  for _, id in ipairs(scan[2]) do redis.call('ZADD', KEYS[1], 0, id) end
  return scan[1]
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  if not writer then return {'unbuilt', {}} end
  local cursor = index(ARGV[6])
  if cursor ~= '0' then
    redis.call('SET', KEYS[4], cursor)
    return {'unbuilt', {}}
  end
  redis.call('SET', KEYS[3], '1')
  redis.call('DEL', KEYS[4])
elseif writer then
  redis.call('SET', KEYS[4], index(ARGV[7]))
end
local prefix = ARGV[2]
local min = ARGV[3]
local limit = tonumber(ARGV[4])
local heads = ARGV[1] .. ':{'
local out = {}
while #out < limit do
  local want = math.min(limit - #out, 256)
  local ids = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, want)
  local done = #ids < want
  for _, id in ipairs(ids) do
    if string.sub(id, 1, #prefix) ~= prefix then
      done = true
      break
    end
    if redis.call('EXISTS', heads .. id .. '}:head') == 1 then
      out[#out + 1] = id
    elseif writer then
      redis.call('ZREM', KEYS[1], id)
      redis.call('SREM', KEYS[2], id)
      redis.call('ZREM', KEYS[5], id)
    end
    min = '(' .. id
  end
  if done then break end
end
return {'page', out}
";

/// What both runnable scripts begin with: `check_types(kinds)` (the reply
/// naming the first key among `KEYS[1..]` that holds another type than
/// `kinds` says, or nil), `now` and `limit` (`ARGV[1]`, `ARGV[2]`),
/// `over(v, id, bad)` (whether a lease or claim value has ended; one that
/// is not a whole number is listed in `bad` and counts as ended) and
/// `agent_of(id)` (`P:agents`, or the head of a session written before it:
/// the key prefix is `ARGV[5]`). A macro, so that each script is one
/// literal at compile time.
macro_rules! runnable_prelude {
    () => {
        r"
local function check_types(kinds)
  for i = 1, #kinds do
    local t = redis.call('TYPE', KEYS[i]).ok
    if t ~= 'none' and t ~= kinds[i] then
      return redis.error_reply('key ' .. KEYS[i] .. ' holds a ' .. t .. ', not a ' .. kinds[i])
    end
  end
  return nil
end
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local prefix = ARGV[5]
local function over(v, id, bad)
  if not v then return true end
  if not string.match(v, '^%d+$') then
    bad[#bad + 1] = id
    return true
  end
  return tonumber(v) <= now
end
local function agent_of(id)
  local agent = redis.call('HGET', KEYS[4], id)
  if agent then return agent end
  local head = redis.call('GET', prefix .. ':{' .. id .. '}:head')
  if head then
    local ok, doc = pcall(cjson.decode, head)
    if ok and type(doc) == 'table' and type(doc.agent_id) == 'string' then
      return doc.agent_id
    end
  end
  return nil
end
"
    };
}

/// Up to `limit` running sessions of one agent with no live lease nor
/// claim, oldest `updated_at` first; claims them until ARGV[3] unless it is
/// '0'. A running session missing from the agents hash (written before it
/// existed) has its agent read from its head; a head that cannot be read
/// belongs to no agent.
///
/// A lease or claim is an expiry in ms as the store writes it (digits). A
/// value that is not one (an edit, another tool) is taken as none and its
/// session id reported, never a failure of the walk: the walk is oldest
/// first, so a failure would stop at the same value every time, and every
/// worker of the agent with it. Taking the session is still the
/// compare-and-set on its head, whose lease is the one that counts. The
/// keys' types are checked before the first claim is written (Redis does
/// not roll back a script that fails part way).
///
/// KEYS: running, leases, claims, agents. ARGV: now, limit, claim until,
/// agent, key prefix. Replies the ids, then the ids whose lease could not
/// be read, then those whose claim could not be read.
const RUNNABLE_LUA: &str = concat!(
    runnable_prelude!(),
    r"
local failed = check_types({'zset', 'hash', 'hash', 'hash'})
if failed then return failed end
local out, bad_leases, bad_claims = {}, {}, {}
local start = 0
local page = 256
while #out < limit do
  local ids = redis.call('ZRANGE', KEYS[1], start, start + page - 1)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    if agent_of(id) == ARGV[4] then
      local lease = redis.call('HGET', KEYS[2], id)
      local claim = redis.call('HGET', KEYS[3], id)
      if over(lease, id, bad_leases) and over(claim, id, bad_claims) then
        out[#out + 1] = id
        if ARGV[3] ~= '0' then
          redis.call('HSET', KEYS[3], id, ARGV[3])
        end
        if #out >= limit then break end
      end
    end
  end
  start = start + page
end
return {out, bad_leases, bad_claims}
"
);

/// Running sessions re-indexed per [`RUNNABLE_INDEXED_LUA`] call, from a
/// cursor over `P:running`: what sessions written by a version of this
/// store before the index (during a rolling deploy) are found by.
const REINDEX_PER_CALL: usize = 32;

/// [`RUNNABLE_LUA`] through the agent's index: its ready set (running, no
/// lease nor claim, scored by `updated_at`) and its waiting set (a lease or
/// claim, scored by when the later one ends). The waiting sessions whose
/// time has come move to the ready set; the ready set is walked oldest
/// first, each session checked against `P:running`, `P:agents` (or its
/// head), `P:leases` and `P:claims` as the full walk does (one no longer
/// running or not the agent's is dropped, one held moves to the waiting
/// set); what it returns is claimed (and waits
/// until the claim ends). A call costs the sessions it returns and those
/// whose lease or claim ended since the last, not every running session.
///
/// The index is built from `P:running` the first time (marker key absent):
/// sessions written before it existed. After that, each call re-indexes
/// ARGV[6] running sessions from a cursor, round and round: a session that
/// an older version of this store wrote meanwhile (a rolling deploy) is
/// found within a few rounds.
///
/// KEYS: running, leases, claims, agents, ready, waiting, marker, cursor.
/// ARGV: now, limit, claim until, agent, key prefix, re-index per call.
/// Replies as [`RUNNABLE_LUA`].
const RUNNABLE_INDEXED_LUA: &str = concat!(
    runnable_prelude!(),
    r"
local failed = check_types({'zset', 'hash', 'hash', 'hash', 'zset', 'zset'})
if failed then return failed end
local function expiry(v)
  if v and string.match(v, '^%d+$') then return tonumber(v) end
  return 0
end
local function index(id, updated)
  local agent = agent_of(id)
  if not agent then return end
  local ready = prefix .. ':ready:' .. agent
  local waiting = prefix .. ':waiting:' .. agent
  local at = math.max(expiry(redis.call('HGET', KEYS[2], id)),
    expiry(redis.call('HGET', KEYS[3], id)))
  if at > 0 then
    redis.call('ZREM', ready, id)
    redis.call('ZADD', waiting, at, id)
  else
    redis.call('ZREM', waiting, id)
    redis.call('ZADD', ready, updated, id)
  end
end
if redis.call('EXISTS', KEYS[7]) == 0 then
  local start = 0
  while true do
    local page = redis.call('ZRANGE', KEYS[1], start, start + 511, 'WITHSCORES')
    if #page == 0 then break end
    for i = 1, #page, 2 do index(page[i], page[i + 1]) end
    start = start + 512
  end
  redis.call('SET', KEYS[7], '1')
else
  local step = tonumber(ARGV[6])
  local cursor = tonumber(redis.call('GET', KEYS[8]) or '0') or 0
  local page = redis.call('ZRANGE', KEYS[1], cursor, cursor + step - 1, 'WITHSCORES')
  for i = 1, #page, 2 do index(page[i], page[i + 1]) end
  if #page < 2 * step then cursor = 0 else cursor = cursor + step end
  redis.call('SET', KEYS[8], cursor)
end
while true do
  local due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 256)
  if #due == 0 then break end
  for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[6], id)
    local updated = redis.call('ZSCORE', KEYS[1], id)
    if updated then redis.call('ZADD', KEYS[5], updated, id) end
  end
end
local out, bad_leases, bad_claims = {}, {}, {}
local offset = 0
while #out < limit do
  local ids = redis.call('ZRANGE', KEYS[5], offset, offset + 255)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local stays = false
    if not redis.call('ZSCORE', KEYS[1], id) or agent_of(id) ~= ARGV[4] then
      redis.call('ZREM', KEYS[5], id)
    else
      local lease = redis.call('HGET', KEYS[2], id)
      local claim = redis.call('HGET', KEYS[3], id)
      if over(lease, id, bad_leases) and over(claim, id, bad_claims) then
        out[#out + 1] = id
        if ARGV[3] ~= '0' then
          redis.call('HSET', KEYS[3], id, ARGV[3])
          redis.call('ZREM', KEYS[5], id)
          redis.call('ZADD', KEYS[6], ARGV[3], id)
        else
          stays = true
        end
      else
        redis.call('ZREM', KEYS[5], id)
        redis.call('ZADD', KEYS[6], math.max(expiry(lease), expiry(claim)), id)
      end
    end
    if stays then offset = offset + 1 end
    if #out >= limit then break end
  end
end
return {out, bad_leases, bad_claims}
"
);

#[derive(Debug)]
struct Scripts {
    commit: Script,
    checkpoints: Script,
    sessions: Script,
    page: Script,
    runnable: Script,
    runnable_indexed: Script,
}

/// How a [`RedisStore`] names its keys and expires finished sessions.
///
/// ```
/// use harness_stores::RedisOptions;
/// use std::time::Duration;
///
/// let options = RedisOptions::default()
///     .prefix("agents")
///     .finished_ttl(Duration::from_secs(7 * 24 * 3600));
/// assert_eq!(options.prefix_name(), "agents");
/// ```
#[derive(Clone, Debug)]
pub struct RedisOptions {
    prefix: String,
    finished_ttl: Option<Duration>,
    claim_ttl: Duration,
    read_only: bool,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.into(),
            finished_ttl: None,
            claim_ttl: DEFAULT_CLAIM_TTL,
            read_only: false,
        }
    }
}

impl RedisOptions {
    /// The prefix of every key (default `harness`); it must not be empty nor
    /// contain `{` or `}`. Stores with different prefixes share nothing.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Expire the keys of a session this long after a commit leaves it
    /// completed or failed (default: never). See
    /// [`RedisStore::with_finished_ttl`]; a TTL longer than 1,000 years is
    /// taken as 1,000 years.
    pub fn finished_ttl(mut self, ttl: Duration) -> Self {
        self.finished_ttl = Some(ttl);
        self
    }

    /// How long [`runnable`](SessionStore::runnable) hides the sessions it
    /// returns from other callers (default 10 s); zero makes it a plain
    /// read.
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl;
        self
    }

    /// Opens the store for reading only (default: no), for inspection
    /// tools: commits are refused before they reach the server,
    /// [`runnable`](SessionStore::runnable) claims nothing, and
    /// [`sessions`](SessionStore::sessions) leaves the ids of expired
    /// sessions in the index instead of forgetting them. (Redis has no
    /// read-only connection; give the store a user whose ACL allows reads
    /// only to have the server enforce it.)
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The prefix.
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }
}

/// The oldest server the store works with: scripts are replicated by their
/// effects from 5.0 on, and only then may one write after a command whose
/// reply varies (`SSCAN`), as the listing's scripts do.
pub const MIN_REDIS_VERSION: (u32, u32, u32) = (5, 0, 0);

/// The `redis_version` of an `INFO server` reply, if it has one that reads
/// as `major.minor.patch`.
fn redis_version(info: &str) -> Option<(u32, u32, u32)> {
    let value = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("redis_version:"))?;
    let mut parts = value.trim().splitn(3, '.').map(|p| {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Sessions in Redis, shared by any number of processes.
///
/// Needs Redis 5.0 or later ([`MIN_REDIS_VERSION`];
/// [`connect`](Self::connect) refuses an older server by the version it
/// reports).
///
/// Built on the `redis` crate's tokio [`ConnectionManager`] (one
/// multiplexed connection, reconnecting by itself).
///
/// # Keys
///
/// With the prefix `P` (`harness` by default, see [`RedisOptions::prefix`]):
///
/// - `P:{id}:head`: the head ([`StoredRun`]) as JSON, exactly as serialized;
/// - `P:{id}:cp`: a hash, field = the seq as 20 zero-padded digits, value =
///   the [`Checkpoint`] as JSON;
/// - `P:{id}:seqs`: a sorted set of the same fields, all with score 0, so
///   that `ZRANGEBYLEX` reads the log in seq order (scores are doubles and
///   would not tell `u64::MAX - 1` from `u64::MAX`);
/// - `P:sessions`: the set of session ids;
/// - `P:ids`: the same ids in a sorted set, every score 0, so that
///   `ZRANGEBYLEX` reads them in byte order (see "Listing"); `P:ids-built`
///   marks it built, and `P:ids-cursor` is where its building or
///   re-indexing from `P:sessions` goes on;
/// - `P:created`: the feed of created sessions
///   ([`created_since`](SessionStore::created_since)), a sorted set of the
///   ids scored by their position, which the commit that creates a session
///   takes from the counter `P:created-last` (`INCR`, in the same script,
///   so positions follow the commits' order; scores are doubles, exact up
///   to 2^53 creations); an expired session leaves it when a writer's
///   listing or page forgets its id. Sessions created by a version of this
///   store before it, or by one still running beside it (a rolling
///   deploy), are not in it. Asked from a position above the counter (the
///   server lost its data, and the counter began again), the feed is read
///   from its start, in the same round trip when nothing is new;
/// - `P:running`: a sorted set of the running sessions, scored by
///   `updated_at`;
/// - `P:leases`: a hash, id → lease expiry (ms since the epoch), of the
///   running sessions with a lease;
/// - `P:claims`: a hash, id → claim expiry (see "Finding work");
/// - `P:agents`: a hash, id → agent id, of the running sessions;
/// - `P:ready:AGENT` and `P:waiting:AGENT`: the index of agent `AGENT`'s
///   running sessions that workers look for work in (see "Finding work"):
///   those with no lease nor claim, scored by `updated_at`, and those with
///   one, scored by when it ends; `P:index` marks the index built, and
///   `P:index-cursor` is where its re-indexing goes on.
///
/// The braces make `{id}` the hash tag of a session's own keys, but a
/// commit also updates the shared indexes, so the store needs a single
/// Redis (or a primary with replicas), not Redis Cluster.
///
/// # Commits
///
/// A commit is one Lua script (`EVALSHA`, loaded again after a server
/// restart): it decodes the stored head, refuses it when it is unreadable,
/// of another schema version or another session's (reported as
/// [`StoreError::Load`]; nothing is written), compares its version with the
/// expected one (else [`StoreError::Conflict`] with the version found), and
/// only then writes the head, the removals and appends, and the indexes.
/// Redis runs a script alone, so a commit is atomic for every reader. Redis
/// does not undo a script that fails part way, so the script first checks
/// the type of every key it writes (and that the feed's counter is a
/// number): a key holding something else, an application's or one edited
/// by hand, fails the commit with nothing written, naming the key.
/// Leases need nothing more: they are in the head, taken by compare-and-set.
///
/// # Durability
///
/// Redis acknowledges a write once it is in memory; whether it survives a
/// crash of the server depends on the server's persistence settings, which
/// this store cannot change and does not check. With `appendonly yes` and
/// `appendfsync always`, every commit is on disk before its reply, so every
/// commit is durable, `durable` or not. With `appendfsync everysec` (Redis's
/// default when AOF is on) a server crash can lose about the last second of
/// commits; with RDB snapshots only, or no persistence, much more. The
/// store issues nothing extra for a `durable` commit, and
/// [`flush`](SessionStore::flush) does nothing: choose the persistence
/// settings for the durability you need (replicas add availability, not
/// durability, unless you also wait for them).
///
/// # Finding work
///
/// [`runnable`](SessionStore::runnable) is a script that reads the
/// agent's own index, never the other agents' sessions nor those held by a
/// live lease: it moves the waiting sessions whose lease or claim has ended
/// to the ready set, walks the ready set from the oldest `updated_at`, checks
/// each against `P:running`, `P:leases` and `P:claims` (a lease or claim
/// value that is not an expiry in ms is taken as none, with a warning; an
/// id that is not UTF-8 is skipped, with a warning), and claims what it
/// returns for [`claim_ttl`](RedisOptions::claim_ttl) (default 10 s), so
/// that concurrent workers get different sessions (the same design as
/// `PostgresStore`'s). Any commit clears the claim; taking a session is
/// still the compare-and-set on its head. A call costs the sessions it
/// returns and those whose lease or claim ended since the last one: with
/// 10 000 sessions of another agent waiting and 10 000 of its own running,
/// a worker's poll took 60–72 ms (median of 200) on the walk of
/// `P:running` this replaced, Redis doing nothing else meanwhile, and takes
/// 0.7 ms on the index, as with 100 (`benchmarks/src/bin/redis_runnable.rs`,
/// a debug build, one local Redis).
///
/// The first call builds the index from `P:running` (sessions written by a
/// version of this store before the index: one walk). Each call also
/// re-indexes 32 running sessions from a cursor, round and round, so that a
/// session an older version writes during a rolling deploy is found within
/// a few rounds. A store opened [read-only](RedisOptions::read_only) writes
/// no index: its `runnable` walks `P:running` as before.
///
/// # Listing
///
/// [`sessions`](SessionStore::sessions) lists `P:sessions`, every id.
/// [`sessions_page`](SessionStore::sessions_page) reads a range of `P:ids`
/// instead: from the page's lower bound, the ids under its prefix, each
/// checked against its head, until the page is full. A page costs the ids
/// it returns (and those of expired sessions it meets, which a writer then
/// forgets), not the store's size, so the HTTP server's scheduler, which
/// lists its crons a few times a second, reads its crons and nothing else.
///
/// Data written by a version of this store before `P:ids` existed is in
/// `P:sessions` only. Each page a writer asks for then builds the index
/// from it by one `SSCAN` step of count 4 096 (about as many ids) and is
/// answered from the listing of every id until the step that ends the
/// scan: a store of a few thousand sessions is indexed at its first page.
/// After that, each writer's page re-indexes a step of count 64, round and
/// round, so that a session an older version writes during a rolling
/// deploy is listed after at most one round (`P:sessions`' hash table over
/// 64: 256 pages with 10 000 sessions). A store opened
/// [read-only](RedisOptions::read_only) writes no index: until a writer
/// has built it, its pages come from the listing of every id.
///
/// # Finished sessions
///
/// With [`with_finished_ttl`](Self::with_finished_ttl), a commit that leaves
/// a session completed or failed expires its keys (after at most 1,000
/// years): the head after the TTL,
/// its log a second later (so a reader who saw the head can read the log).
/// A later commit of the session (a continued run) makes them permanent
/// again. Once expired, the session is gone: `load` finds nothing and
/// `sessions` no longer lists it.
///
/// ```no_run
/// use harness_stores::RedisStore;
/// use std::time::Duration;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/")
///     .await?
///     .with_finished_ttl(Duration::from_secs(30 * 24 * 3600));
/// # Ok::<(), harness::session::StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct RedisStore {
    con: ConnectionManager,
    prefix: String,
    finished_ttl: Option<Duration>,
    claim_ttl: Duration,
    /// Opened with [`RedisOptions::read_only`].
    read_only: bool,
    scripts: Arc<Scripts>,
    /// The server's clock, by which leases are judged.
    clock: Arc<ServerClock>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("finished_ttl", &self.finished_ttl)
            .field("claim_ttl", &self.claim_ttl)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// A backend error: what failed, and Redis's own message (never the URL).
fn redis_error(what: impl Display, e: &redis::RedisError) -> StoreError {
    StoreError::backend(format!("redis store: cannot {what}: {e}"))
}

/// Whether Redis refused a command for a key that holds another type
/// than the command reads (`WRONGTYPE`, also from inside a script).
fn wrong_type(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A reply of an unexpected shape.
fn bad_reply(what: impl Display, reply: impl fmt::Debug) -> StoreError {
    StoreError::backend(format!("redis store: {what}: unexpected reply {reply:?}"))
}

impl RedisStore {
    /// Connects to `url` (`redis://[:password@]host:port/db`, `rediss://`
    /// needs the redis crate's TLS features) with the default
    /// [`RedisOptions`].
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to `url` with `options`. An unreachable server is retried
    /// with backoff for several seconds before this fails; once connected,
    /// the connection is re-established by itself after a drop.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let client = Client::open(url).map_err(|e| {
            StoreError::backend(format!("redis store: the URL cannot be used: {e}"))
        })?;
        let addr = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            // A commit whose reply times out may still have been applied:
            // wait long enough that only a sick server does that.
            .set_response_timeout(Some(Duration::from_secs(30)));
        let con = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| redis_error(format_args!("connect to {addr}"), &e))?;
        let store = Self::from_manager(con, options)?;
        store.check_version(&addr).await?;
        store.refresh_clock_if_stale().await;
        Ok(store)
    }

    /// Refuses a server older than [`MIN_REDIS_VERSION`], by the version
    /// `INFO server` reports; a server that does not say (`INFO` refused or
    /// renamed, another field layout) is taken as it is.
    async fn check_version(&self, addr: &str) -> Result<(), StoreError> {
        let info: Result<String, _> = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.con())
            .await;
        let version = match info {
            Ok(info) => redis_version(&info),
            Err(e) => {
                tracing::debug!(error = %e, "redis store: INFO server refused; the server's version is not checked");
                None
            }
        };
        match version {
            Some(version) if version < MIN_REDIS_VERSION => Err(StoreError::backend(format!(
                "redis store: the server at {addr} is Redis {}.{}.{}, and the store needs {}.{} or \
                 later (its scripts write after SSCAN, which older servers refuse)",
                version.0, version.1, version.2, MIN_REDIS_VERSION.0, MIN_REDIS_VERSION.1
            ))),
            _ => Ok(()),
        }
    }

    /// A store on an existing connection manager.
    pub fn from_manager(con: ConnectionManager, options: RedisOptions) -> Result<Self, StoreError> {
        let prefix = options.prefix;
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(StoreError::backend(format!(
                "redis store: invalid key prefix {prefix:?}: it must not be empty nor contain {{ or }}"
            )));
        }
        Ok(Self {
            clock: Arc::new(ServerClock::default()),
            con,
            prefix,
            finished_ttl: options.finished_ttl,
            claim_ttl: if options.read_only {
                Duration::ZERO
            } else {
                options.claim_ttl
            },
            read_only: options.read_only,
            scripts: Arc::new(Scripts {
                commit: Script::new(COMMIT_LUA),
                checkpoints: Script::new(CHECKPOINTS_LUA),
                sessions: Script::new(SESSIONS_LUA),
                page: Script::new(PAGE_LUA),
                runnable: Script::new(RUNNABLE_LUA),
                runnable_indexed: Script::new(RUNNABLE_INDEXED_LUA),
            }),
        })
    }

    /// Expire the keys of a session `ttl` after a commit leaves it completed
    /// or failed (see "Finished sessions"). A TTL longer than 1,000 years
    /// (`Duration::MAX`, say) is taken as 1,000 years: Redis cannot keep an
    /// expiry much past that.
    pub fn with_finished_ttl(mut self, ttl: Duration) -> Self {
        self.finished_ttl = Some(ttl);
        self
    }

    /// The connection, for inspection and repair tools.
    pub fn connection(&self) -> ConnectionManager {
        self.con.clone()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key prefixes of the session stores on this Redis database (this
    /// one's too, if it has sessions), in byte order. Redis keeps no mark
    /// of a store, so a prefix with a typo reads as a store without
    /// sessions; this names the ones there are. A prefix `P` counts when
    /// `P:sessions` is a set and one of its members, taken at random, has a
    /// head, `P:{id}:head` (an application's set of that name has none): a
    /// store whose sessions have all expired but for ids not yet forgotten
    /// may be missed. Found with `SCAN` (never `KEYS`, which blocks the
    /// server), three pipelined round trips per thousand keys looked at, and
    /// no more than about `scan_at_most` keys: on a larger database, some
    /// may be missed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if Redis fails.
    pub async fn store_prefixes(&self, scan_at_most: usize) -> Result<Vec<String>, StoreError> {
        const SUFFIX: &str = ":sessions";
        const BATCH: usize = 1000;
        let mut con = self.con();
        let mut found = std::collections::BTreeSet::new();
        let (mut cursor, mut scanned) = (0u64, 0usize);
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("*{SUFFIX}"))
                .arg("COUNT")
                .arg(BATCH)
                .query_async(&mut con)
                .await
                .map_err(|e| redis_error("scan the keys for session stores", &e))?;
            // The candidates whose prefix is text, then those that are
            // sets, then those whose member has a head.
            let candidates: Vec<(&[u8], &str)> = keys
                .iter()
                .filter_map(|key| {
                    let prefix = std::str::from_utf8(key).ok()?.strip_suffix(SUFFIX)?;
                    Some((key.as_slice(), prefix))
                })
                .collect();
            if !candidates.is_empty() {
                let mut types = redis::pipe();
                for (key, _) in &candidates {
                    types.cmd("TYPE").arg(*key);
                }
                let kinds: Vec<String> = types
                    .query_async(&mut con)
                    .await
                    .map_err(|e| redis_error("read the types of keys", &e))?;
                let sets: Vec<&(&[u8], &str)> = candidates
                    .iter()
                    .zip(&kinds)
                    .filter(|(_, kind)| *kind == "set")
                    .map(|(c, _)| c)
                    .collect();
                // An empty pipeline is refused by the client: a batch
                // without a set (or a set without a member) ends here.
                found.extend(Self::prefixes_with_heads(&mut con, &sets).await?);
            }
            scanned += BATCH;
            cursor = next;
            if cursor == 0 || scanned >= scan_at_most {
                break;
            }
        }
        Ok(found.into_iter().collect())
    }

    /// Those of `sets` (a `P:sessions` key and its prefix `P`) whose
    /// member, taken at random, has a head: two pipelined round trips, none
    /// for no set.
    async fn prefixes_with_heads(
        con: &mut ConnectionManager,
        sets: &[&(&[u8], &str)],
    ) -> Result<Vec<String>, StoreError> {
        if sets.is_empty() {
            return Ok(Vec::new());
        }
        let mut members = redis::pipe();
        for (key, _) in sets {
            members.cmd("SRANDMEMBER").arg(*key);
        }
        let picked: Vec<Option<Vec<u8>>> = members
            .query_async(con)
            .await
            .map_err(|e| redis_error("read a member of the session sets", &e))?;
        let heads: Vec<(&str, String)> = sets
            .iter()
            .zip(picked)
            .filter_map(|((_, prefix), id)| {
                let id = String::from_utf8(id?).ok()?;
                Some((*prefix, format!("{prefix}:{{{id}}}:head")))
            })
            .collect();
        if heads.is_empty() {
            return Ok(Vec::new());
        }
        let mut exists = redis::pipe();
        for (_, head) in &heads {
            exists.cmd("EXISTS").arg(head);
        }
        let there: Vec<bool> = exists
            .query_async(con)
            .await
            .map_err(|e| redis_error("look for the heads of sessions", &e))?;
        Ok(heads
            .iter()
            .zip(there)
            .filter(|(_, there)| *there)
            .map(|((prefix, _), _)| (*prefix).to_owned())
            .collect())
    }

    /// The load error of `session` for a `WRONGTYPE` refusal `e` of a
    /// command on `keys` (each with the type the store writes there): one
    /// damaged session, not a failure of the backend, so that a listing or
    /// a walk reading every session goes on past it. Names the first key
    /// that holds another type (asked of Redis), or all of them when none
    /// does any more.
    async fn wrong_type_error(
        &self,
        session: &SessionId,
        record: &str,
        keys: &[(&str, &str)],
        e: &redis::RedisError,
    ) -> StoreError {
        for (key, kind) in keys {
            let found: Result<String, _> = redis::cmd("TYPE")
                .arg(*key)
                .query_async(&mut self.con())
                .await;
            if let Ok(found) = found
                && found != "none"
                && found != *kind
            {
                return load_error(
                    session,
                    record,
                    format!(
                        "the key {key} holds a {found}, not a {kind} as the store writes it \
                         (left as it is)"
                    ),
                );
            }
        }
        let named: Vec<String> = keys
            .iter()
            .map(|(key, kind)| format!("{key} (a {kind})"))
            .collect();
        load_error(
            session,
            record,
            format!(
                "a key of it holds another type than the store writes ({}): {e}",
                named.join(", ")
            ),
        )
    }

    /// The key of `session`'s head.
    fn head_key(&self, session: &SessionId) -> String {
        format!("{}:{{{session}}}:head", self.prefix)
    }

    /// The key of `session`'s checkpoint hash.
    fn checkpoints_key(&self, session: &SessionId) -> String {
        format!("{}:{{{session}}}:cp", self.prefix)
    }

    /// The key of `session`'s sorted set of checkpoint fields.
    fn seqs_key(&self, session: &SessionId) -> String {
        format!("{}:{{{session}}}:seqs", self.prefix)
    }

    /// The field of checkpoint `seq` in the checkpoint hash.
    fn checkpoint_field(seq: u64) -> String {
        format!("{seq:020}")
    }

    /// Measures the server's clock (`TIME`) against this machine's if the
    /// last measure is old; a failure keeps the last estimate.
    async fn refresh_clock_if_stale(&self) {
        if !self.clock.is_stale() {
            return;
        }
        let read = self.clock.measure(async {
            let (secs, micros): (u64, u64) =
                redis::cmd("TIME").query_async(&mut self.con()).await?;
            Ok::<_, redis::RedisError>(secs.saturating_mul(1000).saturating_add(micros / 1000))
        });
        if let Err(e) = read.await {
            tracing::warn!(error = %e, "redis store: cannot read the server's clock");
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    fn con(&self) -> ConnectionManager {
        self.con.clone()
    }

    /// The session ids in `reply`, read from the index `index`; an id that
    /// is not UTF-8 (not one this store writes: a `SessionId` is a string)
    /// is skipped with a warning naming it, so that one foreign member
    /// does not hide every other session.
    fn readable_ids(&self, reply: Vec<Vec<u8>>, index: &str) -> Vec<SessionId> {
        let mut out = Vec::with_capacity(reply.len());
        for id in reply {
            match String::from_utf8(id) {
                Ok(id) => out.push(SessionId::from(id)),
                Err(e) => tracing::warn!(
                    session = %String::from_utf8_lossy(e.as_bytes()),
                    bytes = ?e.as_bytes(),
                    key = %self.key(index),
                    "redis store: skipping a session id that is not UTF-8: {}",
                    e.utf8_error()
                ),
            }
        }
        out
    }

    async fn commit_inner(&self, commit: &Commit) -> Result<(), StoreError> {
        self.refresh_clock_if_stale().await;
        let head = &commit.head;
        let session = &head.session_id;
        let what = format!("commit session {session}");
        let doc = head_to_vec(head)?;
        let running = head.phase == SessionPhase::Running;
        let finished = matches!(
            head.phase,
            SessionPhase::Completed { .. } | SessionPhase::Failed { .. }
        );
        let (head_ttl, log_ttl) = match self.finished_ttl {
            Some(ttl) if finished => {
                let ms = millis(ttl).clamp(1, MAX_FINISHED_TTL_MS);
                (ms, ms.saturating_add(LOG_TTL_MARGIN_MS))
            }
            _ => (0, 0),
        };
        // Appends overwrite, last one wins; a seq both removed and appended
        // ends appended, as when the removal is applied first.
        let mut append: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for cp in &commit.append {
            append.insert(cp.seq, checkpoint_to_vec(session, cp)?);
        }
        let remove: BTreeSet<u64> = commit
            .remove
            .iter()
            .copied()
            .filter(|seq| !append.contains_key(seq))
            .collect();

        let mut call = self.scripts.commit.prepare_invoke();
        call.key(self.head_key(session))
            .key(self.checkpoints_key(session))
            .key(self.seqs_key(session))
            .key(self.key("sessions"))
            .key(self.key("running"))
            .key(self.key("leases"))
            .key(self.key("claims"))
            .key(self.key("agents"))
            .key(self.key(&format!("ready:{}", head.agent_id)))
            .key(self.key(&format!("waiting:{}", head.agent_id)))
            .key(self.key("ids"))
            .key(self.key("created"))
            .key(self.key("created-last"))
            .arg(session.as_str())
            .arg(
                commit
                    .expected_version
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
            )
            .arg(doc)
            .arg(SCHEMA_VERSION)
            .arg(if running { "1" } else { "0" })
            .arg(head.updated_at)
            .arg(
                head.lease
                    .as_ref()
                    .map(|l| l.expires_at.to_string())
                    .unwrap_or_default(),
            )
            .arg(head_ttl)
            .arg(log_ttl)
            .arg(remove.len())
            .arg(head.agent_id.as_str());
        for seq in &remove {
            call.arg(Self::checkpoint_field(*seq));
        }
        for (seq, json) in append {
            call.arg(Self::checkpoint_field(seq)).arg(json);
        }
        let reply: Vec<Vec<u8>> = call
            .invoke_async(&mut self.con())
            .await
            .map_err(|e| redis_error(&what, &e))?;
        match reply.first().map(Vec::as_slice) {
            Some(b"ok") => Ok(()),
            Some(b"conflict") => {
                let found = match reply.get(1).map(Vec::as_slice) {
                    None | Some(b"") => None,
                    Some(v) => Some(
                        std::str::from_utf8(v)
                            .ok()
                            .and_then(|s| s.parse::<u64>().ok())
                            .ok_or_else(|| bad_reply(&what, &reply))?,
                    ),
                };
                Err(StoreError::Conflict {
                    session: session.clone(),
                    expected: commit.expected_version,
                    found,
                })
            }
            Some(b"unreadable") => {
                let stored = reply.get(1).map(Vec::as_slice).unwrap_or_default();
                // The precise reason, as `load` gives it.
                match head_from_slice(session, stored) {
                    Err(e) => Err(e),
                    Ok(_) => Err(load_error(
                        session,
                        "head",
                        "the commit script cannot read the stored head",
                    )),
                }
            }
            _ => Err(bad_reply(&what, &reply)),
        }
    }
}

#[async_trait]
impl SessionStore for RedisStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let key = self.head_key(session);
        let bytes: Option<Vec<u8>> = match redis::cmd("GET")
            .arg(&key)
            .query_async(&mut self.con())
            .await
        {
            Ok(bytes) => bytes,
            Err(e) if wrong_type(&e) => {
                return Err(self
                    .wrong_type_error(session, "head", &[(&key, "string")], &e)
                    .await);
            }
            Err(e) => {
                return Err(redis_error(
                    format_args!("read the head of session {session}"),
                    &e,
                ));
            }
        };
        bytes.map(|b| head_from_slice(session, &b)).transpose()
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::backend(format!(
                "redis store (prefix {:?}): opened read-only, it refuses the commit of session {}",
                self.prefix, commit.head.session_id
            )));
        }
        self.commit_inner(commit).await
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let what = format!("read the log of session {session}");
        let (cp_key, seqs_key) = (self.checkpoints_key(session), self.seqs_key(session));
        let reply: Vec<Vec<u8>> = match self
            .scripts
            .checkpoints
            .key(&cp_key)
            .key(&seqs_key)
            .arg(Self::checkpoint_field(from_seq))
            .arg(HMGET_CHUNK)
            .invoke_async(&mut self.con())
            .await
        {
            Ok(reply) => reply,
            Err(e) if wrong_type(&e) => {
                let keys = [(cp_key.as_str(), "hash"), (seqs_key.as_str(), "zset")];
                return Err(self.wrong_type_error(session, "log", &keys, &e).await);
            }
            Err(e) => return Err(redis_error(&what, &e)),
        };
        if !reply.len().is_multiple_of(2) {
            return Err(bad_reply(&what, reply.len()));
        }
        let mut out = Vec::with_capacity(reply.len() / 2);
        for pair in reply.chunks_exact(2) {
            let seq = std::str::from_utf8(&pair[0])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| {
                    load_error(
                        session,
                        "checkpoint field",
                        format!("{:?} is not a seq", String::from_utf8_lossy(&pair[0])),
                    )
                })?;
            if pair[1].is_empty() {
                return Err(load_error(
                    session,
                    format!("checkpoint {seq}"),
                    "listed in the log's index but missing from its hash",
                ));
            }
            out.push(checkpoint_from_slice(session, seq, &pair[1])?);
        }
        Ok(out)
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let reply: Vec<Vec<u8>> = self
            .scripts
            .sessions
            .key(self.key("sessions"))
            .key(self.key("ids"))
            .key(self.key("created"))
            .arg(&self.prefix)
            .arg(if self.read_only { "0" } else { "1" })
            .invoke_async(&mut self.con())
            .await
            .map_err(|e| redis_error("list the sessions", &e))?;
        let mut out = self.readable_ids(reply, "sessions");
        out.sort();
        Ok(out)
    }

    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The lower bound, in `ZRANGEBYLEX` syntax: past `after` when it
        // is not below the prefix, else from the prefix.
        let mut min = match after {
            Some(after) if after.as_str() >= prefix => [b"(", after.as_str().as_bytes()].concat(),
            _ if prefix.is_empty() => b"-".to_vec(),
            _ => [b"[", prefix.as_bytes()].concat(),
        };
        let mut out = Vec::new();
        loop {
            let want = limit - out.len();
            let (status, ids): (Vec<u8>, Vec<Vec<u8>>) = self
                .scripts
                .page
                .key(self.key("ids"))
                .key(self.key("sessions"))
                .key(self.key("ids-built"))
                .key(self.key("ids-cursor"))
                .key(self.key("created"))
                .arg(&self.prefix)
                .arg(prefix)
                .arg(&min)
                .arg(want)
                .arg(if self.read_only { "0" } else { "1" })
                .arg(IDS_BUILD_PER_CALL)
                .arg(IDS_REINDEX_PER_CALL)
                .invoke_async(&mut self.con())
                .await
                .map_err(|e| redis_error("list a page of the sessions", &e))?;
            if status == b"unbuilt" {
                // No index yet (written by an older version): the listing
                // of every id, as `sessions` reads it, sorted.
                let mut ids = self.sessions().await?;
                ids.retain(|id| id.as_str().starts_with(prefix) && after.is_none_or(|a| id > a));
                ids.truncate(limit);
                return Ok(ids);
            }
            if status != b"page" {
                return Err(bad_reply("list a page of the sessions", status));
            }
            let full = ids.len() >= want;
            let last = ids.last().map(|id| [b"(", id.as_slice()].concat());
            out.extend(self.readable_ids(ids, "ids"));
            // An id that is not UTF-8 was skipped: the page reads on.
            match last {
                Some(last) if full && out.len() < limit => min = last,
                _ => return Ok(out),
            }
        }
    }

    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        let mut con = self.con();
        let last_key = self.key("created-last");
        let last_of = |last: Option<Vec<u8>>| match last {
            None => Ok(0),
            Some(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| bad_reply(format_args!("read the counter {last_key}"), bytes)),
        };
        let Some(since) = since else {
            let last: Option<Vec<u8>> = redis::cmd("GET")
                .arg(&last_key)
                .query_async(&mut con)
                .await
                .map_err(|e| redis_error(format_args!("read the counter {last_key}"), &e))?;
            return Ok(Some(Created {
                sessions: Vec::new(),
                next: last_of(last)?,
            }));
        };
        let key = self.key("created");
        let what = format!("read the feed of created sessions {key}");
        let range = |from: u64| {
            let mut cmd = redis::cmd("ZRANGEBYSCORE");
            cmd.arg(&key)
                .arg(format!("({from}"))
                .arg("+inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(limit.min(i64::MAX as usize));
            cmd
        };
        // The page and the counter in one round trip: a counter below the
        // position asked from means the feed was lost (the server's data
        // was) and begun again, so it is read from its start.
        let (mut page, last): (Vec<(Vec<u8>, f64)>, Option<Vec<u8>>) = redis::pipe()
            .add_command(range(since))
            .cmd("GET")
            .arg(&last_key)
            .query_async(&mut con)
            .await
            .map_err(|e| redis_error(&what, &e))?;
        let mut out = Created {
            sessions: Vec::new(),
            next: since,
        };
        if page.is_empty() && last_of(last)? < since {
            tracing::warn!(
                key = %key,
                since,
                "redis store: the feed of created sessions ends below the position asked from \
                 (the server lost its data?): reading it from its start"
            );
            out.next = 0;
            if limit > 0 {
                page = range(0)
                    .query_async(&mut con)
                    .await
                    .map_err(|e| redis_error(&what, &e))?;
            }
        }
        for (id, position) in page {
            // Exact: positions are whole numbers below 2^53.
            out.next = position as u64;
            out.sessions.extend(self.readable_ids(vec![id], "created"));
        }
        Ok(Some(out))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // Durability is the server's persistence settings (see the docs).
        Ok(())
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    async fn runnable(
        &self,
        agent: &str,
        now: u64,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.refresh_clock_if_stale().await;
        let claim = millis(self.claim_ttl);
        let until = if claim == 0 {
            0
        } else {
            now.saturating_add(claim)
        };
        type Reply = (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<Vec<u8>>);
        // A reader writes nothing, not even the index: it walks every
        // running session.
        let mut call = if self.read_only {
            self.scripts.runnable.prepare_invoke()
        } else {
            self.scripts.runnable_indexed.prepare_invoke()
        };
        call.key(self.key("running"))
            .key(self.key("leases"))
            .key(self.key("claims"))
            .key(self.key("agents"));
        if !self.read_only {
            call.key(self.key(&format!("ready:{agent}")))
                .key(self.key(&format!("waiting:{agent}")))
                .key(self.key("index"))
                .key(self.key("index-cursor"));
        }
        call.arg(now)
            .arg(limit)
            .arg(until)
            .arg(agent)
            .arg(&self.prefix)
            .arg(REINDEX_PER_CALL);
        let (ids, bad_leases, bad_claims): Reply = call
            .invoke_async(&mut self.con())
            .await
            .map_err(|e| redis_error("find runnable sessions", &e))?;
        for (hash, bad) in [("leases", bad_leases), ("claims", bad_claims)] {
            for id in bad {
                tracing::warn!(
                    session = %String::from_utf8_lossy(&id),
                    key = %self.key(hash),
                    "redis store: a value that is not an expiry in ms is taken as none"
                );
            }
        }
        Ok(self.readable_ids(ids, "running"))
    }
}

#[cfg(test)]
mod tests {
    use super::redis_version;

    #[test]
    fn the_version_is_read_from_info_server() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n");
        assert_eq!(redis_version(&info("7.0.15")), Some((7, 0, 15)));
        assert_eq!(redis_version(&info("4.0.14")), Some((4, 0, 14)));
        assert_eq!(redis_version(&info("5.0")), Some((5, 0, 0)));
        assert_eq!(redis_version(&info("6")), Some((6, 0, 0)));
        assert_eq!(redis_version(&info("7.2.4-rc1")), Some((7, 2, 4)));
        assert_eq!(redis_version(&info("255.255.255")), Some((255, 255, 255)));
        // No version, or none that reads as one: not checked.
        assert_eq!(redis_version("# Server\r\nredis_mode:standalone\r\n"), None);
        assert_eq!(redis_version(&info("unknown")), None);
        assert_eq!(redis_version(&info("")), None);
        assert_eq!(redis_version(""), None);
        // A field that only ends with the name is another field.
        assert_eq!(redis_version("xredis_version:3.0.0\r\n"), None);
    }
}
