"""The OpenAI wire format, without HTTP: what a chat-completion request asks for, and the JSON of its answer.

A request is classified by how it asks for structured output (``json_schema`` response format, a tool,
JSON mode with the schema in a fenced block of the prompt, or plain text); the answer's text comes from
`schema_gen` (or from the rule that fired) and is wrapped into a completion, stream chunks or an error body.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Final

from greval.testing.openai.rules import FINISH, ServerConfig
from greval.testing.openai.schema_gen import Node, compile_schema, instance_of, violate

__all__ = [
    "Answer",
    "ChatRequest",
    "classify",
    "completion",
    "error_body",
    "fault_body",
    "item_ids",
    "output_text",
    "prompt_text",
    "refusal",
    "stream_payload",
]

_ITEM_IDS_RE: Final = re.compile(r"^[ \t]*Item ids:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_FENCE_RE: Final = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


# ------------------------------------------------------------------------------------------- the request
def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def prompt_text(messages: list[Any]) -> str:
    """All message contents joined: what rules match and what answers are keyed by."""
    return "\n".join(_content_text(m.get("content")) for m in messages if isinstance(m, dict))


def item_ids(prompt: str) -> list[str] | None:
    """The ids of the prompt's last ``Item ids:`` line (greval's per-item judges list them), else None."""
    if "Item ids:" not in prompt:
        return None
    matches = _ITEM_IDS_RE.findall(prompt)
    if not matches:
        return None
    return [part.strip() for part in matches[-1].split(",") if part.strip()]


def _schema_from_fences(prompt: str) -> dict[str, Any] | None:
    """JSON mode sends no schema; greval puts it in the prompt, the last fenced block wins."""
    if "```" not in prompt:
        return None
    for block in reversed(_FENCE_RE.findall(prompt)):
        try:
            candidate = json.loads(block)
        except ValueError:
            continue
        if isinstance(candidate, dict) and isinstance(candidate.get("properties"), dict):
            return candidate
    return None


@dataclass
class ChatRequest:
    """How a request wants its answer."""

    mode: str  # json_schema | tools | json_object | text
    schema: Any
    tool_name: str | None


def classify(body: dict[str, Any], prompt: str) -> ChatRequest:
    """A forced tool (or any tool when no JSON response format is asked for) wins over the response format."""
    fmt = body.get("response_format")
    fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
    tool = _tool_request(body, fmt_type)
    if tool is not None:
        return tool
    if fmt_type == "json_schema" and isinstance(fmt, dict):
        json_schema = fmt.get("json_schema") or {}
        return ChatRequest("json_schema", json_schema.get("schema") or {}, None)
    if fmt_type == "json_object":
        return ChatRequest("json_object", _schema_from_fences(prompt), None)
    return ChatRequest("text", None, None)


def _tool_request(body: dict[str, Any], fmt_type: Any) -> ChatRequest | None:
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    choice = body.get("tool_choice")
    forced = isinstance(choice, dict) or choice == "required"
    if not tools or choice == "none" or not (forced or fmt_type not in ("json_schema", "json_object")):
        return None
    tool = tools[0]
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        tool = next((t for t in tools if t["function"].get("name") == wanted), tools[0])
    function = tool["function"]
    return ChatRequest("tools", function.get("parameters") or {}, str(function.get("name", "tool")))


# ------------------------------------------------------------------------------------------- errors
def error_body(message: str, err_type: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def refusal(body: dict[str, Any], config: ServerConfig) -> dict[str, Any] | None:
    """The 400 error body when the request asks for what the configured model does not offer, else None."""
    fmt = body.get("response_format")
    if body.get("logprobs") and config.logprobs == "reject":
        return error_body(
            "Unsupported parameter: 'logprobs' is not supported with this model.",
            "invalid_request_error",
            param="logprobs",
            code="unsupported_parameter",
        )
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and not config.json_schema:
        return error_body(
            "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
            "invalid_request_error",
            param="response_format",
        )
    if body.get("tools") and not config.tools:
        return error_body(
            "Invalid parameter: 'tools' is not supported with this model.", "invalid_request_error", param="tools"
        )
    return None


_FAULT_KINDS: Final = {
    400: ("Invalid request (injected)", "invalid_request_error", None),
    401: ("Incorrect API key provided (injected)", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to sample from this model (injected)", "invalid_request_error", None),
    404: ("The model does not exist or you do not have access to it (injected)", "invalid_request_error", None),
    413: ("Request entity too large (injected)", "invalid_request_error", None),
    429: ("Rate limit reached (injected by greval test server)", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request (injected)", "server_error", None),
    503: ("The engine is currently overloaded (injected)", "server_error", "service_unavailable"),
}


def fault_body(status: int, action: dict[str, Any], authorization: str, request: dict[str, Any]) -> Any:
    """The JSON body of an injected error: ``action["body"]`` verbatim, or an OpenAI-style error object."""
    if "body" in action:
        fault: Any = json.loads(json.dumps(action["body"]))  # a copy: echoing must not change the rule
    else:
        message, err_type, code = _FAULT_KINDS.get(status, ("Injected fault", "server_error", None))
        if status == 404 and "message" not in action:
            message = f"The model `{request.get('model')}` does not exist or you do not have access to it."
        fault = {
            "error": {
                "message": action.get("message", message),
                "type": action.get("error_type", err_type),
                "param": action.get("param"),
                "code": action.get("code", code),
            }
        }
    echo = action.get("echo_auth")
    if echo:
        if echo == "token":  # the credential alone, without its scheme
            authorization = authorization.partition(" ")[2] or authorization
        error = fault.get("error") if isinstance(fault, dict) else None
        if isinstance(error, dict):
            error["message"] = f"{error.get('message', '')} (received Authorization: {authorization})".strip()
        elif isinstance(fault, dict):
            fault["authorization"] = authorization
    return fault


# ------------------------------------------------------------------------------------------- the answer
def output_text(
    req: ChatRequest, kind: Any, action: dict[str, Any], prompt: str, seed: int, choice: int, ids: list[str] | None
) -> str:
    """The assistant text (or tool arguments) for one choice."""
    if kind == "respond":
        if "text" in action:
            return str(action["text"])
        if req.mode == "text" and isinstance(action.get("content"), str):
            return str(action["content"])
        return json.dumps(action.get("content"))
    if req.mode == "text":
        return "OK" if kind not in FINISH else _finished(kind, "OK, a plain answer cut short")
    schema = req.schema
    if schema is None:  # JSON mode without a schema in the prompt
        value: Any = {}
        node = Node("object")
    else:
        node = compile_schema(schema)
        value = instance_of(node, prompt, seed=seed, choice=choice, ids=ids)
    if kind == "invalid":
        value = violate(node, value)
    text = json.dumps(value)
    if kind == "malformed":
        text = _malformed(text)
    return _finished(kind, text)


def _finished(kind: Any, text: str) -> str:
    """What is left of an answer that did not finish: half of it (length), nothing (content filter)."""
    if kind == "length":
        return text[: max(1, len(text) // 2)]
    return "" if kind == "content_filter" else text


def _malformed(text: str) -> str:
    """Truncate JSON mid-way and close it with the wrong bracket.

    A bare truncation is not enough: langchain's `parse_partial_json` repairs missing closing
    brackets, but it gives up on a mismatched one.
    """
    cut = text[: max(1, len(text) // 2)]
    stack: list[str] = []
    in_string = escaped = False
    for char in cut:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]" and stack:
            stack.pop()
    if escaped:
        cut = cut[:-1]
    if in_string:
        cut += '"'
    wrong = "]" if not stack or stack[-1] == "}" else "}"
    return cut + wrong


def _usage(prompt: str, outputs: list[str], cached: int) -> dict[str, Any]:
    """Tokens as this server counts them: the prompt's words, the answers' words, and of the prompt's words
    those a prefix cache held (``prompt_tokens_details.cached_tokens``, as OpenAI reports it)."""
    prompt_tokens = len(prompt.split())
    completion_tokens = sum(len(o.replace('"', " ").split()) for o in outputs)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _tool_call(req: ChatRequest, completion_id: str, index: int, arguments: str) -> dict[str, Any]:
    return {
        "id": f"call_{completion_id[9:21]}{index}",
        "type": "function",
        "function": {"name": req.tool_name, "arguments": arguments},
    }


def _header(body: dict[str, Any], completion_id: str, obj: str) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": obj,
        "created": int(time.time()),
        "model": body.get("model") or "greval-test",
        "system_fingerprint": "greval-test",
    }


@dataclass(frozen=True)
class Answer:
    """What every shape of an answer is built from: the request, each choice's text, and how it ended."""

    body: dict[str, Any]
    req: ChatRequest
    outputs: list[str]
    completion_id: str
    prompt: str
    finish_as: str | None = None
    cached: int = 0  # the prompt's words a prefix cache held (see State.cached_words)


