"""The Redis store: conversation state, approved records and exec bindings on redis-py's asyncio client.

Key layout (``<p>`` is ``redis.key_prefix``; the part in braces is the Redis Cluster hash tag)::

    <p>:cs:{<route>/<conversation>}     HASH: one conversation's state, one field per entry (``policy.state``:
                                        ``h`` the header, ``l:<id>`` a line's first decision, ``o:<id>`` a
                                        handoff, ``r:<id>`` a readback, ``t:<id>`` a handoff's thread), with a TTL
    <p>:gc:{<route>/<conversation>}     ZSET: its collection queue (ids, score = when queued), the same TTL
    <p>:conv:{<route>/<conversation>}   the same state as one JSON document (version 1, earlier releases): read
                                        once, written as the hash, and deleted (see "Conversation state")
    <p>:rec:{<item>}:<ask>              an approved record: JSON of Record.to_dict(), no TTL
    <p>:bind:{<item>}:<ask>             the exec binding of that record: "<conversation>/<HO id>", no TTL
    <p>:recidx:{<item>}                 a set of the asks that have a record for <item> (``records get ITEM``)
    <p>:generation                      the generation marker: a random id written (SET NX) at the first start; every
                                        load, claim, save and ping reads it first in its pipeline and raises
                                        ``DataLost`` when it is missing or not the one the store started on (Redis
                                        restarted without persistence, was flushed, or failed over to an empty one)
    <p>:generation:{<n>}                on a Redis Cluster: a copy of the marker on each master (``<n>`` a number
                                        whose slot that master serves), read first with the marker (see "Redis
                                        Cluster")
    <p>:generation:copies{<p>:generation}
                                        on a Redis Cluster: the set of the copies' numbers, in the marker's slot

The handoff lifecycle (``gatekeeper.sweeper``) adds, per route and input partition ``<n>`` (decimal)::

    <p>:due:{<route>/#<n>}              ZSET: open handoffs with a pending deadline, and questions (AQ) with a
                                        pending by=, score = that deadline (epoch)
    <p>:open:{<route>/#<n>}             ZSET: every open handoff, score = when it was forwarded (epoch)
    <p>:lapsed:{<route>/#<n>}           ZSET: handoffs the gatekeeper cancelled or alerted when their time ran out,
                                        score = when; kept after they close, for ``retention_seconds``
    <p>:cancel:{<route>/<conversation>}:<HO id>
                                        HASH: the cancel intent of one handoff (``store.CancelIntent``), with the
                                        conversation's TTL (``open_retention_seconds``)

    <p>:epoch:{<route>/#<n>}            the owner epoch of the partition: INCR'd by each instance it is assigned to

  Members of the three indexes are the JSON array ``["<conversation>","<HO id>"]``. The three keys of one partition
  share a slot (one hash tag), so a bucket is never split across nodes; partitions spread over slots, and a sweeper
  reads only the buckets of the partitions it holds. The cancel intent shares its conversation's slot.

- A conversation's state lives in one slot, so a cluster keeps a thread on one node.
- A record, its binding and its item's index share the item's slot, so a record is written together with its index
  entry by one Lua script, and ``records get ITEM`` reads the index and then the records (MGET, one slot) without
  KEYS or SCAN.
- Hash tags are escaped so that no value can end a tag early or move a key to another slot: ``%`` -> ``%25``,
  ``{`` -> ``%7B``, ``}`` -> ``%7D`` (and ``/`` -> ``%2F`` in the route, the separator of the conversation tag).
  The escape is deterministic and reversible, so two different (route, conversation) or items never share a key.

**Conversation state.** A batch loads only the entries its lines name: the header, the four entries of each id the
lines name, and the entries of the ids those point to (the closure ``policy.state.wanted_fields`` computes in
Python, here in Lua, next to the data). It writes only the entries that changed (the fields and the header, the
collection of what is older than the retention, the TTLs), together with its binding changes and its lifecycle index
entries. On a single Redis each is **one script call for the whole batch** (``_LOAD_BATCH``, ``_COMMIT_BATCH``;
the load's records are read by an ``MGET`` on the same pipeline, see "Key spaces"): two round trips a batch, and the
writes atomic. On a Redis Cluster a script may only touch one slot, so the same
Lua functions run once per conversation, binding and index bucket (``_LOAD``, ``_CAS``, ``_SAVE``, ``_INDEX``) on
one pipeline, and the binding changes go first in a round trip of their own (the states are written only when no
claim conflicted). A hash that does not exist yet is looked up as a version-1 document in the same script: such a
state is converted on first touch (decoded whole once, written as fields by that batch's save, and the document
deleted), so an upgrade needs no migration step and no downtime.

**Key spaces.** Two parties write, with Redis ACL users of their own (the chart README's "Redis ACL users"):
the approver (``gatekeeper records load|delete``) writes the records and the item index (``<p>:rec:*``,
``<p>:recidx:*``), and only reads the bindings, the generation marker and the owner epochs; the daemon writes every
other key and only reads the records (never the index). Redis checks every key of an ``EVALSHA`` as read *and*
written, so no script of the daemon names a record among its keys: the records are read by plain ``GET``/``MGET``.
The bindings are the daemon's: they change in the same script call as the conversations (atomically), and an ACL
cannot allow a script's ``DEL`` on one key kind and refuse it to a plain command. ``gatekeeper replay`` adds its
in-flight markers, ``<p>:replaying:{<route>/<conversation>}:<line digest>`` (``gatekeeper.replay``).

**Fenced writes.** An instance takes a new epoch for each input partition it is assigned (``take_epochs``: INCR of
the partition's epoch key, so every assignment's epoch is higher than every earlier one's). Every write of a batch
carries it: a conversation's hash is written by ``save_one`` only if the epoch it was last written under (its ``e``
field) is not higher, and a partition's indexes by ``index_one`` only if the partition's epoch key is not higher (the
indexes and the epoch key share the partition's slot). An instance that lost its partitions in a rebalance and has
not noticed yet (a GC pause, a slow network) therefore cannot overwrite what the new owner wrote: its save raises
``Fenced``, and it drops the batch as it would on any store error, until the revocation reaches it.

Retention: a conversation's hash is written with ``EX open_retention_seconds`` while it has an open handoff (the
header's ``open`` count), else ``EX retention_seconds``; every write renews it. Records and
bindings never expire: an approval is withdrawn by ``gatekeeper records delete``, a binding by the protocol.

Deleting a record does not delete its binding: the handoff bound to it may still be in flight (the act may be
running right now). If the binding went with the record, re-loading the same approval would let a second handoff
bind it and act twice. The binding is released only the protocol's way (UN, FL, an acknowledged CX, a DN with
``out=NOOP``).

Exec bindings change by compare-and-set (``cas_one``; the scripts are registered once with redis-py's
``register_script`` and queued as ``EVALSHA``): a change applies when the binding still is ``before`` (or already
is ``after``: a retried claim is idempotent). Two gatekeepers racing for one approval: exactly
one wins, the other gets its change back as a conflict.

**Redis Cluster** (``redis.cluster: true``, or ``?cluster=true`` on the url: ``client_from_settings`` builds a
``redis.asyncio.RedisCluster`` seeded by the url's node, with the same credentials and TLS; or pass one as
``client=``). Every pipeline is ``transaction=False``: redis-py's cluster pipeline splits it per master and sends
the parts in parallel, so a load, claim or save stays one round trip's time, and every command in it, scripts
included, touches one slot (the hash tags above: a script's keys are one conversation's, one item's or one
partition's). What differs from a single Redis:

- ``EVALSHA`` is queued as a raw command (``_evalsha``): redis-py's cluster pipeline blocks its ``evalsha`` method
  (redis-py issue #2914) but routes the raw command by its keys. A script the server forgot is loaded on every
  master (``SCRIPT LOAD`` goes to all primaries) and the pipeline sent once more, as on a single Redis.
- The generation marker lives on one master. ``ensure_generation`` keeps a copy on every master that serves slots
  (``_ensure_copies``) and every pipeline reads the marker and all its copies first (each first on its master's
  connection), so the loss of any master is ``DataLost`` at the next batch. A copy missing at a start is not
  written again (the first batch raises); a master without a copy (added, or its copy's slot resharded away) is
  given one. ``accept_loss`` deletes the copies with the old marker.
- ``ping`` pings every master, beside the read of the marker and its copies (PING has no key: a cluster pipeline
  refuses it).
- A save's index changes and its states may be on different masters, sent in parallel, so "a state written means
  its index entries were written" holds per master only. It is not needed: a batch whose save failed (or whose
  instance died) is not committed, and its retry writes the index entries of every open handoff its lines load
  again (``Processor``: the repair of a failed write).
- ``index`` (an operator's command) SCANs every master (redis-py's cluster ``scan_iter``).

Connection trouble and timeouts become ``StoreError`` (``raise StoreError(...) from exc``): infrastructure trouble
is never a bad line.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec
import orjson
from redis import exceptions as redis_exc
from redis.asyncio import Redis, RedisCluster

from gatekeeper.config import ConfigError, RedisSettings
from gatekeeper.policy import BindingChange, ConversationState, Record, RecordKey
from gatekeeper.policy.lifecycle import IndexEntry
from gatekeeper.policy.state import COLLECT_PER_SAVE
from gatekeeper.redis_packing import packed_in_one
from gatekeeper.store import (
    CancelIntent,
    DataLost,
    DueView,
    Fenced,
    Indexed,
    IndexKind,
    Loaded,
    RecordExists,
    StoreError,
    Wants,
    blocking,
)

log = logging.getLogger(__name__)

# The scripts. Each operation on one key group (a binding, a conversation, an index bucket) is a Lua function of
# its keys and of its arguments ``A[i..j]``; a script made of one calls it on ``KEYS`` and ``ARGV`` (a Redis Cluster:
# one slot per script), the batch scripts of a single Redis call it once per group, for a whole batch in one call.

#: Compare-and-set of one binding. ``A[i..i+3]``: has_before, before, has_after, after ("1"/"0" flags, so that no
#: holder value has to double as "none"). Returns 1 when applied, 0 on a conflict.
_CAS_FN = """
local function cas_one(key, A, i)
  local cur = redis.call('GET', key)
  if cur == false then cur = nil end
  local before = nil
  if A[i] == '1' then before = A[i + 1] end
  local after = nil
  if A[i + 2] == '1' then after = A[i + 3] end
  if cur ~= before and cur ~= after then return 0 end
  if after == nil then redis.call('DEL', key) else redis.call('SET', key, after) end
  return 1
