"""The operator's console at ``/console``: what happened in a conversation and why a line was held, the dead
letters and their replay, and the state of each route now, on web pages served by the gatekeeper's own HTTP server.

- ``service``: the console's reads (bounded, in the HTTP process) and its one act, replay, with its audit record;
- ``pages``: the pages (server-rendered HTML, no script) and their security headers;
- ``access``: who may do what (tokens, the session cookie, CSRF);
- ``timeline``, ``letters``, ``history``: a conversation, a dead letter and the last hour of line counts, shaped
  for a reader.

docs/console.md is the operator's guide.
"""
