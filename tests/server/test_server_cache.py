"""The prompt cache (docs/serving.md "Prompt cache") on the CPU backend: a reply that reuses a cached prefix
is the reply of the same request on a server with the cache off, bit for bit (tokens, text, log-probabilities;
greedy and seeded, drafting off and on), with usage.prompt_tokens_details.cached_tokens saying how much was
reused: a two-turn chat, a completion extending the previous one's ids, the same request again (a roll back);
images with the same text and ids share nothing of their spans (the key decides, not the ids);
idle sequences are evicted rather than any request waiting or failing for a sequence or pool room; and
--prompt-cache 0 reuses nothing."""
import base64
import concurrent.futures
import struct
import subprocess
import unittest
import zlib

from server_util import DSKIT, Server, metric, post, sse_events, tiny_vision_model, wait_until

CACHE = PLAIN = DRAFT = None


def setUpModule():
    global CACHE, PLAIN, DRAFT
    CACHE = Server("--draft", "off", "--parallel", "4")  # the default cache: 2 sequences
    PLAIN = Server("--draft", "off", "--parallel", "4", "--prompt-cache", "0")
    DRAFT = Server("--draft", "on", "--parallel", "4", "--prompt-cache", "4")


def tearDownModule():
    for s in (CACHE, PLAIN, DRAFT):
        if s:
            s.close()


def ok(port, path, body):
    st, b = post(port, path, body)
    assert st == 200, (st, b)
    return b


def essence(reply):
    """What must be equal with and without reuse: tokens, text, log-probabilities, finish reason, counts."""
    c = reply["choices"][0]
    text = c.get("text") if "text" in c else (c["message"].get("content"), c["message"].get("reasoning_content"))
    u = reply["usage"]
    return (c["token_ids"], text, c["logprobs"], c["finish_reason"], u["prompt_tokens"], u["completion_tokens"])


def gauge_is(srv, name, value):
    """Gauges are set at the end of the scheduler's round, which may come just after a reply."""
    return wait_until(lambda: metric(srv.port, name) == value, 5)


def cached(reply):
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def sampled(seed, **kw):
    """Seeded sampling with log-probabilities (seed None: greedy)."""
    p = {"return_token_ids": True, "ignore_eos": True}
    if seed is None:
        p.update(temperature=0)
    else:
        p.update(temperature=0.9, top_p=0.95, seed=seed)
    p.update(kw)
    return p


class Reuse(unittest.TestCase):
    def test_two_turn_chat(self):
        """Turn 2 carries turn 1 and its reply: on the cache server it reuses turn 1's sequence (rolled back
        to where the history's rendering of the reply departs from what was generated) and replies exactly
        as a server without the cache does; thinking on and off, greedy and seeded."""
        for thinking in (False, True):
            for seed in (None, 7):
                msgs = [{"role": "user", "content": "Turn one %s %s: what is a prompt cache?" % (thinking, seed)}]
                first = dict(sampled(seed, max_tokens=4, logprobs=True, top_logprobs=2), messages=msgs,
                             chat_template_kwargs={"thinking": thinking})
                a = ok(CACHE.port, "/v1/chat/completions", first)
                self.assertEqual(cached(a), 0)
                self.assertEqual(essence(a), essence(ok(PLAIN.port, "/v1/chat/completions", first)))
                m = a["choices"][0]["message"]
                msgs = msgs + [{"role": "assistant", "content": m["content"] or "ok",
                                "reasoning_content": m.get("reasoning_content")},
                               {"role": "user", "content": "And turn two?"}]
                second = dict(first, messages=msgs, max_tokens=6)
                b = ok(CACHE.port, "/v1/chat/completions", second)
                p = ok(PLAIN.port, "/v1/chat/completions", second)
                self.assertEqual(essence(b), essence(p), "thinking %s seed %s" % (thinking, seed))
                self.assertGreater(cached(b), 0)
                self.assertLess(cached(b), b["usage"]["prompt_tokens"])
                self.assertEqual(cached(p), 0)

    def test_extend_and_repeat(self):
        """A completion whose ids are the previous prompt, its reply and more extends the cached sequence:
        exactly prompt + reply - 1 positions reused (the last drawn token never ran); the same request
        again rolls back to one short of its prompt. Drafting on too (its verify windows run past the
        committed length; the drafter follows the roll back)."""
        for srv, seed in ((CACHE, None), (CACHE, 3), (DRAFT, None), (DRAFT, 5)):
            p1 = [2000 + 17 * i + (seed or 0) + srv.port % 7 for i in range(30)]
            body1 = dict(sampled(seed, max_tokens=5, logprobs=2), prompt=p1)
            a = ok(srv.port, "/v1/completions", body1)
            self.assertEqual(essence(a), essence(ok(PLAIN.port, "/v1/completions", body1)))
            reply = a["choices"][0]["token_ids"]
            p2 = p1 + reply + [3000 + i for i in range(12)]
            body2 = dict(body1, prompt=p2, max_tokens=7)
            b = ok(srv.port, "/v1/completions", body2)
            want = ok(PLAIN.port, "/v1/completions", body2)
            self.assertEqual(essence(b), essence(want))
            self.assertEqual(cached(b), len(p1) + len(reply) - 1)
            again = ok(srv.port, "/v1/completions", body2)
            self.assertEqual(essence(again), essence(want))
            self.assertEqual(cached(again), len(p2) - 1)

    def test_stream_usage(self):
        body = dict(sampled(11, max_tokens=3), prompt=[4000 + i for i in range(20)])
        ok(CACHE.port, "/v1/completions", body)
        events = list(sse_events(CACHE.port, "/v1/completions",
                                 dict(body, stream=True, stream_options={"include_usage": True})))
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(events[-2]["usage"]["prompt_tokens_details"]["cached_tokens"], 19)

    def test_metrics(self):
        h0, r0 = metric(CACHE.port, "dskit_prompt_cache_hits_total"), metric(CACHE.port, "dskit_prompt_tokens_reused_total")
        m0 = metric(CACHE.port, "dskit_prompt_cache_misses_total")
        body = dict(sampled(None, max_tokens=2), prompt=[5000 + i for i in range(25)])
        ok(CACHE.port, "/v1/completions", body)
        b = ok(CACHE.port, "/v1/completions", body)
        self.assertEqual(metric(CACHE.port, "dskit_prompt_cache_hits_total"), h0 + 1)
        self.assertEqual(metric(CACHE.port, "dskit_prompt_cache_misses_total"), m0 + 1)
        self.assertEqual(metric(CACHE.port, "dskit_prompt_tokens_reused_total"), r0 + cached(b))
        self.assertEqual(cached(b), 24)
        self.assertTrue(gauge_is(CACHE, "dskit_prompt_cache_sequences", 2))  # --parallel 4: 2 kept, the bound


