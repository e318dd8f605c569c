"""Redis commands packed by hiredis in one call.

redis-py packs a command through hiredis, but first hands each of its arguments to its encoder in Python (about
0.6 µs an argument on this project's machine). A batch's load names two keys a conversation and its save three:
about 1,400 arguments for a batch of 500 lines, which redis-py took most of a millisecond to pack and hiredis packs
in a tenth of that. hiredis writes a ``str`` (as UTF-8, strict), ``bytes``, ``int`` and ``float`` itself, the same
bytes redis-py's encoder writes for them (``tests/unit/test_redis_packing.py`` holds the two to each other); a
command it refuses (a ``bool``, a ``memoryview``: its ``TypeError``) or whose name holds a space (redis-py's own
``"SCRIPT LOAD"``, split there) goes redis-py's way, with redis-py's errors.

Written here because neither library offers it: redis-py's packer is chosen inside its connection's constructor, so
the connection class a pool makes is extended (``packed_in_one``) rather than the client configured.
"""

from __future__ import annotations

from typing import Any, TypeVar

import hiredis

C = TypeVar("C", bound=type)


def packed_in_one(connection_class: C) -> C:
    """``connection_class`` with its commands packed by hiredis in one call where hiredis can (see the module)."""

    class Packed(connection_class):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            name = args[0] if args else None
            if type(name) is str and " " not in name:
                try:
                    return [hiredis.pack_command(args)]
                except TypeError:  # an argument hiredis does not write: redis-py's encoder decides (DataError)
                    pass
            result: list[bytes] = super().pack_command(*args)
            return result

    Packed.__name__ = Packed.__qualname__ = f"Packed{connection_class.__name__}"
    return Packed  # type: ignore[return-value]
