"""The LLM planner against a fake OpenAI-compatible server (pytest-httpserver): a whole run
through garbage, a proposed edit the verifier refutes (its counterexample must reach the next
prompt) and a timeout; plus refusals, HTTP errors and answers that do not fit the space."""

import json
import time

import pytest
from fakes import edits
from pytest_httpserver import HTTPServer

from argus.search import Budget, Problem, tune
from argus.search.planners import SearchState
from argus.search.planners.llm import ChatClient, LLMFailure, LLMPlanner, client_from_options
from argus.search.planners.offline import OfflinePlanner
from argus.search.rewrites import trace_hooks
from argus.search.space import SearchError
from argus.search.store import read

GEMM = Problem("gemm", {"M": 256, "N": 256, "K": 256})


@pytest.fixture
def httpserver():
    """The fake server for one test only: the plugin's own fixture keeps a server thread for the
    whole session, and a live thread stops the verifier from forking its workers (can_fork)."""
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    server.clear()
    server.stop()


def completion(content=None, refusal=None, finish="stop"):
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content,
                                     "refusal": refusal}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class Script:
    """Answers requests in order and keeps what each prompt said."""

    def __init__(self, answers):
        self.answers, self.prompts = list(answers), []

    def __call__(self, request):
        from werkzeug import Response

        body = request.get_json()
        self.prompts.append(body["messages"][-1]["content"])
        answer = self.answers.pop(0) if self.answers else completion("{}")
        if callable(answer):
            answer = answer()
        return Response(json.dumps(answer), status=200, content_type="application/json")


def slow(seconds, then):
    def answer():
        time.sleep(seconds)
        return then
    return answer


def serve(httpserver, answers) -> Script:
    script = Script(answers)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(script)
    return script


def test_a_whole_run_through_garbage_a_refuted_edit_and_a_timeout(httpserver, tmp_path):
    edit = {"rationale": "read A without the swizzle to save the XOR",
            "proposals": [{"source": edits.UNSWIZZLED_READ}]}
    script = serve(httpserver, [
        completion("Sure! Tiles should be bigger, I think. Maybe block_m=128?"),
        completion("Here is my plan:\n```json\n" + json.dumps(edit) + "\n```"),
        slow(3.0, completion(json.dumps({"proposals": [{"move": "grow_m"}]}))),
    ])
    run_file = tmp_path / "run.jsonl"
    # only the scheduling policy is searched, so the fallback's second proposal shares the
    # default's verdict and interpreter run (the run stays short; the planner logic is the same)
    problem = Problem("gemm", GEMM.sizes, {"block_m": 64, "block_n": 64, "block_k": 32,
                                           "split_k": 1, "swizzle": True, "prefetch": 1,
                                           "instr": "v_mfma_f32_32x32x8_bf16"})
    progress = tune(problem, run_file=run_file, budget=Budget(3), planner="llm", jobs=0,
                    llm={"base_url": httpserver.url_for("/v1"), "model": "fake",
                         "timeout_s": 1.0})
    events = read(run_file)
    exchanges = [e for e in events if e["kind"] == "llm"]
    assert [e["status"] for e in exchanges] == ["malformed", "ok", "timeout"]
    assert exchanges[0]["fallback"] and exchanges[2]["fallback"]
    evaluations = progress.state.evaluations
    assert [e.move for e in evaluations] == ["fallback:default", "llm-edit", evaluations[2].move]
    refuted = evaluations[1]
    assert refuted.status == "refuted" and refuted.stage == "verify"
    witness = refuted.counterexamples[0]["text"]
    assert "confirmed by concrete replay" in witness
    # the counterexample, word for word, is in the very next prompt
    assert witness.splitlines()[1].strip() in script.prompts[2]
    assert "A and B meet at one k" in script.prompts[2]
    assert witness.splitlines()[1].strip() not in script.prompts[1]
    assert refuted not in progress.state.results
    assert "class" not in exchanges[0]["message"] and "JSON" in exchanges[0]["message"]


def test_refusals_http_errors_and_empty_answers_are_failures_of_their_kind(httpserver):
    serve(httpserver, [completion(None, refusal="I can't help with GPU kernels."),
                       completion(None, finish="content_filter"),
                       completion(""), {"choices": []}])
    client = ChatClient(httpserver.url_for("/v1"), "fake", "key", timeout_s=5)
    kinds = []
    for _ in range(4):
        with pytest.raises(LLMFailure) as failure:
            client.complete([{"role": "user", "content": "tune"}])
        kinds.append(failure.value.reason)
    assert kinds == ["refusal", "refusal", "malformed", "malformed"]
    httpserver.clear()
    httpserver.expect_request("/v1/chat/completions").respond_with_data("boom", status=500)
    with pytest.raises(LLMFailure, match="HTTP 500") as failure:
        client.complete([{"role": "user", "content": "tune"}])
    assert failure.value.reason == "error"


