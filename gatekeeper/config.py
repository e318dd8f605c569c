"""Configuration: a YAML file, overridden by ``GK_`` environment variables (``__`` for nesting).

    GK_KAFKA__BOOTSTRAP_SERVERS=10.0.0.5:9092 GK_REDIS__URL=redis://redis:6379/0 gatekeeper run --config gk.yaml

Precedence, highest first: keyword arguments (the CLI), environment variables, the YAML file, the defaults here;
the merging (key by key, nested mappings merged) is pydantic-settings' own. Lists and mappings are given to the
environment as JSON (``GK_ROUTES='[...]'``), except ``GK_PROFILE_DIRS``, a path list (``/a:/b``).
Secrets are ``SecretStr``: they never appear in ``repr``, logs or error messages. A bad file is reported as one
``ConfigError`` naming the key (``routes.0.profile: ...``), never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from gatekeeper.errors import ConfigError as ConfigError  # raised here, part of the tree

T = TypeVar("T")

ENV_PREFIX = "GK_"
CONFIG_ENV = "GK_CONFIG"  # a config file named by the environment, when --config is not given


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSecurity(_Strict):
    """TLS and SASL for the Kafka clients (aiokafka's names)."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: SecretStr | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSecurity:
        if self.protocol.startswith("SASL") and self.sasl_mechanism is None:
            raise ValueError("a SASL protocol needs sasl_mechanism")
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
            self.sasl_username and self.sasl_password
        ):
            raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs sasl_username and sasl_password")
        return self


class KafkaSettings(_Strict):
    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = "gatekeeper"
    group_instance_id: str | None = Field(
        None,
        description="static group membership (KIP-345): a stable name per instance, such as a StatefulSet pod's, "
        "so a restart within session_timeout_ms does not rebalance the group",
    )
    session_timeout_ms: int = Field(
        10_000,
        ge=6_000,
        le=1_800_000,
        description="how long the group waits for a silent member before it rebalances (brokers allow 6 s to 30 min "
        "by default)",
    )
    client_id: str = "rogerwilco-gatekeeper"
    max_batch: int = Field(500, ge=1, le=100_000, description="records per getmany() call")
    batch_timeout_ms: int = Field(100, ge=0, description="how long getmany() waits for a batch to fill")
    fetch_min_bytes: int = Field(
        32_768,
        ge=1,
        le=52_428_800,
        description="a fetch of the input waits at the broker until this many bytes of lines are there, or "
        "fetch_max_wait_ms passed: fuller batches at live rates (1: every line fetched as it arrives)",
    )
    fetch_max_wait_ms: int = Field(
        5,
        ge=1,
        le=500,
        description="how long a fetch of the input waits at the broker for fetch_min_bytes: what a line may wait "
        "to be fetched when traffic is light (at least 1: a fetch that never waits would poll an idle broker "
        "without pause)",
    )
    request_timeout_ms: int = Field(30_000, ge=1000)
    commit_interval_ms: int = Field(
        100,
        ge=0,
        description="offsets are committed at most this often (0: after every batch); only acknowledged outcomes' "
        "offsets are ever committed, so a longer interval only means more lines decided again after a crash",
    )
    transactional: bool = Field(
        False,
        description="exactly-once: each input partition's outcomes and offsets in one Kafka transaction, on a "
        "producer of that partition's own",
    )
    transactional_id_prefix: str | None = Field(
        None,
        description="with transactional: the producers' transactional ids are <prefix>-<topic>-<partition>, the "
        "same on every instance of the group (so a partition's new owner fences its old one); default: group_id",
    )
    security: KafkaSecurity = KafkaSecurity()

    @model_validator(mode="before")
    @classmethod
    def _no_instance_transactional_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "transactional_id" in data:
            raise ValueError(
                "kafka.transactional_id is gone: exactly-once now uses one transactional id per input partition, "
                "<transactional_id_prefix>-<topic>-<partition>, the same on every instance (that is what fences a "
                "paused instance). Remove transactional_id; set transactional_id_prefix only to change the prefix "
                "from the group_id"
            )
        return data


