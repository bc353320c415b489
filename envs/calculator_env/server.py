"""Serve CalculatorEnv with the `openreward` package's own ORS server.

    app = Server([CalculatorEnv]).app   # a FastAPI app: uvicorn "calculator_env.server:app"
    python -m calculator_env.server --host 0.0.0.0 --port 8080    # what a container would run
"""

from __future__ import annotations

import argparse

from openreward.environments import Server

from calculator_env.environment import CalculatorEnv

server = Server([CalculatorEnv])
app = server.app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server.run(host=args.host, port=args.port)


if __name__ == "__main__":
    main()
