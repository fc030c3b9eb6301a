"""dskit serve end to end on the tiny model (CPU backend): the routes through the official openai client
and plain HTTP, chat (thinking on/off, tools, logprobs, usage, streaming), errors, keys, metrics,
disconnects, drain, and clients that misbehave."""
import json
import os
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest

import openai

from server_util import (Server, get, metric, parse_prometheus, post, request, sse_events, tiny_model,
                         wait_until, DSKIT, free_port)

S = None  # the shared server: drafting off (fast), a small idle timeout for the bad-client tests
MODEL_NAME = "tiny"


def setUpModule():
    global S
    S = Server("--draft", "off", "--served-model-name", MODEL_NAME, "--timeout", "2", "--max-body", "65536",
               "--parallel", "4", "--send-buffer", "4096")


def tearDownModule():
    if S:
        S.close()


def client(port=None, key="none"):
    return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % (port or S.port), api_key=key, max_retries=0,
                         timeout=120)


def dechunk(b):
    """The payload of an HTTP/1.1 chunked body."""
    out = b""
    while b:
        size, b = b.split(b"\r\n", 1)
        n = int(size, 16)
        if n == 0:
            break
        out += b[:n]
        b = b[n + 2:]
    return out


def chat_body(content="Hello! Who are you?", **kw):
    b = {"messages": [{"role": "user", "content": content}], "max_tokens": 6, "temperature": 0}
    b.update(kw)
    return b


