"""Shared by the server tests: the tiny model (made once per build tree), a `dskit serve` on a free port
that is always stopped (SIGTERM, then SIGKILL) even when a test fails, plain-HTTP helpers and a small
Prometheus text parser. Standard library only (the openai client is used by the tests themselves)."""
import ctypes
import fcntl
import http.client
import json
import os
import shlex
import re
import selectors
import signal
import socket
import subprocess
import tempfile
import time

BUILD = os.environ.get("DSKIT_BINARY_DIR", "build")
DSKIT = os.path.join(BUILD, "dskit")
_MODEL = os.path.join(BUILD, "tests", "server", "tiny-model")


def _preset_model(preset, path):
    """A synthetic checkpoint of a mkmodel preset (seed 1), written once per build tree; a lock keeps
    concurrent test programs from writing it twice."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(path, "done")):
            subprocess.run([DSKIT, "mkmodel", "--preset", preset, "--seed", "1", "--out", path, "--force"],
                           check=True, stdout=subprocess.DEVNULL)
            open(os.path.join(path, "done"), "w").close()
    return path


def tiny_model():
    """The tiny synthetic checkpoint."""
    return _preset_model("tiny", _MODEL)


def tiny_vision_model():
    """The tiny-vision checkpoint (the tiny LM and the tiny tower)."""
    return _preset_model("tiny-vision", os.path.join(BUILD, "tests", "server", "tiny-vision-model"))


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies (a crash or a ctest timeout), so no
    server outlives its test."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`dskit serve` on the tiny model. args are extra options; port None: --port 0 and the port read from
    the ready line."""

    def __init__(self, *args, port=None, wait_ready=True, model=None):
        self.model = model or tiny_model()
        self.err = tempfile.TemporaryFile(mode="w+")
        # DSKIT_SERVE_ARGS: options every server of the tests gets, e.g. "--kit KIT" for the GPU backend
        extra = shlex.split(os.environ.get("DSKIT_SERVE_ARGS", ""))
        self.cmd = [DSKIT, "serve", "--model", self.model, "--port", str(port or 0)] + [str(a) for a in args] + extra
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                     preexec_fn=_die_with_parent)
        self.port = port
        self.ready_line = None
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        end = time.time() + timeout
        while time.time() < end:
            if not sel.select(timeout=max(0.0, end - time.time())):
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"ready on http://[^ ]*:(\d+):", line)
            if m:
                self.port = int(m.group(1))
                self.ready_line = line
                sel.close()
                return
        sel.close()
        self.stop()
        raise RuntimeError("dskit serve did not get ready: " + self.stderr())

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def url(self, path=""):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stop(self, timeout=30):
        """SIGTERM (a drain), SIGKILL if it does not end; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def close(self):
        """Stop it; a sanitizer report in its stderr (a build with DSKIT_SANITIZE) fails the test."""
        self.stop()
        err = self.stderr()
        self.err.close()
        if "Sanitizer" in err or "runtime error:" in err:
            raise AssertionError("dskit serve reported:\n" + err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def request(port, method, path, body=None, headers=None, timeout=600, raw=None):
    """One plain HTTP request; returns (status, headers dict (lowercase), body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, out


def post(port, path, body, **kw):
    st, hd, out = request(port, "POST", path, body, **kw)
    return st, json.loads(out) if out else None


def get(port, path, **kw):
    return request(port, "GET", path, **kw)


def sse_events(port, path, body, headers=None, timeout=600):
    """A streaming request; yields each data: payload (parsed JSON, or the string [DONE])."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    if r.status != 200:
        raise AssertionError("stream refused: %d %s" % (r.status, r.read()))
    try:
        for line in r:
            line = line.decode().rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            yield payload if payload == "[DONE]" else json.loads(payload)
    finally:
        c.close()


def parse_prometheus(text):
    """Prometheus text format 0.0.4: returns {name: {labels frozenset: value}} and {name: type}. Checks every
    line's syntax, that each sample belongs to a declared family, and the histogram rules (cumulative
    buckets, +Inf last and equal to _count)."""
    samples, types = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            assert parts[1] in ("HELP", "TYPE"), line
            if parts[1] == "TYPE":
                assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), line
                types[parts[2]] = parts[3]
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$', line)
        assert m, "bad sample line: %r" % line
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        pairs = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels)
        assert ",".join('%s="%s"' % p for p in pairs) == labels, "bad labels: %r" % line
        samples.setdefault(name, {})[frozenset(pairs)] = float(value)
    for name in samples:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or base in types, "sample %s has no TYPE" % name
    for name, t in types.items():
        if t != "histogram":
            continue
        buckets = sorted(((float(dict(k)["le"]), v) for k, v in samples[name + "_bucket"].items()))
        assert buckets[-1][0] == float("inf")
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), name
        assert buckets[-1][1] == samples[name + "_count"][frozenset()]
    return samples, types


def metric(port, name, **labels):
    st, _, body = get(port, "/metrics")
    assert st == 200
    samples, _ = parse_prometheus(body.decode())
    return samples.get(name, {}).get(frozenset(labels.items()), 0.0)


def wait_until(cond, timeout, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