class CacheOff(unittest.TestCase):
    def test_off(self):
        body = dict(sampled(None, max_tokens=3), prompt=[6000 + i for i in range(20)])
        for _ in range(2):
            self.assertEqual(cached(ok(PLAIN.port, "/v1/completions", body)), 0)
        self.assertEqual(metric(PLAIN.port, "dskit_prompt_cache_hits_total"), 0)
        self.assertTrue(gauge_is(PLAIN, "dskit_sequences_open", 0))
        self.assertEqual(metric(PLAIN.port, "dskit_prompt_cache_sequences"), 0)
        self.assertIn("prompt cache 0", PLAIN.ready_line)

    def test_bound(self):
        """The cache keeps at most --parallel sequences: more is refused at start, naming both."""
        p = subprocess.run([DSKIT, "serve", "--model", PLAIN.model, "--parallel", "4", "--prompt-cache", "5"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--prompt-cache 5: the cache keeps at most --parallel (4) sequences", p.stderr)
        self.assertIn("prompt cache 2", CACHE.ready_line)  # the default: --parallel / 2


class Pressure(unittest.TestCase):
    def test_sequences(self):
        """Every sequence idle in the cache (--prompt-cache = --parallel): six new requests at once, none of
        which can reuse anything, all run (four cached sequences evicted), none waits past the queue timeout
        or fails; each reply is its reply on the server without the cache."""
        with Server("--draft", "off", "--parallel", "4", "--prompt-cache", "4", "--queue-timeout", "60") as s:
            for i in range(4):
                ok(s.port, "/v1/completions", dict(sampled(i, max_tokens=3), prompt=[7000 + 50 * i + k for k in range(10)]))
            self.assertTrue(gauge_is(s, "dskit_prompt_cache_sequences", 4))
            self.assertEqual(metric(s.port, "dskit_sequences_open"), 4)
            bodies = [dict(sampled(i, max_tokens=4), prompt=[9000 + 40 * i + k for k in range(12)]) for i in range(6)]
            with concurrent.futures.ThreadPoolExecutor(6) as ex:
                got = list(ex.map(lambda b: post(s.port, "/v1/completions", b), bodies))
            for (st, b), body in zip(got, bodies):
                self.assertEqual(st, 200, b)
                self.assertEqual(cached(b), 0)
                self.assertEqual(essence(b), essence(ok(PLAIN.port, "/v1/completions", body)))
            self.assertGreaterEqual(metric(s.port, "dskit_prompt_cache_evictions_total"), 4)
            self.assertEqual(metric(s.port, "dskit_generations_finished_total", reason="error"), 0)

    def test_pool(self):
        """A bounded pool (below parallel x context: each sequence reserves prompt + max_tokens + 1): two
        cached sequences hold 28 of its 40 positions; a request for 13 evicts the least recent one only. A
        request whose prompt a cached sequence holds reuses it when that sequence's reservation covers it,
        and not when it asks for more positions than that reservation has."""
        def comp(prompt, max_tokens, seed=None):
            body = dict(sampled(seed, max_tokens=max_tokens), prompt=prompt)
            b = ok(s.port, "/v1/completions", body)
            self.assertEqual(essence(b), essence(ok(PLAIN.port, "/v1/completions", body)))
            return b
        pa, pb, pc = [7100 + k for k in range(10)], [7200 + k for k in range(10)], [7300 + k for k in range(6)]
        with Server("--draft", "off", "--parallel", "2", "--prompt-cache", "2", "--context", "32", "--pool", "40") as s:
            comp(pa, 3)
            comp(pb, 3, seed=2)
            self.assertTrue(gauge_is(s, "dskit_prompt_cache_sequences", 2))
            self.assertEqual(metric(s.port, "dskit_pool_positions_used"), 28)
            self.assertEqual(cached(comp(pc, 6)), 0)
            self.assertEqual(metric(s.port, "dskit_prompt_cache_evictions_total"), 1)  # a's, the least recent
            self.assertTrue(gauge_is(s, "dskit_pool_positions_used", 14 + 13))
            self.assertEqual(metric(s.port, "dskit_prompt_cache_positions"), 14 + 13)
            self.assertEqual(cached(comp(pb, 3, seed=2)), len(pb) - 1)  # b's sequence: 14 positions, enough
            self.assertEqual(cached(comp(pb, 8, seed=2)), 0)  # 19 positions: b's sequence cannot hold them
            self.assertEqual(metric(s.port, "dskit_generations_finished_total", reason="error"), 0)


def png(w, h, seed):
    """An 8-bit RGB PNG of a seeded pattern (standard library only)."""
    rows = [b"\x00" + bytes(((x * 5 + y * 11 + seed * 70 + c * 60) & 255) for x in range(w) for c in range(3))
            for y in range(h)]

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cache = Server("--draft", "off", "--parallel", "2", "--prompt-cache", "2", "--served-model-name",
                           "tiny-vision", model=tiny_vision_model())
        cls.plain = Server("--draft", "off", "--parallel", "2", "--served-model-name", "tiny-vision",
                           "--prompt-cache", "0", model=tiny_vision_model())

    @classmethod
    def tearDownClass(cls):
        cls.cache.close()
        cls.plain.close()

    def test_keys_decide(self):
        """Images of one size have the same span and the same placeholder ids: only the key tells them apart.
        A second image with the same text reuses nothing of the first one's span; the same image again
        reuses all but the last prompt position; a text turn after it extends across its span; the same
        turn with a third image (ids identical to that turn's) reuses nothing of the span. Every reply
        equals its reply without the cache. (With the tiny model's rollback window of 8 positions and
        spans of at least 14, a prefix cut at a span's start is too far back to roll back to, so "nothing
        of the span" is cached_tokens 0 here; the cut itself is test_server_units' test_prompt_cache_prefix.)"""
        def chat(seed, history=()):
            url = "data:image/png;base64," + base64.b64encode(png(40, 28, seed)).decode()
            msgs = [{"role": "user", "content": [{"type": "text", "text": "Compare these."},
                                                 {"type": "image_url", "image_url": {"url": url}}]}]
            return {"messages": msgs + list(history), "max_tokens": 4, "temperature": 0.8, "seed": 3,
                    "return_token_ids": True, "chat_template_kwargs": {"thinking": False}}

        def both(body):
            got = ok(self.cache.port, "/v1/chat/completions", body)
            self.assertEqual(essence(got), essence(ok(self.plain.port, "/v1/chat/completions", body)))
            return got
        ra = both(chat(1))
        self.assertEqual(cached(ra), 0)
        ids = ra["prompt_token_ids"]
        img = 129264  # image_token_id (vision.md §1.3)
        start, span = ids.index(img), ids.count(img)
        self.assertGreaterEqual(span, 4)
        rb = both(chat(2))
        self.assertEqual(rb["prompt_token_ids"], ids)  # the same ids: only the key differs
        self.assertLessEqual(cached(rb), start)
        self.assertNotEqual(essence(ra)[0], essence(rb)[0])  # and the image does change the reply
        ra2 = both(chat(1))
        self.assertEqual(cached(ra2), len(ids) - 1)
        history = [{"role": "assistant", "content": ra2["choices"][0]["message"]["content"] or "ok"},
                   {"role": "user", "content": "Say more."}]
        rt = both(chat(1, history))
        self.assertGreater(cached(rt), start + span)  # the span inside the prefix is the cached sequence's own
        rc = both(chat(3, history))
        self.assertEqual(rc["prompt_token_ids"], rt["prompt_token_ids"])
        self.assertLessEqual(cached(rc), start)


if __name__ == "__main__":
    unittest.main()
