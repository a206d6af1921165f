"""Run the cases of one hostile folder and print what each did (for writing cases):
python -m tests.hostile.try_cases FOLDER [NAME...]"""

from __future__ import annotations

import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.hostile.test_hostile import HERE, run_case


def main() -> None:
    folder = HERE / sys.argv[1]
    wanted = set(sys.argv[2:])
    cases = [c for c in tomllib.loads((folder / "cases.toml").read_text())["case"]]
    cases = [c for c in cases if not wanted or c["name"] in wanted]

    def one(case: dict) -> str:
        base = Path(tempfile.mkdtemp(prefix="try-"))
        r = run_case(folder, case, base)
        tail = r.output.strip().replace("\n", " | ")[-700:]
        return (
            f"== {case['name']}: exit {r.returncode} in {r.seconds:.1f}s dead={r.dead} "
            f"changed={r.changed} leaked={r.leaked} remained={r.remained} "
            f"err={r.sandbox_error}\n   {tail}"
        )

    with ThreadPoolExecutor(2) as pool:
        for line in pool.map(one, cases):
            print(line, flush=True)


if __name__ == "__main__":
    main()
