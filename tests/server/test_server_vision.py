"""Images through dskit serve (docs/vision.md, issue 17) on the tiny-vision model, CPU backend: image_url
parts as data URLs decoded, preprocessed and placed as spans; replies repeatable, four image requests at
once equal to each alone, an image turn followed by text turns, usage counting the span's positions, and
bad images of every kind refused with a 400 naming the part; a model without a tower refuses images."""
import base64
import json
import struct
import threading
import unittest
import zlib

from server_util import Server, post, tiny_vision_model

S = None


def setUpModule():
    global S
    S = Server("--draft", "off", "--served-model-name", "tiny-vision", "--parallel", "4",
               model=tiny_vision_model())


def tearDownModule():
    if S:
        S.close()


def png(w, h, seed, ihdr=None, cut=None):
    """An 8-bit RGB PNG of a seeded pattern (standard library only); ihdr overrides the header's size,
    cut truncates the file."""
    rows = []
    for y in range(h):
        rows.append(b"\x00" + bytes(((x * 7 + y * 3 + seed * 50 + c * 80) & 255) for x in range(w) for c in range(3)))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    hw = ihdr or (w, h)
    f = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", hw[0], hw[1], 8, 2, 0, 0, 0)) +
         chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    return f[:cut] if cut else f


def data_url(b, mime="image/png"):
    return "data:%s;base64,%s" % (mime, base64.b64encode(b).decode())


def image_chat(url, text="What is in this picture?", **kw):
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": text},
                                                       {"type": "image_url", "image_url": {"url": url}}]}],
            "max_tokens": 8, "temperature": 0.8, "seed": 11}
    body.update(kw)
    return body


def reply(body, port=None):
    st, b = post(port or S.port, "/v1/chat/completions", body)
    return st, b


class Images(unittest.TestCase):
    def test_repeatable_and_usage(self):
        url = data_url(png(40, 30, 1))
        st, a = reply(image_chat(url))
        self.assertEqual(st, 200, a)
        st, b = reply(image_chat(url))
        self.assertEqual(st, 200, b)
        self.assertEqual(a["choices"][0]["message"], b["choices"][0]["message"])
        text_only = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}]}],
                     "max_tokens": 8, "temperature": 0.8, "seed": 11}
        st, t = reply(text_only)
        self.assertEqual(st, 200, t)
        # the span: n_llm_h * (n_llm_w + 1) + 2 positions, at least 4 for any image
        self.assertGreaterEqual(a["usage"]["prompt_tokens"] - t["usage"]["prompt_tokens"], 4)
        # another image, another prompt: the reply's own tokens may differ, the span's size may not
        st, c = reply(image_chat(data_url(png(40, 30, 2))))
        self.assertEqual(st, 200, c)
        self.assertEqual(c["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"])

    def test_four_at_once_equal_alone(self):
        bodies = [image_chat(data_url(png(24 + 8 * i, 20 + 4 * i, 10 + i)), seed=i) for i in range(4)]
        alone = [reply(b) for b in bodies]
        for st, b in alone:
            self.assertEqual(st, 200, b)
        together = [None] * 4

        def run(i):
            together[i] = reply(bodies[i])
        th = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join(300)
        for i in range(4):
            self.assertEqual(together[i][0], 200, together[i][1])
            self.assertEqual(together[i][1]["choices"][0]["message"], alone[i][1]["choices"][0]["message"])
            for k in ("prompt_tokens", "completion_tokens"):  # cached_tokens depends on what ran before
                self.assertEqual(together[i][1]["usage"][k], alone[i][1]["usage"][k])

    def test_image_then_text_turns(self):
        first = image_chat(data_url(png(32, 32, 5)))
        st, a = reply(first)
        self.assertEqual(st, 200, a)
        msgs = first["messages"] + [{"role": "assistant", "content": a["choices"][0]["message"]["content"] or "ok"},
                                    {"role": "user", "content": "And the colours?"}]
        st, b = reply({"messages": msgs, "max_tokens": 6, "temperature": 0})
        self.assertEqual(st, 200, b)
        msgs += [{"role": "assistant", "content": b["choices"][0]["message"]["content"] or "ok"},
                 {"role": "user", "content": "Thanks."}]
        st, c = reply({"messages": msgs, "max_tokens": 6, "temperature": 0})
        self.assertEqual(st, 200, c)
        self.assertGreater(c["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"])

    def test_bad_images_refused(self):
        good = png(16, 16, 3)
        cases = {
            "truncated": data_url(good, "image/png")[:60],
            "cut file": data_url(png(16, 16, 3, cut=40)),
            "not an image": data_url(b"hello, world", "text/plain"),
            "bad base64": "data:image/png;base64,@@@@",
            "http url": "https://example.com/cat.png",
            "file path": "/etc/passwd",
            "decompression bomb": data_url(png(16, 16, 3, ihdr=(60000, 60000))),
            "zero size": data_url(png(16, 16, 3, ihdr=(0, 16))),
        }
        for name, url in cases.items():
            with self.subTest(name):
                st, b = reply(image_chat(url))
                self.assertEqual(st, 400, (name, b))
                self.assertIn("messages[0].content[1]", b["error"]["message"], name)
        # the server goes on
        st, b = reply(image_chat(data_url(good)))
        self.assertEqual(st, 200, b)

    def test_model_without_tower_refuses(self):
        with Server("--draft", "off") as text_only:
            st, b = reply(image_chat(data_url(png(16, 16, 1))), port=text_only.port)
            self.assertEqual(st, 400, b)
            self.assertIn("no vision tower", b["error"]["message"])
            self.assertIn("messages[0].content[1]", b["error"]["message"])


if __name__ == "__main__":
    unittest.main()
