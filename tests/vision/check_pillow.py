#!/usr/bin/env python3
"""dskit's image preprocessing against Pillow (vision.md §1.2, §2): random images of random sizes, modes and
formats are written with Pillow, then decoded and preprocessed by tests/vision/vision_dump (the C code) and
by Pillow as REF does it (Image.open(...).convert("RGB"), ImageOps.pad(..., BICUBIC, color 127)), with the
plan of §2.1 transcribed here in Python. Decoded pixels, plan, canvas and bf16 patches must be identical.

usage: check_pillow.py VISION_DUMP [CASES] [SEED]   (exit 77, skipped: no numpy, or no Pillow 13 or newer)"""
import json
import math
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from PIL import Image, ImageOps
except ImportError as e:
    print(f"check_pillow: skipped ({e}); scripts/install-deps.sh installs Pillow 13 and numpy")
    sys.exit(77)

# REF ran Pillow 13.0 (vision.md §0). Older Pillow resamples both axes horizontal-first and refuses an
# empty fit, so its canvases are not REF's: comparing against it would test the wrong thing.
if int(Image.__version__.split(".")[0]) < 13:
    print(f"check_pillow: skipped (Pillow {Image.__version__}; REF's is 13.0: scripts/install-deps.sh)")
    sys.exit(77)


