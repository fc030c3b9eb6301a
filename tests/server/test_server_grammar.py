"""Structured output through dskit serve on the tiny model (random weights: the grammar does all the work).
Every reply is checked with validators that are not dskit's: Python's jsonschema (Draft 2020-12, formats
checked) for schemas and tool arguments, re.fullmatch for regexes. Drafting on gives the same replies as
drafting off, 12 constrained requests at once give what each gets alone, refusals name what they refuse
and come back fast. Two servers: drafting off (the reference) and on."""
import concurrent.futures
import json
import re
import socket
import time
import unittest

import jsonschema
import openai

from server_util import Server, metric, post, sse_events, wait_until

OFF = ON = None
MODEL = "tiny"


def setUpModule():
    global OFF, ON
    OFF = Server("--draft", "off", "--served-model-name", MODEL, "--parallel", "12")
    ON = Server("--draft", "on", "--served-model-name", MODEL, "--parallel", "4")


def tearDownModule():
    for s in (OFF, ON):
        if s:
            s.close()


SCHEMAS = {
    "nested": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                 "required": ["name", "age"]},
        "ok": {"type": "boolean"}}, "required": ["user"]},
    "array": {"type": "array", "items": {"type": "number", "minimum": -5, "maximum": 5}, "minItems": 1,
              "maxItems": 4},
    "enum": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                              "size": {"enum": [1, 2, 3, None]}}, "required": ["color", "size"]},
    "anyof": {"anyOf": [{"type": "string", "pattern": "^[a-z]{2,5}$"}, {"type": "integer"},
                        {"type": "object", "properties": {"k": {"const": "v"}}, "required": ["k"]}]},
    "ref_tree": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"},
    "formats": {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
                                                 "ip": {"type": "string", "format": "ipv4"}},
                "required": ["d", "ip"]},
    "objects": {"type": "array", "items": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "string", "maxLength": 4}}, "required": ["x", "y"],
        "additionalProperties": False}, "maxItems": 3},
    "tuple": {"type": "object", "properties": {
        "p": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "boolean"}],
              "items": False},
        "n": {"type": ["string", "null"], "maxLength": 5}}, "required": ["p", "n"]},
}

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "maxLength": 12},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object", "properties": {
        "hour": {"type": "integer", "minimum": 0, "maximum": 23}, "label": {"enum": ["wake", "nap"]}},
        "required": ["hour", "label"], "additionalProperties": False}}},
]


def validate(schema, text):
    value = json.loads(text)  # every reply parses...
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(value)  # ...and validates
    return value


def chat(extra, max_tokens=40, seed=1, thinking=False):
    b = {"model": MODEL, "messages": [{"role": "user", "content": "Answer in the format asked."}],
         "max_tokens": max_tokens, "seed": seed, "temperature": 1.0}
    if not thinking:
        b["chat_template_kwargs"] = {"enable_thinking": False}
    b.update(extra)
    return "/v1/chat/completions", b


def completion(extra, max_tokens=40, seed=1):
    b = {"model": MODEL, "prompt": "The answer:", "max_tokens": max_tokens, "seed": seed, "temperature": 1.0}
    b.update(extra)
    return "/v1/completions", b


def send(server, req):
    st, body = post(server.port, req[0], req[1])
    if st != 200:
        raise AssertionError("%s: %d %s" % (req[1], st, body))
    return body


def output(body):
    """What a reply says: its text, or its content and tool calls (their ids name the request: left out)."""
    c = body["choices"][0]
    if "text" in c:
        return c["text"]
    calls = [t["function"] for t in c["message"].get("tool_calls") or []]
    return c["message"]["content"], calls


def both(req):
    """The same request to the drafting-off and the drafting-on server at once."""
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        a, b = ex.submit(send, OFF, req), ex.submit(send, ON, req)
        return a.result(), b.result()


