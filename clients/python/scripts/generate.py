"""Regenerates src/leash_client/_proto/shackle_pb2.py(.pyi) from @leash/wire's proto with protoc.

Not a build step: the output is committed, so installing the package needs no protoc. With --check it
writes nothing and exits 1 when the committed files differ from what protoc makes (CI runs that).
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PROTO_ROOT = HERE.parent.parent / "packages" / "wire" / "proto"
PROTO = "shackle/sp1/shackle.proto"
OUT = HERE / "src" / "leash_client" / "_proto"
FILES = ("shackle_pb2.py", "shackle_pb2.pyi")


def generate(into: Path) -> None:
    subprocess.run(
        ["protoc", f"-I{PROTO_ROOT}", f"--python_out={into}", f"--pyi_out={into}", PROTO],
        check=True,
    )


def main(argv: list[str]) -> int:
    check = "--check" in argv
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        made = Path(tmp) / "shackle" / "sp1"
        if check:
            drift = [f for f in FILES if not (OUT / f).exists() or not filecmp.cmp(made / f, OUT / f, shallow=False)]
            if drift:
                print(f"generated code is stale: {', '.join(drift)}; run python3 scripts/generate.py", file=sys.stderr)
                return 1
            print("generated code matches the proto")
            return 0
        for f in FILES:
            shutil.copyfile(made / f, OUT / f)
        print(f"wrote {', '.join(FILES)} to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
