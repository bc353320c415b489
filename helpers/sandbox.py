"""The code sandbox, re-exported: it lives in `code_feedback_env.server.sandbox`, the environment package
that uses it, so that environment can be pushed and served without this repository's `helpers`."""

from code_feedback_env.server.sandbox import (  # noqa: F401
    Limits,
    SandboxError,
    SandboxResult,
    isolation_report,
    landlock_abi,
    run_python,
)
