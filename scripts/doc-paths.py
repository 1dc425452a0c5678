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
    module and only those; every Rust path it names in backticks
    (`core::placement::Placer::place`, `grantfile::set_vram`, `Size::Ppm`)
    resolves through the crates' module files to an item defined there, and
    every type it names (`GpuGrant`, `Reservation`) is defined in some crate.
  - source comments (Rust, C, shell, Python) name no ticket ("issue 18",
    "Issue 16 §4"): a comment says why the code is as it is; which ticket
    asked for it is git history's (the GPU suite's result ids, `30#share`,
    and the dated records under docs/ are not comments).
`--self-test` runs the checks on a small made-up tree, once as it is and
once with a type and a function gone, and fails unless only the second is
flagged (the negative control CI runs).
Prints each stale claim as FILE:LINE: what, and exits 1 when there is one.
usage: scripts/doc-paths.py [REPO_DIR]
"""
import glob
import os
import re
import sys

_args = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT = os.path.abspath(_args[0] if _args else os.path.join(os.path.dirname(__file__), ".."))
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
FILES_SET = set(FILES)
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


# Rust source roots by the names the docs use for them
CRATES = {"core": "core/src", "gpuquota_core": "core/src", "formats": "formats/src",
          "gpuquota_formats": "formats/src", "interceptor": "interceptor/src", "install": "install/src",
          "shim": "shim/src", "hook": "hook/src", "deviceplugin": "deviceplugin/src", "dra": "dra/src"}
# names of the standard library and of the language, never ours to define
STD_TYPES = {"Ok", "Err", "Some", "None", "Vec", "String", "Option", "Result", "Box", "Arc", "Rc",
             "HashMap", "HashSet", "BTreeMap", "BTreeSet", "Path", "PathBuf", "File", "Self", "Value",
             "Mutex", "Cow", "Default", "Debug", "Clone", "Drop", "Send", "Sync", "Fn", "FnOnce", "FnMut"}
ITEM_KINDS = r"(?:pub(?:\([a-z: ]+\))?\s+)?(?:unsafe\s+|const\s+|async\s+|extern\s+\"C\"\s+)*(?:fn|struct|enum|trait|type|const|static|mod|union)"
RUST_PATH_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
TYPE_RE = re.compile(r"^([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:<.*>)?$")


def rust_files_under(d):
    return [f for f in FILES if f.startswith(d + "/") and f.endswith(".rs")]


def module_files(base, name):
    """The files of module `name` inside the module whose directory is `base`
    (`base/name.rs`, and everything under `base/name/`)."""
    out = [f for f in (base + "/" + name + ".rs", base + "/" + name + "/mod.rs") if f in FILES_SET]
    out += [f for f in rust_files_under(base + "/" + name) if f not in out]
    return out


def defines(files, name, any_word=False):
    """An item `name` defined in one of `files` (or, for a path's later
    segments, a variant, field or method: any_word)."""
    n = re.escape(name)
    if any_word:
        pat = re.compile(r"\b" + n + r"\b")
    else:
        pat = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*" + ITEM_KINDS + r"\s+" + n + r"\b"
                         r"|macro_rules!\s*" + n + r"\b"
                         r"|^\s*pub(?:\([a-z: ]+\))?\s+use\s+[^;]*\b" + n + r"\b", re.M)
    return any(pat.search(text(f)) for f in files)


def resolve_path(token):
    """None when `token` (a::b::C) names what the sources define, else why not.
    Paths that start with no crate or module of ours (std::fs, libc::..) are
    not ours to check: None."""
    segs = token.split("::")
    if segs[0] in ("crate", "self", "super") or segs[0].isupper():
        return None  # relative, or a placeholder (`FILE::test`)
    if segs[0] in CRATES:
        base, rest = CRATES[segs[0]], segs[1:]
        files = [f for f in (base + "/lib.rs", base + "/main.rs") if f in FILES_SET]
    else:
        # a module named from inside its crate (`grantfile::set_vram`), or a
        # type with its variant or method (`Size::Ppm`, `Ledger::read`)
        homes = [c for c in sorted(set(CRATES.values())) if module_files(c, segs[0])]
        if not homes:
            if segs[0][:1].isupper():
                if segs[0] in STD_TYPES:
                    return None
                owners = [f for f in SOURCES if f.endswith(".rs") and defines([f], segs[0])]
                if not owners:
                    return f"no type {segs[0]} is defined in any crate"
                return None if all(defines(owners, x, any_word=True) for x in segs[1:]) else \
                    f"{segs[0]} ({owners[0]}) has no {'::'.join(segs[1:])}"
            return None
        base, rest = homes[0], segs
        files = []
    while rest:
        sub = module_files(base, rest[0])
        if not sub:
            break
        base, files, rest = base + "/" + rest[0], sub, rest[1:]
    if not rest:
        return None
    if not files:
        return f"no module {rest[0]} in {base}"
    if not defines(files, rest[0]):
        return f"{base} defines no {rest[0]}"
    if rest[1:] and not all(defines(files + [f for f in SOURCES if f.endswith('.rs') and defines([f], rest[0])], x, any_word=True) for x in rest[1:]):
        return f"{rest[0]} in {base} has no {'::'.join(rest[1:])}"
    return None


def architecture_names(doc="docs/architecture.md"):
    """Every Rust path and type named in backticks in the architecture doc
    resolves (see the module doc)."""
    bad = []
    for n, line in enumerate(text(doc).splitlines(), 1):
        for code in re.findall(r"`([^`]+)`", line):
            for m in RUST_PATH_RE.finditer(code):
                why = resolve_path(m.group(1))
                if why:
                    bad.append(f"{doc}:{n}: `{m.group(1)}`: {why}")
            t = TYPE_RE.match(code.strip())
            if t and t.group(1) not in STD_TYPES and "::" not in code:
                if not any(defines([f], t.group(1)) for f in SOURCES if f.endswith(".rs")):
                    bad.append(f"{doc}:{n}: no type {t.group(1)} is defined in any crate")
    return bad


TICKET_RE = re.compile(r"\b[Ii]ssues? ?#?\d+")
COMMENT_RE = re.compile(r"(//|/\*|^\s*\*|^\s*#(?!\[|!\[|include|define|if|endif|else|pragma|undef))")


def ticket_refs():
    """Source comments that name a ticket."""
    bad = []
    for f in FILES:
        if not f.endswith((".rs", ".c", ".h", ".sh", ".py")) or f.startswith("docs/") \
                or f == "scripts/doc-paths.py":
            continue
        for n, line in enumerate(text(f).splitlines(), 1):
            c = COMMENT_RE.search(line)
            if c and TICKET_RE.search(line[c.start():]) and "containerd issues" not in line:
                bad.append(f"{f}:{n}: a comment names a ticket: {line.strip()[:80]}")
    return bad


def self_test():
    """The negative control: a made-up tree whose doc names what it
    defines passes; with a type and a function removed it fails on both."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def write(rel, body):
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as h:
                h.write(body)
        write("core/src/lib.rs", "pub mod placement;\npub mod grantfile;\n")
        write("core/src/placement.rs", "pub struct Placer;\nimpl Placer {\n    pub fn place(&self) {}\n}\n")
        write("core/src/grantfile.rs", "pub fn set_vram() {}\npub enum Size { Ppm(u32) }\n")
        write("docs/architecture.md", "`core::placement::Placer::place`, `grantfile::set_vram`, `Size::Ppm`, `Placer`\n")
        write("core/src/why.rs", "// the grant is read once: a second read could differ\n")
        run = lambda: subprocess.run([sys.executable, os.path.abspath(__file__), "--names-only", d],
                                     capture_output=True, text=True)
        ok = run()
        write("core/src/placement.rs", "pub struct Admission;\n")
        write("core/src/grantfile.rs", "pub fn set_bytes() {}\npub enum Size { Ppm(u32) }\n")
        write("core/src/why.rs", "// the grant is read once (issue 29): a second read could differ\n")
        gone = run()
        good = ok.returncode == 0 and gone.returncode == 1 and "set_vram" in gone.stdout and "Placer" in gone.stdout \
            and "names a ticket" in gone.stdout
        print(("ok" if good else "FAILED") + ": doc-paths self-test: intact tree exit "
              f"{ok.returncode} ({ok.stdout.strip()!r}), tree with Placer and set_vram gone exit "
              f"{gone.returncode} ({gone.stdout.strip()!r})")
        return 0 if good else 1


def main():
    if "--names-only" in sys.argv:
        bad = architecture_names() + ticket_refs()
        for b in bad:
            print(b)
        return 1 if bad else 0
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
    bad += architecture_names()
    bad += ticket_refs()
    for b in bad:
        print(b)
    print(f"doc-paths: {len(docs)} documents, {len(bad)} stale claim(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv else main())
