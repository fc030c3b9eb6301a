#!/usr/bin/env python3
"""Build the kernel emulator (docs/emulator.md): every kit variant dskit-build lists (--list-defines)
compiled for the CPU from tests/emu/emu_kernel.cc with that variant's -D definitions, the emulator's
own test kernels, the scheduler and the stand-in driver, linked into OUT/libcuda.so.1.

Incremental, make-style: an object is rebuilt when it is missing, its command changed, or a file its
depfile lists (the kit source, the headers, the emulator headers) is newer; the library is relinked
when an object changed. Parallel: -j compiles at once (longest first).

usage: build_emu.py --builder BUILD/dskit-build --out DIR [-j N] [--arch sm_90] [--for MODEL_DIR]
                    [--family F[,F...]] [--cxx g++] [--cc gcc] [--opt -O1]"""
import argparse
import concurrent.futures
import os
import shlex
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# The emulator's own test kernels (tests/emu/emu_selftest.cu): kernel emutest_NAME is built with -DEMU_TEST_NAME.
SELF_TESTS = ["barrier", "warp", "atomics", "deadlock", "mismatch", "warp_mismatch", "fault", "axpy", "mma",
              "cp_async", "intrinsics"]

# The emulator's own code builds warning-free (-Werror); kit sources print g++'s warnings without stopping
# the build (NVRTC is their compiler, and one family's warning should not keep the others off the emulator).
WARN = ["-Wall", "-Wextra", "-Wno-unused-parameter"]
OWN_WARN = WARN + ["-Werror"]
# Kit sources are CUDA: #pragma unroll, helpers a variant does not call, int/unsigned comparisons.
KIT_WARN = WARN + ["-Wno-unknown-pragmas", "-Wno-unused-function", "-Wno-unused-variable", "-Wno-sign-compare",
                   "-Wno-unused-but-set-variable", "-Wno-maybe-uninitialized"]