class OpenAIClient(unittest.TestCase):
    def test_models(self):
        models = client().models.list()
        self.assertEqual([m.id for m in models.data], [MODEL_NAME])

    def test_chat_thinking_default_on(self):
        r = client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=6, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].finish_reason, "length")
        m = r.choices[0].message
        self.assertEqual(m.role, "assistant")
        # random weights never write </think>: everything is reasoning
        self.assertTrue(m.model_extra.get("reasoning_content"))
        self.assertEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 6)
        # the prompt ends with <think>
        st, tk = post(S.port, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})
        self.assertEqual(tk["count"], r.usage.prompt_tokens)
        st, dt = post(S.port, "/detokenize", {"tokens": tk["tokens"][-2:]})
        self.assertEqual(dt["prompt"], "<｜Assistant｜><think>")

    def test_chat_thinking_off(self):
        r = client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=6, temperature=0,
                                             extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        m = r.choices[0].message
        self.assertTrue(m.content)
        self.assertIsNone(m.model_extra.get("reasoning_content"))
        st, tk = post(S.port, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}],
                                            "chat_template_kwargs": {"enable_thinking": False}})
        st, dt = post(S.port, "/detokenize", {"tokens": tk["tokens"][-2:]})
        self.assertEqual(dt["prompt"], "<｜Assistant｜></think>")

    def test_reasoning_effort(self):
        st, a = post(S.port, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "max"})
        st, b = post(S.port, "/detokenize", {"tokens": a["tokens"]})
        self.assertIn("Reasoning Effort: 100", b["prompt"])
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                             reasoning_effort="medium", max_tokens=2)
        self.assertIn("reasoning_effort", str(e.exception))

    def test_chat_stream_with_usage(self):
        chunks = list(client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                                       max_tokens=5, temperature=0, stream=True,
                                                       stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                            for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finish, ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 5)
        # the stream says what the whole reply says
        whole = client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=5, temperature=0)
        self.assertEqual(reasoning, whole.choices[0].message.model_extra["reasoning_content"])

    def test_logprobs(self):
        r = client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs.content
        self.assertEqual(len(lp), 4)
        for e in lp:
            self.assertLessEqual(e.logprob, 0.0)
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertEqual(e.top_logprobs[0].token, e.token)  # greedy draws the most likely
            self.assertAlmostEqual(e.top_logprobs[0].logprob, e.logprob, places=5)
            self.assertGreaterEqual(e.top_logprobs[0].logprob, e.top_logprobs[2].logprob)
        c = client().completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=3, temperature=0, logprobs=2)
        self.assertEqual(len(c.choices[0].logprobs.tokens), 3)
        self.assertEqual(len(c.choices[0].logprobs.top_logprobs[0]), 2)

    def test_completions_text_and_ids(self):
        c = client()
        a = c.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=5, temperature=0,
                                 extra_body={"return_token_ids": True})
        self.assertEqual(a.object, "text_completion")
        ids = a.model_extra["prompt_token_ids"]
        self.assertEqual(ids[0], 0)  # BOS first for a text prompt
        b = c.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=5, temperature=0)
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        self.assertEqual(b.usage.prompt_tokens, len(ids))
        s = "".join(x.choices[0].text for x in c.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=5,
                                                                    temperature=0, stream=True))
        self.assertEqual(s, a.choices[0].text)

    def test_stop_strings(self):
        c = client()
        full = c.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=12, temperature=0).choices[0].text
        cut = full[3:6] if len(full) > 6 else full[-2:]
        r = c.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=12, temperature=0, stop=[cut])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, full[:full.index(cut)])
        s = "".join(x.choices[0].text for x in c.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=12,
                                                                    temperature=0, stop=cut, stream=True))
        self.assertEqual(s, full[:full.index(cut)])

    def test_seeded_sampling(self):
        c = client()
        kw = dict(model=MODEL_NAME, prompt="Hello", max_tokens=8, temperature=1.0, top_p=0.9)
        a = c.completions.create(seed=7, **kw).choices[0].text
        self.assertEqual(a, c.completions.create(seed=7, **kw).choices[0].text)
        self.assertNotEqual(a, c.completions.create(seed=8, **kw).choices[0].text)
        # without a seed, the one derived from the request id comes back and reproduces the reply
        for _ in range(4):
            st, hd, body = request(S.port, "POST", "/v1/completions", dict(kw, model=MODEL_NAME))
            seed = int(hd["x-dskit-seed"])
            self.assertLess(seed, 2 ** 53)
            again = c.completions.create(seed=seed, **kw).choices[0].text
            self.assertEqual(json.loads(body)["choices"][0]["text"], again)

    def test_tools_auto(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                   "parameters": {"type": "object", "properties": {
                                                       "city": {"type": "string"}}, "required": ["city"]}}}]
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        r = client().chat.completions.create(model=MODEL_NAME, messages=msgs, tools=tools, tool_choice="auto",
                                             max_tokens=4, temperature=0)
        self.assertIn(r.choices[0].finish_reason, ("length", "stop", "tool_calls"))
        st, tk = post(S.port, "/tokenize", {"messages": msgs, "tools": tools})
        self.assertEqual(tk["count"], r.usage.prompt_tokens)
        st, dt = post(S.port, "/detokenize", {"tokens": tk["tokens"]})
        self.assertIn("## Tools", dt["prompt"])
        self.assertIn('"get_weather"', dt["prompt"])
        # tool_choice none leaves the tools out of the prompt
        r2 = client().chat.completions.create(model=MODEL_NAME, messages=msgs, tools=tools, tool_choice="none",
                                              max_tokens=2, temperature=0)
        self.assertLess(r2.usage.prompt_tokens, r.usage.prompt_tokens)
        # a conversation that called the tool and got its result
        msgs2 = msgs + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 21 C"}]
        r3 = client().chat.completions.create(model=MODEL_NAME, messages=msgs2, tools=tools, max_tokens=2,
                                              temperature=0)
        self.assertGreater(r3.usage.prompt_tokens, r.usage.prompt_tokens)
        st, tk = post(S.port, "/tokenize", {"messages": msgs2, "tools": tools})
        st, dt = post(S.port, "/detokenize", {"tokens": tk["tokens"]})
        self.assertIn('<｜DSML｜ invoke name="get_weather">', dt["prompt"])
        self.assertIn("<tool_result>sunny, 21 C</tool_result>", dt["prompt"])
        # forced calls (constrained decoding) are tested in test_server_grammar.py; a bad one is refused
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model=MODEL_NAME, messages=msgs, tools=tools, max_tokens=2,
                                             tool_choice={"type": "function", "function": {"name": "absent"}})
        self.assertEqual(e.exception.body["param"], "tool_choice")
        self.assertIn("absent", e.exception.body["message"])