class RedisSettings(_Strict):
    url: str = "redis://127.0.0.1:6379/0"
    username: str | None = None
    password: SecretStr | None = None
    tls: bool = False
    tls_ca_file: Path | None = None
    cluster: bool = Field(
        False,
        description="a Redis Cluster: url names one of its nodes (a seed; the client discovers the others and "
        "follows the slots), with the same credentials and TLS; every key of a conversation, of an item's records "
        "or of a partition's lifecycle indexes shares one hash slot, and each batch is sent as one pipeline per "
        "node, in parallel; a redis:// or rediss:// url (database 0). The url's query parameter cluster=true "
        "sets it too (redis://node-0:6379/0?cluster=true: one value, e.g. GK_REDIS__URL, says it all)",
    )
    key_prefix: str = Field("gk", pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    retention_seconds: int = Field(7 * 86400, ge=60, description="how long a closed conversation's state is kept")
    open_retention_seconds: int = Field(
        30 * 86400, ge=60, description="how long a conversation with an open handoff is kept after its last line"
    )

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        cls.split_cluster_param(v)  # a cluster= parameter must be true or false
        return v

    @model_validator(mode="before")
    @classmethod
    def _cluster_in_url(cls, data: Any) -> Any:
        """``?cluster=true`` on the url means ``cluster: true`` (either one is enough)."""
        if isinstance(data, dict) and isinstance(data.get("url"), str):
            try:
                _url, flag = cls.split_cluster_param(data["url"])
            except ValueError:
                return data  # the url's own validator reports it
            if flag:
                return {**data, "cluster": True}
        return data

    @staticmethod
    def split_cluster_param(url: str) -> tuple[str, bool | None]:
        """The url without its ``cluster`` query parameter (the client is given the rest), and that parameter's
        value (None: absent). Raises ``ValueError`` for a value that is not true or false."""
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        values = [v.strip().lower() for k, v in pairs if k == "cluster"]
        if not values:
            return url, None
        if any(v not in ("true", "false") for v in values):
            raise ValueError("the query parameter cluster must be true or false")
        rest = urlencode([(k, v) for k, v in pairs if k != "cluster"])
        return urlunsplit(parts._replace(query=rest)), values[-1] == "true"


class BreakerSettings(_Strict):
    """A route's dead-letter flood breaker (``gatekeeper.consumers.breaker``): an upstream agent gone mad pages
    someone instead of filling the dead-letter topic."""

    enabled: bool = True
    ratio: float = Field(0.5, gt=0, le=1, description="trips when this share of the window's lines is dead-lettered")
    window_seconds: float = Field(60.0, gt=0, description="the sliding window the share is measured over")
    min_lines: int = Field(100, ge=1, description="lines the window must hold before the share counts")
    action: Literal["alert", "pause"] = Field(
        "alert", description="alert: an alert and a metric; pause: also stop consuming the route for pause_seconds"
    )
    pause_seconds: float = Field(60.0, gt=0, description="how long a tripped breaker pauses the route (action pause)")


class Route(_Strict):
    """One input topic and where its lines go."""

    input: str = Field(min_length=1)
    output: str = Field(min_length=1)
    dead_letter: str = Field(min_length=1)
    alerts: str = Field(min_length=1)
    profile: str = Field(min_length=1)
    mode: Literal["enforce", "dry-run"] = "enforce"
    senders: list[str] | None = Field(None, description="sender binding: which from= may publish here")
    conversation_header: str | None = Field(
        None, description="a header that names the conversation when the record has no key"
    )
    hold_seconds: float = Field(30.0, ge=0, description="how long a reply whose handoff is unknown is held")
    max_line_bytes: int = Field(8192, ge=64, le=1_000_000)
    readback_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description="cancel (CX why=TIMEOUT) a handoff with no passing readback this long after it was forwarded; "
        "off by default (the protocol also lets the sender re-send instead)",
    )
    dead_letter_breaker: BreakerSettings = BreakerSettings()
    sender_auth: bool = Field(
        False,
        description="require every line to be signed by its from= agent's key (sender_auth.keys); a line unsigned, "
        "signed by an unknown key, badly signed or signed by another agent is dead-lettered sender-auth",
    )
    refusal_notices: bool = Field(
        True,
        description="tell the sender of a dead-lettered line, when it is known: the gatekeeper's UN on the output "
        "topic (gatekeeper.notices); false: no notice. A dry-run route writes none, it only counts them",
    )
    refuse_unverified_comprehension: bool = Field(
        False,
        description="refuse (check-rb) a comprehension readback (rb=acc, rb=plan) whose record holds no withheld "
        "criteria (expect_acc); false: forward it with the note comprehension-unverified (gk.notes)",
    )

    @field_validator("conversation_header")
    @classmethod
    def _not_ours(cls, v: str | None) -> str | None:
        if v is not None and v.lower().startswith("gk."):
            raise ValueError("gk.* headers are the gatekeeper's own: name a header the producers set")
        return v

    @property
    def name(self) -> str:
        return self.input


