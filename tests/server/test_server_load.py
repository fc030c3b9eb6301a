"""A bounded load: 200 requests from 32 clients at once (chat and completions, streaming and not, the openai
client and plain HTTP) against 8 sequences and a bounded queue. Nothing is lost, nothing fails, every
reply equals the reply its request gets alone, and the server ends with every slot and position free."""
import random
import threading
import unittest

import openai

from server_util import Server, metric, post, sse_events, wait_until

CLIENTS, REQUESTS = 32, 200


def make(i):
    kind = i % 4
    if kind == 0:
        return ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi %d" % (i % 5)}],
                                          "max_tokens": 3, "temperature": 0, "chat_template_kwargs": {"thinking": False}})
    if kind == 1:
        return ("/v1/completions", {"prompt": [100 + i % 7, 200, 300], "max_tokens": 3, "temperature": 0})
    if kind == 2:
        return ("/v1/completions", {"prompt": "load %d" % (i % 3), "max_tokens": 2, "temperature": 0.7,
                                    "seed": i % 3})
    return ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x%d" % (i % 2)}], "max_tokens": 2,
                                      "temperature": 0, "chat_template_kwargs": {"thinking": True}})


def text_of(reply):
    c = reply["choices"][0]
    return c["text"] if "text" in c else (c["message"].get("content") or "") + "|" + \
        (c["message"].get("reasoning_content") or "")


def streamed(port, path, body):
    text, reasoning = "", ""
    for ev in sse_events(port, path, dict(body, stream=True)):
        if ev == "[DONE]":
            break
        c = ev["choices"][0]
        if "text" in c:
            text += c["text"]
        else:
            text += c["delta"].get("content") or ""
            reasoning += c["delta"].get("reasoning_content") or ""
    return text if path == "/v1/completions" else text + "|" + reasoning


class Load(unittest.TestCase):
    def test_load(self):
        with Server("--draft", "off", "--parallel", "8", "--queue", "64") as s:
            reqs = [make(i) for i in range(REQUESTS)]
            want = {}
            for path, body in reqs:
                key = (path, repr(body))
                if key not in want:
                    st, reply = post(s.port, path, body)
                    self.assertEqual(st, 200, reply)
                    want[key] = text_of(reply)
            oa = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="x", max_retries=0, timeout=300)
            got, errors = [None] * REQUESTS, []
            lock = threading.Lock()
            todo = list(range(REQUESTS))
            random.Random(1).shuffle(todo)

            def client():
                while True:
                    with lock:
                        if not todo:
                            return
                        i = todo.pop()
                    path, body = reqs[i]
                    try:
                        if i % 3 == 0:
                            got[i] = streamed(s.port, path, body)
                        elif i % 3 == 1 and path == "/v1/completions":
                            extra = {k: v for k, v in body.items() if k not in ("prompt", "max_tokens")}
                            r = oa.completions.create(model="tiny-model", prompt=body["prompt"],
                                                      max_tokens=body["max_tokens"], extra_body=extra)
                            got[i] = r.choices[0].text
                        else:
                            st, reply = post(s.port, path, body)
                            if st != 200:
                                raise AssertionError("%d %s" % (st, reply))
                            got[i] = text_of(reply)
                    except Exception as e:  # collected: every failure is reported, none is lost
                        with lock:
                            errors.append((i, repr(e)))
            threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            self.assertEqual(errors, [])
            for i, (path, body) in enumerate(reqs):
                self.assertEqual(got[i], want[(path, repr(body))], "request %d" % i)
            for name in ("dskit_requests_running", "dskit_requests_queued"):  # gauges: set at the end of a round
                self.assertTrue(wait_until(lambda: metric(s.port, name) == 0, 5), name)
            # what stays open is the prompt cache's (at most --parallel / 2 sequences), nothing else
            self.assertLessEqual(metric(s.port, "dskit_prompt_cache_sequences"), 4)
            self.assertEqual(metric(s.port, "dskit_sequences_open"), metric(s.port, "dskit_prompt_cache_sequences"))
            self.assertEqual(metric(s.port, "dskit_pool_positions_used"), metric(s.port, "dskit_prompt_cache_positions"))
            self.assertGreater(metric(s.port, "dskit_prompt_cache_hits_total"), 0)
            done = sum(metric(s.port, "dskit_requests_total", route=r, status="200")
                       for r in ("/v1/chat/completions", "/v1/completions"))
            self.assertEqual(done, REQUESTS + len(want))


if __name__ == "__main__":
    unittest.main()
