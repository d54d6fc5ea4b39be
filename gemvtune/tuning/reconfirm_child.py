"""The re-confirmation's own process (``python -m gemvtune.tuning.reconfirm_child``, started by
``tuning.reconfirm.reconfirm``): reads its job (one JSON object) from stdin, measures it on a CUDA runner of its
own and writes one JSON object per line on stdout (``tuning.reconfirm`` has the protocol). An error is one line
on stderr and gemvtune's exit code (2 bad input, 3 no GPU); it ends when its parent ends."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def _emit(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, default=lambda o: o.item() if hasattr(o, "item") else str(o)) + "\n")
    sys.stdout.flush()


def _cuda_runner() -> Any:
    from ..runners.cuda import CudaRunner

    return CudaRunner()


def main(runner_factory: Callable[[], Any] = _cuda_runner) -> int:
    """The child's whole life; returns its exit code. ``runner_factory``: the runner (tests give a fake one)."""
    from ..errors import GemvtuneError, UsageError
    from .coordination.workers import die_with_parent
    from .reconfirm import run_job

    die_with_parent()
    try:
        try:
            job = json.loads(sys.stdin.read())
        except ValueError as e:
            raise UsageError(f"the re-confirmation's job is not JSON: {e}") from None
        if not isinstance(job, dict) or not isinstance(job.get("entries"), list):
            raise UsageError("the re-confirmation's job has no entries")
        run_job(job, runner_factory(), _emit)
    except GemvtuneError as e:
        print(f"gemvtune: error: {' '.join(str(e).split())}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("gemvtune: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
