//! Long-term memory in Redis.

use crate::memory_codec::{parse_key, prefix_bytes, record_key};
use async_trait::async_trait;
use harness::memory::{Filter, MemoryBackend, MemoryError, Namespace, Record, Write};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Records read per round trip of a search or a listing.
const PAGE: usize = 256;

/// Applies a batch. KEYS: index, records, meta. ARGV: now, then per
/// write: `P`, member, record JSON, created_at, expires_at (`''`: none);
/// `D`, member; `T`, member, expires_at, the expiry read (a touch applies
/// only to a record that still has it). Checks the keys' types before
/// its first write (Redis does not roll back a script that fails part
/// way); nothing else in it can fail: times in the meta hash it cannot
/// read as the store writes them (`created expires`, each a `u64` in
/// digits, the expiry possibly empty) are taken as a record that is not
/// there, as the sled backend takes a record it cannot read: a put
/// replaces it, a touch leaves it. Replies the created_at of each put,
/// then the members whose times could not be read.
const APPLY_LUA: &str = r"
local expected = {'zset', 'hash', 'hash'}
for i = 1, 3 do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= expected[i] then
    return redis.error_reply('memory key ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
-- A u64 in digits, without its leading zeros; nil if it is not one.
local function u64(s)
  if not string.match(s, '^%d+$') then return nil end
  local d = string.match(s, '^0*(%d*)$')
  if #d > 20 or (#d == 20 and d > '18446744073709551615') then return nil end
  return d
end
-- Whether the u64 a is more than b (both as u64 returns them).
local function more(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local now = u64(ARGV[1])
local unreadable = {}
local function live_created(member)
  local meta = redis.call('HGET', KEYS[3], member)
  if not meta then return nil end
  local created, expires = string.match(meta, '^(%d+) (%d*)$')
  local at = expires and expires ~= '' and u64(expires)
  if not created or not u64(created) or (expires ~= '' and not at) then
    unreadable[#unreadable + 1] = member
    return nil
  end
  if expires == '' or more(at, now) then return created, expires end
  return nil
end
local created = {}
local i = 2
while i <= #ARGV do
  local op, member = ARGV[i], ARGV[i + 1]
  if op == 'P' then
    local c = live_created(member) or ARGV[i + 3]
    redis.call('HSET', KEYS[2], member, ARGV[i + 2])
    redis.call('HSET', KEYS[3], member, c .. ' ' .. ARGV[i + 4])
    redis.call('ZADD', KEYS[1], 0, member)
    created[#created + 1] = c
    i = i + 5
  elseif op == 'D' then
    redis.call('HDEL', KEYS[2], member)
    redis.call('HDEL', KEYS[3], member)
    redis.call('ZREM', KEYS[1], member)
    i = i + 2
  else
    -- Only the record the refresh read: one that still expires then.
    local c, e = live_created(member)
    if c and e == ARGV[i + 3] then redis.call('HSET', KEYS[3], member, c .. ' ' .. ARGV[i + 2]) end
    i = i + 4
  end
end
return {created, unreadable}
";

/// Reads a page in order. KEYS: index, records, meta. ARGV: min, max (as
/// `ZRANGEBYLEX` takes them), count, `1` to read the records too. Replies
/// member, meta, record (or false) for each member.
const PAGE_LUA: &str = r"
local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(members) do
  out[#out + 1] = m
  out[#out + 1] = redis.call('HGET', KEYS[3], m)
  if ARGV[4] == '1' then out[#out + 1] = redis.call('HGET', KEYS[2], m) else out[#out + 1] = false end
end
return out
";

/// Long-term memory in Redis, shared by any number of processes.
///
/// **Keys.** With the prefix `P` (`harness` by default), three keys with
/// one hash tag (so they live on one node):
///
/// - `{P:memory}:idx`: a sorted set of every record's member, all with
///   score 0, so that `ZRANGEBYLEX` reads them in order: the member is the
///   namespace's labels each followed by `0x01`, then `0x00`, then the key
///   (byte order is the core's namespace then key order, and a namespace
///   prefix is a lexical range: `["a"]` is `a\x01`, never a prefix of
///   `["ab"]`'s `ab\x01`);
/// - `{P:memory}:rec`: a hash, member → the [`Record`] as JSON (item, TTL,
///   vector);
/// - `{P:memory}:meta`: a hash, member → `"created_at expires_at"` (ms;
///   the expiry empty when there is none): the times that count, read
///   with the record.
///
/// **Writes.** A batch is one Lua script: Redis runs it alone, so readers
/// see all of it or none of it. It checks the keys' types first (Redis
/// does not roll back a script that fails part way), and times in the
/// meta hash it cannot read are taken as no record there (a put replaces
/// it, a touch leaves it, with a warning naming it), so a batch is applied
/// whole or not at all; everything the
/// backend refuses (a key or label with a control character, the empty
/// namespace) is refused before the script runs.
///
/// **Reads.** Expiry is judged at every read from the meta hash: an
/// expired record is never returned; it stays in Redis until a put or
/// delete of its key (Redis's own expiry works on whole keys, not on hash
/// fields of every server version, so none is set). A get reads the
/// record and its times in one `MULTI`. A search reads the prefix's range
/// a page of 256 records at a time (each page one script, so one
/// snapshot; a search longer than a page may see a batch applied between
/// two pages) and applies expiry, filters, offset and limit in this
/// process. Listing namespaces reads the members and times, not the
/// records.
///
/// **Durability** is the server's persistence settings' (see
/// [`RedisStore`](crate::RedisStore)). A single Redis or a primary with
/// replicas; the hash tag also lets it live on one node of a cluster.
#[derive(Clone)]
pub struct RedisMemory {
    con: ConnectionManager,
    prefix: String,
    scripts: Arc<(Script, Script)>,
}

impl fmt::Debug for RedisMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisMemory")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn redis_error(what: impl fmt::Display, e: &redis::RedisError) -> MemoryError {
    MemoryError::backend(format!("redis memory: cannot {what}: {e}"))
}

/// The times in a meta field: created_at and the expiry.
fn parse_meta(member: &[u8], meta: &[u8]) -> Result<(u64, Option<u64>), MemoryError> {
    let bad = || {
        corrupt(
            member,
            format!("unreadable times {:?}", String::from_utf8_lossy(meta)),
        )
    };
    let text = std::str::from_utf8(meta).map_err(|_| bad())?;
    let (created, expires) = text.split_once(' ').ok_or_else(bad)?;
    let created = digits(created).ok_or_else(bad)?;
    let expires = match expires {
        "" => None,
        at => Some(digits(at).ok_or_else(bad)?),
    };
    Ok((created, expires))
}

/// A `u64` written in decimal digits only, as the store writes times (and
/// as the apply script reads them: `parse` alone would also take `+5`,
/// which the script does not).
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn corrupt(member: &[u8], why: String) -> MemoryError {
    match parse_key(member) {
        Ok((ns, key)) => MemoryError::Corrupt {
            namespace: ns.to_string(),
            key,
            why,
        },
        Err(bad) => MemoryError::Corrupt {
            namespace: String::from_utf8_lossy(member).into_owned(),
            key: String::new(),
            why: format!("a member that is not a record's ({bad}); {why}"),
        },
    }
}

/// The live record of `member`, from its meta and record JSON; `None` if
/// it is missing or expired at `now`.
fn live_record(
    member: &[u8],
    meta: Option<&[u8]>,
    json: Option<&[u8]>,
    now: u64,
) -> Result<Option<Record>, MemoryError> {
    let Some(meta) = meta else {
        return Ok(None);
    };
    let (created_at, expires_at) = parse_meta(member, meta)?;
    if expires_at.is_some_and(|at| now >= at) {
        return Ok(None);
    }
    let json = json.ok_or_else(|| corrupt(member, "times without a record".into()))?;
    let mut record: Record = serde_json::from_slice(json)
        .map_err(|e| corrupt(member, format!("invalid record JSON: {e}")))?;
    let stored = record_key(&record.item.namespace, &record.item.key)
        .map_err(|e| corrupt(member, e.to_string()))?;
    if stored != member {
        return Err(corrupt(
            member,
            format!(
                "the record is {}/{}'s",
                record.item.namespace, record.item.key
            ),
        ));
    }
    record.item.created_at = created_at;
    record.item.expires_at = expires_at;
    Ok(Some(record))
}

type Entry = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

impl RedisMemory {
    /// Connects to `url` (`redis://[:password@]host:port/db`) with keys
    /// under `prefix` (not empty, no `{` or `}`).
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, MemoryError> {
        let client = Client::open(url).map_err(|e| {
            MemoryError::backend(format!("redis memory: the URL cannot be used: {e}"))
        })?;
        let addr = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        let con = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| redis_error(format_args!("connect to {addr}"), &e))?;
        Self::from_manager(con, prefix)
    }

    /// Memory on an existing connection manager (e.g. the session store's
    /// [`RedisStore::connection`](crate::RedisStore::connection)).
    pub fn from_manager(con: ConnectionManager, prefix: &str) -> Result<Self, MemoryError> {
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(MemoryError::backend(format!(
                "redis memory: invalid key prefix {prefix:?}: it must not be empty nor contain {{ or }}"
            )));
        }
        Ok(Self {
            con,
            prefix: prefix.to_owned(),
            scripts: Arc::new((Script::new(APPLY_LUA), Script::new(PAGE_LUA))),
        })
    }

    /// The connection, for inspection and repair tools.
    pub fn connection(&self) -> ConnectionManager {
        self.con.clone()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The three keys: the index, the records, the times.
    pub fn keys(&self) -> [String; 3] {
        let tag = format!("{{{}:memory}}", self.prefix);
        [
            format!("{tag}:idx"),
            format!("{tag}:rec"),
            format!("{tag}:meta"),
        ]
    }

    /// The members in `(min, max)` (lexical range bounds), a page at a
    /// time, with their times and (if `records`) their JSON, calling
    /// `each` until it says stop.
    async fn pages(
        &self,
        min: Vec<u8>,
        max: Vec<u8>,
        records: bool,
        mut each: impl FnMut(Entry) -> Result<bool, MemoryError>,
    ) -> Result<(), MemoryError> {
        let keys = self.keys();
        let mut min = min;
        loop {
            let mut invocation = self.scripts.1.prepare_invoke();
            invocation
                .key(&keys[0])
                .key(&keys[1])
                .key(&keys[2])
                .arg(&min)
                .arg(&max)
                .arg(PAGE)
                .arg(if records { "1" } else { "0" });
            let flat: Vec<Option<Vec<u8>>> = invocation
                .invoke_async(&mut self.con.clone())
                .await
                .map_err(|e| redis_error("read a page", &e))?;
            if !flat.len().is_multiple_of(3) {
                return Err(MemoryError::backend(format!(
                    "redis memory: a page of {} values, not triples",
                    flat.len()
                )));
            }
            let full = flat.len() / 3 == PAGE;
            let mut last = None;
            let mut it = flat.into_iter();
            while let (Some(member), Some(meta), Some(json)) = (it.next(), it.next(), it.next()) {
                let member = member
                    .ok_or_else(|| MemoryError::backend("redis memory: a page without a member"))?;
                last = Some(member.clone());
                if !each((member, meta, json))? {
                    return Ok(());
                }
            }
            match last {
                Some(last) if full => {
                    min = [b"(".as_slice(), &last].concat();
                }
                _ => return Ok(()),
            }
        }
    }
}

#[async_trait]
impl MemoryBackend for RedisMemory {
    async fn apply(&self, writes: Vec<Write>, now: u64) -> Result<Vec<u64>, MemoryError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys();
        let mut invocation = self.scripts.0.prepare_invoke();
        invocation
            .key(&keys[0])
            .key(&keys[1])
            .key(&keys[2])
            .arg(now);
        for write in &writes {
            match write {
                Write::Put(r) => {
                    let member = record_key(&r.item.namespace, &r.item.key)?;
                    let json = serde_json::to_vec(r).map_err(|e| MemoryError::Value {
                        namespace: r.item.namespace.to_string(),
                        key: r.item.key.clone(),
                        why: format!("it cannot be encoded: {e}"),
                    })?;
                    let expires = r
                        .item
                        .expires_at
                        .map(|at| at.to_string())
                        .unwrap_or_default();
                    invocation
                        .arg("P")
                        .arg(member)
                        .arg(json)
                        .arg(r.item.created_at)
                        .arg(expires);
                }
                Write::Delete { namespace, key } => {
                    invocation.arg("D").arg(record_key(namespace, key)?);
                }
                Write::Touch {
                    namespace,
                    key,
                    expires_at,
                    from,
                } => {
                    invocation
                        .arg("T")
                        .arg(record_key(namespace, key)?)
                        .arg(*expires_at)
                        .arg(*from);
                }
            }
        }
        let (created, unreadable): (Vec<String>, Vec<Vec<u8>>) = invocation
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| redis_error("apply a batch", &e))?;
        for member in unreadable {
            // Named as a read names it.
            let MemoryError::Corrupt {
                namespace,
                key,
                why,
            } = corrupt(&member, "unreadable times".into())
            else {
                continue;
            };
            tracing::warn!(
                namespace,
                key,
                meta = %self.keys()[2],
                "redis memory: {why}, taken as no record by a batch (a put replaces it, a \
                 touch leaves it)"
            );
        }
        created
            .iter()
            .map(|c| {
                c.parse().map_err(|_| {
                    MemoryError::backend(format!("redis memory: a created time {c:?}"))
                })
            })
            .collect()
    }

    async fn get(
        &self,
        namespace: &Namespace,
        key: &str,
        now: u64,
    ) -> Result<Option<Record>, MemoryError> {
        let member = record_key(namespace, key)?;
        let keys = self.keys();
        let (meta, json): (Option<Vec<u8>>, Option<Vec<u8>>) = redis::pipe()
            .atomic()
            .hget(&keys[2], &member)
            .hget(&keys[1], &member)
            .query_async(&mut self.con.clone())
            .await
            .map_err(|e| redis_error("get a record", &e))?;
        live_record(&member, meta.as_deref(), json.as_deref(), now)
    }

    async fn search(
        &self,
        prefix: &Namespace,
        filters: &[Filter],
        offset: usize,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Record>, MemoryError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let (min, max) = if prefix.is_root() {
            (b"-".to_vec(), b"+".to_vec())
        } else {
            let p = prefix_bytes(prefix);
            // No member has the byte 0xFF (UTF-8 never does).
            (
                [b"[".as_slice(), &p].concat(),
                [b"(".as_slice(), &p, &[0xFF]].concat(),
            )
        };
        let mut skipped = 0;
        self.pages(min, max, true, |(member, meta, json)| {
            let Some(record) = live_record(&member, meta.as_deref(), json.as_deref(), now)? else {
                return Ok(true);
            };
            if !filters.iter().all(|f| f.matches(&record.item.value)) {
                return Ok(true);
            }
            if skipped < offset {
                skipped += 1;
                return Ok(true);
            }
            out.push(record);
            Ok(out.len() < limit)
        })
        .await?;
        Ok(out)
    }

    async fn namespaces(&self, now: u64) -> Result<Vec<Namespace>, MemoryError> {
        let mut out: Vec<Namespace> = Vec::new();
        self.pages(b"-".to_vec(), b"+".to_vec(), false, |(member, meta, _)| {
            let Some(meta) = meta else {
                return Ok(true);
            };
            let (_, expires) = parse_meta(&member, &meta)?;
            if expires.is_some_and(|at| now >= at) {
                return Ok(true);
            }
            let (namespace, _) = parse_key(&member).map_err(|why| corrupt(&member, why))?;
            if out.last() != Some(&namespace) {
                out.push(namespace);
            }
            Ok(true)
        })
        .await?;
        Ok(out)
    }
}
