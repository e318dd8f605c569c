"""Configuration: the YAML file, GK_ overrides with ``__``, one error naming a bad key, secrets never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.config import ConfigError, Settings, load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "gatekeeper.example.yaml"
SECRET = "s3cr3t-Pa55word"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests see no GK_ variable of the environment they run in (a developer's shell, make test)."""
    import os

    for name in list(os.environ):
        if name.startswith("GK_"):
            monkeypatch.delenv(name)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gk.yaml"
    path.write_text(text)
    return path


def test_example_file_loads() -> None:
    s = load_settings(EXAMPLE)
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert s.redis.key_prefix == "gk"
    [route] = s.routes
    assert (route.input, route.output, route.dead_letter, route.alerts) == (
        "agents.pay",
        "agents.pay.checked",
        "agents.pay.dlq",
        "agents.pay.alerts",
    )
    assert route.mode == "enforce" and route.profile == "pay"
    assert route.senders == ["scheduler", "payer", "coordinator", "desk"]
    assert s.route("agents.pay") is route


def test_defaults_without_a_file() -> None:
    s = load_settings(None)
    assert isinstance(s, Settings) and s.routes == [] and s.redis.url.startswith("redis://")


def test_config_file_from_gk_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_CONFIG", str(EXAMPLE))
    assert load_settings().routes[0].input == "agents.pay"


def test_environment_overrides_the_file_with_double_underscore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_REDIS__URL", "redis://redis.internal:6380/2")
    monkeypatch.setenv("GK_KAFKA__SECURITY__PROTOCOL", "SSL")
    monkeypatch.setenv("GK_KAFKA__MAX_BATCH", "50")
    monkeypatch.setenv("GK_GRACE_SECONDS", "2.5")
    s = load_settings(EXAMPLE)
    assert s.redis.url == "redis://redis.internal:6380/2"
    assert s.redis.key_prefix == "gk"  # the file's other redis keys stay
    assert s.kafka.security.protocol == "SSL"
    assert s.kafka.max_batch == 50
    assert s.grace_seconds == 2.5
    assert s.routes[0].input == "agents.pay"


def test_keyword_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_LOG_LEVEL", "ERROR")
    assert load_settings(EXAMPLE, log_level="DEBUG").log_level == "DEBUG"


def test_an_unknown_key_is_one_error_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "redis:\n  pasword: x\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    text = str(info.value)
    assert "redis.pasword: unknown key" in text
    assert str(path) in text
    assert "Traceback" not in text and "pydantic" not in text.lower()


