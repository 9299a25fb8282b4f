"""Usage: check-c-optimization.py WHEEL MODULE_SO (readelf -p .GCC.command.line MODULE_SO on stdin).

The wheel's C code (the host codecs: zstd-sys, lz4-sys, libdeflate-sys) must be compiled at the
optimization cargo's release profile asks for, -O3, which `zig cc` would turn into clang's -O2:
scripts/build-wheel.sh has gcc (aarch64-linux-gnu-gcc for aarch64) compile it with
-frecord-gcc-switches, so every compilation's options are in the module. The cc crate's -O3 comes
first; a crate may lower one file of its own after it (aws-lc, under object_store's TLS, builds its
jitter-entropy source at -O0, as that source requires). Used by scripts/test.sh for both wheels."""

import re
import sys

wheel = sys.argv[1]
record = re.compile(r"^\s*\[\s*[0-9a-f]+\]\s+(.*)$")
lines = [m.group(1) for m in map(record.match, sys.stdin) if m]


def levels(line):
    return re.findall(r"(?:^| )(-O\S*)", line)


bad = [line for line in lines if not line.startswith("GNU C") or levels(line)[:1] != ["-O3"]]
found = bad or ("no record" if not lines else None)
if found:
    sys.exit(f"{wheel}: its C code must be compiled by gcc at -O3 (the release profile), "
             f"recorded in .GCC.command.line; found {found}")
