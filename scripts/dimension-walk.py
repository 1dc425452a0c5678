#!/usr/bin/env python3
"""Which production files name each dimension of a grant, at a git ref:
the walk of `sm` beside the walk of `vram` (docs/architecture.md).

usage: scripts/dimension-walk.py [REF]   (default HEAD)

Production files: *.rs outside tests/, benches/, fuzz/, any tests/
directory, tests.rs and *_tests.rs; an inline `#[cfg(test)] mod tests`
and what follows it is left out; comments count (a comment that names a
field is part of what a change of it touches)."""
import re
import subprocess
import sys

PATTERNS = {"sm": r"sm_percent|sm_procs|sm_user", "vram": r"vram_bytes"}


def production(path):
    return (path.endswith(".rs") and "/tests/" not in path
            and not path.startswith(("tests/", "benches/", "fuzz/"))
            and not path.endswith(("/tests.rs", "_tests.rs")))


def main():
    ref = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref],
                           capture_output=True, text=True, check=True).stdout.split()
    found = {k: {} for k in PATTERNS}
    for f in filter(production, names):
        text = subprocess.run(["git", "show", f"{ref}:{f}"], capture_output=True,
                              text=True, check=True).stdout
        m = re.search(r"\n#\[cfg\(test\)\]\s*\nmod tests\s*\{", text)
        if m:
            text = text[:m.start()]
        for k, p in PATTERNS.items():
            n = len(re.findall(p, text))
            if n:
                found[k][f] = n
    for k, d in found.items():
        print(f"{k}: {len(d)} files, {sum(d.values())} occurrences")
        print("   " + ", ".join(f"{f} {n}" for f, n in sorted(d.items(), key=lambda x: (-x[1], x[0]))))


if __name__ == "__main__":
    main()