def test_the_per_instance_transactional_id_of_earlier_releases_is_refused_with_what_replaced_it(
    tmp_path: Path,
) -> None:
    """An id per instance cannot fence a zombie: the ids are per input partition now, alike on every instance."""
    path = _write(tmp_path, "kafka:\n  transactional: true\n  transactional_id: gatekeeper-0\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    text = str(info.value)
    assert "kafka" in text and "transactional_id is gone" in text and "transactional_id_prefix" in text
    settings = Settings.model_validate({"kafka": {"transactional": True, "transactional_id_prefix": "gk"}})
    from gatekeeper.consumers.kafka import transactional_id

    assert transactional_id(settings.kafka, "agents.pay", 3) == "gk-agents.pay-3"
    assert transactional_id(Settings().kafka, "agents.pay", 0) == "gatekeeper-agents.pay-0"


async def test_the_input_consumer_fetches_as_configured() -> None:
    """The fetch settings reach the worker's consumer: the defaults batch a fetch (32 KiB or 5 ms); a minimum of 1
    fetches each line as it arrives."""
    from gatekeeper.consumers.kafka import make_consumer

    for kafka, want in (
        (Settings().kafka, (32_768, 5)),
        (Settings(kafka={"fetch_min_bytes": 1, "fetch_max_wait_ms": 500}).kafka, (1, 500)),
    ):
        consumer = make_consumer(kafka, ["agents.pay"])
        try:
            assert (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms) == want  # aiokafka keeps them so
        finally:
            await consumer.stop()  # never started: nothing to leave, but aiokafka warns of a consumer not stopped


def test_a_bad_value_names_its_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "kafka:\n  max_batch: 0\nredis:\n  url: http://localhost\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "kafka.max_batch" in str(info.value)
    assert "redis.url" in str(info.value)


def test_a_bad_environment_value_names_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_REDIS__RETENTION_SECONDS", "soon")
    with pytest.raises(ConfigError, match=r"redis\.retention_seconds"):
        load_settings(None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
    ],
)
def test_unusable_files(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_settings(_write(tmp_path, text))


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml")


def test_secrets_never_in_repr_str_or_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(
        tmp_path,
        "redis:\n"
        f"  password: {SECRET}\n"
        "kafka:\n"
        "  security:\n"
        "    protocol: SASL_SSL\n"
        "    sasl_mechanism: PLAIN\n"
        "    sasl_username: gk\n"
        f"    sasl_password: {SECRET}\n",
    )
    s = load_settings(path)
    assert s.redis.password is not None and s.redis.password.get_secret_value() == SECRET
    for shown in (repr(s), str(s), repr(s.redis), str(s.kafka.security), s.model_dump_json(), str(s.model_dump())):
        assert SECRET not in shown
    # an error elsewhere in a file that holds secrets does not show them
    bad = _write(tmp_path, f"redis:\n  password: {SECRET}\n  retention_seconds: -1\n  bogus: {SECRET}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(bad)
    assert SECRET not in str(info.value) and "redis.bogus" in str(info.value)
    # a secret of the wrong shape is refused without being echoed
    wrong = _write(tmp_path, f"redis:\n  password: [{SECRET}]\n")
    with pytest.raises(ConfigError) as info:
        load_settings(wrong)
    assert SECRET not in str(info.value) and "redis.password" in str(info.value)
    monkeypatch.setenv("GK_REDIS__PASSWORD", SECRET)
    monkeypatch.setenv("GK_REDIS__TLS", "maybe")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert SECRET not in str(info.value) and "redis.tls" in str(info.value)


def test_unknown_route() -> None:
    s = load_settings(EXAMPLE)
    with pytest.raises(ConfigError, match=r"unknown route 'agents\.nope' \(routes: agents\.pay\)"):
        s.route("agents.nope")
    with pytest.raises(ConfigError, match="none configured"):
        load_settings(None).route("agents.pay")


def test_a_route_with_an_unknown_profile(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("profile: pay ", "profile: nosuch ")
    with pytest.raises(ConfigError, match=r"route agents\.pay: profile"):
        load_settings(_write(tmp_path, text))


def test_two_routes_on_one_topic(tmp_path: Path) -> None:
    route = "{input: a, output: b, dead_letter: c, alerts: d, profile: pay}"
    with pytest.raises(ConfigError, match="more than one route"):
        load_settings(_write(tmp_path, f"routes: [{route}, {route}]\n"))


def test_routes_as_json_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "GK_ROUTES", '[{"input": "a", "output": "b", "dead_letter": "c", "alerts": "d", "profile": "pay"}]'
    )
    [route] = load_settings(EXAMPLE).routes  # the environment's list replaces the file's
    assert (route.input, route.profile) == ("a", "pay")
    monkeypatch.setenv("GK_ROUTES", "[{not json")
    with pytest.raises(ConfigError) as info:
        load_settings(EXAMPLE)
    assert "routes: the environment value is not valid JSON" in str(info.value)
    assert "{not json" not in str(info.value)


def test_an_unknown_nested_environment_key_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_KAFKA__BOOTSTRAP", "kafka:9092")  # a near miss of bootstrap_servers
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap: unknown key"):
        load_settings(EXAMPLE)


def test_variables_that_are_not_settings_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GK_CONFIG", str(EXAMPLE))
    monkeypatch.setenv("GK_STATE_DIR", "/tmp/x")  # the local stack's, not the daemon's
    assert load_settings().routes[0].input == "agents.pay"


def test_profile_dirs_from_the_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "profile_dirs: [/etc/gk/profiles]\n")
    assert load_settings(path).all_profile_dirs() == [Path("/etc/gk/profiles")]
    monkeypatch.setenv("GK_PROFILE_DIRS", "/a:/b")  # os.pathsep-separated, and it overrides the file as any GK_ does
    assert load_settings(path).all_profile_dirs() == [Path("/a"), Path("/b")]


def test_one_file_per_call(tmp_path: Path) -> None:
    """The YAML file is the call's: a second call without one sees only the defaults."""
    assert load_settings(_write(tmp_path, "log_level: DEBUG\n")).log_level == "DEBUG"
    assert load_settings(None).log_level == "INFO"
