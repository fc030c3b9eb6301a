#!/usr/bin/env python3
"""Instructions per decoded weight in the inner loop of exl3_mm variants, from a kit's SASS.

usage: scripts/exl3_sass_count.py KIT.tar.zst [SYMBOL...]   (default: M8 at K 2, 3, 4 x MCG, MUL1)

The inner loop is one pipeline stage: the unrolled 8 chunks x n-tiles between the BAR.SYNC before the
first HMMA and the last HMMA (in parentheses: up to the next BAR.SYNC, i.e. with the block loop's own
overhead). Per weight = count / (tiles x 8 positions per lane). Needs cuobjdump (CUOBJDUMP or
/opt/cudatools/cuobjdump)."""
import collections, os, re, subprocess, sys, tempfile

CUOBJDUMP = os.environ.get("CUOBJDUMP", "/opt/cudatools/cuobjdump")
INT = {"IMAD", "IDP", "LOP3", "SHF", "PRMT", "IADD3", "LEA", "ISETP", "SEL", "VIADD", "MOV", "IABS"}


def sass(path):
    out = subprocess.run([CUOBJDUMP, "-sass", path], capture_output=True, text=True, check=True).stdout
    ops = []
    for line in out.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops.append(m.group(2).split(".")[0])
    return ops


def stage(ops):
    h = [i for i, x in enumerate(ops) if x == "HMMA"]
    s = h[0]
    while ops[s - 1] != "BAR":
        s -= 1
    e = h[0]
    while ops[e + 1] != "BAR":
        e += 1
    last = max(i for i in range(s, e + 1) if ops[i] == "HMMA")
    return collections.Counter(ops[s:last + 1]), sum(1 for _ in ops[s:e + 1])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    syms = sys.argv[2:] or [f"exl3_mm__K{k}_CB{cb}_M8" for cb in (1, 2) for k in (2, 3, 4)]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["tar", "--zstd", "-xf", sys.argv[1], "-C", d], check=True)
        names = {}
        for f in os.listdir(os.path.join(d, "cubins")):
            p = os.path.join(d, "cubins", f)
            r = subprocess.run([CUOBJDUMP, "-res-usage", p], capture_output=True, text=True).stdout
            for m in re.finditer(r"Function (\w+)", r):
                names[m.group(1)] = p
        cols = ["IMAD", "IDP", "LOP3", "SHF", "PRMT", "HFMA2+HADD2", "LDS", "HMMA"]
        print("| variant | instr/weight (with loop) | integer | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 3) + "|")
        for s in syms:
            c, whole = stage(sass(names[s]))
            m = int(re.search(r"_M(\d+)", s).group(1))
            w = (16 if m <= 16 else 8) * 8.0
            vals = [c[x] for x in cols[:5]] + [c["HFMA2"] + c["HADD2"], c["LDS"], c["HMMA"]]
            ints = sum(v for k, v in c.items() if k in INT)
            print(f"| {s} | {sum(c.values()) / w:.2f} ({whole / w:.2f}) | {ints / w:.2f} | " +
                  " | ".join(f"{v / w:.2f}" for v in vals) + " |")


if __name__ == "__main__":
    main()