def test_answers_are_checked_against_the_space():
    planner = LLMPlanner(GEMM, ChatClient("http://unused", "fake", "key"),
                         OfflinePlanner(GEMM, legal=lambda c: ""))
    state = SearchState(GEMM)
    answer = json.dumps({"proposals": [
        {"move": "teleport"}, {"params": {"block_m": 96}}, {"params": {"colour": "red"}},
        {"source": ""}, "block_m=128", {"params": {"block_m": 128}}, {"move": "grow_n"}]})
    proposals, rejected = planner.parse(answer, state)
    assert [p.move for p in proposals] == ["llm-params", "grow_n"]
    assert proposals[0].candidate.param_dict["block_m"] == 128
    assert len(rejected) == 5 and "unknown move 'teleport'" in rejected[0]
    assert "outside gemm's space" in rejected[1]
    with pytest.raises(LLMFailure) as failure:
        planner.parse("I'm sorry, but I cannot help with that.", state)
    assert failure.value.reason == "refusal"
    prompt = planner.prompt(state)
    assert "def gemm_program" in prompt and '"id": "grow_m"' in prompt
    # program rewrites, the DSL-level ones (wave grid, ping-pong groups) checked against
    # their preconditions at the parent's knobs
    answer = json.dumps({"proposals": [
        {"rewrite": "drop_barrier", "site": [1]}, {"rewrite": "pingpong", "site": [2]},
        {"rewrite": "regrid", "site": [4, 1]}, {"rewrite": "pingpong_handoff", "site": [2]}]})
    proposals, rejected = planner.parse(answer, state)
    assert [p.move for p in proposals] == ["llm-rewrite:drop_barrier"]
    assert "prefetch 2" in rejected[0] and "(4, 1)" in rejected[1]  # the default: prefetch 1
    assert "repair_of" in rejected[2]                                # and the 32x32 MFMA
    narrow = Problem("gemm", GEMM.sizes, {"prefetch": 2, "instr": "v_mfma_f32_16x16x16_bf16"})
    planner = LLMPlanner(narrow, ChatClient("http://unused", "fake", "key"),
                         OfflinePlanner(narrow, legal=lambda c: ""))
    state = SearchState(narrow)
    assert "- regrid site [4, 1]" in planner.prompt(state)
    assert "- pingpong site [2]" in planner.prompt(state)
    proposals, rejected = planner.parse(answer, state)
    assert [p.candidate.rewrites for p in proposals] == [
        (("drop_barrier", (1,)),), (("pingpong", (2,)),), (("regrid", (4, 1)),)]


def test_the_client_comes_from_options_or_the_environment(monkeypatch):
    monkeypatch.delenv("ARGUS_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("ARGUS_LLM_MODEL", raising=False)
    with pytest.raises(SearchError, match="--llm-base-url"):
        client_from_options()
    monkeypatch.setenv("ARGUS_LLM_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("ARGUS_LLM_MODEL", "qwen")
    monkeypatch.setenv("ARGUS_LLM_API_KEY", "secret")
    client = client_from_options()
    assert (client.base_url, client.model, client.api_key) == (
        "http://localhost:11434/v1", "qwen", "secret")
    assert "secret" not in repr(client)
    with pytest.raises(SearchError, match="MY_KEY"):
        client_from_options(api_key_env="MY_KEY")


def test_a_refuted_rewrite_brings_its_repair_to_the_next_prompt(httpserver, tmp_path):
    """The model picks the ping-pong wave split from the prompt's menu of program rewrites, in
    its variant whose late wave group stores past the loop's barrier; the verifier refutes it
    with the race, the next prompt shows that counterexample and the repair it maps to (hand
    the late group's stores over before the barrier), the model proposes that repair and it
    is accepted: verified, correct, modelled, its LDS stores split between the wave groups."""
    first = {"rationale": "overlap one wave group's LDS writes with the other's MFMAs",
             "proposals": [{"rewrite": "pingpong_late", "site": [2]}]}
    script = serve(httpserver, [completion(json.dumps(first))])

    def repair_answer():
        prompt = script.prompts[-1]
        line = next(line for line in prompt.splitlines() if '"repair_of"' in line
                    and '"pingpong_handoff"' in line)
        item = json.loads(line[2:line.index("}") + 1])
        return completion(json.dumps({"rationale": "apply the suggested repair",
                                      "proposals": [item]}))

    script.answers.append(repair_answer)
    problem = Problem("gemm", GEMM.sizes, {"block_m": 64, "block_n": 64, "block_k": 32,
                                           "split_k": 1, "swizzle": True, "prefetch": 2,
                                           "instr": "v_mfma_f32_32x32x8_bf16",
                                           "policy": "interleave"})
    run_file = tmp_path / "run.jsonl"
    progress = tune(problem, run_file=run_file, budget=Budget(3), planner="llm", jobs=0,
                    fresh=True, llm={"base_url": httpserver.url_for("/v1"), "model": "fake"})
    evaluations = progress.state.evaluations
    # the third exchange answers nothing usable: the offline planner's default fills in
    assert [e.move for e in evaluations] == ["llm-rewrite:pingpong_late",
                                             "llm-repair:pingpong_handoff", "fallback:default"]
    refuted, repaired = evaluations[0], evaluations[1]
    assert refuted.status == "refuted" and refuted.counterexamples[0]["kind"] == "lds-race"
    witness = refuted.counterexamples[0]["text"].splitlines()
    assert witness[1].strip() in script.prompts[1] and witness[1].strip() not in \
        script.prompts[0]
    assert f'"repair_of": "{refuted.key}"' in script.prompts[1]
    assert repaired.candidate.rewrites == (("pingpong_late", (2,)), ("pingpong_handoff", (2,)))
    assert trace_hooks("gemm", repaired.candidate.param_dict, repaired.candidate.rewrites) == \
        trace_hooks("gemm", repaired.candidate.param_dict, (("pingpong", (2,)),))
    assert repaired.is_result and repaired in progress.state.results
    assert "pingpong site [2]" in script.prompts[0] and "pingpong_late site [2]" in \
        script.prompts[0]
    assert any(e["kind"] == "llm" and e["status"] == "ok" for e in read(run_file))
