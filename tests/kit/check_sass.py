#!/usr/bin/env python3
"""Every kernel of a kit reads memory only through uniform registers that it writes.

ptxas (CUDA 13.0) can emit an instruction whose memory operand names uniform registers that no
instruction of the kernel writes: exl3_mm's hinted cp.async at K 3 came out as
`LDGSTS [R7+UR0], desc[UR1][R20.64]` with the policy built in UR6:UR7, and sm_90 faults on it with
CUDA_ERROR_ILLEGAL_INSTRUCTION. The emulator cannot see SASS; this check reads it (cuobjdump -sass of
each cubin) and names every such instruction.

usage: check_sass.py KIT.tar.zst... [--cuobjdump PATH]
PATH defaults to $DSKIT_CUOBJDUMP, then cuobjdump on PATH, then the one the PyPI package
nvidia-cuda-cuobjdump installs, with nvidia-cuda-nvdisasm beside it (scripts/install-deps.sh
installs both).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor

INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
MEM = re.compile(r"(desc\[[^\]]*\]|\[[^\]]*\])")
UREG = re.compile(r"\bUR(\d+)\b")


def has_nvdisasm(cuobjdump):
    """cuobjdump -sass runs nvdisasm: from its own folder, NVDISASM_PATH or PATH."""
    return (os.access(os.path.join(os.path.dirname(cuobjdump), "nvdisasm"), os.X_OK) or
            bool(os.environ.get("NVDISASM_PATH")) or shutil.which("nvdisasm") is not None)


def find_cuobjdump(arg):
    if arg:
        return arg
    if os.environ.get("DSKIT_CUOBJDUMP"):
        return os.environ["DSKIT_CUOBJDUMP"]
    cands = [shutil.which("cuobjdump")]
    try:
        import nvidia  # the namespace package of NVIDIA's PyPI wheels
        for base in nvidia.__path__:
            cands += sorted(glob.glob(os.path.join(base, "*", "bin", "cuobjdump")), reverse=True)
    except ImportError:
        pass
    for c in cands:
        if c and has_nvdisasm(c):
            return c
    return None


def written(insns):
    """The uniform registers an instruction list writes: the first operand of each instruction whose
    first operand is a UR (a .64, .WIDE or .128 form writes the next ones too)."""
    out = set()
    for ins in insns:
        body = re.sub(r"^@!?U?P\w+\s+", "", ins)
        parts = body.split(None, 1)
        if len(parts) < 2:
            continue
        op, rest = parts
        m = re.match(r"UR(\d+)\b", rest)
        if not m:
            continue
        n = int(m.group(1))
        width = 4 if ".128" in op else 2 if ".64" in op or ".WIDE" in op else 1
        out.update(range(n, n + width))
    return out


def check_cubin(cuobjdump, path):
    r = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s -sass %s failed: %s" % (cuobjdump, path, r.stderr.strip()))
    insns = [m.group(1) for m in map(INSN.match, r.stdout.splitlines()) if m]
    if not insns:
        raise RuntimeError("%s: cuobjdump printed no instructions" % path)
    have = written(insns)
    bad = []
    for ins in insns:
        for mem in MEM.findall(ins):
            missing = [int(u) for u in UREG.findall(mem) if int(u) not in have]
            if missing:
                bad.append("%s (UR%s never written)" % (ins, ",UR".join(map(str, missing))))
                break
    return len(insns), bad


def check_kit(cuobjdump, kit):
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(["tar", "--zstd", "-xf", kit, "-C", tmp], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("cannot unpack %s: %s" % (kit, r.stderr.strip()))
        with open(os.path.join(tmp, "manifest.json")) as f:
            manifest = json.load(f)
        blobs = sorted({k["blob"] for k in manifest["kernels"]})
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            res = dict(zip(blobs, pool.map(lambda b: check_cubin(cuobjdump, os.path.join(tmp, "cubins", b + ".cubin")),
                                           blobs)))
    failures = 0
    for k in manifest["kernels"]:
        for b in res[k["blob"]][1]:
            print("%s %s: %s" % (manifest["arch"], k["symbol"], b))
            failures += 1
    print("check_sass: %s: %d kernels, %d cubins, %d instructions, %d memory operands on unwritten uniform registers"
          % (kit, len(manifest["kernels"]), len(blobs), sum(n for n, _ in res.values()), failures))
    return failures


def main():
    args = sys.argv[1:]
    if args == ["--cuobjdump-found"]:  # for scripts/install-deps.sh
        return 0 if find_cuobjdump(None) else 1
    given = None
    if "--cuobjdump" in args:
        i = args.index("--cuobjdump")
        if i + 1 >= len(args):
            print("check_sass: --cuobjdump needs a path", file=sys.stderr)
            return 2
        given = args[i + 1]
        del args[i:i + 2]
    if not args:
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        return 2
    cuobjdump = find_cuobjdump(given)
    if not cuobjdump:
        print("check_sass: no cuobjdump with an nvdisasm beside it (set DSKIT_CUOBJDUMP, or pip install "
              "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 1
    failures = 0
    for kit in args:
        try:
            failures += check_kit(cuobjdump, kit)
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            print("check_sass: %s: %s" % (kit, e), file=sys.stderr)
            return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
