"""The HTTP API and the MCP tools, on the gatekeeper's one HTTP port (``gatekeeper.http.HttpServer``).

- ``functions``: the stateless functions (check-ho, check-rb, ... legend), shared by HTTP and MCP;
- ``app``: the ASGI application (FastAPI): probes, ``/metrics``, ``/v1/...``, ``/openapi.json``, ``/mcp``;
- ``mcp``: the MCP tools on the official SDK, streamable HTTP;
- ``auth``: the bearer tokens of ``/v1/gate`` (stored hashed, each for a set of agents);
- ``gate``: ``POST /v1/gate``, the daemon's verdict for one line through Kafka.
"""
