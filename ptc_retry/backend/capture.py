"""The outputs of one execution, turned into the text a model reads and kept bounded however
much the program prints. Pure code: it sees message contents, never a kernel."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..core import sentences as said
from ..core.protocol import strip_ansi

__all__ = ["MAX_RAW_OUTPUTS", "MAX_RAW_OUTPUT_CHARS", "Capture", "strip_ansi"]

#: Raw outputs kept in ``RunResult.outputs``: characters of text and encoded data, and count.
MAX_RAW_OUTPUT_CHARS = 1_000_000
MAX_RAW_OUTPUTS = 1_000

_BINARY_TYPES = ("image/", "audio/", "video/", "application/pdf", "application/octet-stream")


class Capture:
    """The outputs of one execution, bounded however much the program prints.

    ``text()``: stdout and stderr as printed, each ``execute_result`` and ``display_data``
    as its ``text/plain`` (binary data as a placeholder such as ``[image/png output,
    12.3 kB]``), tracebacks without ANSI codes; its first ``max_chars // 2`` characters and
    a rolling tail of the rest around ``[... 12,345 characters cut ...]``. ``outputs``: the
    raw outputs (nbformat v4 dicts, consecutive streams merged), which stop growing after
    ``max_raw`` characters or ``MAX_RAW_OUTPUTS`` outputs (an error is always kept). So the
    memory held does not grow with the output; only the one message being read is held
    whole while it is decoded, and its size is the kernel's choice.
    """

    def __init__(self, max_chars: int, max_raw: int = MAX_RAW_OUTPUT_CHARS) -> None:
        self.head_max = max_chars // 2
        self.tail_max = max_chars - self.head_max
        self.head: list[str] = []
        self.head_len = 0
        self.tail: list[str] = []
        self.tail_len = 0
        #: Characters of text the outputs came to, before truncation.
        self.total = 0
        self.last = "\n"  # the last character added, so each rich output starts a line
        self.outputs: list[dict[str, Any]] = []
        self.max_raw = max_raw
        self.raw = 0
        self.raw_cut = False

    @property
    def truncated(self) -> bool:
        """Whether the text or the raw outputs lost part of what came."""
        return self.raw_cut or self.total > self.head_max + self.tail_max

    def add(self, msg_type: str, content: Mapping[str, Any]) -> None:
        """Take one iopub message: ``stream``, ``execute_result``, ``display_data``, ``error``."""
        if msg_type == "stream":
            text = content.get("text", "")
            self._text(text)
            self._raw_stream(content.get("name", "stdout"), text)
        elif msg_type in ("execute_result", "display_data"):
            data = content.get("data") or {}
            self._text(_bundle_text(data), line=True)
            output: dict[str, Any] = {
                "output_type": msg_type,
                "data": data,
                "metadata": content.get("metadata") or {},
            }
            if msg_type == "execute_result":
                output["execution_count"] = content.get("execution_count")
            self._raw(output, sum(_chars(value) for value in data.values()))
        elif msg_type == "error":
            traceback = content.get("traceback") or [
                f"{content.get('ename')}: {content.get('evalue')}"
            ]
            self._text("\n".join(traceback) + "\n", line=True)
            output = {
                "output_type": "error",
                "ename": content.get("ename", ""),
                "evalue": content.get("evalue", ""),
                "traceback": list(traceback),
            }
            self._raw(output, 0, always=True)  # what the program ended with

    def text(self) -> str:
        """What the model reads of the outputs so far."""
        head = "".join(self.head)
        tail = "".join(self.tail)[-self.tail_max :] if self.tail else ""
        cut = self.total - len(head) - len(tail)
        if cut <= 0:
            return head + tail
        marker = f"\n[... {cut:,} characters cut ...]\n"
        return head + marker + tail

    def _text(self, text: str, *, line: bool = False) -> None:
        text = strip_ansi(text)
        if line and self.last != "\n":
            text = "\n" + text
        if not text:
            return
        self.total += len(text)
        self.last = text[-1]
        if self.head_len < self.head_max:
            part = text[: self.head_max - self.head_len]
            self.head.append(part)
            self.head_len += len(part)
            text = text[len(part) :]
            if not text:
                return
        if len(text) >= self.tail_max:  # one big piece: no need to copy it whole
            self.tail, self.tail_len = [text[-self.tail_max :]], self.tail_max
            return
        self.tail.append(text)
        self.tail_len += len(text)
        if self.tail_len > 2 * self.tail_max:  # compact now and then: amortised linear
            kept = "".join(self.tail)[-self.tail_max :]
            self.tail, self.tail_len = [kept], len(kept)

    def _raw_stream(self, name: str, text: str) -> None:
        room = self.max_raw - self.raw
        if room <= 0:
            self.raw_cut = self.raw_cut or bool(text)
            return
        part = text[:room]
        self.raw_cut = self.raw_cut or len(part) < len(text)
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += part
        elif len(self.outputs) < MAX_RAW_OUTPUTS:
            self.outputs.append({"output_type": "stream", "name": name, "text": part})
        else:
            self.raw_cut = True
            return
        self.raw += len(part)

    def _raw(self, output: dict[str, Any], size: int, *, always: bool = False) -> None:
        full = self.raw + size > self.max_raw or len(self.outputs) >= MAX_RAW_OUTPUTS
        if full and not always:
            self.raw_cut = True
            return
        self.raw += size
        self.outputs.append(output)


def _bundle_text(data: Mapping[str, Any]) -> str:
    """A display's text for the model: text/plain, and a placeholder for binary data."""
    parts = [_placeholder(mime, value) for mime, value in data.items() if _is_binary(mime)]
    plain = data.get("text/plain")
    if isinstance(plain, str):
        parts.append(plain)
    elif not parts and data:  # e.g. only text/html: say what there was
        mime = next(iter(data))
        parts.append(_placeholder(mime, data[mime]))
    return "\n".join(parts) + "\n" if parts else ""


def _is_binary(mime: str) -> bool:
    return mime.startswith(_BINARY_TYPES) and mime != "image/svg+xml"


def _placeholder(mime: str, value: Any) -> str:
    """``[image/png output, 12.3 kB]``: the size is that of the decoded data."""
    if _is_binary(mime) and isinstance(value, str):  # base64, possibly with line breaks
        chars = len(value) - value.count("\n")
        size = max(0, chars * 3 // 4 - value[-2:].count("="))
    elif isinstance(value, str):
        size = len(value.encode("utf-8", "surrogatepass"))
    else:
        size = _chars(value)
    return said.OUTPUT_PLACEHOLDER.render(mime=mime, size=_human_size(size))


def _chars(value: Any) -> int:
    """Characters a MIME value takes in memory (JSON values as their JSON text)."""
    return len(value) if isinstance(value, str) else len(json.dumps(value, default=str))


def _human_size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} kB"
    return f"{n / 1_000_000:.1f} MB"
