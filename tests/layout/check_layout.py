#!/usr/bin/env python3
"""Check the source tree against docs/layout.md: every #include "..." of a file in a listed folder names a
file of the same folder or of a folder its row allows, and no two object files of one library call each
other in a circle (symbols read with nm from the build tree). Exit 0 clean, 1 with one line per problem.

usage: check_layout.py SOURCE_DIR [BUILD_DIR]"""
import collections
import os
import re
import subprocess
import sys

CLI_FILES = re.compile(r"(^|/)(cmd_[a-z_]*\.c|bench[a-z_0-9]*\.c|mkmodel\.c|verify_cli\.c|main\.c)$")


def read_table(path):
    rows = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\|\s*`([^`]+)`\s*\|[^|]*\|(.*)\|\s*$", line)
        if not m:
            continue
        allowed = re.findall(r"`([^`]+)`", m.group(2))
        rows[m.group(1)] = "*" if "anything" in m.group(2) else set(allowed)
    return rows


def folder_of(path, folders):
    best = None
    for f in folders:
        if (path == f or path.startswith(f + "/")) and (best is None or len(f) > len(best)):
            best = f
    return best


def check_includes(src, rows):
    problems = []
    folders = list(rows)
    for dirpath, dirnames, files in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "build")) and d not in ("cubins", "models", "kits")]
        for name in files:
            if not name.endswith((".c", ".h", ".cu", ".cuh", ".cc")):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name))
            own = folder_of(rel, folders)
            if own is None:
                problems.append(f"{rel}: its folder is not in docs/layout.md")
                continue
            allowed = rows[own]
            if allowed == "*":
                continue
            text = open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                if inc == "runtime/cli.h" and CLI_FILES.search(rel):
                    continue
                target = folder_of(inc, folders)
                if own == "kit/src" and "/" not in inc:
                    continue  # kernel sources include each other by bare name (NVRTC's include path)
                if target is None:
                    problems.append(f"{rel}: includes {inc}, which is in no folder of docs/layout.md")
                elif target != own and target not in allowed:
                    problems.append(f"{rel}: includes {inc} ({target}), which {own} may not include")
    return problems


def check_cycles(build):
    problems = []
    libs = collections.defaultdict(list)
    for dirpath, _, files in os.walk(os.path.join(build, "CMakeFiles")):
        if not dirpath.endswith(".dir") and ".dir/" not in dirpath:
            continue
        lib = dirpath.split("CMakeFiles/")[1].split(".dir")[0]
        if lib not in ("dskit_core", "dskit_runtime"):
            continue
        for f in files:
            if f.endswith(".o"):
                libs["all"].append(os.path.join(dirpath, f))
    defs, uses = {}, {}
    for obj in libs["all"]:
        name = obj.split(".dir/")[1][:-2]
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        d, u = set(), set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDRBC":
                d.add(p[2])
            elif len(p) == 2 and p[0] == "U":
                u.add(p[1])
        defs[name], uses[name] = d, u
    owner = {s: n for n, d in defs.items() for s in d}
    graph = {n: {owner[s] for s in u if s in owner and owner[s] != n} for n, u in uses.items()}
    index, low, stack, on, counter = {}, {}, [], set(), [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                problems.append("files calling each other in a circle: " + " <-> ".join(sorted(comp)))

    sys.setrecursionlimit(100000)
    for v in graph:
        if v not in index:
            visit(v)
    if not defs:
        problems.append(f"no object files found under {build}/CMakeFiles (build first)")
    return problems


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = sys.argv[1]
    rows = read_table(os.path.join(src, "docs", "layout.md"))
    if not rows:
        print("docs/layout.md: no folder table found", file=sys.stderr)
        return 2
    problems = check_includes(src, rows)
    if len(sys.argv) > 2:
        problems += check_cycles(sys.argv[2])
    for p in problems:
        print(p)
    print(f"layout: {len(rows)} folders, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
