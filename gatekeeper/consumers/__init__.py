"""Kafka in and out (aiokafka): the only place records are read and written.

Modules:

- ``loop``: the worker, ``Gatekeeper(settings).run()``: consume, decide per batch (``Processor``), produce the
  outcomes, commit after the acknowledgements; holds, backoff, rebalances, two-stage stop, exactly-once option.
- ``outcomes``: the outcome records (forward, dead-letter, alert) and their ``gk.*`` headers, pure; the header
  table is in its docstring.
- ``holds``: the hold buffer for replies whose handoff is not known yet, and the commit watermarks, pure.
- ``kafka``: the aiokafka client factory (TLS, SASL, idempotent or transactional producer, topic limits).

Errors (``loop``)::

    GatekeeperError
     ├── Unavailable     Kafka or Redis not reachable within the startup time (``gatekeeper run`` exits 3)
     └── FatalError      this instance must stop: a bug (exit 1)

Infrastructure trouble while running (``StoreError``, aiokafka's ``KafkaError``) is never raised out of the worker:
it pauses intake, retries the batch with backoff and shows on ``/readyz``.
"""