class PlainHTTP(unittest.TestCase):
    def test_health_and_ids(self):
        st, hd, body = get(S.port, "/health")
        self.assertEqual((st, json.loads(body)), (200, {"status": "ok"}))
        st, hd, body = request(S.port, "POST", "/v1/chat/completions", chat_body(max_tokens=1))
        self.assertEqual(st, 200)
        self.assertTrue(hd["x-request-id"].startswith("chatcmpl-"))
        self.assertEqual(json.loads(body)["id"], hd["x-request-id"])

    def test_stream_plain(self):
        ev = list(sse_events(S.port, "/v1/chat/completions",
                             chat_body(stream=True, max_tokens=3, chat_template_kwargs={"thinking": False})))
        self.assertEqual(ev[-1], "[DONE]")
        self.assertEqual(ev[-2]["choices"][0]["finish_reason"], "length")
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev[:-1])
        st, whole = post(S.port, "/v1/chat/completions", chat_body(max_tokens=3, chat_template_kwargs={"thinking": False}))
        self.assertEqual(text, whole["choices"][0]["message"]["content"])

    def assertError(self, st, body, status, param=None, code=None):
        self.assertEqual(st, status, body)
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        if param:
            self.assertEqual(body["error"]["param"], param, body)
            self.assertIn(param, body["error"]["message"])
        if code:
            self.assertEqual(body["error"]["code"], code)

    def test_errors(self):
        p = S.port
        st, hd, body = request(p, "POST", "/v1/chat/completions", raw=b'{"messages": [')
        self.assertError(st, json.loads(body), 400, code="invalid_json")
        st, hd, body = request(p, "POST", "/v1/chat/completions", raw=b'[1, 2]')
        self.assertError(st, json.loads(body), 400)
        cases = [({"temperature": "hot"}, "temperature"), ({"max_tokens": -1}, "max_tokens"),
                 ({"max_tokens": "9"}, "max_tokens"), ({"messages": "hi"}, "messages"), ({"n": 2}, "n"),
                 ({"top_p": 0}, "top_p"), ({"top_k": 5000}, "top_k"), ({"stop": [1, 2]}, "stop"),
                 ({"stream": "yes"}, "stream"), ({"response_format": {"type": "yaml"}}, "response_format"),
                 ({"guided_json": 5}, "guided_json"), ({"guided_grammar": "root ::= x"}, "guided_grammar"), ({"presence_penalty": 0.5}, "presence_penalty"),
                 ({"frequency_penalty": 1}, "frequency_penalty"), ({"logit_bias": {"5": 10}}, "logit_bias"),
                 ({"frobnicate": 1}, "frobnicate"), ({"top_logprobs": 3}, "top_logprobs"),
                 ({"stream_options": {"include_usage": True}}, "stream_options"),
                 ({"tool_choice": 5}, "tool_choice"), ({"seed": 1.5}, "seed")]
        for extra, param in cases:
            st, body = post(p, "/v1/chat/completions", chat_body(**extra))
            self.assertError(st, body, 400, param=param)
        st, body = post(p, "/v1/chat/completions", chat_body(model=MODEL_NAME))
        self.assertEqual(st, 200)
        st, body = post(p, "/v1/chat/completions", chat_body(model="gpt-4"))
        self.assertError(st, body, 404, param="model", code="model_not_found")
        st, body = post(p, "/v1/completions", {"prompt": ["a", "b"], "max_tokens": 1})
        self.assertError(st, body, 400, param="prompt")
        st, body = post(p, "/v1/completions", {"prompt": [1, 99999999], "max_tokens": 1})
        self.assertError(st, body, 400, param="prompt")
        st, body = post(p, "/v1/completions", {"prompt": "x", "echo": True})
        self.assertError(st, body, 400, param="echo")
        st, body = post(p, "/v1/chat/completions", chat_body(messages=[{"role": "wizard", "content": "x"}]))
        self.assertError(st, body, 400, param="messages")
        st, hd, body = get(p, "/v2/nothing")
        self.assertError(st, json.loads(body), 404)
        st, hd, body = get(p, "/v1/chat/completions")
        self.assertError(st, json.loads(body), 405)
        # the openai client sees them as its own exceptions
        with self.assertRaises(openai.BadRequestError):
            client().chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], n=2)

    def test_huge_body(self):
        big = {"messages": [{"role": "user", "content": "x" * 70000}]}
        st, hd, body = request(S.port, "POST", "/v1/chat/completions", big)
        self.assertError(st, json.loads(body), 413, code="request_too_large")
        # chunked upload (no Content-Length): refused once it passes the limit
        c = socket.create_connection(("127.0.0.1", S.port), timeout=10)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 16384
        try:
            for _ in range(8):
                c.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            c.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = c.recv(4096)
        c.close()
        self.assertIn(b" 413 ", reply.split(b"\r\n")[0])

    def test_invalid_utf8(self):
        raw = b'{"messages": [{"role": "user", "content": "bad \xff\xfe bytes"}], "max_tokens": 1}'
        st, hd, body = request(S.port, "POST", "/v1/chat/completions", raw=raw)
        self.assertError(st, json.loads(body), 400, code="invalid_json")
        raw = b'{"messages": [{"role": "user", "content": "lone \\udc00 surrogate"}], "max_tokens": 1}'
        st, hd, body = request(S.port, "POST", "/v1/chat/completions", raw=raw)
        self.assertEqual(st, 400)
        # bytes the tokenizer cannot decode to text come back as U+FFFD, never as invalid JSON
        st, body = post(S.port, "/detokenize", {"tokens": [3]})
        self.assertEqual(st, 200)

    def test_tokenize_detokenize(self):
        st, a = post(S.port, "/tokenize", {"prompt": "Hello world"})
        self.assertEqual(a["tokens"][0], 0)
        st, b = post(S.port, "/tokenize", {"prompt": "Hello world", "add_special_tokens": False})
        self.assertEqual(a["tokens"][1:], b["tokens"])
        st, c = post(S.port, "/detokenize", {"tokens": b["tokens"]})
        self.assertEqual(c["prompt"], "Hello world")
        st, d = post(S.port, "/detokenize", {"tokens": ["x"]})
        self.assertEqual(st, 400)

    def test_prompt_over_context(self):
        with Server("--draft", "off", "--context", "64") as s:
            st, body = post(s.port, "/v1/completions", {"prompt": list(range(100, 170)), "max_tokens": 4})
            self.assertError(st, body, 400, code="context_length_exceeded")
            # max_tokens past the context's end: the reply stops there with "length"
            st, body = post(s.port, "/v1/completions", {"prompt": list(range(100, 160)), "max_tokens": 50,
                                                        "temperature": 0, "ignore_eos": True})
            self.assertEqual(st, 200)
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertEqual(body["usage"]["completion_tokens"], 4)

    def test_pool_limit(self):
        with Server("--draft", "off", "--context", "256", "--pool", "64", "--parallel", "2") as s:
            st, body = post(s.port, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 100})
            self.assertError(st, body, 400, code="pool_exceeded")
            st, body = post(s.port, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 8, "temperature": 0})
            self.assertEqual(st, 200)
            self.assertEqual(metric(s.port, "dskit_pool_positions_total"), 64)

    def test_metrics(self):
        st, hd, body = get(S.port, "/metrics")
        self.assertEqual(st, 200)
        self.assertTrue(hd["content-type"].startswith("text/plain"))
        before, types = parse_prometheus(body.decode())
        post(S.port, "/v1/chat/completions", chat_body(max_tokens=3))
        post(S.port, "/v1/chat/completions", chat_body(n=3))
        after, _ = parse_prometheus(get(S.port, "/metrics")[2].decode())

        def val(samples, name, **labels):
            return samples.get(name, {}).get(frozenset(labels.items()), 0.0)
        route = "/v1/chat/completions"
        self.assertEqual(val(after, "dskit_requests_total", route=route, status="200"),
                         val(before, "dskit_requests_total", route=route, status="200") + 1)
        self.assertEqual(val(after, "dskit_requests_total", route=route, status="400"),
                         val(before, "dskit_requests_total", route=route, status="400") + 1)
        self.assertGreaterEqual(val(after, "dskit_generation_tokens_total") - val(before, "dskit_generation_tokens_total"), 3)
        self.assertGreater(val(after, "dskit_prompt_tokens_total"), val(before, "dskit_prompt_tokens_total"))
        self.assertEqual(val(after, "dskit_time_to_first_token_seconds_count"),
                         val(before, "dskit_time_to_first_token_seconds_count") + 1)
        self.assertEqual(val(after, "dskit_time_per_output_token_seconds_count"),
                         val(before, "dskit_time_per_output_token_seconds_count") + 2)
        for name in ("dskit_requests_running", "dskit_requests_queued", "dskit_pool_positions_used",
                     "dskit_draft_tokens_proposed_total", "dskit_draft_tokens_accepted_total"):
            self.assertIn(name, types)
        self.assertEqual(types["dskit_time_to_first_token_seconds"], "histogram")

    def test_engram_nvme(self):
        """--engram nvme:DIR: the same reply as host rows; an injected slow read is said on stderr and in
        /metrics; an injected I/O error fails that request only, with a message naming the file."""
        with tempfile.TemporaryDirectory() as tmp:
            pack = os.path.join(tmp, "pack")
            subprocess.run([DSKIT, "engram", "pack", "--model", tiny_model(), "--out", pack], check=True,
                           stdout=subprocess.DEVNULL)
            body = chat_body(max_tokens=8, temperature=0.8, seed=5)
            ref = post(S.port, "/v1/chat/completions", body)[1]["choices"][0]["message"]
            os.environ["DSKIT_ENGRAM_FAULT"] = "slow@3:120,eio@150"
            try:
                srv = Server("--draft", "off", "--served-model-name", MODEL_NAME, "--engram", "nvme:" + pack,
                             "--engram-cache-mb", "0")
            finally:
                del os.environ["DSKIT_ENGRAM_FAULT"]
            with srv:
                st, b1 = post(srv.port, "/v1/chat/completions", body)
                self.assertEqual(st, 200, b1)
                self.assertEqual(b1["choices"][0]["message"], ref)
                self.assertGreater(metric(srv.port, "dskit_engram_rows_total"), 0)
                self.assertGreater(metric(srv.port, "dskit_engram_reads_total"), 0)
                self.assertGreaterEqual(metric(srv.port, "dskit_engram_slow_reads_total"), 1)
                self.assertIn("slow read", srv.stderr())
                # read 150 fails (the first reply took about 100): a later request, on rows not cached
                # yet, meets it; it fails naming the pack, and the server goes on
                failed = None
                for i in range(40):
                    st, b2 = post(srv.port, "/v1/chat/completions", chat_body("Question %d: why?" % i, max_tokens=8))
                    if st != 200:
                        failed = (st, b2)
                        break
                self.assertIsNotNone(failed, "the injected I/O error was never met")
                self.assertEqual(failed[0], 500, failed[1])
                self.assertIn("Engram", failed[1]["error"]["message"])
                self.assertIn(pack, failed[1]["error"]["message"])
                self.assertGreaterEqual(metric(srv.port, "dskit_engram_read_errors_total"), 1)
                st, b3 = post(srv.port, "/v1/chat/completions", body)
                self.assertEqual(st, 200, b3)
                self.assertEqual(b3["choices"][0]["message"], ref)

    def test_disconnect_frees_the_slot(self):
        gen0 = metric(S.port, "dskit_generation_tokens_total")
        c = socket.create_connection(("127.0.0.1", S.port), timeout=30)
        body = json.dumps(chat_body(stream=True, max_tokens=400, ignore_eos=True)).encode()
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while got.count(b"data: ") < 3:
            got += c.recv(4096)
        self.assertEqual(metric(S.port, "dskit_requests_running"), 1)
        c.close()
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_requests_running") == 0, 5))
        # closed, not cached (a cancelled reply's sequence is not kept): only the prompt cache's stay open
        self.assertEqual(metric(S.port, "dskit_sequences_open"), metric(S.port, "dskit_prompt_cache_sequences"))
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_generations_finished_total",
                                                  reason="cancelled") >= 1, 5))
        self.assertLess(metric(S.port, "dskit_generation_tokens_total") - gen0, 400)
        # a non-streaming request whose client leaves while it runs is cancelled too
        c = socket.create_connection(("127.0.0.1", S.port), timeout=30)
        body = json.dumps(chat_body(max_tokens=400, ignore_eos=True)).encode()
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_requests_running") == 1, 10))
        c.close()
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_requests_running") == 0, 5))

    def test_half_request_times_out(self):
        c = socket.create_connection(("127.0.0.1", S.port), timeout=15)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess")
        t0 = time.time()
        # meanwhile the server answers others
        st, body = post(S.port, "/v1/chat/completions", chat_body(max_tokens=2))
        self.assertEqual(st, 200)
        try:
            while c.recv(4096):
                pass
        except ConnectionResetError:
            pass
        self.assertLess(time.time() - t0, 10)  # --timeout 2: closed, not held
        c.close()

    def test_stream_never_read(self):
        # tiny buffers both ends (the server's --send-buffer 4096) so the server's writes block soon; the
        # stream is never read
        gen0 = metric(S.port, "dskit_generation_tokens_total")
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        c.connect(("127.0.0.1", S.port))
        body = json.dumps(chat_body(stream=True, max_tokens=300, ignore_eos=True, logprobs=True,
                                    top_logprobs=20)).encode()
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_requests_running") == 1, 10))
        # other streams go on at full speed meanwhile
        t0 = time.time()
        ev = list(sse_events(S.port, "/v1/chat/completions", chat_body(stream=True, max_tokens=8)))
        self.assertEqual(ev[-1], "[DONE]")
        self.assertLess(time.time() - t0, 20)
        # its generation is held once SCHED_AHEAD (64) tokens wait for its writer, whatever the machine's
        # speed; the buffers (MHD's 16 KiB, both sockets') hold a few more chunks of about 1.5 KB (30 s:
        # a sanitizer build sharing two cores with other tests takes more than 10 to make those tokens)
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_streams_held") == 1, 30))
        # the unread stream is closed after the idle timeout (2 s) and its generation cancelled, its slot freed
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_requests_running") == 0, 30))
        self.assertEqual(metric(S.port, "dskit_streams_held"), 0)
        self.assertLess(metric(S.port, "dskit_generation_tokens_total") - gen0, 64 + 40 + 8)
        c.close()

    def test_stream_read_late(self):
        # a client that stops reading until its stream is held and then reads on gets every token, the same as a client that reads at once: the hold loses nothing and changes nothing
        body = chat_body(stream=True, max_tokens=200, ignore_eos=True, logprobs=True, top_logprobs=20,
                         temperature=1.0, seed=7)
        want = "".join(e["choices"][0]["delta"].get("content") or "" for e in
                       (x for x in sse_events(S.port, "/v1/chat/completions", body) if x != "[DONE]")
                       if e["choices"])
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        c.connect(("127.0.0.1", S.port))
        raw = json.dumps(body).encode()
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(raw), raw))
        # held (the reads resume well inside the 2 s idle timeout, which runs since the last hand-off)
        self.assertTrue(wait_until(lambda: metric(S.port, "dskit_streams_held") == 1, 10))
        got = b""
        c.settimeout(30)
        while not got.endswith(b"data: [DONE]\r\n\r\n") and not got.endswith(b"0\r\n\r\n"):
            b = c.recv(65536)
            if not b:
                break
            got += b
        c.close()
        # the chunked body's data lines, joined across chunk boundaries
        text = ""
        for line in dechunk(got.split(b"\r\n\r\n", 1)[1]).decode().split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                e = json.loads(line[6:])
                if e["choices"]:
                    text += e["choices"][0]["delta"].get("content") or ""
        self.assertIn(b"data: [DONE]", got)
        self.assertEqual(text, want)
        self.assertEqual(metric(S.port, "dskit_streams_held"), 0)


