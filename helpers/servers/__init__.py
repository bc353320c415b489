"""Servers a notebook talks to: started locally (helpers/servers/local.py) or hosted and retried
(helpers/servers/resilient.py); helpers/servers/serve.py is the child process a LocalServer runs, forked from a
parent that imported the server libraries once (helpers/servers/forkserver.py)."""

from helpers.servers.local import (LocalServer, ServerError, check_reachable, check_sessions, free_port,  # noqa: F401
                                   server_or_url)