def schema_request(name, seed, max_tokens=40):
    # the chat route through response_format, the completions route through guided_json
    if seed % 2:
        return chat({"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "schema": SCHEMAS[name], "strict": True}}}, max_tokens, seed)
    return completion({"guided_json": SCHEMAS[name]}, max_tokens, seed)


def text_of(body):
    c = body["choices"][0]
    return c["text"] if "text" in c else c["message"]["content"]


class Schemas(unittest.TestCase):
    def test_schemas_validate_and_drafting_changes_nothing(self):
        drafted = ("nested", "anyof", "ref_tree", "objects")  # also through the drafting server: the same reply
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            on = {name: ex.submit(send, ON, schema_request(name, 1)) for name in drafted}
            for name in SCHEMAS:
                off = send(OFF, schema_request(name, 1))
                validate(SCHEMAS[name], text_of(off))
                self.assertEqual(off["choices"][0]["finish_reason"], "stop", (name, off))
                if name in on:
                    self.assertEqual(output(off), output(on[name].result()), name)
            for name in ("nested", "ref_tree", "objects"):  # a second seed, on the other route
                validate(SCHEMAS[name], text_of(send(OFF, schema_request(name, 2))))
        self.assertGreater(metric(ON.port, "dskit_grammar_masks_total"), 0)

    def test_json_object_and_thinking(self):
        body = send(OFF, chat({"response_format": {"type": "json_object"}}, 40, 3))
        self.assertIsInstance(json.loads(text_of(body)), dict)
        # thinking on: the reasoning is free text, the constraint starts after </think> (ended in time for
        # the budget), the content validates
        body = send(OFF, chat({"response_format": {"type": "json_object"}}, 60, 4, thinking=True))
        msg = body["choices"][0]["message"]
        self.assertTrue(msg.get("reasoning_content"), msg)
        self.assertIsInstance(json.loads(msg["content"]), dict)

    def test_regex_and_choice(self):
        regexes = [r"[a-z]{3,8}@(example|test)\.(com|org)", r"\d{3}-\d{4}( ext\. \d{1,3})?", r"(yes|no), because [a-z ]{5,20}"]
        for i, rx in enumerate(regexes):
            req = (chat if i % 2 else completion)({"guided_regex": rx}, 40, i)
            self.assertIsNotNone(re.fullmatch(rx, text_of(send(OFF, req))), rx)
        choices = ["positive", "negative", "neutral", "I do not know"]
        seen = set()
        for seed in range(4):
            t = text_of(send(OFF, completion({"guided_choice": choices}, 8, seed)))
            self.assertIn(t, choices)
            seen.add(t)
        # streamed: the same reply in deltas
        path, b = chat({"guided_choice": choices}, 8, 7)
        ev = list(sse_events(OFF.port, path, dict(b, stream=True)))
        streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev[:-1])
        self.assertEqual(streamed, text_of(send(OFF, (path, b))))
        self.assertIn(streamed, choices)

    def test_forced_tool_calls(self):
        params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % OFF.port, api_key="x", max_retries=0, timeout=300)
        msgs = [{"role": "user", "content": "Set an alarm, or tell me the weather."}]
        for choice, want in (("required", None),):
            r = c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice=choice, max_tokens=90,
                                          seed=5, extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                                          parallel_tool_calls=False)
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "tool_calls", ch)
            self.assertEqual(len(ch.message.tool_calls), 1)
            call = ch.message.tool_calls[0].function
            if want:
                self.assertEqual(call.name, want)
            self.assertIn(call.name, params)
            validate(params[call.name], call.arguments)
        # drafting on == off for a forced call too
        req = chat({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, 90, 6)
        off, on = both(req)
        self.assertEqual(output(off), output(on))
        self.assertEqual(off["choices"][0]["finish_reason"], "tool_calls")
        call = off["choices"][0]["message"]["tool_calls"][0]["function"]
        self.assertEqual(call["name"], "get_weather")
        validate(params["get_weather"], call["arguments"])

    def test_concurrent_equals_alone(self):
        reqs = [schema_request(n, s, 24) for n, s in (("enum", 1), ("array", 2), ("anyof", 3), ("enum", 4),
                                                    ("tuple", 5), ("array", 6))]
        reqs += [completion({"guided_regex": r"[A-Z][a-z]{1,6} \d{2}"}, 12, s) for s in (1, 2)]
        reqs += [chat({"guided_choice": ["alpha", "beta", "gamma"]}, 6, s) for s in (1, 2)]
        reqs += [chat({"response_format": {"type": "json_object"}}, 16, s) for s in (1, 2)]
        alone = [output(send(OFF, r)) for r in reqs]
        with concurrent.futures.ThreadPoolExecutor(len(reqs)) as ex:
            burst = list(ex.map(lambda r: output(send(OFF, r)), reqs))
        self.assertEqual(len(reqs), 12)
        self.assertEqual(burst, alone)
        wait_until(lambda: metric(OFF.port, "dskit_requests_running") == 0, 10)


    def test_disconnect_frees_the_sequence(self):
        # a constrained stream (drafting on: the matcher and its draft copy) whose client leaves
        path, b = chat({"guided_json": {"type": "array", "items": {"type": "string"}}}, 400, 9)
        body = json.dumps(dict(b, stream=True)).encode()
        c = socket.create_connection(("127.0.0.1", ON.port), timeout=60)
        c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (path.encode(), len(body), body))
        got = b""
        while got.count(b"data: ") < 4:
            got += c.recv(4096)
        self.assertEqual(metric(ON.port, "dskit_requests_running"), 1)
        c.close()
        self.assertTrue(wait_until(lambda: metric(ON.port, "dskit_requests_running") == 0, 10))
        self.assertEqual(metric(ON.port, "dskit_sequences_open"), metric(ON.port, "dskit_prompt_cache_sequences"))
        # and the server goes on constraining
        self.assertIn(text_of(send(ON, completion({"guided_choice": ["x", "y"]}, 4))), ("x", "y"))


