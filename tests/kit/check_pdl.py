#!/usr/bin/env python3
"""check_pdl.py SOURCE_DIR: the programmatic-dependent-launch rule of docs/kernels.md.

A family marked "pdl" in kit/variants.json is launched while the grid before it may still run, so its
kernel must wait (griddepcontrol.wait, through dsk_pdl_wait or its family's own helper) before it reads
or writes anything an earlier kernel touches. The emulator runs grids one at a time and cannot see a
missing wait, so this reads the sources: the kernel's first statement is the wait, except in the
families listed below, whose kernels read weights or arguments first by design (each documents what it
reads before its wait). A source that waits while its family is not marked pdl is flagged too (the
wait would never be armed: a sign the mark was lost)."""
import json
import os
import re
import sys

# families that do work before their wait, on purpose (docs/exl3-kernels.md, docs/kernels.md)
LATE_WAIT = {
    "exl3_mm": "issues its first trellis stage (weights) before the wait",
    "mhc_mix": "loads its slice of hc_fn (weights) before the wait",
}
WAIT = re.compile(r"\b(dsk_pdl_wait|mix_pdl_wait)\s*\(\s*\)\s*;")


def kernel_body(text):
    """The text of the DSK_KERNEL's body after its opening brace (None if there is no kernel)."""
    i = text.find("DSK_KERNEL")
    if i < 0:
        return None
    j = text.find("\n{\n", i)
    return None if j < 0 else text[j + 3:]


def first_statement(body):
    for line in body.splitlines():
        s = line.split("//")[0].strip()
        if s:
            return s
    return ""


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    fams = json.load(open(os.path.join(root, "kit", "variants.json")))["families"]
    problems, marked = [], 0
    for f in fams:
        name, path = f["family"], os.path.join(root, "kit", "src", f["source"])
        text = open(path).read()
        body = kernel_body(text)
        if body is None:
            problems.append(f"{name}: no DSK_KERNEL body found in {path}")
            continue
        waits = WAIT.search(text) is not None
        if not f.get("pdl"):
            if waits:
                problems.append(f"{name}: {path} waits for the previous grid but the family is not marked pdl")
            continue
        marked += 1
        if name in LATE_WAIT:
            if not waits:
                problems.append(f"{name}: marked pdl and has no wait at all")
            continue
        first = first_statement(body)
        if not WAIT.match(first):
            problems.append(f"{name}: marked pdl, but its kernel's first statement is '{first}', not the wait "
                            f"(move dsk_pdl_wait() first, or list the family in LATE_WAIT with the reason)")
    for p in problems:
        print(p)
    print(f"pdl: {len(fams)} families, {marked} marked pdl, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
