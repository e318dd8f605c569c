"""The legend: the text another model needs in its prompt to read and write lines under a profile.

Generated from the compiled profile, word for word as the reference generates it, once per (profile, lean).
``lean`` drops the comprehension-readback keys, the profile's described slots from the per-type lists and the core
asks the profile does not use, for teams that use envelope echo only; when that drops ``UNDO``, the sentence that
tells agents to reverse a done report with ``ask=UNDO`` goes too (the one place a legend differs from the
reference's: ``docs/rwcore-differences.md``).
"""

from __future__ import annotations

from typing import Final

from rwcore._codec import VERSION
from rwcore._profiles import Profile, core_data, reference_profile

_ACC_SLOTS: Final = frozenset({"acc", "keys", "do", "not", "asm"})
_HEAD: Final = (
    f"rogerwilco {VERSION}. One line per message: RW1 <TYPE> <id> [re=<id>] from=<agent> to=<agent> [item=<ref>] "
    "key=value ... [// tail]. No spaces in values; lists join with +; dates YYYYMMDD; tail is free text, 300 chars max."
)
_RB_LEAN: Final = (
    "RB echoes the HO's item, ask and due as decoded, plus any slots the HO names in rb= (rb=all: every slot). "
    "Code-side receivers add h=<digest of the HO>. Unknown code: reply UN why=UNK. Every reply carries re=."
)
_RB_FULL: Final = (
    "RB must echo the HO's item, ask and due as decoded (plus any slots the HO names in rb=; rb=all means every "
    "slot). If the HO says rb=acc or rb=plan, the RB must also carry acc=<criteria you derived from the brief, as "
    "key:value tokens joined by +>, and for rb=plan do=<what you will produce>; optional not=<what you exclude> "
    "asm=<assumptions>; tail = the task in your own words. Code-side receivers add h=<digest of the HO>. Unknown "
    "code: reply UN why=UNK. Every reply carries re=."
)
_CLOSE_UNDO: Final = " A DN that does not match the plan is reversed with a new HO ask=UNDO ctx=<that DN id>."
_CLOSE: Final = (
    "Every HO closes exactly once: DN, UN or FL from the receiver, or CX from the sender. On a CX, abandon anything "
    "prepared and answer AN val=Y; if the act already ran, send its DN instead. exp=YYYYMMDDTHHMMZ (UTC) is the "
    "latest moment to act or confirm: never act on an HO, and never confirm a statement, past its exp." + _CLOSE_UNDO
)
_IDS: Final = (
    "Message ids are <yourname>-<n>, unique in the conversation. Readback level is set per handoff by the sender: "
    "rb=exec before an irreversible act (a payment release, a payee change, anything external) where the profile "
    "names execution slots, rb=all where it does not; the default envelope echo otherwise."
)
_EXEC_HEAD: Final = (
    "rb=exec: the RB carries the execution slots for the ask with the values you will actually use, resolved from "
    "your own records where the HO does not give them ("
)
_EXEC_TAIL: Final = (
    "). The sender checks them against its record and only an AN val=Y clears the act. After the act, the DN carries "
    "the same slots with the values as executed, taken from the tool's result, not from your intention; the sender "
    "checks that too."
)

_cache: dict[tuple[int, bool], tuple[Profile, str]] = {}


def _build(prof: Profile, lean: bool) -> str:
    out = [_HEAD]
    prof_slots = prof.slot_desc
    for code, t in prof.types.items():
        optional = [k for k in t.optional if not (lean and (k in prof_slots or k in _ACC_SLOTS))]
        opt = " ".join(optional)
        out.append(f"{code} {t.name}: requires {' '.join(t.required)}" + (f"; optional {opt}" if opt else ""))
    if lean and prof_slots:
        out.append("Profile slots may appear on any type where they carry a fact.")
    out.append(_RB_LEAN if lean else _RB_FULL)
    hide: frozenset[str] = frozenset()
    if lean and prof.asks_used:
        hide = frozenset(prof.core_asks) - frozenset(prof.asks_used)
    for ename, vals in prof.enums.items():
        shown = [f"{k}={v}" for k, v in vals.items() if not (ename == "ask" and k in hide)]
        out.append(f"{ename}: " + ", ".join(shown))
    if not lean:
        keys = "; ".join(f"{k}={v}" for k, v in core_data()["constraint_keys"].items())
        out.append(
            f"acc= constraint keys (closed set): {keys}. Values: no spaces, lowercase, e.g. len:120w lang:uk "
            "must:monday-problem no:em-dash."
        )
    # The lean legend lists only the asks the profile uses; when UNDO is not among them, it does not tell agents to
    # send one either (the reference keeps the sentence: docs/rwcore-differences.md, 9).
    out.append(_CLOSE.removesuffix(_CLOSE_UNDO) if "UNDO" in hide else _CLOSE)
    out.append(_IDS)
    if prof.exec_map:
        out.append(_EXEC_HEAD + "; ".join(f"{k}: {' '.join(v)}" for k, v in prof.exec_map.items()) + _EXEC_TAIL)
    if prof.declared:
        name = prof.declared
        line = f"Profile {name}: messages carry p={name}."
        if prof.agents:
            line += f" Agents: {', '.join(sorted(prof.agents))}."
        if prof.ans:
            line += " AQ opts and AN val must come from ans; do not invent options."
        if prof.slot_desc:
            descs = "; ".join(f"{k}={v} ({prof.slot_types[k]})" for k, v in prof.slot_desc.items())
            line += f" Profile slots: {descs}."
        types = set(prof.slot_types.values())
        if "money" in types:
            line += " money = digits with two decimals, no separators (5400.00)."
        if "num" in types:
            line += " num = a number as written, or two numbers with a slash (7.2, 148/88); units go in their own slot."
        if prof.item_kinds:
            line += " item is <kind>:<concept>; kinds: " + ", ".join(f"{k}={v}" for k, v in prof.item_kinds.items())
            line += "."
        if prof.item_examples:
            line += " item examples: " + ", ".join(prof.item_examples) + "."
        out.append(line)
    return "\n".join(out)


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
