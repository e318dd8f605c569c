"""The seed's payment (specification section 8, "Before an irreversible act"), shared by the gatekeeper's tests.

The handoff, the tool's statement, the clearance and the done report of one approved payment, the cancel and its
acknowledgement (the guide's "Cancel, expiry"), and the approved record they are checked against.
"""

from __future__ import annotations

HO = (
    "RW1 HO scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 ask=PAY rb=exec sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
RB = (
    "RW1 RB payer-1 re=scheduler-1 from=payer to=scheduler item=inv:MD-2026-057 ask=PAY p=pay h=a7a82de76607 "
    "sup=marlow amt=5400.00 cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929"
)
AN = "RW1 AN scheduler-2 re=payer-1 p=pay from=scheduler to=payer val=Y // readback matches the approved run; proceed"
DN = (
    "RW1 DN payer-2 re=scheduler-1 p=pay from=payer to=scheduler item=inv:MD-2026-057 out=OK sup=marlow amt=5400.00 "
    "cur=GBP kind=GROSS acct=40-12-88/61102938 paid=20261002 ref=MD-2026-057 apref=FD-0929 // as executed"
)
CX = "RW1 CX scheduler-3 re=scheduler-1 p=pay from=scheduler to=payer item=inv:MD-2026-057 why=REVOKED"
ACK = "RW1 AN payer-3 re=scheduler-3 p=pay from=payer to=scheduler val=Y // statement abandoned; nothing paid"

#: The approved record's values, as written on the line.
RECORD_VALUES = {
    "to": "payer",
    "item": "inv:MD-2026-057",
    "ask": "PAY",
    "sup": "marlow",
    "amt": "5400.00",
    "cur": "GBP",
    "kind": "GROSS",
    "acct": "40-12-88/61102938",
    "paid": "20261002",
    "ref": "MD-2026-057",
    "apref": "FD-0929",
}