def _ed25519_public_key(v: str) -> str:
    """A configured Ed25519 public key: the standard base64 of its raw 32 bytes."""
    try:
        raw = base64.b64decode(v.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    if len(raw) != 32:
        raise ValueError(f"{len(raw)} bytes; an Ed25519 public key is 32")
    return v.strip()


class SenderKey(_Strict):
    """One agent's Ed25519 public key (``gatekeeper.auth``). Public keys are not secrets."""

    id: str = Field(pattern=r"^[A-Za-z0-9._:-]{1,64}$", description="the key id a signature header names")
    agent: str = Field(pattern=r"^[!-~]{1,128}$", description="the from= agent whose key it is")
    public_key: str = Field(description="base64 of the raw 32-byte Ed25519 public key")
    routes: list[str] | None = Field(
        None,
        min_length=1,
        description="the routes (input topics) this key may sign for; none: every route. A signature by this key "
        "on another route is refused (sender-auth-wrong-route)",
    )

    @field_validator("public_key")
    @classmethod
    def _ed25519(cls, v: str) -> str:
        return _ed25519_public_key(v)


class SenderAuthSettings(_Strict):
    """Sender authentication (``gatekeeper.auth``): the agents' public keys, and the header their signatures are
    in. A route requires signatures with ``routes[].sender_auth: true``."""

    header: str = Field("rw-sig", min_length=1, max_length=64, description="the record header of the signature")
    keys: list[SenderKey] = Field(default_factory=list, description="the agents' public keys")
    keys_file: Path | None = Field(
        None, description="a YAML or JSON file with more keys, a list of entries as in keys (a mounted ConfigMap)"
    )

    @field_validator("header")
    @classmethod
    def _not_ours(cls, v: str) -> str:
        if v.lower().startswith("gk."):
            raise ValueError("gk.* headers are the gatekeeper's own: name a header the agents set")
        return v

    @model_validator(mode="after")
    def _distinct(self) -> SenderAuthSettings:
        ids = [k.id for k in self.keys]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"key id {', '.join(dupes)} is configured more than once")
        return self


#: What a token may do beyond gating its agents' lines. ``operator``: see the record's values and the holder of a
#: binding in a gate answer (``gatekeeper.api.redaction``), and replay dead letters from the console; ``metrics``:
#: scrape ``/metrics`` when ``http.metrics_auth`` is on; ``unmask``: see sensitive values in full on the console.
ApiScope = Literal["operator", "metrics", "unmask"]


