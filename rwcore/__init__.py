"""rwcore: the RW1 protocol core (pure, no I/O beyond reading profile files once)."""

from rwcore._types import CheckResult, Message, Problem, SlotValue

__all__ = ["CheckResult", "Message", "Problem", "SlotValue"]