end
"""

#: Load a part of one conversation's state. ``hash``: its hash, ``doc``: its version-1 document. ``A[i..j]``: ``*``
#: for every field, else the ids the batch's lines name. Returns a flat list of field, value... (the header, the
#: entries of each id, then the entries of the ids those point to: a line's ``re``, a readback's ``ho``, a handoff's
#: ``cleared_by`` and ``passed_rb``), ``{}`` for a conversation never seen, or ``{"v1", document}``.
_LOAD_FN = """
local kinds = {'l:', 'o:', 'r:', 't:'}
-- The ids an entry points at: a line's `re`, a handoff's `cleared_by` and `passed_rb`, a readback's `ho`. The engine
-- writes them first, so they are read off the entry's opening: a key that opens the entry, holds a plain id and is
-- not in the rest of its text, or a key in none of its text (a key's quoted name followed by a colon is found only
-- where it is a key: in a JSON string a quote is escaped). Any other entry is decoded.
local function decoded(k, v)
  local e = cjson.decode(v)
  if k == 1 then return e['re'] elseif k == 2 then return e['cleared_by'], e['passed_rb'] end
  return e['ho']
end
local function absent(v, name, at)
  return not string.find(v, '"' .. name .. '":', at, true)
end
local function opening(v, name, at)
  local id, after = string.match(v, '^"' .. name .. '":"([A-Za-z0-9._%-]+)"()[,}]', at)
  if id and absent(v, name, after) then return id, after + 1 end
end
local function pointers(k, v)
  if k == 1 then
    if absent(v, 're', 1) then return nil end
    local re = opening(v, 're', 2)
    if re then return re end
  elseif k == 2 then
    local c, at = opening(v, 'cleared_by', 2)
    local p
    if c then
      p = opening(v, 'passed_rb', at)
      if p or absent(v, 'passed_rb', at) then return c, p end
    elseif absent(v, 'cleared_by', 1) then
      if absent(v, 'passed_rb', 1) then return nil end
      p = opening(v, 'passed_rb', 2)
      if p then return nil, p end
    end
  else
    local ho = opening(v, 'ho', 2)
    if ho then return ho end
  end
  return decoded(k, v)
