"""Child-process entry point used by `helpers.servers.LocalServer`.

    python -m helpers.servers.serve module:app --port 8001 [--fd N] [--parent-pid PID] [--factory]

(helpers.servers.forkserver runs the same `main` in a forked child, with --forked.)

Runs uvicorn on 127.0.0.1 (on the already bound socket `--fd` when given: the parent binds the port, so no other
process can take it between choosing and listening) and exits by itself when the parent process (a notebook kernel, a
test run) disappears, so a crashed kernel never leaves a server holding a port.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time


def process_alive(pid: int) -> bool:
    """The process exists and has not exited (one that exited but was not reaped yet, a zombie, counts as gone;
    without /proc, existing is enough)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _exit_when_parent_dies(parent_pid: int, forked: bool = False) -> None:
    while True:
        if not process_alive(parent_pid):
            os._exit(0)
        if not forked and os.getppid() == 1:  # re-parented to init: our parent is gone
            os._exit(0)
        time.sleep(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("app", help="module:attribute of the ASGI app")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--fd", type=int, default=None, help="a bound socket inherited from the parent")
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--factory", action="store_true", help="app is a function returning the app")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--forked", action="store_true",
                        help="forked by helpers.servers.forkserver: --parent-pid asked for it, but is not its parent")
    args = parser.parse_args()

    if args.parent_pid:
        threading.Thread(target=_exit_when_parent_dies, args=(args.parent_pid, args.forked), daemon=True).start()

    import uvicorn

    config = uvicorn.Config(args.app, host=args.host, port=args.port, factory=args.factory,
                            log_level=args.log_level, ws_ping_interval=None)
    uvicorn.Server(config).run(sockets=None if args.fd is None else [socket.socket(fileno=args.fd)])


if __name__ == "__main__":
    main()
