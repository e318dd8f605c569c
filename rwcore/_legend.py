"""The legend: the text another model needs in its prompt to read and write lines under a profile.

Generated from the compiled profile, word for word as the reference generates it, once per (profile, lean).
``lean`` drops the comprehension-readback keys, the profile's described slots from the per-type lists and the core
asks the profile does not use, for teams that use envelope echo only; when that drops ``UNDO``, the sentence that
tells agents to reverse a done report with ``ask=UNDO`` goes too (the one place a legend differs from the
reference's: ``docs/rwcore-differences.md``).
"""

from __future__ import annotations

from rwcore import _native
from rwcore._profiles import Profile, core_data, reference_profile

# The words are the native code's (native/rw1/src/legend.rs); this module hands it the profile's and keeps what it
# wrote, once per (profile, lean).

_cache: dict[tuple[int, bool], tuple[Profile, str]] = {}


def _build(prof: Profile, lean: bool) -> str:
    text: str = _native.legend(
        [(code, t.name, list(t.required), list(t.optional)) for code, t in prof.types.items()],
        [(k, str(v)) for k, v in prof.slot_desc.items()],
        [(k, str(v)) for k, v in prof.slot_types.items()],
        [(name, [(k, str(v)) for k, v in vals.items()]) for name, vals in prof.enums.items()],
        list(prof.core_asks),
        list(prof.asks_used or ()),
        [(k, str(v)) for k, v in core_data()["constraint_keys"].items()],
        [(k, list(v)) for k, v in prof.exec_map.items()],
        prof.declared,
        list(prof.agents or ()),
        bool(prof.ans),
        [(k, str(v)) for k, v in (prof.item_kinds or {}).items()],
        list(prof.item_examples or ()),
        lean,
    )
    return text


def legend(profile: Profile | str | None = None, lean: bool = False) -> str:
    """The legend for a profile (a Profile, or a name as the reference takes it; None: the core). Cached."""
    prof = profile if isinstance(profile, Profile) else reference_profile(profile)
    key = (id(prof), bool(lean))
    hit = _cache.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1]
    text = _build(prof, bool(lean))
    _cache[key] = (prof, text)
    return text
