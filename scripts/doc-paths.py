#!/usr/bin/env python3
"""Check that what docs/*.md and README.md name exists in the repository.

Checked (docs/gpu-runs/ are dated records and are skipped):
  - repo-relative paths (core/src/x.rs, tests/e2e/y.rs, benches/z.sh, ...), globs
    included (tests/e2e/untrusted_*.rs must match a file); a path git ignores
    (an output such as fuzz/corpus/) is not required to exist;
  - test references `FILE::name` (a fn, const, static, struct, enum or mod) (also `x.rs::name` or `e2e/x.rs::name` when
    the short name is unique): `fn name` must be in that file (or, for a
    module directory, in one of its files);
  - relative Markdown links [text](other.md);
  - `make TARGET`: a target of the Makefile;
  - GPU_QUOTA_* environment variables: named somewhere outside docs/;
  - docs/architecture.md: each crate's row names every file of its src/ (and
    include/) and only files that exist; the layers table names every core
    module and only those.
Prints each stale claim as FILE:LINE: what, and exits 1 when there is one.
usage: scripts/doc-paths.py [REPO_DIR]
"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
TOP = ("core", "formats", "interceptor", "shim", "hook", "install", "deviceplugin", "tests",
       "docs", "benches", "scripts", "deploy", "fuzz", ".ci")
PATH_RE = re.compile(r"(?<![\w/.<>-])((?:%s)/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/])(?:::([A-Za-z_][A-Za-z0-9_]*))?" % "|".join(re.escape(t) for t in TOP))
SHORT_RE = re.compile(r"(?<![\w/.-])((?:[a-z0-9_]+/)?[a-z0-9_]+\.rs)::([a-z_][a-z0-9_]*)")
LINK_RE = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MAKE_RE = re.compile(r"`make ([a-z][a-z0-9-]*)")
ENV_RE = re.compile(r"\bGPU_QUOTA_[A-Z0-9_]*[A-Z0-9]\b")
SKIP_DIRS = {".git", "target", "build", "node_modules", ".gpu-carry"}


def repo_files():
    out = []
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return out


FILES = repo_files()
BY_SUFFIX = {}
for f in FILES:
    if f.endswith(".rs"):
        parts = f.split("/")
        for k in (1, 2):
            if len(parts) >= k:
                BY_SUFFIX.setdefault("/".join(parts[-k:]), []).append(f)
SOURCES = [f for f in FILES if not f.startswith("docs/") and f != "README.md"
           and f.endswith((".rs", ".sh", ".c", ".h", ".toml", ".py", ".yaml", ".yml", "Makefile", ".service", ".json"))]
_text_cache = {}


def text(f):
    if f not in _text_cache:
        try:
            with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as h:
                _text_cache[f] = h.read()
        except OSError:
            _text_cache[f] = ""
    return _text_cache[f]


def files_of(path):
    """The files a path names: itself, a module directory's files, a glob's matches."""
    p = path.rstrip("/")
    full = os.path.join(ROOT, p)
    if any(c in p for c in "*?["):
        return [os.path.relpath(x, ROOT) for x in glob.glob(full)]
    if os.path.isfile(full):
        return [p]
    if os.path.isdir(full):
        return [p]
    return []


def ignored(path):
    import subprocess
    r = subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", "--no-index", path.rstrip("/") + "/x"],
                       capture_output=True)
    return r.returncode == 0


def has_fn(files, name):
    pat = re.compile(r"\b(?:fn|const|static|struct|enum|mod) %s\b" % re.escape(name))
    for f in files:
        if os.path.isdir(os.path.join(ROOT, f)):
            ff = [x for x in FILES if x.startswith(f.rstrip("/") + "/") and x.endswith(".rs")]
        elif f.endswith(".rs") and os.path.isdir(os.path.join(ROOT, f[:-3])):
            ff = [f] + [x for x in FILES if x.startswith(f[:-3] + "/")]
        else:
            ff = [f]
        if any(pat.search(text(x)) for x in ff):
            return True
    return False


def make_targets():
    t = set()
    for line in text("Makefile").splitlines():
        m = re.match(r"^([a-z][a-z0-9-]*)\s*:(?!=)", line)
        if m:
            t.add(m.group(1))
    return t


def architecture():
    """docs/architecture.md lists every crate's files and every core module: both ways."""
    bad = []
    doc = "docs/architecture.md"
    lines = text(doc).splitlines()
    rows = {}
    modules = set()
    for n, line in enumerate(lines, 1):
        m = re.match(r"^\| ([a-z]+)/ \(`[^`]+`\) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = (n, m.group(2))
        m = re.match(r"^\| \d+ \| `([a-z_]+)` \|", line)
        if m:
            modules.add(m.group(1))
    for crate in ("core", "formats", "interceptor", "shim", "hook", "install", "deviceplugin"):
        if crate not in rows:
            bad.append(f"{doc}: no row for {crate}/ in the crates' files table")
            continue
        n, cell = rows[crate]
        named = set(re.findall(r"`([A-Za-z0-9_./-]+)`", cell))
        have = sorted(f for f in FILES if f.startswith(crate + "/src/") and f.endswith(".rs")
                      or f.startswith(crate + "/include/"))
        for f in have:
            rel = f[len(crate) + 1:]
            inner = rel[len("src/"):] if rel.startswith("src/") else rel
            base = os.path.basename(f)
            if crate == "core" and "/" not in inner and base[:-3] in modules:
                continue
            if base == "tests.rs":
                continue  # a module's tests beside it
            if not (base in named or inner in named or rel in named):
                bad.append(f"{doc}:{n}: {f} is not listed for {crate}/")
        for x in named:
            if re.search(r"\.(rs|h)$|/$", x) and not any(
                    f.startswith(crate + "/") and (f.endswith("/" + x) or ("/" + x) in f) for f in FILES):
                bad.append(f"{doc}:{n}: {crate}/ has no {x}")
    core_mods = {os.path.basename(f)[:-3] if f.count("/") == 2 else f.split("/")[2]
                 for f in FILES if f.startswith("core/src/") and f.endswith(".rs")} - {"lib"}
    for m in sorted(core_mods - modules):
        bad.append(f"{doc}: core module {m} is not in the layers table")
    for m in sorted(modules - core_mods):
        bad.append(f"{doc}: the layers table names {m}, which core/src does not have")
    return bad


def main():
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]
    targets = make_targets()
    env_known = {}
    bad = []
    for doc in docs:
        rel = os.path.relpath(doc, ROOT)
        with open(doc, encoding="utf-8") as h:
            lines = h.read().splitlines()
        in_code = False
        for n, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
            for m in PATH_RE.finditer(line):
                path, fn = m.group(1), m.group(2)
                path = path.rstrip(".")
                if "<" in path or "$" in path:
                    continue
                found = files_of(path)
                if not found and ignored(path):
                    continue  # an output (fuzz/corpus/, tests/fake/build/): made by a run, ignored by git
                if not found:
                    bad.append(f"{rel}:{n}: no such path in the repository: {path}")
                elif fn and not has_fn(found, fn):
                    bad.append(f"{rel}:{n}: {path} has no fn {fn}")
            for m in SHORT_RE.finditer(line):
                short, fn = m.group(1), m.group(2)
                if PATH_RE.search(line[max(0, m.start() - 80):m.end()]) and any(t + "/" in line[max(0, m.start() - 40):m.start() + len(short)] for t in TOP):
                    continue  # part of a full path, checked above
                cands = BY_SUFFIX.get(short, [])
                if not cands:
                    # a module turned directory: x.rs -> x/mod.rs
                    stem = short[:-3]
                    cands = [f for f in FILES if ("/" + stem + "/") in "/" + f and f.endswith(".rs")]
                if not cands:
                    bad.append(f"{rel}:{n}: no file {short} (for {short}::{fn})")
                elif not has_fn(cands, fn):
                    bad.append(f"{rel}:{n}: no fn {fn} in {short} ({', '.join(cands)})")
            if not in_code:
                for m in LINK_RE.finditer(line):
                    target = m.group(1)
                    if re.match(r"^[a-z]+:", target):
                        continue
                    p = os.path.normpath(os.path.join(os.path.dirname(doc), target))
                    if not os.path.exists(p):
                        bad.append(f"{rel}:{n}: broken link {target}")
            for m in MAKE_RE.finditer(line):
                if m.group(1) not in targets:
                    bad.append(f"{rel}:{n}: no make target {m.group(1)}")
            for m in ENV_RE.finditer(line):
                v = m.group(0)
                if v not in env_known:
                    env_known[v] = any(v in text(f) for f in SOURCES)
                if not env_known[v]:
                    bad.append(f"{rel}:{n}: environment variable {v} is named by no source file")
    bad += architecture()
    for b in bad:
        print(b)
    print(f"doc-paths: {len(docs)} documents, {len(bad)} stale claim(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
