"""The LLM planner: an OpenAI-compatible chat model (the `openai` package; base URL, model and
key from options or ARGUS_LLM_BASE_URL / ARGUS_LLM_MODEL / ARGUS_LLM_API_KEY, so a local vLLM
or ollama server works) reads the kernel source, the knowledge base, per-move statistics, the
best candidates with their modelled times and the latest rejections with their counterexamples,
and answers with moves, knob settings or an edited DSL source.

Every exchange is recorded (answer, malformed reply, timeout, refusal, transport error). When
an answer yields nothing usable the offline planner proposes instead, so a bad model never
stalls the run. Edited sources are traced in the sandbox process, never here.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections import defaultdict

import attrs

from argus import env
from argus.errors import ArgusError
from argus.search.kb import Context, moves_for
from argus.search.planners import Proposal, SearchState
from argus.search.space import Action, Candidate, Problem, SearchError, apply

TIMEOUT_S = 120.0
#: rejections (with counterexamples) and best candidates shown per prompt
SHOWN_FAILURES, SHOWN_BEST = 4, 3
ANSWER_CHARS = 4000  # of each answer kept in the run file

SYSTEM = """You tune AMD CDNA3 (MI300X, gfx942) GPU kernels written in the Argus tile DSL.
Every candidate you propose is verified (tag assertions proved for all sizes; a refuted one
comes back with a concrete counterexample), run against numpy, and timed by a performance
model. Propose candidates that are likely to be faster and still correct.