class ApiToken(_Strict):
    """A bearer token of ``POST /v1/gate``, stored hashed: the token itself is never in the configuration.

    ``sha256`` is the hex SHA-256 of the token's UTF-8 text (``printf %s "$TOKEN" | sha256sum``). The token speaks
    for ``agents`` only: a line whose ``from=`` is not one of them is refused (403); ``"*"`` is any agent. Its
    ``scopes`` (none by default) widen what it sees, never whom it speaks for."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$", description="for logs and errors")
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$", description="hex SHA-256 of the token")
    agents: list[str] = Field(
        default_factory=list, description='the from= agents it may speak for ("*": any; none: it gates no line)'
    )
    routes: list[str] | None = Field(None, description="the routes (input topics) it may gate; none: every route")
    scopes: list[ApiScope] = Field(
        default_factory=list,
        description="what more it may see: operator, the record's values and the holder of a binding in a gate "
        "answer's problems (none: codes, tiers, slots and the line's own values only), and replay from the console; "
        "metrics, /metrics when http.metrics_auth is on; unmask, sensitive values in full on the console",
    )

    @field_validator("sha256")
    @classmethod
    def _lower(cls, v: str) -> str:
        return v.lower()


class InFlightLimits(_Strict):
    """Requests in progress at once, per class of endpoint; one more is answered 503 ``busy`` at once (with
    ``Retry-After``). The probes have no limit: they answer from what the worker last published."""

    metrics: int = Field(2, ge=1, le=1000, description="/metrics")
    api: int = Field(4, ge=1, le=1000, description="the stateless checks, /v1/legend, /openapi.json and /docs")
    gate: int = Field(64, ge=1, le=10_000, description="POST /v1/gate (most of its time is spent waiting)")
    mcp: int = Field(4, ge=1, le=1000, description="/mcp")
    console: int = Field(4, ge=1, le=1000, description="/console (its pages read Redis and Kafka)")


class HttpSettings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(9108, ge=0, le=65535)
    stall_seconds: float = Field(
        60.0,
        ge=0,
        description="/healthz fails when the work loop has not turned for this long while it holds partitions with "
        "lag (a hung call: restarting is the cure); 0 never fails it",
    )
    api: bool = Field(True, description="serve the HTTP API (/v1/...) and its OpenAPI on this port")
    mcp: bool = Field(True, description="serve the MCP tools at /mcp (streamable HTTP) on this port")
    console: bool = Field(True, description="serve the operator's console at /console on this port")
    console_redis_username: str | None = Field(
        None,
        description="the Redis user the console's replay uses (under the chart's ACLs, the operator's: a replay "
        "writes markers the daemon's user may not); none: redis.username",
    )
    console_redis_password: SecretStr | None = Field(None, description="that user's password")
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=64 * 1_048_576, description="a request body larger than this is refused (413)"
    )
    rate_limit: float = Field(
        50.0,
        ge=0,
        description="requests per second per client address to the API, MCP and /metrics (0: no limit); the "
        "probes are never limited",
    )
    rate_burst: int = Field(100, ge=1, description="requests a client may make at once before rate_limit applies")
    max_answer_bytes: int = Field(
        2 * 1_048_576,
        ge=65_536,
        le=256 * 1_048_576,
        description="an answer larger than this is not sent: 413 answer-too-large instead (send fewer lines)",
    )
    in_flight: InFlightLimits = Field(default_factory=InFlightLimits)
    idle_timeout_seconds: float = Field(
        5.0, gt=0, le=3600, description="a connection with no request in progress that sends nothing this long closes"
    )
    read_timeout_seconds: float = Field(
        10.0, gt=0, le=3600, description="a request's head and body must arrive within this from its first byte (408)"
    )
    max_connections: int = Field(
        256,
        ge=8,
        le=100_000,
        description="open connections; past it a new one closes the longest-idle (the daemon's open files stay "
        "bounded)",
    )
    max_requests_per_connection: int = Field(1000, ge=1, description="keep-alive: then the connection closes")
    metrics_auth: bool = Field(
        False, description="/metrics needs a bearer token with the metrics (or operator) scope, from tokens"
    )
    tokens: list[ApiToken] = Field(default_factory=list, description="the bearer tokens of POST /v1/gate, hashed")
    tokens_file: Path | None = Field(
        None, description="a YAML or JSON file with more tokens, a list of entries as in tokens (a mounted secret)"
    )
    gate_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=300,
        description="how long POST /v1/gate waits for the line's outcome before answering 504 (the line is still in "
        "the pipeline); a request may ask for less",
    )


class HoldSettings(_Strict):
    """Bounds on the replies held for a handoff not known yet (``gatekeeper.consumers.holds``). Past a bound the
    oldest holds are decided at once, as if their hold window had ended (fail closed); intake never pauses."""

    max_per_conversation: int = Field(100, ge=1, description="held and queued lines of one conversation")
    max_per_partition: int = Field(1_000, ge=1, description="held and queued lines of one input partition")
    max_total: int = Field(10_000, ge=1, description="held and queued lines of this instance")


class SweeperSettings(_Strict):
    """The handoff lifecycle's sweeper (``gatekeeper.sweeper``): it cancels the handoffs whose time ran out."""

    interval_seconds: float = Field(5.0, ge=0, description="how often the sweeper looks for deadlines (0: never)")
    takeover_seconds: float = Field(
        60.0,
        gt=0,
        description="a cancel another instance started and did not finish is taken over after this long",
    )
    max_per_sweep: int = Field(500, ge=1, le=100_000, description="deadlines handled per partition per sweep")