end
local function load_one(hash, doc, A, i, j)
  if redis.call('EXISTS', hash) == 0 then
    local old = redis.call('GET', doc)
    if old then return {'v1', old} end
    return {}
  end
  if j >= i and A[i] == '*' then return redis.call('HGETALL', hash) end
  local out, seen, more = {}, {}, {}
  local h = redis.call('HGET', hash, 'h')
  if h then out[1] = 'h'; out[2] = h end
  local function point(v)
    if type(v) == 'string' then more[#more + 1] = v end
  end
  local function grab(id, first)
    if seen[id] then return end
    seen[id] = true
    local vals = redis.call('HMGET', hash, 'l:' .. id, 'o:' .. id, 'r:' .. id, 't:' .. id)
    for k = 1, 4 do
      local v = vals[k]
      if v then
        out[#out + 1] = kinds[k] .. id
        out[#out + 1] = v
        if first and k < 4 then
          local a, b = pointers(k, v)
          point(a)
          point(b)
        end
      end
    end
  end
  for x = i, j do grab(A[x], true) end
  for x = 1, #more do grab(more[x], false) end
  return out
end
"""

#: Write a batch's changes to one conversation, fenced, and collect what is older than the retention (the rule of
#: ``policy.state.collectable``). ``hash``: its hash, ``doc``: its version-1 document, ``queue``: its collection
#: queue. ``A[i..j]``: the writer's epoch ("" for an unfenced write), the TTL, "1" to delete the document, now, the
#: cutoff (now - retention), how many queued ids to look at, how many ids to queue, those ids, then field, value...
#: Returns 1 when written, 0 when a higher epoch wrote the conversation last (nothing written).
_SAVE_FN = """
local function closed(hash, ho)
  local t = redis.call('HGET', hash, 't:' .. ho)
  local o = redis.call('HGET', hash, 'o:' .. ho)
  if not t or not o then return true end
  local by = cjson.decode(o)['superseded_by']
  if type(by) == 'string' and by ~= '' then return true end
  local rec = cjson.decode(t)
  if type(rec[8]) == 'table' and #rec[8] > 0 then return true end
  return rec[11] == 1
end
local function open_handoff(hash, id)
  return redis.call('HEXISTS', hash, 'o:' .. id) == 1 and not closed(hash, id)
end
local function collectable(hash, id)
  if redis.call('HEXISTS', hash, 'o:' .. id) == 1 then return closed(hash, id) end
  local l = redis.call('HGET', hash, 'l:' .. id)
  if not l then return true end
  local re = cjson.decode(l)['re']
  if type(re) ~= 'string' then return true end
  if open_handoff(hash, re) then return false end
  local r = redis.call('HGET', hash, 'r:' .. re)
  if r then
    local ho = cjson.decode(r)['ho']
    if type(ho) == 'string' and open_handoff(hash, ho) then return false end
  end
  return true
end
local function save_one(hash, doc, queue, A, i, j)
  local epoch = tonumber(A[i])
  if epoch then
    local last = tonumber(redis.call('HGET', hash, 'e') or '0')
    if last > epoch then return 0 end
    redis.call('HSET', hash, 'e', A[i])
  end
  local n = tonumber(A[i + 6])
  for x = i + 7 + n, j, 2000 do
    redis.call('HSET', hash, unpack(A, x, math.min(x + 1999, j)))
  end
  for x = i + 7, i + 6 + n do redis.call('ZADD', queue, A[i + 3], A[x]) end
  local due = redis.call('ZRANGEBYSCORE', queue, '-inf', A[i + 4], 'LIMIT', '0', A[i + 5])
  for _, id in ipairs(due) do
    if collectable(hash, id) then
      redis.call('HDEL', hash, 'l:' .. id, 'o:' .. id, 'r:' .. id, 't:' .. id)
      redis.call('ZREM', queue, id)
    else
      redis.call('ZADD', queue, A[i + 3], id)
    end
  end
  redis.call('EXPIRE', hash, A[i + 1])
  redis.call('EXPIRE', queue, A[i + 1])
  if A[i + 2] == '1' then redis.call('DEL', doc) end
  return 1
end
"""

#: Write a batch's changes to one partition's lifecycle indexes, fenced. ``epoch``: the partition's epoch key,
#: ``due``, ``open``, ``lapsed``: its indexes. ``A[i..j]``: the writer's epoch ("" for an unfenced write), then
#: triples op, member, score with op ``due``/``open``/``lapsed`` (add) or ``-due``/``-open`` (remove; the score is
#: ignored). Returns 1 written, 0 refused.
_INDEX_FN = """
local function index_one(epoch, due, open, lapsed, A, i, j)
  if A[i] ~= '' and tonumber(redis.call('GET', epoch) or '0') > tonumber(A[i]) then return 0 end
  local key = {due = due, open = open, lapsed = lapsed}
  for x = i + 1, j, 3 do
    local op, member = A[x], A[x + 1]
    if string.sub(op, 1, 1) == '-' then
      redis.call('ZREM', key[string.sub(op, 2)], member)
    else
      redis.call('ZADD', key[op], A[x + 2], member)
    end
  end
  return 1
end
"""

#: One binding (KEYS[1]), one conversation (KEYS[1..2]), one conversation's write (KEYS[1..3]), one index bucket
#: (KEYS[1..4]); ARGV as the function's ``A``. A Redis Cluster runs these, each on one slot.
_CAS = _CAS_FN + "return cas_one(KEYS[1], ARGV, 1)"
_LOAD = _LOAD_FN + "return load_one(KEYS[1], KEYS[2], ARGV, 1, #ARGV)"
_SAVE = _SAVE_FN + "return save_one(KEYS[1], KEYS[2], KEYS[3], ARGV, 1, #ARGV)"
_INDEX = _INDEX_FN + "return index_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV, 1, #ARGV)"

#: A batch's load on a single Redis, in one call. KEYS: per conversation its hash and its document, then the bindings.
#: ARGV[1]: JSON, per conversation the list of its arguments (as ``load_one``'s: the ids it needs, or ``*``): one
#: argument to pack instead of one per id, decoded by Redis's cjson; ARGV[2]: how many bindings. Returns one list per
#: conversation (as ``load_one``), then the bindings' values (nil where none). The records are not among its keys:
#: Redis's ACLs take every key of an ``EVALSHA`` as read and written, and the daemon's user may only read them (an
#: ``MGET`` in the same pipeline reads them; see ``load``).
_LOAD_BATCH = (
    _LOAD_FN
    + """
local segments = cjson.decode(ARGV[1])
local n, m = #segments, tonumber(ARGV[2])
local out = {}
for c = 1, n do
  local A = segments[c]
  out[c] = load_one(KEYS[2 * c - 1], KEYS[2 * c], A, 1, #A)
end
for r = 1, m do out[n + r] = redis.call('GET', KEYS[2 * n + r]) end
return out
"""
)

#: A batch's writes on a single Redis, in one call (so atomically): the binding changes first; when one that binds
#: conflicts, nothing else is written; then the lifecycle index buckets, then the conversations. KEYS: the binding
#: of each change, four per bucket (as ``index_one``), three per conversation (as ``save_one``). ARGV[1]: JSON
#: ``[changes, buckets, conversations]``, each a list of the arguments of one call (as ``cas_one``, ``index_one``,
#: ``save_one``): one argument to pack instead of thousands, decoded by Redis's cjson. Returns the changes'
#: results, then (unless a binding conflicted) the buckets' and the conversations'.
_COMMIT_BATCH = (
    _CAS_FN
    + _SAVE_FN
    + _INDEX_FN
    + """
local batch = cjson.decode(ARGV[1])
local changes, buckets, convs = batch[1], batch[2], batch[3]
local out, blocked = {}, false
for x = 1, #changes do
  out[x] = cas_one(KEYS[x], changes[x], 1)
  if out[x] == 0 and changes[x][3] == '1' then blocked = true end
end
if blocked then return out end
local k = #changes
for _, A in ipairs(buckets) do
  out[#out + 1] = index_one(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], A, 1, #A)
  k = k + 4
end
for _, A in ipairs(convs) do
  out[#out + 1] = save_one(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], A, 1, #A)
  k = k + 3
end
return out
"""
)

#: Write one record and its index entry. KEYS[1]: record key, KEYS[2]: the item's index set.
#: ARGV: record JSON, ask, supersede ("1"/"0"). Returns 0 refused (exists), 1 written new, 2 replaced an existing one.
_PUT = """
if ARGV[3] == '1' then
  local existed = redis.call('EXISTS', KEYS[1])
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[2])
  return 1 + existed
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('SADD', KEYS[2], ARGV[2])
  return 1
end
return 0
"""

#: Record a cancel intent unless one exists. KEYS[1]: the intent hash. ARGV[1]: TTL seconds, then field, value...
#: Returns nil when recorded, else the existing intent's fields (HGETALL).
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HGETALL', KEYS[1]) end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return false
"""

#: Take a pending intent over. KEYS[1]: the intent hash. ARGV[1]: the token seen, then field, value... to set.
#: Returns 1 when taken, 0 when the token moved on (another sweeper took it) or the intent is done or gone.
_TAKE_OVER = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'done') == '1' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""

#: The errors of redis-py that mean "the store is not usable right now" (connection, timeout, server answers; a
#: cluster client's own errors, e.g. no node reachable, derive from RedisClusterException, not RedisError).
_REDIS_ERRORS: tuple[type[BaseException], ...] = (redis_exc.RedisError, redis_exc.RedisClusterException, OSError)


def escape_tag(value: str) -> str:
    """Escape a value for use inside a hash tag: ``%``, ``{`` and ``}`` are percent-encoded."""
    return value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def unescape_tag(value: str) -> str:
    """The inverse of ``escape_tag`` (and of the route's ``/`` escape)."""
    return value.replace("%2F", "/").replace("%7B", "{").replace("%7D", "}").replace("%25", "%")


def _glob_escape(value: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in value)


def _member(conversation: str, ho: str) -> str:
    """An index member: the JSON pair. orjson writes the bytes ``json.dumps`` with compact separators and
    ``ensure_ascii=False`` wrote (members written by earlier releases are removed by their bytes)."""
    return orjson.dumps([conversation, ho]).decode("utf-8")


def _unmember(raw: bytes | str) -> tuple[str, str]:
    conv, ho = _loads(raw)
    return str(conv), str(ho)


_JSON = msgspec.json.Decoder()


def _loads(raw: bytes | str) -> Any:
    """JSON read by msgspec: five times faster than the standard library on a record, and, unlike orjson, exact on
    an integer beyond 64 bits. What msgspec refuses and the standard library reads (an escaped lone surrogate) is
    read by the standard library, as every release before read it."""
    try:
        return _JSON.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


def _compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def redacted_url(url: str) -> str:
    """The URL without its user info (a password may be in it)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@functools.lru_cache(maxsize=4096)
def _conversation_tag(route: str, conversation: str) -> str:
    """The hash tag of a conversation's keys, without its braces. Memoised: a batch names each conversation's keys
    several times (its state, its version-1 document, its collection queue), each escape a few string scans."""
    return f"{escape_tag(route).replace('/', '%2F')}/{escape_tag(conversation)}"


@functools.lru_cache(maxsize=4096)
def _conversation_keys(prefix: str, route: str, conversation: str) -> tuple[str, str, str]:
    """A conversation's state hash, version-1 document and collection queue (``Keys.conversation``). Memoised: each
    batch's load and save name them for every conversation in it, and a conversation's lines span batches."""
    tag = _conversation_tag(route, conversation)
    return f"{prefix}:cs:{{{tag}}}", f"{prefix}:conv:{{{tag}}}", f"{prefix}:gc:{{{tag}}}"


@functools.lru_cache(maxsize=4096)
def _item_tag(item: str) -> str:
    """An item's hash tag (``escape_tag``), memoised: a batch names each handoff's record and binding."""
    return escape_tag(item)


class Keys:
    """The key layout (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def conversation(self, route: str, conversation: str) -> tuple[str, str, str]:
        """A conversation's keys: its state hash, its version-1 document and its collection queue (as ``state``,
        ``conv`` and ``queue``)."""
        return _conversation_keys(self.prefix, route, conversation)

    def queue(self, route: str, conversation: str) -> str:
        """A conversation's collection queue (``policy.state.collect``): ids by when they may be collected."""
        return _conversation_keys(self.prefix, route, conversation)[2]

    def state(self, route: str, conversation: str) -> str:
        """A conversation's state hash."""
        return _conversation_keys(self.prefix, route, conversation)[0]

    def conv(self, route: str, conversation: str) -> str:
        """A conversation's version-1 state document (earlier releases; read once and converted)."""
        return _conversation_keys(self.prefix, route, conversation)[1]

    def record(self, key: RecordKey) -> str:
        return f"{self.prefix}:rec:{{{_item_tag(key.item)}}}:{key.ask}"

    def binding(self, key: RecordKey) -> str:
        return f"{self.prefix}:bind:{{{_item_tag(key.item)}}}:{key.ask}"

    def index(self, item: str) -> str:
        return f"{self.prefix}:recidx:{{{escape_tag(item)}}}"

    @staticmethod
    def route_tag(route: str) -> str:
        return escape_tag(route).replace("/", "%2F")

    def lifecycle(self, kind: str, route: str, partition: int) -> str:
        """One of a partition's lifecycle indexes: ``due``, ``open`` or ``lapsed``."""
        return f"{self.prefix}:{kind}:{{{self.route_tag(route)}/#{partition}}}"

    def lifecycle_pattern(self, kind: str, route: str | None) -> str:
        """A SCAN pattern for the lifecycle indexes of one kind (of one route, or all)."""
        tag = "*" if route is None else _glob_escape(self.route_tag(route))
        return f"{_glob_escape(self.prefix)}:{kind}:{{{tag}/#*}}"

    def parse_lifecycle(self, key: str) -> tuple[str, int] | None:
        """The (route, partition) of a lifecycle index key, or None."""
        _head, sep, rest = key.partition("{")
        if not sep or not rest.endswith("}"):
            return None
        route_tag, sep, part = rest[:-1].rpartition("/#")
        if not sep or not part.isdigit():
            return None
        return unescape_tag(route_tag), int(part)

    def generation(self) -> str:
        """The generation marker: a random id, written once (SET NX) at the first start against this Redis."""
        return f"{self.prefix}:generation"

    def generation_copy(self, n: int) -> str:
        """On a Redis Cluster: a copy of the generation marker, on the master that serves the slot of ``{<n>}``."""
        return f"{self.prefix}:generation:{{{n}}}"

    def generation_copies(self) -> str:
        """On a Redis Cluster: the set of the copies' numbers ``n``, in the marker's own slot (its hash tag is the
        marker's whole key), so that it is lost with the marker or not at all."""
        return f"{self.prefix}:generation:copies{{{self.generation()}}}"

    def cancel(self, route: str, conversation: str, ho: str) -> str:
        return f"{self.prefix}:cancel:{{{self.route_tag(route)}/{escape_tag(conversation)}}}:{ho}"


def client_from_settings(settings: RedisSettings, *, socket_timeout: float = 10.0, connect_timeout: float = 5.0) -> Any:
    """A redis-py asyncio client for ``settings``: credentials from the settings (the password stays a SecretStr
    until here), TLS when ``tls`` is set or the URL is ``rediss://``. With ``cluster`` set, a
    ``redis.asyncio.RedisCluster`` seeded by the URL's node (it discovers the others on its first command), with
    the same options."""
    url, _flag = RedisSettings.split_cluster_param(settings.url)  # ?cluster=true is ours, not redis-py's
    kwargs: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "decode_responses": False,
    }
    if settings.username is not None:
        kwargs["username"] = settings.username
    if settings.password is not None:
        kwargs["password"] = settings.password.get_secret_value()
    tls = settings.tls or url.startswith("rediss://")
    if tls:
        if url.startswith("unix://"):
            raise ConfigError("redis.tls: TLS cannot be used with a unix:// url")
        if url.startswith("redis://"):
            url = "rediss://" + url[len("redis://") :]
        if settings.tls_ca_file is not None:
            kwargs["ssl_ca_certs"] = str(settings.tls_ca_file)
    if settings.cluster:
        if url.startswith("unix://"):
            raise ConfigError("redis.cluster: a Redis Cluster is reached over TCP: a redis:// or rediss:// url")
        if urlsplit(url).path.strip("/") not in ("", "0"):
            raise ConfigError("redis.cluster: a Redis Cluster has only database 0 (the url's path must be /0)")
    try:
        if settings.cluster:
            return RedisCluster.from_url(url, **kwargs)
        client = Redis.from_url(url, **kwargs)
    except (ValueError, redis_exc.RedisClusterException) as exc:
        raise ConfigError(f"redis.url: {exc}") from None
    # a batch's load and save name a few keys a conversation: packed by hiredis in one call (``redis_packing``)
    pool = client.connection_pool
    pool.connection_class = packed_in_one(pool.connection_class)
    return client


class RedisStore:
    """The ``Store`` on Redis. Build it from ``RedisSettings``; ``client`` may be given instead (a RedisCluster
    client, or a shared one). The store closes only a client it made."""

    def __init__(self, settings: RedisSettings, *, client: Any | None = None, metrics: Any | None = None) -> None:
        self.settings = settings
        self._metrics = metrics  # gatekeeper.metrics.Metrics: counts the round trips of load, claim and save
        self.keys = Keys(settings.key_prefix)
        self._owns_client = client is None
        self._redis: Any = client if client is not None else client_from_settings(settings)
        self._cluster = settings.cluster or isinstance(self._redis, RedisCluster)
        self._cas = self._redis.register_script(_CAS)
        self._load = self._redis.register_script(_LOAD)
        self._save = self._redis.register_script(_SAVE)
        self._index = self._redis.register_script(_INDEX)
        self._load_batch = self._redis.register_script(_LOAD_BATCH)
        self._commit_batch = self._redis.register_script(_COMMIT_BATCH)
        self._put = self._redis.register_script(_PUT)
        self._claim_cancel = self._redis.register_script(_CLAIM)
        self._take_over = self._redis.register_script(_TAKE_OVER)
        self._where = redacted_url(settings.url)
        self._generation: str | None = None  # the marker this store started on (ensure_generation)
        # the marker keys every load, claim, save and ping reads first: the marker; on a cluster also its copies,
        # one per master (ensure_generation)
        self._markers: list[str] = [self.keys.generation()]

    # ------------------------------------------------------------ the generation marker

    async def ensure_generation(self, *, create: bool = True, copies: bool = True) -> str | None:
        """The generation marker (``<prefix>:generation``), written with SET NX when there is none (the first start
        against this Redis). Remembered: from then on every load, claim, save and ping reads it in the same
        pipeline, ahead of its other commands, and raises ``DataLost`` when it is missing or different.

        ``create=False``: a missing marker is not written; None is returned and every later call raises
        ``DataLost`` (the daemon decides whether this is a first start: see ``Gatekeeper``). ``copies=False``: on a
        Redis Cluster the copies there are are read with the marker, and none is written (the operator's commands,
        ``gatekeeper.generation.require``: a dry run writes nothing)."""
        fresh = uuid.uuid4().hex
        try:
            pipe = self._redis.pipeline(transaction=False)
            if create:
                pipe.set(self.keys.generation(), fresh, nx=True)
            pipe.get(self.keys.generation())
            results = await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise self._error("generation", exc) from exc
        created, raw = (results[0], results[1]) if create else (False, results[0])
        if raw is None:
            if create:
                raise StoreError(f"redis {self._where}: the generation marker was not written")
            self._generation = ""  # no marker matches: every load, claim, save and ping raises DataLost
            return None
        self._generation = _text(raw)
        if created:
            log.warning(
                "redis generation marker written: the first start against this redis (or its data was lost before "
                "this start: see the runbook, docs/troubleshooting.md)",
                extra={"generation": self._generation},
            )
        if self._cluster:
            await self._ensure_copies(self._generation, write=copies)
        return self._generation

    async def _ensure_copies(self, generation: str, *, write: bool = True) -> None:
        """On a Redis Cluster the marker lives on one master; a copy on every master lets the other masters' loss
        be seen too (one restarted without persistence, or failed over to an empty replica, comes back empty).
        The copies this Redis has (``generation_copies``) are kept and read by every later pipeline with the
        marker: a missing one raises ``DataLost`` there. A master that holds none (the first start, a master
        added since, a copy's slot moved away by a reshard) is given one: SET NX of the marker's value on a key
        whose slot it serves, added to the set (unless ``write`` is False). When a copy is missing now, nothing is
        written (a loss is not papered over): the first batch raises ``DataLost``."""
        try:
            numbers = sorted(int(n) for n in await self._redis.smembers(self.keys.generation_copies()))
            self._markers = [self.keys.generation(), *(self.keys.generation_copy(n) for n in numbers)]
            if numbers:
                found = await self._redis.mget_nonatomic([self.keys.generation_copy(n) for n in numbers])
                if any(f is None or _text(f) != generation for f in found):
                    return
            if not write:
                return

            def master(n: int) -> str:
                return str(self._redis.get_node_from_key(self.keys.generation_copy(n)).name)

            held = {master(n) for n in numbers}
            # the masters that serve a slot (a master just added serves none until a reshard)
            serving = {nodes[0].name for nodes in self._redis.nodes_manager.slots_cache.values() if nodes}
            missing = sorted(serving - held)
            added: list[int] = []
            n = 0
            while missing and n < 1_000_000:  # a slot of each master is found within a few tries per master
                if n not in numbers and master(n) in missing:
                    missing.remove(master(n))
                    await self._redis.set(self.keys.generation_copy(n), generation, nx=True)
                    added.append(n)
                n += 1
            if added:
                await self._redis.sadd(self.keys.generation_copies(), *added)
                numbers = sorted({*numbers, *added})
                self._markers = [self.keys.generation(), *(self.keys.generation_copy(n) for n in numbers)]
        except _REDIS_ERRORS as exc:
            raise self._error("generation (copies)", exc) from exc

    async def epochs_exist(self, route: str, partitions: Collection[int]) -> bool:
        """Whether any of these input partitions has an owner epoch key: a gatekeeper was assigned it against this
        Redis (the keys never expire), so a missing generation marker means a loss, not a first start."""
        results = await self._on_epochs("exists", route, partitions)
        return any(int(r) for r in results.values())

    async def _on_epochs(self, command: str, route: str, partitions: Collection[int]) -> dict[int, Any]:
        """One pipelined round trip: ``command`` (EXISTS, INCR) on each partition's epoch key; its reply per
        partition."""
        parts = sorted(set(partitions))
        if not parts:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for p in parts:
            getattr(pipe, command)(self.keys.lifecycle("epoch", route, p))
        try:
            results = await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise self._error("epochs", exc) from exc
        return dict(zip(parts, results, strict=True))

    async def generation(self) -> str | None:
        """The generation marker in Redis now (None: there is none)."""
        try:
            raw = await self._redis.get(self.keys.generation())
        except _REDIS_ERRORS as exc:
            raise self._error("generation", exc) from exc
        return None if raw is None else _text(raw)

    async def accept_loss(self) -> tuple[str | None, str]:
        """Write a new generation marker (``gatekeeper redis accept-loss``): the operator accepts what Redis holds
        now. Returns (the marker before, the new one). Running gatekeepers stay stopped until restarted."""
        fresh = uuid.uuid4().hex
        try:
            old = await self._redis.set(self.keys.generation(), fresh, get=True)
            if self._cluster:  # the copies of the old marker go; a gatekeeper's next start writes new ones
                numbers = [int(n) for n in await self._redis.smembers(self.keys.generation_copies())]
                await self._redis.delete(self.keys.generation_copies(), *map(self.keys.generation_copy, numbers))
        except _REDIS_ERRORS as exc:
            raise self._error("accept-loss", exc) from exc
        return (None if old is None else _text(old)), fresh

    def _queue_markers(self, pipe: Any) -> int:
        """GET of the marker (and, on a cluster, of its copies) queued first on a pipeline: how many results."""
        for key in self._markers:
            pipe.get(key)
        return len(self._markers)

    def _check_markers(self, raws: Sequence[Any]) -> None:
        for key, raw in zip(self._markers, raws, strict=True):
            self._check_generation(raw, key)

    def _check_generation(self, raw: Any, key: str | None = None) -> None:
        if isinstance(raw, BaseException):
            raise self._error("generation", raw) from raw
        found = None if raw is None else _text(raw)
        if found != self._generation:
            what = "is missing" if found is None else f"changed ({self._generation or 'none'} -> {found})"
            raise DataLost(
                f"redis {self._where} lost its data: the generation marker {key or self.keys.generation()} {what}",
                self._generation,
                found,
            )

    # ------------------------------------------------------------ plumbing

    def _trip(self, operation: str) -> None:
        if self._metrics is not None:
            self._metrics.redis_round_trips.labels(operation=operation).inc()

    async def _scripted(self, what: str, queue: Callable[[Any], None], scripts: Sequence[tuple[Any, str]]) -> list[Any]:
        """One pipelined round trip of the commands ``queue`` puts on a pipeline (``EVALSHA`` of ``scripts`` among
        them). When the server forgot a script (a restart, ``SCRIPT FLUSH``, a failover) the scripts are loaded and
        the pipeline is sent once more: the commands of a load or a save are idempotent. Any other error is a
        ``StoreError``."""
        checked = self._generation is not None
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            # first on the connection: the commands after it ran on the same data (on a cluster: first on each
            # master's connection, one copy of the marker each)
            markers = self._queue_markers(pipe) if checked else 0
            queue(pipe)
            self._trip(what)
            try:
                results: list[Any] = await pipe.execute(raise_on_error=False)
            except _REDIS_ERRORS as exc:
                raise self._error(what, exc) from exc
            if checked:
                self._check_markers(results[:markers])
                results = results[markers:]
            if attempt == 0 and any(isinstance(r, redis_exc.NoScriptError) for r in results):
                try:
                    for script, text in scripts:
                        script.sha = await self._redis.script_load(text)
                except _REDIS_ERRORS as exc:
                    raise self._error(f"{what} (script load)", exc) from exc
                continue
            failed = next((r for r in results if isinstance(r, BaseException)), None)
            if failed is not None:
                raise self._error(what, failed) from failed
            return results
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"redis {self._where}: {what} failed: {type(exc).__name__}: {exc}")

    async def ping(self) -> bool:
        """True when Redis answers (readiness). Raises ``StoreError`` otherwise, ``DataLost`` when the generation
        marker is not the one this store started on."""
        try:
            if self._cluster:
                # PING has no key: a cluster pipeline refuses it. Every master is pinged, and the marker and its
                # copies read, side by side (one round trip's time)
                pings = self._redis.ping(target_nodes=RedisCluster.PRIMARIES)
                if self._generation is None:
                    return bool(await pings)
                pipe = self._redis.pipeline(transaction=False)
                self._queue_markers(pipe)
                pong, raws = await asyncio.gather(pings, pipe.execute())
                self._check_markers(raws)
                return bool(pong)
            if self._generation is None:
                return bool(await self._redis.ping())
            pipe = self._redis.pipeline(transaction=False)
            pipe.ping()
            pipe.get(self.keys.generation())
            pong, raw = await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise self._error("ping", exc) from exc
        self._check_generation(raw)
        return bool(pong)

    async def close(self) -> None:
        if self._owns_client:
            try:
                await self._redis.aclose()
            except _REDIS_ERRORS as exc:  # closing a broken connection is not worth an error
                log.debug("closing the redis client: %s", exc)

    async def __aenter__(self) -> RedisStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------ the Store protocol

    async def load(self, route: str, wants: Wants, keys: Collection[RecordKey]) -> Loaded:
        """One round trip: the part of each conversation's state its ids need (``load_one``), the records and the
        bindings. On a single Redis one call of ``_LOAD_BATCH`` (the states and the bindings) and an ``MGET`` of the
        records on the same pipeline; on a cluster one ``_LOAD`` per conversation and a GET per key, each on its
        slot's master. The records are read by plain reads, never as a script's keys: the daemon's Redis user may
        only read them (the chart README's "Redis ACL users"), and Redis checks a script's keys as written."""
        convs = list(wants)
        rkeys = list(keys)
        if not convs and not rkeys:
            return Loaded()
        segments = [["*"] if wants[conv] is None else sorted(wants[conv] or ()) for conv in convs]
        states = [self.keys.conversation(route, conv)[:2] for conv in convs]

        def batch(pipe: Any) -> None:
            kv: list[Any] = [k for pair in states for k in pair]
            kv += [self.keys.binding(k) for k in rkeys]
            kv += [orjson.dumps(segments), len(rkeys)]
            _evalsha(pipe, self._load_batch.sha, 2 * len(convs) + len(rkeys), *kv)
            if rkeys:
                pipe.mget([self.keys.record(k) for k in rkeys])

        def per_slot(pipe: Any) -> None:
            for pair, args in zip(states, segments, strict=True):
                _evalsha(pipe, self._load.sha, 2, *pair, *args)
            for k in rkeys:
                pipe.get(self.keys.record(k))
            for k in rkeys:
                pipe.get(self.keys.binding(k))

        n = len(convs)
        if self._cluster:
            results = await self._scripted("load", per_slot, [(self._load, _LOAD)])
            raw_states, raw_records, raw_bindings = results[:n], results[n : n + len(rkeys)], results[n + len(rkeys) :]
        else:
            found = await self._scripted("load", batch, [(self._load_batch, _LOAD_BATCH)])
            raw_states, raw_bindings = found[0][:n], found[0][n:]
            raw_records = found[1] if rkeys else []
        loaded = Loaded()
        for conv, (key, _), raw in zip(convs, states, raw_states, strict=True):
            loaded.states[conv] = self._decode_state(key, raw)
        for k, raw in zip(rkeys, raw_records, strict=True):
            if raw is not None:
                loaded.records[k] = self._decode_record(self.keys.record(k), raw)
        for k, raw in zip(rkeys, raw_bindings, strict=True):
            if raw is not None:
                loaded.bindings[k] = _text(raw)
        return loaded

    async def take_epochs(self, route: str, partitions: Collection[int]) -> dict[int, int]:
        """One pipelined round trip: INCR each partition's epoch key."""
        return {p: int(e) for p, e in (await self._on_epochs("incr", route, partitions)).items()}

    async def save(
        self,
        route: str,
        states: Mapping[str, ConversationState],
        deadlines: Sequence[IndexEntry] = (),
        fences: Mapping[str, int] | None = None,
        now: float | None = None,
        claims: Sequence[BindingChange] = (),
    ) -> list[BindingChange]:
        """The binding changes ``claims`` (compare-and-set, as ``claim``), then, unless one that binds conflicted,
        the lifecycle index changes (``deadlines``) and per state the fields it changed and its collection at
        ``now`` (``save_one``: HSET, the collection queue, its TTL, longer while a handoff is open; a state
        converted from a version-1 document deletes the document), each fenced by its writer's epoch when
        ``fences`` names one. Returns the changes that conflicted.

        On a single Redis all of it is one call of ``_COMMIT_BATCH``: one round trip, and atomic. On a cluster the
        changes are a round trip of their own (a binding and a conversation are on different slots, and the
        conversations are written only when no claim conflicted), then one pipeline: the index buckets first (so a
        state written means its index entries were sent before it on that master's connection; an entry left
        behind by a failed write is harmless: the sweeper finds the handoff closed and drops it, and a batch
        retried after a failure writes its handoffs' entries again), then the conversations. Raises ``Fenced``
        naming the conversations refused."""
        if self._cluster and claims:
            conflicts = await self.claim(claims)
            if blocking(conflicts):
                return conflicts
            claims = ()
        else:
            conflicts = []
        if not states and not deadlines and not claims:
            return conflicts
        fences = fences or {}
        at = time.time() if now is None else now
        convs = list(states)
        # each conversation's arguments made by the engine (``ConversationState.save_args``): on a single Redis as
        # JSON, one element of the script's one argument; on a cluster as the arguments of its own script call
        scored = (_score(at), _score(at - self.settings.retention_seconds))
        ttls = (self.settings.open_retention_seconds, self.settings.retention_seconds)
        json = not self._cluster
        writes: list[tuple[tuple[str, str, str], Any]] = []
        for conv in convs:
            args = states[conv].save_args(fences.get(conv), *ttls, *scored, COLLECT_PER_SAVE, json=json)
            writes.append(
                (
                    self.keys.conversation(route, conv),
                    orjson.Fragment(args) if json else args,
                )
            )
        buckets = self._index_buckets(route, deadlines, fences)

        def batch(pipe: Any) -> None:
            kv: list[Any] = [self.keys.binding(ch.key) for ch in claims]
            kv += [k for keys, _ in buckets for k in keys]
            kv += [k for keys, _ in writes for k in keys]
            blob = orjson.dumps([[_cas_args(ch) for ch in claims], [a for _, a in buckets], [a for _, a in writes]])
            _evalsha(pipe, self._commit_batch.sha, len(kv), *kv, blob)

        def per_slot(pipe: Any) -> None:
            for bucket, segment in buckets:
                _evalsha(pipe, self._index.sha, 4, *bucket, *segment)
            for conv, segment in writes:
                _evalsha(pipe, self._save.sha, 3, *conv, *segment)

        if self._cluster:
            results = await self._scripted("save", per_slot, [(self._save, _SAVE), (self._index, _INDEX)])
        else:
            results = (await self._scripted("save", batch, [(self._commit_batch, _COMMIT_BATCH)]))[0]
            conflicts = [ch for ch, r in zip(claims, results, strict=False) if int(r) == 0]
            if blocking(conflicts):
                return conflicts
            results = results[len(claims) :]
        index_refused = sum(1 for r in results[: len(buckets)] if int(r) == 0)
        refused = [c for c, r in zip(convs, results[len(buckets) :], strict=True) if int(r) == 0]
        if refused or index_refused:
            raise Fenced(
                f"a newer owner of the partition wrote {len(refused)} conversation(s) of this batch"
                + (f" and {index_refused} index bucket(s)" if index_refused else ""),
                refused,
            )
        return conflicts

    def _index_buckets(
        self, route: str, entries: Sequence[IndexEntry], fences: Mapping[str, int]
    ) -> list[tuple[list[str], list[Any]]]:
        """The index changes, per partition: its keys (as ``index_one``: the epoch key, then the due, open and
        lapsed indexes) and its arguments (the lowest epoch of its entries' conversations, "" when none is
        fenced, then triples op, member, score)."""
        buckets: dict[int, list[IndexEntry]] = {}
        for e in entries:
            buckets.setdefault(e.partition, []).append(e)
        out: list[tuple[list[str], list[Any]]] = []
        for partition, group in sorted(buckets.items()):
            epochs = [fences[e.conversation] for e in group if e.conversation in fences]
            args: list[Any] = [min(epochs) if epochs else ""]
            for e in group:
                member = _member(e.conversation, e.ho)
                args += ("due", member, _score(e.due_at)) if e.due_at is not None else ("-due", member, 0)
                args += ("open", member, _score(e.opened_at or 0.0)) if e.open else ("-open", member, 0)
                if e.lapsed_at is not None:
                    args += ("lapsed", member, _score(e.lapsed_at))
            keys = [self.keys.lifecycle(k, route, partition) for k in ("epoch", "due", "open", "lapsed")]
            out.append((keys, args))
        return out

    # ------------------------------------------------------------ the lifecycle (LifecycleStore)

    async def due_view(
        self, route: str, partitions: Collection[int], now: float, limit: int, *, forget_lapsed_before: float | None
    ) -> dict[int, DueView]:
        """One pipelined round trip over the partitions' indexes (see ``LifecycleStore``)."""
        parts = sorted(set(partitions))
        if not parts:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for p in parts:
            pipe.zrangebyscore(self.keys.lifecycle("due", route, p), "-inf", now, start=0, num=limit, withscores=True)
            pipe.zcard(self.keys.lifecycle("open", route, p))
            pipe.zrange(self.keys.lifecycle("open", route, p), 0, 0, withscores=True)
            if forget_lapsed_before is not None:
                pipe.zremrangebyscore(self.keys.lifecycle("lapsed", route, p), "-inf", f"({forget_lapsed_before}")
        try:
            results = await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise self._error("due_view", exc) from exc
        out: dict[int, DueView] = {}
        step = 4 if forget_lapsed_before is not None else 3
        for i, p in enumerate(parts):
            due, count, oldest = results[i * step : i * step + 3]
            items = [Indexed(p, *_unmember(m), float(t)) for m, t in due]
            first = [Indexed(p, *_unmember(m), float(t)) for m, t in oldest]
            out[p] = DueView(due=items, open_count=int(count), oldest=first[0] if first else None)
        return out

    async def index(self, route: str | None, kind: IndexKind) -> list[tuple[str, Indexed]]:
        """Every member of one index (SCAN over the partitions' keys; an operator's command, not the daemon's)."""
        out: list[tuple[str, Indexed]] = []
        try:
            pattern = self.keys.lifecycle_pattern(kind, route)
            keys = sorted({_text(k) async for k in self._redis.scan_iter(match=pattern, count=500)})
            for key in keys:
                where = self.keys.parse_lifecycle(key)
                if where is None or (route is not None and where[0] != route):
                    continue
                members = await self._redis.zrange(key, 0, -1, withscores=True)
                out.extend((where[0], Indexed(where[1], *_unmember(m), float(t))) for m, t in members)
        except _REDIS_ERRORS as exc:
            raise self._error("index", exc) from exc
        return out

    async def index_head(
        self, route: str, kind: IndexKind, partitions: Collection[int], limit: int, *, newest: bool = False
    ) -> list[Indexed]:
        """ZRANGE of each partition's key (the daemon's ACL allows it; SCAN and ZREVRANGE it does not need)."""
        out: list[Indexed] = []
        start, stop = (-limit, -1) if newest else (0, limit - 1)
        try:
            for p in sorted(partitions):
                members = await self._redis.zrange(self.keys.lifecycle(kind, route, p), start, stop, withscores=True)
                out.extend(Indexed(p, *_unmember(m), float(t)) for m, t in members)
        except _REDIS_ERRORS as exc:
            raise self._error("index", exc) from exc
        out.sort(key=lambda m: m.score, reverse=newest)
        return out[:limit]

    async def index_size(self, route: str, kind: IndexKind, partitions: Collection[int]) -> int:
        try:
            return sum([int(await self._redis.zcard(self.keys.lifecycle(kind, route, p))) for p in partitions])
        except _REDIS_ERRORS as exc:
            raise self._error("index", exc) from exc

    async def intents(self, route: str, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], CancelIntent]:
        pairs = list(keys)
        if not pairs:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for conv, ho in pairs:
            pipe.hgetall(self.keys.cancel(route, conv, ho))
        try:
            results = await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise self._error("intents", exc) from exc
        out = {}
        for pair, raw in zip(pairs, results, strict=True):
            if raw:
                out[pair] = self._decode_intent(self.keys.cancel(route, *pair), raw)
        return out

    async def claim_cancel(self, route: str, conversation: str, ho: str, intent: CancelIntent) -> CancelIntent | None:
        key = self.keys.cancel(route, conversation, ho)
        args: list[Any] = [self.settings.open_retention_seconds]
        for k, v in intent.fields().items():
            args.extend((k, v))
        try:
            res = await self._claim_cancel(keys=[key], args=args)
        except _REDIS_ERRORS as exc:
            raise self._error("claim_cancel", exc) from exc
        if not res:
            return None
        existing = self._decode_intent(key, dict(zip(res[::2], res[1::2], strict=True)))
        # this very claim, written by an attempt whose answer was lost and retried by the client (a cluster client
        # retries a timed-out command): it is ours, not another sweeper's
        return None if existing == intent else existing

    async def take_over_cancel(
        self, route: str, conversation: str, ho: str, seen_token: int, owner: str, at: float
    ) -> CancelIntent | None:
        key = self.keys.cancel(route, conversation, ho)
        new_token = seen_token + 1
        args = [json.dumps(seen_token), "owner", owner, "token", json.dumps(new_token), "at", json.dumps(at)]
        try:
            if not int(await self._take_over(keys=[key], args=args)):
                return None
            raw = await self._redis.hgetall(key)
        except _REDIS_ERRORS as exc:
            raise self._error("take_over_cancel", exc) from exc
        return self._decode_intent(key, raw) if raw else None

    async def finish_cancel(self, route: str, conversation: str, ho: str, published: int) -> None:
        key = self.keys.cancel(route, conversation, ho)
        try:
            await self._redis.hset(key, mapping={"done": "1", "published": json.dumps(published)})
        except _REDIS_ERRORS as exc:
            raise self._error("finish_cancel", exc) from exc

    def _decode_intent(self, key: str, raw: Mapping[Any, Any]) -> CancelIntent:
        try:
            return CancelIntent.from_fields({_text(k): _text(v) for k, v in raw.items()})
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"redis {self._where}: the cancel intent at {key} cannot be read: {exc}") from exc

    async def claim(self, changes: Sequence[BindingChange]) -> list[BindingChange]:
        """Compare-and-set each change in one pipeline of EVALSHA. Returns the conflicts."""
        if not changes:
            return []
        pending = list(changes)
        conflicts: list[BindingChange] = []
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            checked = self._generation is not None
            markers = self._queue_markers(pipe) if checked else 0  # first on the connection, as in _scripted
            for ch in pending:
                _evalsha(pipe, self._cas.sha, 1, self.keys.binding(ch.key), *_cas_args(ch))
            self._trip("claim")
            try:
                results = await pipe.execute(raise_on_error=False)
            except _REDIS_ERRORS as exc:
                raise self._error("claim", exc) from exc
            if checked:
                self._check_markers(results[:markers])
                results = results[markers:]
            retry: list[BindingChange] = []
            for ch, res in zip(pending, results, strict=True):
                if isinstance(res, redis_exc.NoScriptError) and attempt == 0:
                    retry.append(ch)
                elif isinstance(res, BaseException):
                    raise self._error("claim", res) from res
                elif int(res) == 0:
                    conflicts.append(ch)
            if not retry:
                return conflicts
            # the server forgot the script (a restart, SCRIPT FLUSH, a failover): load it and retry those changes
            try:
                self._cas.sha = await self._redis.script_load(_CAS)
            except _REDIS_ERRORS as exc:
                raise self._error("claim (script load)", exc) from exc
            pending = retry
        raise StoreError(f"redis {self._where}: claim failed: the compare-and-set script cannot be loaded")

    async def store_record(self, record: Record, *, supersede: bool = False) -> bool:
        """Write an approved record atomically with its index entry. Returns True when it replaced an existing one.
        Raises ``RecordExists`` when one exists and ``supersede`` is not set."""
        keys = [self.keys.record(record.key), self.keys.index(record.item)]
        args = [_compact(record.to_dict()), record.ask, "1" if supersede else "0"]
        try:
            res = int(await self._put(keys=keys, args=args))
        except _REDIS_ERRORS as exc:
            raise self._error("put_record", exc) from exc
        if res == 0:
            raise RecordExists(f"a record for item {record.item} ask {record.ask} exists; supersede it explicitly")
        return res == 2

    async def put_record(self, record: Record, *, supersede: bool = False) -> None:
        await self.store_record(record, supersede=supersede)

    async def get_records(self, item: str, ask: str | None = None) -> list[Record]:
        """The records of ``item`` (all asks, from the item's index), or of (item, ask), sorted by ask."""
        try:
            if ask is not None:
                raw = await self._redis.get(self.keys.record(RecordKey(item, ask)))
                return [] if raw is None else [self._decode_record(self.keys.record(RecordKey(item, ask)), raw)]
            asks = sorted(await self._asks(item))
            if not asks:
                return []
            rec_keys = [self.keys.record(RecordKey(item, a)) for a in asks]
            raws = await self._redis.mget(rec_keys)
        except _REDIS_ERRORS as exc:
            raise self._error("get_records", exc) from exc
        # an index entry whose record is gone (deleted between the two reads) is skipped
        return [self._decode_record(k, r) for k, r in zip(rec_keys, raws, strict=True) if r is not None]

    async def delete_records(self, item: str, ask: str | None = None) -> int:
        """Delete the records of ``item`` (or of (item, ask)) and their index entries; bindings stay (see above).
        Returns how many records were deleted."""
        try:
            asks = [ask] if ask is not None else await self._asks(item)
            if not asks:
                return 0
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(*(self.keys.record(RecordKey(item, a)) for a in asks))
            pipe.srem(self.keys.index(item), *asks)
            deleted, _removed = await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise self._error("delete_records", exc) from exc
        return int(deleted)

    async def _asks(self, item: str) -> list[str]:
        return [_text(a) for a in await self._redis.smembers(self.keys.index(item))]

    async def binding(self, key: RecordKey) -> str | None:
        try:
            raw = await self._redis.get(self.keys.binding(key))
        except _REDIS_ERRORS as exc:
            raise self._error("binding", exc) from exc
        return None if raw is None else _text(raw)

    # ------------------------------------------------------------ decoding

    def _decode_state(self, key: str, raw: list[Any]) -> ConversationState:
        try:
            if len(raw) == 2 and _text(raw[0]) == "v1":
                return ConversationState.from_dict(_loads(raw[1]))
            return ConversationState.from_reply(raw)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise StoreError(f"redis {self._where}: the state at {key} cannot be read: {exc}") from exc

    def _decode_record(self, key: str, raw: bytes | str) -> Record:
        try:
            return _read_record(raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"redis {self._where}: the record at {key} cannot be read: {exc}") from exc


_RECORD = msgspec.json.Decoder(Record)


def _read_record(raw: bytes | str) -> Record:
    """A stored record, decoded straight into a ``Record`` (2 µs, where a dict then ``Record.from_dict`` took 5.7);
    one whose fields are of other types, or JSON msgspec refuses, is read as every record was (``from_dict``).
    Raises ValueError, KeyError or TypeError for a value that is not a record."""
    try:
        return _RECORD.decode(raw)
    except msgspec.DecodeError:
        return Record.from_dict(_loads(raw))


def _evalsha(pipe: Any, sha: str, numkeys: int, *keys_and_args: Any) -> None:
    """Queue an ``EVALSHA`` on a pipeline. The raw command, because redis-py's cluster pipeline blocks its
    ``evalsha`` method (redis-py issue #2914; the command itself is routed by its keys, which must share a slot:
    ours do). On a single Redis this is exactly what ``Pipeline.evalsha`` queues."""
    pipe.execute_command("EVALSHA", sha, numkeys, *keys_and_args)


def _score(t: float) -> str:
    """A time as Redis reads a score: the text redis-py sends for a float (``repr``, the shortest that reads back
    the same; ``inf`` as ``+inf``). Text inside the JSON of ``_COMMIT_BATCH`` too, so the score never depends on
    how Lua turns a number back into a command's argument."""
    if t == float("inf"):
        return "+inf"
    return repr(t)


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


def _cas_args(ch: BindingChange) -> list[str]:
    return [
        "0" if ch.before is None else "1",
        ch.before or "",
        "0" if ch.after is None else "1",
        ch.after or "",
    ]