def completion(answer: Answer, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``chat.completion`` object (``logprobs``: each choice's, when asked for and offered)."""
    choices = []
    for i, text in enumerate(answer.outputs):
        message: dict[str, Any]
        if answer.finish_as == "content_filter":
            message = {"role": "assistant", "content": None, "refusal": None}
            finish = answer.finish_as
        elif answer.req.mode == "tools":
            call = _tool_call(answer.req, answer.completion_id, i, text)
            message = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": text, "refusal": None}
            finish = "stop"
        finish = answer.finish_as or finish
        choice = {"index": i, "message": message, "logprobs": None if logprobs is None else logprobs[i]}
        choices.append({**choice, "finish_reason": finish})
    header = _header(answer.body, answer.completion_id, "chat.completion")
    return {**header, "choices": choices, "usage": _usage(answer.prompt, answer.outputs, answer.cached)}


def stream_payload(answer: Answer) -> bytes:
    """Server-sent events, one delta per choice: enough for clients that set ``stream=True``."""
    base = _header(answer.body, answer.completion_id, "chat.completion.chunk")
    chunks: list[dict[str, Any]] = []
    for i, text in enumerate(answer.outputs):
        if answer.req.mode == "tools":
            call = _tool_call(answer.req, answer.completion_id, i, text)
            delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **call}]}
            finish = "tool_calls"
        else:
            delta = {"role": "assistant", "content": text}
            finish = "stop"
        finish = answer.finish_as or finish
        chunks.append({**base, "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": i, "delta": {}, "logprobs": None, "finish_reason": finish}]})
    options = answer.body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**base, "choices": [], "usage": _usage(answer.prompt, answer.outputs, answer.cached)})
    return ("".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n").encode()