class SigningSettings(_Strict):
    """Signed verdicts (``gatekeeper.verdicts``): the Ed25519 key the gatekeeper signs every record it writes to an
    output topic with (the ``gk.sig`` header); act tools verify it with the public key. Off unless
    ``private_key_file`` is set. The key is read once at start and never logged."""

    key_id: str = Field(
        "gk-1", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the key id gk.sig names (change it with the key)"
    )
    private_key_file: Path | None = Field(
        None,
        description="the private key: an unencrypted PKCS#8 PEM file or the base64 of the 32-byte seed (a mounted "
        "Secret); none: records are not signed",
    )


class ApproverKey(_Strict):
    """One approving system's Ed25519 public key (``gatekeeper.approvals``): it signs the records it approves."""

    id: str = Field(pattern=r"^[A-Za-z0-9._:-]{1,64}$", description="the key id a record's signature names")
    approver: str = Field(pattern=r"^[!-~]{1,128}$", description="the approving system whose key it is")
    public_key: str = Field(description="base64 of the raw 32-byte Ed25519 public key")

    @field_validator("public_key")
    @classmethod
    def _ed25519(cls, v: str) -> str:
        return _ed25519_public_key(v)


class RecordSettings(_Strict):
    """Approvals with provenance (``gatekeeper.approvals``): the approving systems' public keys, and whether a
    record must carry a valid signature of one of them to be honoured."""

    require_signed: bool = Field(
        False,
        description="honour only records signed by a configured approver key (checked at records load and at every "
        "handoff's check); off: unsigned records are honoured (the local demo), a signed one is still verified",
    )
    approvers: list[ApproverKey] = Field(default_factory=list, description="the approving systems' public keys")
    approvers_file: Path | None = Field(
        None, description="a YAML or JSON file with more approver keys, a list of entries as in approvers"
    )

    @model_validator(mode="after")
    def _usable(self) -> RecordSettings:
        ids = [k.id for k in self.approvers]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"approver key id {', '.join(dupes)} is configured more than once")
        return self


class Settings(BaseSettings):
    """The whole configuration. See ``config/gatekeeper.example.yaml`` for an annotated example."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True, validate_default=True
    )

    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    http: HttpSettings = HttpSettings()
    routes: list[Route] = Field(default_factory=list)
    profile_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="extra folders of profile JSON files (GK_PROFILE_DIRS: a list separated by the OS's path "
        "separator, ':' on Linux)",
    )
    grace_seconds: float = Field(10.0, ge=0, description="on SIGTERM: how long in-flight work may drain")
    sweeper: SweeperSettings = SweeperSettings()
    holds: HoldSettings = HoldSettings()
    sender_auth: SenderAuthSettings = SenderAuthSettings()
    log_format: Literal["auto", "json", "text"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    signing: SigningSettings = SigningSettings()
    records: RecordSettings = RecordSettings()

    @model_validator(mode="after")
    def _routes_distinct(self) -> Settings:
        inputs = [r.input for r in self.routes]
        dupes = sorted({t for t in inputs if inputs.count(t) > 1})
        if dupes:
            raise ValueError(f"routes: input topic {', '.join(dupes)} is used by more than one route")
        from rwcore import FormError, get_profile

        for r in self.routes:
            if r.input in (r.output, r.dead_letter, r.alerts):
                raise ValueError(f"route {r.input}: the input topic cannot also be an output")
            if r.sender_auth and not self.sender_auth.keys and self.sender_auth.keys_file is None:
                raise ValueError(
                    f"route {r.input}: sender_auth is on but no sender key is configured (sender_auth.keys or "
                    "sender_auth.keys_file): every line would be refused"
                )
            try:
                get_profile(r.profile, extra_dirs=self.all_profile_dirs())
            except FormError as exc:
                raise ValueError(f"route {r.input}: profile: {exc}") from None
        return self

    @field_validator("profile_dirs", mode="before")
    @classmethod
    def _path_list(cls, v: Any) -> Any:
        if isinstance(v, str):  # GK_PROFILE_DIRS=/etc/gk/profiles:/opt/profiles
            return [p for p in v.split(os.pathsep) if p]
        return v

    def all_profile_dirs(self) -> list[Path]:
        """The folders searched for profiles before rwcore's own (``profile_dirs``; ``GK_PROFILE_DIRS`` sets it)."""
        return list(self.profile_dirs)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The one precedence order, highest first: keyword arguments (the CLI), ``GK_`` variables, the YAML file
        of ``load_settings``; the defaults are the fields'. No dotenv file and no secrets directory."""
        path = _YAML_PATH.get()
        if path is None:
            return init_settings, env_settings
        return init_settings, env_settings, _YamlFile(settings_cls, path)

    def route(self, name: str) -> Route:
        """A route by its input topic."""
        for r in self.routes:
            if r.input == name:
                return r
        known = ", ".join(r.input for r in self.routes) or "none configured"
        raise ConfigError(f"unknown route {name!r} (routes: {known})")


