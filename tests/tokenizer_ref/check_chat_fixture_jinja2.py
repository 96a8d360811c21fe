#!/usr/bin/env python3
"""Cross-checks ../fixtures/chat_template_ref.json against Python's Jinja2, set up as transformers'
apply_chat_template sets it up (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, its tojson and
raise_exception). The fixture comes from @huggingface/jinja (make_chat_fixture.mjs); where the two engines
differ, the fixture states Jinja2's result, so every case must agree here.

Run (from tests/tokenizer_ref, after npm ci; needs the jinja2 package):  python3 check_chat_fixture_jinja2.py
"""
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = pathlib.Path(__file__).resolve().parent


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

fixture = json.loads((here / "../fixtures/chat_template_ref.json").read_text())
bad = 0
for name, t in fixture["templates"].items():
    config = json.loads((here / t["dir"] / "tokenizer_config.json").read_text())
    template = env.from_string(config["chat_template"])
    same = 0
    for i, c in enumerate(t["cases"]):
        try:
            got = {"output": template.render(messages=c["messages"], **c["extra"])}
        except jinja2.exceptions.TemplateError as e:
            got = {"error": str(e)}
        want = {k: c[k] for k in ("output", "error") if k in c}
        if got == want:
            same += 1
        else:
            bad += 1
            print(f"{name} case {i}: Jinja2 {json.dumps(got)[:300]}\n  fixture {json.dumps(want)[:300]}")
    print(f"{name}: {same} of {len(t['cases'])} cases identical under Jinja2 {jinja2.__version__}")
sys.exit(1 if bad else 0)
