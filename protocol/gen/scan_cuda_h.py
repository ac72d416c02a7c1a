#!/usr/bin/env python3
"""Lists driver functions declared by the toolkit's cuda.h (and cudaProfiler.h) that the
manifest lacks, as ready-to-paste `unsupported` manifest entries with their parameters.

  scan_cuda_h.py MANIFEST [--cuda-include DIR] [--first-id N]

Uses the C preprocessor so that version macros (cuMemAlloc -> cuMemAlloc_v2) are resolved
exactly as a program compiled against this toolkit sees them.
"""

import os
import re
import shutil
import subprocess
import sys


def declared_functions(include_dir):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        sys.exit("scan_cuda_h.py: no C compiler on the PATH")
    src = "#include <cuda.h>\n#include <cudaProfiler.h>\n"
    pp = subprocess.run([cc, "-E", "-P", "-I", include_dir, "-x", "c", "-"], input=src,
                        capture_output=True, text=True, check=True).stdout
    out = []
    for name, params in re.findall(r"CUresult\s+(cu\w+)\s*\(([^;{]*?)\)\s*;", pp, re.S):
        params = " ".join(params.split())
        plist = [] if params in ("", "void") else [p.strip() for p in params.split(",")]
        out.append((name, plist))
    return out


def manifest_symbols(path):
    syms, ids = set(), set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0]
            if line and not line[0].isspace() and line.strip():
                parts = line.split()
                ids.add(int(parts[0]))
                syms.add(parts[1])
    return syms, ids


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    include_dir = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
    first_id = None
    if "--cuda-include" in argv:
        include_dir = argv[argv.index("--cuda-include") + 1]
    if "--first-id" in argv:
        first_id = int(argv[argv.index("--first-id") + 1])
    syms, ids = manifest_symbols(argv[1])
    next_id = first_id or (max(ids) + 1 if ids else 1)
    missing = [(n, p) for n, p in declared_functions(include_dir) if n not in syms]
    for name, params in missing:
        while next_id in ids:
            next_id += 1
        print(f"{next_id} {name} unsupported")
        for p in params:
            print(f"    {p}")
        ids.add(next_id)
    print(f"# {len(missing)} functions of cuda.h not in the manifest", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