def _format_error(exc: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


class _YamlFile(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, with the gatekeeper's errors: a missing, unreadable or malformed file is one
    ``ConfigError`` naming it (the library would skip a missing file silently and raise yaml's own errors)."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        self.path = path
        super().__init__(settings_cls, yaml_file=path)

    def _read_files(self, files: Any, deep_merge: bool = False) -> dict[str, Any]:
        return self._read_file(self.path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        p = Path(file_path)
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {p} cannot be read: {exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
        if loaded is None:
            return {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p}: the top level must be a mapping of keys to values")
        return loaded


#: The YAML file of the ``load_settings`` call in progress (``Settings.settings_customise_sources`` reads it: the
#: library builds its sources from the class, so a per-call file reaches them through this variable).
_YAML_PATH: ContextVar[Path | None] = ContextVar("gatekeeper_config_yaml", default=None)


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the YAML file (``path``, else ``$GK_CONFIG``, else defaults only), apply ``GK_`` environment variables
    and ``overrides``. Raises ``ConfigError`` with one readable message.

    The merging is pydantic-settings' own (``Settings.settings_customise_sources``): keyword arguments, then the
    environment, then the file, deep-merged key by key."""
    raw = path or os.environ.get(CONFIG_ENV) or None
    yaml_path = Path(raw) if raw is not None else None
    source = str(yaml_path) if yaml_path is not None else "defaults and environment"
    token = _YAML_PATH.set(yaml_path)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source)) from None
    except SettingsError as exc:  # an environment value that is not the JSON its field needs
        raise ConfigError(f"invalid configuration ({source}): {_settings_error(exc)}") from None
    finally:
        _YAML_PATH.reset(token)


def _settings_error(exc: SettingsError) -> str:
    """``error parsing value for field "routes" from source "EnvSettingsSource"`` -> ``routes: not valid JSON``,
    never the value (it may be a secret)."""
    text = str(exc)
    if 'for field "' in text:
        field = text.split('for field "', 1)[1].split('"', 1)[0]
        return f"{field}: the environment value is not valid JSON (lists and mappings are given as JSON)"
    return "an environment value cannot be parsed"


def load_entries(path: Path, model: type[T], setting: str, wrapper: str, *, empty_ok: bool = True) -> list[T]:
    """The entries of a file a setting names (``http.tokens_file``, ``sender_auth.keys_file``): YAML or JSON, a list
    of entries or ``{<wrapper>: [...]}``, each validated as ``model``. Raises ``ConfigError`` naming the setting,
    never echoing a value (the entries may hold secrets' hashes); also when the file holds no entry and not
    ``empty_ok`` (a keys file: an empty one is a mistake, a mount of the wrong key or a file not yet written)."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{setting} {path} does not exist") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{setting} {path} cannot be read: {type(exc).__name__}") from None
    if loaded is None:
        loaded = []
    if isinstance(loaded, dict) and wrapper in loaded:
        loaded = loaded[wrapper]
    try:
        entries = TypeAdapter(list[model]).validate_python(loaded)  # type: ignore[valid-type]
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{setting} {path}: {where}") from None
    if not entries and not empty_ok:
        raise ConfigError(
            f"{setting} {path} holds no entry: list the keys in it (a YAML or JSON list, or {{{wrapper}: [...]}}), or "
            f"remove the setting"
        )
    return entries