class Refusals(unittest.TestCase):
    def refused(self, req, field, needle, bound_s=5.0):
        t0 = time.time()
        st, body = post(OFF.port, req[0], req[1])
        dt = time.time() - t0
        self.assertEqual(st, 400, body)
        self.assertEqual(body["error"]["param"], field, body)
        self.assertIn(needle, body["error"]["message"])
        self.assertLess(dt, bound_s, body)
        return body

    def test_unsupported_keywords(self):
        for kw, schema in (("uniqueItems", {"type": "array", "uniqueItems": True}),
                           ("not", {"not": {"type": "string"}}),
                           ("patternProperties", {"type": "object", "patternProperties": {"^a": {}}}),
                           ("multipleOf", {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})):
            self.refused(schema_request_of(schema, "response_format"), "response_format", kw)
            self.refused(completion({"guided_json": schema}), "guided_json", kw)
        self.refused(completion({"guided_regex": r"(a)\1"}), "guided_regex", "backreference")
        self.refused(completion({"guided_grammar": "root ::= 'a'"}), "guided_grammar", "guided_json")

    def test_huge_and_recursive(self):
        huge = {"type": "object", "properties": {"field_%d" % i: {"type": "string", "maxLength": 400}
                                                 for i in range(3000)}}
        self.refused(completion({"guided_json": huge}), "guided_json", "max_states")
        # a recursion no finite output satisfies
        self.refused(completion({"guided_json": {"$defs": {"a": {"type": "object", "properties": {
            "x": {"$ref": "#/$defs/a"}}, "required": ["x"]}}, "$ref": "#/$defs/a"}}), "guided_json", "finite")
        # nesting past the bound along one path
        deep = {"type": "string"}
        for _ in range(300):
            deep = {"type": "object", "properties": {"a": deep}, "required": ["a"]}
        self.refused(completion({"guided_json": deep}), "guided_json", "nest")

    def test_bad_requests(self):
        self.refused(completion({"guided_json": {"type": "object"}, "guided_regex": "a"}), "guided_regex",
                     "give one")
        self.refused(chat({"response_format": {"type": "json_object"}, "guided_choice": ["a"]}), "guided_choice",
                     "give one")
        self.refused(completion({"guided_choice": []}), "guided_choice", "non-empty")
        self.refused(completion({"guided_choice": ["a", 1]}), "guided_choice", "guided_choice[1]")
        self.refused(completion({"guided_json": "{not json"}), "guided_json", "not JSON")
        self.refused(chat({"response_format": {"type": "xml"}}), "response_format", "xml")
        self.refused(chat({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
                     "response_format", "schema")
        self.refused(chat({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                     "tool_choice", "nope")
        self.refused(chat({"tool_choice": "required"}), "tool_choice", "tools")
        # the server goes on
        self.assertEqual(text_of(send(OFF, completion({"guided_choice": ["ok"]}, 4))), "ok")


def schema_request_of(schema, field):
    return chat({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})


if __name__ == "__main__":
    unittest.main(verbosity=2)
