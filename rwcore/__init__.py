"""rwcore: the RW1 protocol core. No I/O beyond reading profile files once. The parser, the writer, the canonical
form and digest, the three checks, the closing rule's state machine and the translation rules are native
(``native/rw1``, Rust, through ``rwcore._native``); profiles are read and merged here, and the legend is still Python.

Two APIs over one implementation:

* the typed API the gatekeeper calls: :func:`get_profile`, :func:`parse_line`, :func:`encode_message`,
  :func:`message_digest`, :func:`ho_check`, :func:`rb_check`, :func:`dn_check`, :func:`acc_check`,
  :func:`make_readback`, :func:`legend`, returning frozen values (:class:`Message`, :class:`Parsed`,
  :class:`CheckResult` of :class:`Problem`) with stable problem codes (:data:`PROBLEM_CODES`);
* the reference-compatible API (``rogerwilco`` 0.3.0's names, signatures, return shapes and wording):
  ``import rwcore as rw`` and ``rw.parse``, ``rw.encode``, ``rw.check_rb_full``... run unchanged.

Plus the closing rule over a conversation (:class:`ThreadTracker`, :func:`thread_check`, the compatible
:func:`check_thread`) and the pay profile's translation rules (:func:`translation_check`).

One error type: :class:`FormError` (a ``ValueError``).
"""

from types import MappingProxyType

from rwcore._checks import acc_check, dn_check, ho_check, make_readback, now_utc, rb_check
from rwcore._codec import VERSION, Parsed, encode_message, message_digest, parse_line
from rwcore._compat import (
    PROFILES,
    canonical,
    check_dn,
    check_dn_lines,
    check_ho,
    check_ho_lines,
    check_rb,
    check_rb_full,
    check_rb_lines,
    compare_acc,
    digest,
    encode,
    from_json,
    load_core,
    load_profile,
    make_rb,
    parse,
    to_json,
    validate,
)
from rwcore._errors import CHECK_CODES, PARSE_CODES, CodeInfo, FormError
from rwcore._legend import legend
from rwcore._profiles import PROFILE_PATH_ENV, Profile, TypeDef, clear_profile_cache, get_profile

# the other half of rwcore (thread tracking, translation rules): rwcore/_thread.py, rwcore/_translation.py
from rwcore._thread import THREAD_CODES, HandoffView, ThreadTracker, check_thread, thread_check
from rwcore._translation import TRANSLATION_CODES, translation_check
from rwcore._types import CheckResult, Message, Problem, SlotValue

#: Every stable problem code rwcore produces: the parser's, the checks', the closing rule's, the translation rules'.
PROBLEM_CODES = MappingProxyType({**PARSE_CODES, **CHECK_CODES, **THREAD_CODES, **TRANSLATION_CODES})

__all__ = [
    "CHECK_CODES",
    "PARSE_CODES",
    "PROBLEM_CODES",
    "PROFILES",
    "PROFILE_PATH_ENV",
    "THREAD_CODES",
    "TRANSLATION_CODES",
    "VERSION",
    "CheckResult",
    "CodeInfo",
    "FormError",
    "HandoffView",
    "Message",
    "Parsed",
    "Problem",
    "Profile",
    "SlotValue",
    "ThreadTracker",
    "TypeDef",
    "acc_check",
    "canonical",
    "check_dn",
    "check_dn_lines",
    "check_ho",
    "check_ho_lines",
    "check_rb",
    "check_rb_full",
    "check_rb_lines",
    "check_thread",
    "clear_profile_cache",
    "compare_acc",
    "digest",
    "dn_check",
    "encode",
    "encode_message",
    "from_json",
    "get_profile",
    "ho_check",
    "legend",
    "load_core",
    "load_profile",
    "make_rb",
    "make_readback",
    "message_digest",
    "now_utc",
    "parse",
    "parse_line",
    "rb_check",
    "thread_check",
    "to_json",
    "translation_check",
    "validate",
]