Answer with one JSON object and nothing else:
{"rationale": "<one or two sentences>",
 "proposals": [{"move": "<knowledge-base move id>"}
             | {"params": {"<knob>": <value>, ...}}
             | {"rewrite": "<program rewrite>", "site": [<ints>]}
             | {"repair_of": "<key of a refuted candidate>", "rewrite": "<program rewrite>",
                "site": [<ints>]}
             | {"source": "<complete Python module defining one @T.kernel function with the
                           same arguments>", "params": {...}}]}
A program rewrite transforms the kernel (drop a barrier, deepen an LDS ring, swizzle stores,
unroll, change the MFMA wave grid, split the waves into ping-pong groups, ...); some are legal
only sometimes and the verifier decides. A refuted candidate's counterexample names the repairs
that may mend it: propose one with "repair_of".
"""


class LLMFailure(ArgusError):
    """The LLM server gave no usable answer; `reason` is the run file's status for it
    (timeout, error, malformed, refusal). The planner records it and falls back to the offline
    one, so it reaches a caller only from `ChatClient.complete` itself."""

    kind = "environment"

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@attrs.frozen
class ChatClient:
    """An OpenAI-compatible chat-completions endpoint."""

    base_url: str
    model: str
    api_key: str = attrs.field(repr=False)
    timeout_s: float = TIMEOUT_S

    def complete(self, messages: list[dict]) -> str:
        import openai

        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                               timeout=self.timeout_s, max_retries=0)
        try:
            reply = client.chat.completions.create(model=self.model, messages=messages,
                                                   temperature=0.7)
        except openai.APITimeoutError:
            raise LLMFailure("timeout", f"no answer within {self.timeout_s:g} s") from None
        except openai.APIStatusError as err:
            raise LLMFailure("error", f"HTTP {err.status_code}: {err.message}") from None
        except openai.APIConnectionError as err:
            raise LLMFailure("error", f"cannot reach {self.base_url}: {err}") from None
        except (openai.APIResponseValidationError, ValueError, TypeError) as err:
            raise LLMFailure("malformed", f"not a chat completion: {err}") from None
        choices = getattr(reply, "choices", None)
        if not choices:
            raise LLMFailure("malformed", "the reply has no choices")
        choice = choices[0]
        message = choice.message
        refusal = getattr(message, "refusal", None)
        if refusal or choice.finish_reason == "content_filter":
            raise LLMFailure("refusal", refusal or "stopped by the content filter")
        if not message.content:
            raise LLMFailure("malformed", "the reply has no content")
        return message.content


def client_from_options(base_url: str | None = None, model: str | None = None,
                        api_key_env: str | None = None, timeout_s: float | None = None
                        ) -> ChatClient:
    """A client from options, else the environment; a missing URL or model is an error with
    the fix."""
    configured_url, configured_model = env.llm_server()
    base_url, model = base_url or configured_url, model or configured_model
    if not base_url or not model:
        raise SearchError("the llm planner needs a server and a model: give --llm-base-url and "
                          "--llm-model (or ARGUS_LLM_BASE_URL / ARGUS_LLM_MODEL), e.g. "
                          "http://localhost:11434/v1 for ollama")
    key = env.llm_api_key(api_key_env)
    if api_key_env and key is None:
        raise SearchError(f"--llm-api-key-env {api_key_env}: that variable is not set")
    # local servers accept any key; the openai client insists on one
    return ChatClient(base_url, model, key or "unused", timeout_s or TIMEOUT_S)


class LLMPlanner:
    name = "llm"

    def __init__(self, problem: Problem, client: ChatClient, fallback, log=None):
        self.problem, self.client, self.fallback = problem, client, fallback
        self.log = log or (lambda event: None)
        self.moves = {m.id: m for m in moves_for(problem)}
        self.exchanges = 0
        self.refuted: list = []  # refuted evaluations, which `repair_of` may name

    def observe(self, evaluations) -> None:
        self.refuted.extend(e for e in evaluations if e.status == "refuted")
        self.fallback.observe(evaluations)

    def propose(self, state: SearchState, k: int) -> list[Proposal]:
        prompt = self.prompt(state)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        started = time.perf_counter()
        self.exchanges += 1
        event = {"kind": "llm", "exchange": self.exchanges, "model": self.client.model,
                 "prompt": prompt}
        proposals: list[Proposal] = []
        try:
            answer = self.client.complete(messages)
            event["answer"] = answer[:ANSWER_CHARS]
            proposals, rejected = self.parse(answer, state)
            event["rejected"] = rejected
            event["status"] = "ok" if proposals else "malformed"
            if not proposals:
                event["message"] = "; ".join(rejected) or "no proposal in the answer"
        except LLMFailure as failure:
            event["status"], event["message"] = failure.reason, str(failure)
        event["seconds"] = round(time.perf_counter() - started, 3)
        proposals = proposals[:k]
        if not proposals:
            proposals = [attrs.evolve(p, move=f"fallback:{p.move}")
                         for p in self.fallback.propose(state, k)]
            event["fallback"] = [p.candidate.describe() for p in proposals]
        event["proposals"] = [p.candidate.to_dict() | {"move": p.move} for p in proposals]
        self.log(event)
        return proposals

    # --- prompt -----------------------------------------------------------------------------

    def prompt(self, state: SearchState) -> str:
        problem = self.problem
        parent = state.parent()
        sections = [
            f"# Problem\n{problem.family} at {problem.shape} "
            f"({', '.join(f'{k}={v}' for k, v in problem.sizes.items())}); fixed parameters "
            f"{problem.fixed_params() or 'none'}.",
            "# Knobs\n" + "\n".join(f"- {k.name}: one of {list(k.values)} ({k.doc})"
                                    for k in problem.knobs()),
            "# Kernel source\n```python\n" + _source(problem.family) + "```",
            "# Knowledge base (moves that apply to the current best)\n" + json.dumps(
                [m.to_prompt() for m in self._applicable(state, parent)], indent=1),
            "# Statistics per move (n, mean reward, best reward, failures)\n"
            + _move_table(state),
            "# Best candidates (verified, correct, modelled)\n" + _best(state),
            "# Program rewrites that apply to the current best (rewrite, site, effect)\n"
            + self._rewrites(parent),
            "# Latest rejections (never results; fix what they show)\n" + _failures(state),
            "# Repairs the latest counterexamples suggest (propose with repair_of)\n"
            + self._repairs(state),
            f"# Already evaluated (do not repeat)\n{_seen(state)}",
            f"Propose up to 4 new candidates starting from "
            f"{parent.describe() if parent else 'the default configuration'}.",
        ]
        return "\n\n".join(sections)

    def _rewrites(self, parent) -> str:
        from argus.search.evaluate import traced
        from argus.search.rewrites import REWRITES, TRACE_REWRITES, offered, trace_sites
        from argus.search.space import default_candidate

        parent = parent or default_candidate(self.problem)
        kernel = traced(self.problem, parent)
        if kernel is None:
            return "(the current best does not trace)"
        # the DSL program's rewrites (wave grid, ping-pong groups) first, then the IR's
        program = trace_sites(parent.family, parent.param_dict, parent.rewrites) \
            if parent.source is None else []
        lines = [f"- {name} site {list(site)}: {TRACE_REWRITES[name].effect} "
                 f"({TRACE_REWRITES[name].legal})" for name, site in program]
        lines += [f"- {name} site {list(site)}: {REWRITES[name].effect} "
                  f"({REWRITES[name].legal})" for name, site in offered(kernel)]
        return "\n".join(lines) or "(none)"

    def _repairs(self, state: SearchState) -> str:
        """For the latest refuted candidates: the repairs their counterexamples map to."""
        from argus.search.evaluate import REFUTED, traced
        from argus.search.repair import repairs

        lines = []
        refuted = [e for e in state.evaluations if e.status == REFUTED and e.counterexamples]
        for e in refuted[-2:]:
            kernel = traced(self.problem, e.candidate)
            if kernel is None:
                continue
            for r in repairs(kernel, e.candidate, list(e.counterexamples)):
                if r.rewrite.startswith("undo:"):
                    lines.append(f"- {{\"params\": {{}}}} (undo {r.rewrite[5:]}): {r.why}")
                    continue
                lines.append(f"- {json.dumps({'repair_of': e.key, 'rewrite': r.rewrite, 'site': list(r.site)})}: {r.why}")  # noqa: E501
        return "\n".join(lines) or "(none)"

    def _applicable(self, state, parent):
        from argus.search.space import default_candidate

        ctx = Context(self.problem, parent or default_candidate(self.problem))
        return [m for m in self.moves.values() if m.propose(ctx)]

    # --- answer -----------------------------------------------------------------------------

    def parse(self, answer: str, state: SearchState) -> tuple[list[Proposal], list[str]]:
        """Proposals from an answer, and why each rejected item was rejected."""
        data = _json_object(answer)
        if data is None:
            if re.search(r"\b(I can(no|')t|I'm sorry|I am unable|cannot help)\b", answer, re.I):
                raise LLMFailure("refusal", answer.strip()[:200])
            raise LLMFailure("malformed", "no JSON object in the answer")
        items = data.get("proposals") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise LLMFailure("malformed", "the JSON object has no 'proposals' list")
        why = str(data.get("rationale", ""))[:500]
        from argus.search.space import default_candidate

        parent = state.parent() or default_candidate(self.problem)
        proposals, rejected, keys = [], [], set()
        for number, item in enumerate(items, 1):
            try:
                proposal = self._item(item, parent, why)
            except (SearchError, TypeError, ValueError, KeyError) as err:
                rejected.append(f"proposal {number}: {err}")
                continue
            if state.seen(proposal.candidate) or proposal.candidate.key in keys:
                rejected.append(f"proposal {number}: {proposal.candidate.describe()} was "
                                "already evaluated")
                continue
            keys.add(proposal.candidate.key)
            proposals.append(proposal)
        return proposals, rejected

    def _item(self, item, parent: Candidate, why: str) -> Proposal:
        if not isinstance(item, dict):
            raise ValueError(f"{item!r} is not an object")
        fixed = self.problem.fixed_params()
        if "rewrite" in item:
            return self._rewrite(item, parent, why)
        if "move" in item:
            move = self.moves.get(item["move"])
            if move is None:
                raise ValueError(f"unknown move {item['move']!r}")
            actions = move.propose(Context(self.problem, parent))
            if not actions:
                raise ValueError(f"move {move.id} does not apply to {parent.describe()}")
            return Proposal(apply(parent, actions, self.problem), move.id, why)
        params = item.get("params", {})
        if not isinstance(params, dict):
            raise ValueError("'params' is not an object")
        if set(params) & set(fixed):
            raise ValueError(f"{sorted(set(params) & set(fixed))} are fixed by the problem")
        base = Candidate(parent.family, parent.params)
        candidate = apply(base, [Action(name, value) for name, value in params.items()],
                          self.problem)
        if "source" in item:
            if not isinstance(item["source"], str) or not item["source"].strip():
                raise ValueError("'source' is not kernel source text")
            return Proposal(attrs.evolve(candidate, source=item["source"]), "llm-edit", why)
        if not params:
            raise ValueError("neither a move, params nor a source")
        return Proposal(candidate, "llm-params", why)


    def _rewrite_base(self, item: dict, parent: Candidate) -> Candidate:
        if "repair_of" not in item:
            return parent
        key = item["repair_of"]
        found = [e.candidate for e in self.refuted if e.key == key]
        if not found:
            raise ValueError(f"repair_of {key!r} is not a refuted candidate of this run")
        return found[-1]

    def _rewrite(self, item: dict, parent: Candidate, why: str) -> Proposal:
        """A program rewrite on the current best, or on a refuted candidate (`repair_of`),
        checked against the sites the rewrite has in that candidate's IR (a trace-level one:
        in its DSL program, given its knobs and earlier trace-level rewrites)."""
        from argus.search.evaluate import traced
        from argus.search.rewrites import (
            REWRITES,
            TRACE_REWRITES,
            RewriteError,
            trace_hooks,
            with_rewrite,
        )

        name, site = item["rewrite"], item.get("site", [0])
        if name not in REWRITES and name not in TRACE_REWRITES:
            raise ValueError(f"unknown rewrite {name!r}; choose one of "
                             f"{sorted({*REWRITES, *TRACE_REWRITES})}")
        if not isinstance(site, list) or not all(isinstance(i, int) for i in site):
            raise ValueError(f"site {site!r} is not a list of integers")
        base = self._rewrite_base(item, parent)
        move = ("llm-repair:" if "repair_of" in item else "llm-rewrite:") + name
        if name in TRACE_REWRITES:
            step = TRACE_REWRITES[name]
            if step.repair and "repair_of" not in item:
                raise ValueError(f"{name} mends a refuted candidate: give its key in repair_of")
            if base.source is not None:
                raise ValueError(f"{name} rewrites the family's DSL program, not an edited "
                                 "source")
            steps = with_rewrite(base.rewrites, name, site)
            try:  # every trace-level step's precondition, this one's included
                trace_hooks(base.family, base.param_dict, steps)
            except RewriteError as err:
                raise ValueError(f"rewrite {name} at {site} on {base.describe()}: "
                                 f"{err}") from None
            return Proposal(attrs.evolve(base, rewrites=steps), move, why)
        kernel = traced(self.problem, base)
        if kernel is None or tuple(site) not in REWRITES[name].sites(kernel):
            raise ValueError(f"rewrite {name} has no site {site} in {base.describe()}")
        candidate = attrs.evolve(base, rewrites=(*base.rewrites, (name, tuple(site))))
        return Proposal(candidate, move, why)


def _json_object(text: str):
    """The answer's JSON object: the whole text, a fenced block, or the outermost braces."""
    candidates = [text]
    candidates += re.findall(r"```(?:json)?\s*(.*?)```", text, re.S)
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{"):text.rindex("}") + 1])
    for piece in candidates:
        try:
            data = json.loads(piece)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _source(family_name: str) -> str:
    from argus.search.space import family

    return inspect.getsource(inspect.getmodule(family(family_name).kernel.fn))


def _move_table(state: SearchState) -> str:
    rows = defaultdict(lambda: {"n": 0, "rewards": [], "failures": 0})
    for e in state.evaluations:
        row = rows[e.move or "?"]
        row["n"] += 1
        if e.reward is not None:
            row["rewards"].append(e.reward)
        if e.status not in ("ok", "incomplete"):
            row["failures"] += 1
    if not rows:
        return "(no evaluations yet)"
    lines = []
    for move, row in sorted(rows.items()):
        r = row["rewards"]
        mean = f"{sum(r) / len(r):.3f}" if r else "-"
        best = f"{max(r):.3f}" if r else "-"
        lines.append(f"- {move}: n={row['n']} mean={mean} best={best} "
                     f"failures={row['failures']}")
    return "\n".join(lines)


def _best(state: SearchState) -> str:
    results = state.results[:SHOWN_BEST]
    if results:
        return "\n".join(f"- {e.candidate.describe()}: {e.time_us:.2f} µs modelled, reward "
                         f"{e.reward:.3f} vs {e.reference['name']}" for e in results)
    passed = [e for e in state.evaluations if e.status == "incomplete"][-SHOWN_BEST:]
    if passed:
        return ("(no modelled time in this build: " + (passed[-1].missing or "") + ")\n"
                + "\n".join(f"- {e.candidate.describe()}: verified and correct" for e in passed))
    return "(none yet)"


def _failures(state: SearchState) -> str:
    bad = [e for e in state.evaluations
           if e.status not in ("ok", "incomplete")][-SHOWN_FAILURES:]
    if not bad:
        return "(none)"
    parts = []
    for e in bad:
        head = f"- {e.candidate.describe()}: {e.status} at {e.stage}: {e.message}"
        parts.append(head)
        for ob in e.counterexamples:
            parts.append("  counterexample:\n" + "\n".join(
                "    " + line for line in ob.get("text", "").splitlines()))
    return "\n".join(parts)


def _seen(state: SearchState) -> str:
    return "\n".join(f"- {e.candidate.describe()} ({e.status})"
                     for e in state.evaluations[-20:]) or "(nothing yet)"
