"""The gatekeeper's errors: one tree, one exit code each, mapped once at the CLI's edge (``gatekeeper.cli.common``).

    GatekeeperError                      the root; exit 1 unless a subclass says otherwise
    ├── ConfigError                      the configuration cannot be used (exit 2)          gatekeeper.config
    ├── UsageError                       a command's input cannot be used (exit 2)
    │   ├── RecordsError                 a records file (each problem with its position)    gatekeeper.records
    │   ├── ReplayError                  the replay cannot start; nothing changed           gatekeeper.replay
    │   └── TopicError                   a topic is missing or refused an operation         gatekeeper.admin
    ├── Unavailable                      Kafka or Redis did not answer: try again (exit 3)
    │   ├── KafkaUnavailable             the broker                                         gatekeeper.admin
    │   └── StoreError                   Redis (the store)                                  gatekeeper.store
    │       ├── Fenced                   a newer owner of the partition wrote: this instance lost it
    │       └── DataLost                 Redis is not the one this instance started on (its generation marker)
    ├── RecordExists                     a record for (item, ask) is loaded already (exit 1)  gatekeeper.store
    └── FatalError                       this instance must stop: a bug (exit 1)

A line is never an error: a bad line is a verdict (dead-lettered with its reason), and only infrastructure
trouble (``Unavailable``) pauses the work. The daemon retries ``Unavailable`` with backoff and stops only on
``FatalError`` or, at startup, on ``Unavailable`` that outlasts ``--startup-timeout``.
"""

from __future__ import annotations


class GatekeeperError(Exception):
    """The root of the gatekeeper's errors. ``exit_code``: what the CLI exits with."""

    exit_code = 1


class ConfigError(GatekeeperError):
    """The configuration cannot be used. The message names the key and what is wrong with it."""

    exit_code = 2


class UsageError(GatekeeperError):
    """A command's input (a file, a topic, an option's value) cannot be used."""

    exit_code = 2


class Unavailable(GatekeeperError):
    """Kafka or Redis could not be reached, or did not answer in time: infrastructure trouble, never a bad line."""

    exit_code = 3


class FatalError(GatekeeperError):
    """This instance must stop: an unexpected error (a fenced transactional producer is not one: its partition's
    work is dropped and the group rejoined)."""


__all__ = ["ConfigError", "FatalError", "GatekeeperError", "Unavailable", "UsageError"]
