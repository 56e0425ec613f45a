"""`python -m xqajit ARGS...` runs the xqajit CLI (prewarm, bundle, list, doctor, ...).

The CLI binary is looked for at $XQAJIT_CLI, in the package's bin/ folder (a
wheel), next to the library the package loads, in the source tree's
build/tools/, then on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def find_cli() -> str | None:
    candidates = [os.environ.get("XQAJIT_CLI", "")]
    candidates.append(str(_PACKAGE_DIR / "bin" / "xqajit"))
    lib = os.environ.get("XQAJIT_LIBRARY")
    if lib:
        candidates.append(os.path.join(lib if os.path.isdir(lib) else os.path.dirname(lib), "xqajit"))
    candidates.append(str(_PACKAGE_DIR.parent.parent / "build" / "tools" / "xqajit"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("xqajit")


def main(argv: list[str]) -> int:
    cli = find_cli()
    if cli is None:
        sys.stderr.write("python -m xqajit: the xqajit CLI was not found; set XQAJIT_CLI to its path "
                         "(looked in the package's bin/, next to XQAJIT_LIBRARY, build/tools/ and PATH)\n")
        return 1
    sys.stdout.flush()
    os.execv(cli, [cli, *argv])  # the CLI's exit code is ours


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
