"""``gatekeeper keys generate|sign``: an agent's Ed25519 key pair for sender authentication (or an approving
system's, for signed records), and a signature.

The private key stays with its owner (a file of mode 0600); the gatekeeper is given only the public key, as an
entry of ``sender_auth.keys`` (an agent's) or of ``records.approvers`` (an approver's), which ``generate`` prints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gatekeeper.auth import KEY_ID, generate, private_key_from_text, private_key_text, public_key_text, sign
from gatekeeper.cli import app
from gatekeeper.cli.common import EXIT_USAGE, fail
from gatekeeper.verdicts import KeyLoadError, check_private_key_file

keys_app = typer.Typer(
    name="keys",
    help="Make an agent's or an approver's key pair, sign a line (docs/security.md, docs/records.md).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(keys_app, name="keys")

GENERATE_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper keys generate --agent payer --out payer.key >> sender-keys.yaml[/cyan]

The private key is written to --out (PKCS#8 PEM, mode 0600; an existing file is never overwritten): give it to the
agent only. The public key entry goes to stdout, for [cyan]sender_auth.keys[/cyan] or the keys file:

  [cyan]- id: payer-1
    agent: payer
    public_key: ...[/cyan]

An approving system's key, for signed records ([cyan]gatekeeper records sign[/cyan]), is made the same way with
--approver; its entry is for [cyan]records.approvers[/cyan]:

  [cyan]gatekeeper keys generate --approver finance --out finance.key >> approver-keys.yaml[/cyan]
"""

SIGN_EPILOG = """\
[bold]Examples[/bold]

  [cyan]gatekeeper keys sign -k payer.key --id payer-1 -r agents.pay --conversation c-17 "RW1 RB payer-1 ..."[/cyan]

Prints the value of the record's [cyan]rw-sig[/cyan] header ([cyan]v2 <key id> <signature>[/cyan]) for that line in
that conversation on that route (the route's input topic): the signature covers all three, so a copy on another
route or in another conversation does not verify. For a test, [cyan]gatekeeper check[/cyan]'s JSON lines or the
[cyan]signature[/cyan] of POST /v1/gate. Agents sign in their own code with [cyan]gatekeeper.auth.sign[/cyan].
"""


def read_private_key(key: Path) -> Ed25519PrivateKey:
    """The private key of ``--key``: a usage error (exit 2) when others may read it or it is no Ed25519 key."""
    try:
        check_private_key_file(key, "--key")
    except KeyLoadError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        return private_key_from_text(key.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        fail(f"--key {key}: not a readable Ed25519 private key ({type(exc).__name__})", EXIT_USAGE)


@keys_app.command("generate", epilog=GENERATE_EPILOG)
def generate_cmd(
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="AGENT", help="The from= agent the key speaks for.")
    ] = None,
    approver: Annotated[
        str | None,
        typer.Option("--approver", metavar="NAME", help="Instead: the approving system whose records it signs."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="FILE", help="Where the private key goes \\[default: <key id>.key]."),
    ] = None,
    key_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="The key id \\[default: <agent or approver>-1].")
    ] = None,
) -> None:
    """Make a new Ed25519 key pair for an agent (or an approver): the private key to a file (0600), the public key
    entry to stdout."""
    if (agent is None) == (approver is None):
        fail(
            "name the key's owner: --agent AGENT (sender authentication) or --approver NAME (signed records)",
            EXIT_USAGE,
        )
    owner, name = ("agent", agent) if agent is not None else ("approver", approver)
    assert name is not None
    kid = key_id or f"{name}-1"
    if not KEY_ID.fullmatch(kid):
        fail(f"--id {kid!r}: 1-64 of A-Z a-z 0-9 . _ : -", EXIT_USAGE)
    if not name or not name.isascii() or not name.isprintable() or " " in name:
        fail(f"--{owner} {name!r}: a name is printable ASCII without spaces", EXIT_USAGE)
    path = out or Path(f"{kid}.key")
    key = generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fail(f"{path} exists: not overwritten (a key is made once; remove it or name another --out)", EXIT_USAGE)
    except OSError as exc:
        fail(f"{path}: cannot be written: {exc.strerror}", EXIT_USAGE)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(private_key_text(key))
    entry = [{"id": kid, owner: name, "public_key": public_key_text(key.public_key())}]
    typer.echo(yaml.safe_dump(entry, sort_keys=False), nl=False)
    print(f"private key of {kid} written to {path} (mode 0600): give it to {name} only", file=sys.stderr)


@keys_app.command("sign", epilog=SIGN_EPILOG)
def sign_cmd(
    line: Annotated[str, typer.Argument(metavar="LINE", help="The RW1 line, exactly as the record's value.")],
    key: Annotated[Path, typer.Option("--key", "-k", metavar="FILE", help="The agent's private key file.")],
    key_id: Annotated[str, typer.Option("--id", metavar="ID", help="The key id of that key.")],
    conversation: Annotated[
        str, typer.Option("--conversation", metavar="ID", help="The conversation id: the record's key.")
    ],
    route: Annotated[
        str, typer.Option("--route", "-r", metavar="TOPIC", help="The route's input topic the record goes to.")
    ],
) -> None:
    """Print the signature header value of LINE in a conversation on a route, signed with the agent's private key."""
    private = read_private_key(key)
    try:
        typer.echo(sign(private, key_id, conversation, line.encode("utf-8"), route=route))
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