def variant_list(args):
    cmd = [args.builder, "--arch", args.arch, "--list-defines"]
    if args.for_model:
        cmd += ["--for", args.for_model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    variants = []
    for line in out.splitlines():
        f = line.split()
        if len(f) < 4:
            sys.exit(f"build_emu: unexpected line from {' '.join(cmd)}: {line!r}")
        variants.append({"symbol": f[0], "family": f[1], "source": f[2], "defines": f[3:]})
    return variants


def depfile_inputs(path):
    try:
        text = open(path).read().replace("\\\n", " ")
    except OSError:
        return None
    return text.split(":", 1)[1].split() if ":" in text else []


def up_to_date(obj, dep, extra, cmd):
    stamp = obj + ".cmd"
    try:
        if open(stamp).read() != cmd:
            return False
        t = os.path.getmtime(obj)
    except OSError:
        return False
    deps = depfile_inputs(dep)
    if deps is None:
        return False
    deps += extra
    try:
        return all(os.path.getmtime(d) <= t for d in deps)
    except OSError:
        return False


def up_to_date_link(lib, objs, cmd):
    try:
        if open(lib + ".cmd").read() != cmd:
            return False
        t = os.path.getmtime(lib)
        return all(os.path.getmtime(o) <= t for o in objs)
    except OSError:
        return False


def compile_one(job):
    name, argv, obj, dep, extra = job
    cmd = shlex.join(argv)
    if up_to_date(obj, dep, extra, cmd):
        return name, None, False
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        return name, r.stdout + r.stderr, True
    if r.stderr.strip():
        sys.stderr.write(r.stderr)
    with open(obj + ".cmd", "w") as f:
        f.write(cmd)
    return name, None, True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builder", required=True, help="the dskit-build program (for --list-defines)")
    ap.add_argument("--out", required=True, help="output folder: OUT/libcuda.so.1, OUT/obj/")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--for", dest="for_model", help="only the variants this model needs")
    ap.add_argument("--family", help="only these families (comma-separated)")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    ap.add_argument("--opt", default="-O1", help="optimisation of the kernel variants")
    ap.add_argument("--cuda-include", default="/usr/local/cuda/include")
    args = ap.parse_args()

    t0 = time.time()
    out = os.path.abspath(args.out)
    objdir = os.path.join(out, "obj")
    os.makedirs(objdir, exist_ok=True)
    variants = variant_list(args)
    if args.family:
        keep = set(args.family.split(","))
        unknown = keep - {v["family"] for v in variants}
        if unknown:
            sys.exit(f"build_emu: no variants of {', '.join(sorted(unknown))} in the list")
        variants = [v for v in variants if v["family"] in keep]
    with open(os.path.join(out, "variants.txt"), "w") as f:
        for v in variants:
            f.write(" ".join([v["symbol"], v["family"], v["source"]] + v["defines"]) + "\n")

    inc = ["-I" + ROOT, "-I" + args.cuda_include, f"-ffile-prefix-map={ROOT}/="]
    base = [args.cxx, "-std=c++17", "-fPIC", "-fvisibility=hidden", "-ffp-contract=off", "-g0", "-c"] + inc
    jobs = []

    def add(name, argv, extra=()):
        obj = os.path.join(objdir, name + ".o")
        jobs.append((name, argv + ["-MMD", "-MF", obj[:-2] + ".d", "-o", obj], obj, obj[:-2] + ".d", list(extra)))

    # emu.h precompiled once (the CUDA fp16/bf16 headers are most of a small variant's compile); the
    # variants find OUT/pch/tests/emu/emu.h.gch first (their depfiles do not name it: it is an extra input).
    # Their -D definitions do not touch emu.h.
    pchdir = os.path.join(out, "pch")
    pch = os.path.join(pchdir, "tests", "emu", "emu.h.gch")
    os.makedirs(os.path.dirname(pch), exist_ok=True)
    kernel_base = [args.cxx, "-std=c++17", "-fPIC", "-fvisibility=hidden", "-ffp-contract=off", "-g0", args.opt] + KIT_WARN
    pch_job = ("emu.h.gch", kernel_base + inc + ["-x", "c++-header", "tests/emu/emu.h", "-MMD", "-MF", pch + ".d",
                                                 "-o", pch], pch, pch + ".d", [])
    kernel_flags = kernel_base + ["-c", "-I" + pchdir] + inc
    for v in variants:  # the slowest first: exl3_mm variants take the longest
        add(v["symbol"], kernel_flags + v["defines"] +
            [f'-DDSK_EMU_SOURCE="kit/src/{v["source"]}"', "tests/emu/emu_kernel.cc"], [pch])
    for t in SELF_TESTS:
        add("emutest_" + t, kernel_flags +
            ["-Werror", f"-DDSK_SYMBOL=emutest_{t}", "-DDSK_SM=90", f"-DEMU_TEST_{t}",
             '-DDSK_EMU_SOURCE="tests/emu/emu_selftest.cu"', "tests/emu/emu_kernel.cc"], [pch])
    for src in ["tests/emu/emu_sched.cc", "tests/emu/emu_driver.cc"]:
        add(os.path.basename(src)[:-3], base + ["-O2"] + OWN_WARN + [src])
    for src in ["runtime/common/error.c", "runtime/common/escape.c", "runtime/common/numerics.c", "manifest/cubin_elf.c"]:
        add("c_" + os.path.basename(src)[:-2],
            [args.cc, "-std=c11", "-D_GNU_SOURCE", "-fPIC", "-fvisibility=hidden", "-O2", "-g0", "-c"] + inc + OWN_WARN + [src])
    jobs.sort(key=lambda j: 0 if j[0].startswith("exl3_mm") else 1)

    failed, built = [], 0
    name, error, did = compile_one(pch_job)
    if error:
        sys.exit(f"build_emu: precompiling tests/emu/emu.h failed:\n{error}")
    built += did
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        for name, error, did in pool.map(compile_one, jobs):
            built += did
            if error:
                failed.append(name)
                sys.stderr.write(f"build_emu: {name} failed to compile:\n{error}\n")
    if failed:
        sys.exit(f"build_emu: {len(failed)} of {len(jobs)} translation units failed: {', '.join(failed[:8])}")

    lib = os.path.join(out, "libcuda.so.1")
    objs = [j[2] for j in jobs]
    link = [args.cxx, "-shared", "-Wl,-soname,libcuda.so.1", "-Wl,--no-undefined", "-o", lib] + objs + ["-lm", "-lpthread"]
    link_cmd = shlex.join(link)
    fresh = up_to_date_link(lib, objs, link_cmd)
    if not fresh:
        r = subprocess.run(link, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"build_emu: linking {lib} failed:\n{r.stdout}{r.stderr}")
        with open(lib + ".cmd", "w") as f:
            f.write(link_cmd)
    print(f"build_emu: {len(variants)} kit variants + {len(SELF_TESTS)} test kernels; compiled {built} of "
          f"{len(jobs) + 1} translation units (emu.h precompiled is one); {lib} {'up to date' if fresh else 'linked'} "
          f"in {time.time() - t0:.1f} s with -j {args.j}")


if __name__ == "__main__":
    main()
