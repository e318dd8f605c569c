"""One long conversation, for ``gatekeeper check``: N REVIEW handoffs, each HO, its readback, its done report and a
statement (4N lines, every one forwarded). The offline measure of how a line's cost grows with its conversation:

    .venv/bin/python bench/long_conversation.py 1250 > /tmp/long.rw1
    time .venv/bin/gatekeeper check /tmp/long.rw1 --format jsonl > /dev/null
"""

from __future__ import annotations

import sys


def lines(n: int) -> list[str]:
    out = []
    for i in range(1, n + 1):
        item = f"doc:r{i}"
        out += [
            f"RW1 HO scheduler-{i} p=pay from=scheduler to=desk item={item} ask=REVIEW sup=marlow",
            f"RW1 RB desk-{3 * i - 2} re=scheduler-{i} from=desk to=scheduler item={item} ask=REVIEW p=pay sup=marlow",
            f"RW1 DN desk-{3 * i - 1} re=scheduler-{i} p=pay from=desk to=scheduler item={item} out=OK",
            f"RW1 ST desk-{3 * i} p=pay from=desk to=scheduler item={item} // reviewed",
        ]
    return out


if __name__ == "__main__":
    print("\n".join(lines(int(sys.argv[1]) if len(sys.argv) > 1 else 1250)))
