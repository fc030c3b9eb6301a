"""Exactness through the server: a greedy or seeded request gives the tokens `dskit run` gives for the same
prompt ids, and 16 requests sent at once (a burst, and staggered so they join running rounds and long
prompts arrive in chunks between decode rounds) each get the reply they get alone: the same tokens, text
and log-probabilities, with drafting off and on."""
import subprocess
import threading
import time
import unittest

from server_util import DSKIT, Server, metric, post

MAX_TOKENS = 8


def requests16():
    """16 different requests: chat with thinking on and off, completions from text and from ids, greedy and
    seeded sampling, logprobs, a long prompt that takes several prefill chunks, stop strings."""
    out = []
    for i in range(16):
        sampled = i % 3 == 1
        params = {"max_tokens": MAX_TOKENS + (i % 4), "temperature": 0.8 if sampled else 0,
                  "return_token_ids": True}
        if sampled:
            params.update(seed=1000 + i, top_p=0.9, top_k=40 if i % 2 else 0)
        if i % 4 == 0:
            params.update(logprobs=True, top_logprobs=2)
        if i % 5 == 3:
            params.update(stop=["e", "ab"])
        if i % 2 == 0:
            content = "Question %d: %s" % (i, "tell me more " * (30 if i == 4 else 1))
            body = dict(params, messages=[{"role": "user", "content": content}],
                        chat_template_kwargs={"thinking": i % 4 == 2})
            out.append(("/v1/chat/completions", body))
        else:
            if "logprobs" in params:
                params["logprobs"] = 2
                del params["top_logprobs"]
            prompt = list(range(1000 + 37 * i, 1000 + 37 * i + 5 + i)) if i % 4 == 1 else "Once upon a time %d" % i
            out.append(("/v1/completions", dict(params, prompt=prompt)))
    return out


def essence(reply):
    """What must be equal: tokens, text, log-probabilities, finish reason, usage."""
    c = reply["choices"][0]
    text = c.get("text") if "text" in c else (c["message"].get("content"), c["message"].get("reasoning_content"))
    return (c["token_ids"], text, c["logprobs"], c["finish_reason"], reply["usage"]["completion_tokens"])


def run_all(port, reqs, stagger=0.0):
    results = [None] * len(reqs)
    start = threading.Barrier(len(reqs))

    def one(i):
        start.wait()
        time.sleep(i * stagger)
        st, body = post(port, reqs[i][0], reqs[i][1])
        results[i] = (st, body)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for st, body in results:
        assert st == 200, body
    return [essence(b) for _, b in results]


class Exact(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.reqs = requests16()
        # a small prefill chunk: the long prompt arrives over several rounds, between other streams' decodes
        cls.plain = Server("--draft", "off", "--parallel", "16", "--prefill-chunk", "16")
        cls.solo = []
        for path, body in cls.reqs:
            st, reply = post(cls.plain.port, path, body)
            assert st == 200, reply
            cls.solo.append(essence(reply))

    @classmethod
    def tearDownClass(cls):
        cls.plain.close()

    def test_same_as_dskit_run(self):
        st, tk = post(self.plain.port, "/tokenize", {"messages": [{"role": "user", "content": "Hello! Who are you?"}]})
        ids = tk["tokens"]
        for sampling, run_args in (({"temperature": 0}, []),
                                   ({"temperature": 0.8, "seed": 5}, ["--temperature", "0.8", "--seed", "5"])):
            st, reply = post(self.plain.port, "/v1/completions",
                             dict(sampling, prompt=ids, max_tokens=12, return_token_ids=True))
            for draft in ([], ["--draft"]):
                p = subprocess.run([DSKIT, "run", "--backend", "cpu", "--model", self.plain.model, "--prompt-ids",
                                    " ".join(map(str, ids)), "--max-tokens", "12", "--print-ids"] + run_args + draft,
                                   capture_output=True, text=True, check=True, timeout=120)
                self.assertEqual([int(x) for x in p.stdout.split()], reply["choices"][0]["token_ids"])

    def test_concurrent_equals_solo_no_draft(self):
        rounds, rows = (metric(self.plain.port, n) for n in ("dskit_scheduler_rounds_total", "dskit_scheduler_rows_total"))
        self.assertEqual(run_all(self.plain.port, self.reqs), self.solo)
        # the burst did run together: many sequences' rows per step
        rounds2, rows2 = (metric(self.plain.port, n) for n in ("dskit_scheduler_rounds_total", "dskit_scheduler_rows_total"))
        self.assertGreater((rows2 - rows) / (rounds2 - rounds), 4)
        self.assertEqual(run_all(self.plain.port, self.reqs, stagger=0.15), self.solo)

    def test_concurrent_equals_solo_drafting(self):
        with Server("--draft", "on", "--parallel", "16", "--prefill-chunk", "16") as s:
            for i in (0, 1, 4, 7):  # alone with drafting == alone without (exact verification)
                st, reply = post(s.port, *self.reqs[i])
                self.assertEqual(essence(reply), self.solo[i])
            self.assertEqual(run_all(s.port, self.reqs), self.solo)
            self.assertEqual(run_all(s.port, self.reqs, stagger=0.3), self.solo)


if __name__ == "__main__":
    unittest.main()
