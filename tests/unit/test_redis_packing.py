"""A command packed by hiredis in one call is the command redis-py packs (``gatekeeper.redis_packing``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from gatekeeper.config import RedisSettings
from gatekeeper.redis_packing import packed_in_one
from gatekeeper.redis_store import client_from_settings

PACKED = packed_in_one(Connection)
PLAIN = Connection()
FAST = PACKED()

arguments = st.one_of(
    st.text(),  # lone surrogates included: both refuse them (UnicodeEncodeError)
    st.binary(),
    st.integers(),
    st.floats(),  # nan and the infinities too
    st.booleans(),  # redis-py refuses a bool (DataError); hiredis refuses it too, and redis-py decides
    st.none(),
    st.binary().map(memoryview),
)


def packed(conn: Any, args: tuple[Any, ...]) -> bytes | type[BaseException]:
    try:
        return b"".join(bytes(c) for c in conn.pack_command(*args))
    except Exception as exc:  # the error is part of what must agree
        return type(exc)


@given(st.sampled_from(["EVALSHA", "GET", "HSET", "SCRIPT LOAD", "CLIENT SETINFO"]), st.lists(arguments, max_size=8))
def test_a_command_packs_as_redis_py_packs_it(name: str, args: list[Any]) -> None:
    command = (name, *args)
    assert packed(FAST, command) == packed(PLAIN, command)


def test_a_command_hiredis_refuses_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(DataError):
        FAST.pack_command("SET", "k", True)


def test_a_name_with_a_space_is_split_as_redis_py_splits_it() -> None:
    assert FAST.pack_command("SCRIPT LOAD", "return 1") == PLAIN.pack_command("SCRIPT LOAD", "return 1")
    assert FAST.pack_command("SCRIPT LOAD", "return 1")[0].startswith(b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n")


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("redis://127.0.0.1:6379/0", Connection),
        ("rediss://127.0.0.1:6379/0", SSLConnection),
        ("unix:///tmp/redis.sock", UnixDomainSocketConnection),
    ],
)
def test_the_daemons_client_packs_in_one_call_over_every_transport(url: str, base: type) -> None:
    client = client_from_settings(RedisSettings(url=url))
    cls = client.connection_pool.connection_class
    assert issubclass(cls, base) and cls is not base
    assert cls.pack_command is not base.pack_command