class Lifecycle(unittest.TestCase):
    def test_keys(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "keys")
        import hashlib
        with open(path, "w") as f:
            f.write("# two keys\nsecret-one\n\nsha256:%s\n" % hashlib.sha256(b"secret-two").hexdigest())
        os.chmod(path, 0o600)
        with Server("--draft", "off", "--api-key-file", path) as s:
            st, hd, body = get(s.port, "/v1/models")
            self.assertEqual(st, 401)
            self.assertEqual(json.loads(body)["error"]["type"], "authentication_error")
            st, hd, body = get(s.port, "/v1/models", headers={"Authorization": "Bearer wrong"})
            self.assertEqual(st, 401)
            for key in ("secret-one", "secret-two"):
                st, hd, body = get(s.port, "/v1/models", headers={"Authorization": "Bearer " + key})
                self.assertEqual(st, 200)
            self.assertEqual(get(s.port, "/health")[0], 200)
            self.assertEqual(get(s.port, "/metrics")[0], 401)
            with self.assertRaises(openai.AuthenticationError):
                client(s.port, key="wrong").models.list()
            r = client(s.port, key="secret-two").chat.completions.create(
                model=os.path.basename(s.model), messages=[{"role": "user", "content": "x"}], max_tokens=1)
            self.assertEqual(r.usage.completion_tokens, 1)
        # refused at start: readable by others, not a regular file, absent
        os.chmod(path, 0o644)
        for bad in (path, d, os.path.join(d, "absent")):
            p = subprocess.run([DSKIT, "serve", "--model", tiny_model(), "--port", "0", "--api-key-file", bad],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--api-key-file", p.stderr)

    def test_refusals_at_start(self):
        for args, what in ((["--backend", "gpu"], "needs a kit"), (["--backend", "tpu"], "not available"), (["--tp", "9"], "--tp: 9 is out of range"),
                           (["--bogus", "1"], "unknown option")):
            p = subprocess.run([DSKIT, "serve", "--model", tiny_model(), "--port", "0"] + args,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(what, p.stderr)

    def test_loading_then_ready(self):
        port = free_port()
        s = Server("--draft", "off", port=port, wait_ready=False)
        try:
            seen, refused = [], []
            def poll():
                try:
                    st, hd, body = get(port, "/health", timeout=2)
                    seen.append((st, json.loads(body)["status"]))
                    if st == 503 and not refused:  # a request during the load: refused, saying why
                        st2, b2 = post(port, "/v1/completions", {"prompt": "x", "max_tokens": 1})
                        refused.append((st2, b2["error"]["code"] if st2 != 200 else None))
                    return st == 200
                except OSError:
                    return False
            self.assertTrue(wait_until(poll, 60, step=0.01))
            s.wait_ready()
            self.assertIn((503, "loading"), seen)
            self.assertEqual(seen[-1], (200, "ok"))
            self.assertIn(refused[0], ((503, "loading"), (200, None)))
        finally:
            s.close()

    def test_drain(self):
        s = Server("--draft", "off")
        try:
            events = []
            t = threading.Thread(target=lambda: events.extend(sse_events(
                s.port, "/v1/chat/completions", chat_body(stream=True, max_tokens=40, ignore_eos=True))))
            t.start()
            self.assertTrue(wait_until(lambda: metric(s.port, "dskit_requests_running") == 1, 10))
            s.proc.send_signal(15)
            self.assertTrue(wait_until(lambda: get(s.port, "/health")[0] == 503, 5))
            self.assertEqual(json.loads(get(s.port, "/health")[2])["status"], "draining")
            st, body = post(s.port, "/v1/chat/completions", chat_body(max_tokens=1))
            self.assertEqual(st, 503)
            self.assertEqual(body["error"]["code"], "draining")
            t.join(60)
            self.assertEqual(events[-1], "[DONE]")
            self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")
            self.assertEqual(s.proc.wait(30), 0)
        finally:
            s.close()

    def test_second_signal_exits_at_once(self):
        s = Server("--draft", "off")
        try:
            threading.Thread(target=lambda: list(sse_events(
                s.port, "/v1/chat/completions", chat_body(stream=True, max_tokens=2000, ignore_eos=True))),
                daemon=True).start()
            self.assertTrue(wait_until(lambda: metric(s.port, "dskit_requests_running") == 1, 10))
            s.proc.send_signal(15)
            time.sleep(0.3)
            s.proc.send_signal(15)
            self.assertNotEqual(s.proc.wait(10), 0)
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
