#!/usr/bin/env python3
"""The grammar library's outputs checked by validators that are not its code.

    check_samples.py GRAMMAR_SAMPLES CASES.json [SEED]

Runs the grammar_samples program (random walks on the real vocabulary, one JSON line per output)
and checks every output of every case: JSON Schema cases with the `jsonschema` package
(Draft 2020-12, formats checked), regex cases with Python's re.fullmatch, choices by membership,
and tool calls (parsed back by dsml_parse in the C program) by their names and by validating their
arguments against each tool's "parameters" schema. Exits non-zero on any miss."""
import datetime
import json
import os
import re
import subprocess
import sys
import time

import jsonschema
from jsonschema import Draft202012Validator

FORMATS = ("date", "time", "date-time", "uuid", "email", "ipv4")
TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.\d+)?(?:[Zz]|[+-](\d\d):(\d\d))")


def rfc3339_time(s):
    m = TIME.fullmatch(s)
    return bool(m) and int(m[1]) < 24 and int(m[2]) < 60 and int(m[3]) < 61 and (
        m[4] is None or (int(m[4]) < 24 and int(m[5]) < 60))


def rfc3339_date_time(s):
    date, sep, time_part = s.replace("t", "T").partition("T")
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        return False
    return bool(sep) and len(date) == 10 and rfc3339_time(time_part)


def format_checker():
    """Draft 2020-12's checker. jsonschema checks time and date-time only with the optional
    rfc3339-validator package (Debian 12 lacks it); without it, RFC 3339 checks written here."""
    fmt = getattr(Draft202012Validator, "FORMAT_CHECKER", None) or jsonschema.draft202012_format_checker
    if "time" not in fmt.checkers:
        fmt.checks("time")(rfc3339_time)
    if "date-time" not in fmt.checkers:
        fmt.checks("date-time")(rfc3339_date_time)
    return fmt


def tool_name(tool):
    ns = tool.get("namespace") or tool["function"].get("namespace")
    return (ns + "::" if ns else "") + tool["function"]["name"]


def check(case, sample, fmt):
    """An error message for the sample, or None."""
    kind, text = case["kind"], sample["text"]
    if kind in ("schema", "json_object"):
        try:
            value = json.loads(text)
        except ValueError as e:
            return f"not JSON ({e})"
        if kind == "json_object":
            return None if isinstance(value, dict) else "not an object"
        errors = list(Draft202012Validator(case["schema"], format_checker=fmt).iter_errors(value))
        return "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors) or None
    if kind == "regex":
        return None if re.fullmatch(case["regex"], text) else "no full match"
    if kind == "choices":
        return None if text in case["choices"] else "not a choice"
    if kind == "tools":
        calls, tools = sample["calls"], {tool_name(t): t for t in case["tools"]}
        if not calls or sample["content"]:
            return "dsml_parse found no calls, or content beside them"
        if case.get("max_calls") and len(calls) > case["max_calls"]:
            return f"{len(calls)} calls, more than max_calls"
        for call in calls:
            if call["name"] not in tools or (case.get("force") and call["name"] != case["force"]):
                return f"tool {call['name']} was not offered"
            params = tools[call["name"]]["function"].get("parameters", {"type": "object", "additionalProperties": False})
            args = json.loads(call["arguments"])
            errors = list(Draft202012Validator(params, format_checker=fmt).iter_errors(args))
            if errors:
                return f"{call['name']}: " + "; ".join(e.message for e in errors)
        return None
    return f"unknown kind {kind}"


def main():
    exe, cases_path = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else int(time.time())
    print(f"random seed {seed}")
    # the draft's own checker: FormatChecker() mixes all drafts (its "time" is draft 3's, no offset)
    fmt = format_checker()
    missing = [f for f in FORMATS if f not in fmt.checkers]
    if missing:  # an unchecked format would pass anything
        sys.exit(f"the format checker lacks {missing}")
    with open(cases_path) as f:
        cases = json.load(f)
    run = subprocess.run([exe, cases_path, str(seed)], capture_output=True, text=True, env=os.environ)
    if run.returncode:
        sys.exit(f"grammar_samples failed ({run.returncode}):\n{run.stderr}")
    counts, failures = [0] * len(cases), []
    for line in run.stdout.splitlines():
        sample = json.loads(line)
        i = sample["case"]
        counts[i] += 1
        err = check(cases[i], sample, fmt)
        if err:
            failures.append(f"case {i} ({cases[i]['kind']}): {err}\n  output: {sample['text']!r}")
    for i, case in enumerate(cases):
        want = case.get("walks", 8)
        if counts[i] != want:
            failures.append(f"case {i}: {counts[i]} outputs, expected {want}")
    print(f"{sum(counts)} outputs of {len(cases)} cases checked, {len(failures)} failures")
    for f in failures:
        print(f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