def plan(W, H, p, M, m, r=3):
    """REF's plan_image_grid as vision.md §2.1 states it (max_wh_ratio null)."""
    w, h = W, H
    if 0 < w * h < m:
        s = pow(m / (w * h), 0.5)
        w, h = int(w * s), int(h * s)
    bw, bh = math.ceil(w / p) * p, math.ceil(h / p) * p

    def count(bw, bh):
        return math.ceil(bh // p / r) * (math.ceil(bw // p / r) + 1) + 2

    if count(bw, bh) > M:
        rho = h / w
        x = math.sqrt((M - 2) / rho + 0.25) - 0.5
        y = x * rho
        cell = p * r
        if x < 1:
            bh, bw = (M - 2) // 2 * cell, cell
        elif y < 1:
            bh, bw = cell, (M - 3) * cell
        else:
            beta = min(math.floor(x) * cell / w, math.floor(y) * cell / h)
            bh, bw = math.floor(h * beta / p) * p, math.floor(w * beta / p) * p
    assert count(bw, bh) <= M
    return bw, bh, count(bw, bh)


def bf16(a):
    """fp32 -> bf16 bits, round to nearest even (finite values only)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def patches(canvas, p):
    x = canvas.astype(np.float32) / np.float32(255.0)
    x = (x - np.float32(0.5)) / np.float32(0.5)
    H, W, _ = x.shape
    t = x.reshape(H // p, p, W // p, p, 3).transpose(0, 2, 4, 1, 3)  # [row, col, c, dy, dx]
    return bf16(t.reshape(-1))


def picture(rng, w, h):
    """Noise over gradients and edges: every tap of the resampler matters."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), ((xx + yy) * 7) % 256], -1)
    noise = rng.integers(0, 256, (h, w, 3))
    mix = rng.random()
    return np.clip(base * (1 - mix) + noise * mix, 0, 255).astype(np.uint8)


def make(rng, kind, w, h, path):
    a = picture(rng, w, h)
    if kind == "RGB":
        im = Image.fromarray(a, "RGB")
    elif kind == "RGBA":
        im = Image.fromarray(np.dstack([a, rng.integers(0, 256, (h, w))]).astype(np.uint8), "RGBA")
    elif kind == "L":
        im = Image.fromarray(a[..., 0], "L")
    elif kind == "LA":
        im = Image.fromarray(np.dstack([a[..., 0], a[..., 1]]).astype(np.uint8), "LA")
    elif kind == "1":
        im = Image.fromarray(a[..., 0] > 127)
    elif kind == "P":
        im = Image.fromarray(a, "RGB").quantize(colors=int(rng.integers(2, 256)))
    elif kind == "P+tRNS":
        im = Image.fromarray(a, "RGB").quantize(colors=16)
        im.info["transparency"] = 3
    elif kind == "I;16":
        im = Image.fromarray((a[..., 0].astype(np.uint16) * int(rng.integers(1, 300))).astype(np.uint16))  # mode I;16
    elif kind == "CMYK":
        im = Image.fromarray(np.dstack([a, rng.integers(0, 256, (h, w))]).astype(np.uint8), "CMYK")
    else:
        raise ValueError(kind)
    return im


def main():
    dump = sys.argv[1]
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else random.randrange(1 << 30)
    print(f"check_pillow: Pillow {Image.__version__}, numpy {np.__version__}, {cases} cases, seed {seed}")
    rng = np.random.default_rng(seed)
    png_kinds = ["RGB", "RGBA", "L", "LA", "1", "P", "P+tRNS", "I;16"]
    jpeg_kinds = ["RGB", "L", "CMYK"]
    configs = [(14, 1024, 295936), (4, 32, 1024)]  # the release's vision numbers, the tiny preset's
    bad = 0
    jpeg_diff = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(cases):
            p, M, m = configs[k % 2]
            big = p == 14
            if k % 5 == 0:  # extreme aspect ratios: the shrink and one-row/one-column branches
                w, h = (int(rng.integers(1, 40)), int(rng.integers(200, 3000)))
                if rng.random() < 0.5:
                    w, h = h, w
            else:
                w, h = int(rng.integers(1, 1400 if big else 150)), int(rng.integers(1, 1400 if big else 150))
            is_jpeg = k % 3 == 2
            kind = jpeg_kinds[k % len(jpeg_kinds)] if is_jpeg else png_kinds[k % len(png_kinds)]
            im = make(rng, kind, w, h, None)
            path = os.path.join(tmp, f"case{k}." + ("jpg" if is_jpeg else "png"))
            if is_jpeg:
                im.save(path, "JPEG", quality=int(rng.integers(50, 100)), subsampling=int(rng.integers(0, 3)),
                        progressive=bool(rng.integers(0, 2)))
            else:
                im.save(path, "PNG", interlace=bool(rng.integers(0, 2)))
            out = subprocess.run([dump, path, str(p), str(M), str(m), tmp], capture_output=True, text=True)
            what = f"case {k}: {kind} {w}x{h} {'JPEG' if is_jpeg else 'PNG'}, patch {p}"
            if out.returncode != 0:
                print(f"FAIL {what}: {out.stdout.strip()} {out.stderr.strip()}")
                bad += 1
                continue
            got = json.loads(out.stdout)
            ref = np.asarray(Image.open(path).convert("RGB"))
            rgb = np.fromfile(os.path.join(tmp, "rgb.bin"), np.uint8).reshape(h, w, 3)
            if not np.array_equal(rgb, ref):
                d = np.abs(rgb.astype(int) - ref.astype(int))
                if is_jpeg:
                    jpeg_diff.append((what, int((d > 0).sum()), int(d.max())))
                    ref = rgb  # the rest of the chain is checked from dskit's own decode
                else:
                    print(f"FAIL {what}: decoded pixels differ from Pillow's at {(d > 0).sum()} values (max {d.max()})")
                    bad += 1
                    continue
            bw, bh, n = plan(w, h, p, M, m)
            if (got["best_w"], got["best_h"], got["positions"]) != (bw, bh, n):
                print(f"FAIL {what}: plan {got['best_w']}x{got['best_h']} ({got['positions']}), Python {bw}x{bh} ({n})")
                bad += 1
                continue
            canvas = np.asarray(ImageOps.pad(Image.fromarray(ref, "RGB"), (bw, bh), method=Image.BICUBIC,
                                             color=(127, 127, 127)))
            mine = np.fromfile(os.path.join(tmp, "canvas.bin"), np.uint8).reshape(bh, bw, 3)
            if not np.array_equal(mine, canvas):
                d = np.abs(mine.astype(int) - canvas.astype(int))
                print(f"FAIL {what}: canvas {bw}x{bh} (fit {got['fit_w']}x{got['fit_h']} at {got['off_x']},"
                      f"{got['off_y']}) differs from Pillow's at {(d > 0).sum()} values (max {d.max()})")
                bad += 1
                continue
            pt = np.fromfile(os.path.join(tmp, "patches.bin"), np.uint16)
            if not np.array_equal(pt, patches(canvas, p)):
                print(f"FAIL {what}: patches differ")
                bad += 1
                continue
            print(f"ok   {what} -> canvas {bw}x{bh}, fit {got['fit_w']}x{got['fit_h']}, {n} positions")
    for what, n, mx in jpeg_diff:
        print(f"note {what}: Debian's libjpeg-turbo and Pillow's bundled one differ at {n} values (max {mx}); "
              "the canvas and patches were checked from dskit's decode")
    print(f"check_pillow: {cases - bad} of {cases} cases identical to Pillow")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
