"""The kernel's stdin channel, shared by everything that waits for the client's answer: a
program's batches of tool calls, the cancels of calls it no longer waits for, and a
person's ``input()`` or ``getpass`` from any thread. Each request gets its own reply.

ipykernel's own ``raw_input`` sends one input_request, then blocks the thread that asked
and takes whatever comes next on the stdin socket as the reply. So a tool call would stop
the program's event loop while it waits (no other task runs, ``asyncio.wait_for`` cannot
time out, a task cannot be cancelled), and an ``input()`` from another thread would take
the tool call's reply, or the other way round.

Here requests are queued, and one reader thread owns the socket while any request waits
(a pyzmq socket must not be used by two threads): it sends what is queued, then routes
each input_reply by its ``parent_header.msg_id`` to the request it answers; a reply that
names no parent (jupyter_client's ``kc.input()`` sends such) goes to the oldest request
that waits. A request answers through a callback, which a program's tool calls turn into
an asyncio future (:mod:`.tool_calls`), and ``input()`` waits for in its own thread
(:meth:`StdinChannel.ask`, which takes the place of ipykernel's ``_input_request``; its
signature is the same in ipykernel 6.29 and 7). The reader ends when nothing waits, so
that the socket is ours only while a request needs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: What a client answers to mean end-of-file (ipykernel's convention): ``input()`` raises
#: EOFError.
EOF = "\x04"

#: What a request is answered with: the reply's value, or the error that ended the channel.
Answer = str | Exception


@dataclass(frozen=True)
class Route:
    """Where the input_requests of the shell request running in this context go: the
    client's identity on the kernel's sockets, and the request itself (their parent)."""

    ident: Any
    parent: dict[str, Any]

    @property
    def allows_stdin(self) -> bool:
        """Whether the client said it answers input_requests (``allow_stdin``)."""
        return bool((self.parent.get("content") or {}).get("allow_stdin"))


@dataclass(eq=False)
class Request:
    """One input_request: queued, then sent by the reader, answered at most once."""

    prompt: str
    password: bool
    route: Route
    #: None: nobody waits for its reply, which is dropped when it comes.
    answer: Callable[[Answer], None] | None
    header: dict[str, Any] = field(default_factory=dict)

    @property
    def msg_id(self) -> str:
        return str(self.header.get("msg_id"))


class StdinChannel:
    """The stdin channel of one ipykernel kernel (see the module's docstring)."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self._lock = threading.Lock()
        self._queued: list[Request] = []
        #: Sent and not answered yet, oldest first.
        self._waiting: dict[str, Request] = {}
        self._reader: threading.Thread | None = None
        self._detached = False
        # The reader waits on the socket and on this pipe at once: a write wakes it to send
        # what was queued, or to end once nothing waits.
        self._wake_out, self._wake_in = os.pipe()
        os.set_blocking(self._wake_in, False)
        os.set_blocking(self._wake_out, False)

    # -- attaching to a kernel ----------------------------------------------------------------

    @classmethod
    def attach(cls, kernel: Any) -> StdinChannel | None:
        """A channel for ``kernel`` that its ``input()`` and ``getpass`` go through from now
        on; None when ``kernel`` is no ipykernel kernel (plain IPython: no stdin channel)."""
        needed = ("stdin_socket", "session", "_input_request", "_parent_ident", "get_parent")
        if kernel is None or any(getattr(kernel, name, None) is None for name in needed):
            return None
        channel = cls(kernel)
        # ipykernel's raw_input and getpass end in this method (same signature in 6.29 and
        # 7): this instance's attribute puts every person's input through the channel.
        kernel._input_request = channel.ask
        return channel

    def detach(self) -> None:
        """Give ``input()`` back to ipykernel; requests still waiting keep their answers."""
        if self._kernel.__dict__.get("_input_request") == self.ask:
            del self._kernel._input_request
        with self._lock:
            self._detached = True
            if self._reader is None:
                self._close_pipe()
            else:
                self._wake()  # it closes the pipe once nothing waits

    def route(self) -> Route:
        """The route of the shell request running in this context (thread, subshell)."""
        kernel = self._kernel
        # ``_parent_ident["shell"]`` is what raw_input passes in ipykernel 6.29 and 7.x.
        return Route(kernel._parent_ident["shell"], kernel.get_parent("shell") or {})

    # -- requests -----------------------------------------------------------------------------

    def submit(
        self,
        prompt: str,
        route: Route,
        answer: Callable[[Answer], None] | None = None,
        *,
        password: bool = False,
    ) -> Request:
        """Queue an input_request; ``answer`` is called once, from the reader's thread, with
        its reply's value (or the error that ended the channel). Without ``answer`` it is
        only sent: nothing waits for its reply. Returns at once."""
        header = self._kernel.session.msg_header("input_request")
        request = Request(prompt, password, route, answer, header)
        started = None
        with self._lock:
            self._queued.append(request)
            if self._reader is None:
                started = self._reader = threading.Thread(
                    target=self._read, name="ptc-retry stdin", daemon=True
                )
            else:
                self._wake()
        if started is not None:
            started.start()
        return request

    def abandon(self, request: Request) -> bool:
        """Stop waiting for ``request``: its reply, if one comes, is dropped. False when it
        had not been sent yet (now it never is)."""
        with self._lock:
            if request in self._queued:
                self._queued.remove(request)
                return False
            self._waiting.pop(request.msg_id, None)
            self._wake()  # a reader with nothing left to wait for ends
        return True

    def ask(self, prompt: str, ident: Any, parent: Any, password: bool = False) -> str:
        """What ipykernel's ``_input_request`` promises: the reply's value; EOFError for
        end-of-file; ``KeyboardInterrupt("Interrupted by user")`` when interrupted."""
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()  # what was printed before the prompt shows before it
        answered = threading.Event()
        answers: list[Answer] = []

        def keep(answer: Answer) -> None:
            answers.append(answer)
            answered.set()

        request = None
        try:
            request = self.submit(str(prompt), Route(ident, parent or {}), keep, password=password)
            answered.wait()  # a signal interrupts it in the main thread
        except BaseException as exc:
            if request is not None:
                self.abandon(request)
            if isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt("Interrupted by user") from None
            raise
        answer = answers[0]
        if isinstance(answer, Exception):
            raise answer
        if answer == EOF:
            raise EOFError
        return answer

    # -- the reader thread --------------------------------------------------------------------

    def _wake(self) -> None:
        """Wake the reader (with the lock held: the pipe is not closed meanwhile)."""
        if self._wake_in < 0:
            return
        with contextlib.suppress(BlockingIOError):  # full: the reader is awake already
            os.write(self._wake_in, b"\0")

    def _read(self) -> None:
        import zmq

        socket, session = self._kernel.stdin_socket, self._kernel.session
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(self._wake_out, zmq.POLLIN)
        try:
            self._drop_stale(socket)
            while self._send_queued(session, socket):
                for _ in poller.poll():
                    pass
                with contextlib.suppress(OSError):
                    os.read(self._wake_out, 4096)
                self._receive(session, socket)
        except Exception as exc:  # the socket went away (the kernel is shutting down)
            log.warning("the kernel's stdin channel failed: %s", exc)
            self._fail_all(exc)

    def _send_queued(self, session: Any, socket: Any) -> bool:
        """Send what is queued; False (and the reader is done) when nothing waits then."""
        with self._lock:
            queued, self._queued = self._queued, []
            for request in queued:
                if request.answer is not None:
                    self._waiting[request.msg_id] = request
        for request in queued:
            content = {"prompt": request.prompt, "password": request.password}
            route = request.route
            session.send(
                socket,
                "input_request",
                content,
                parent=route.parent,
                ident=route.ident,
                header=request.header,
            )
        with self._lock:
            if self._waiting or self._queued:
                return True
            self._reader = None  # from here on, a new request starts a new reader
            if self._detached:
                self._close_pipe()
            return False

    def _drop_stale(self, socket: Any) -> None:
        """Replies already there when a reader starts answer requests nobody waits for
        (abandoned ones): ipykernel drops them before each request, as this does."""
        import zmq

        while True:
            try:
                socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return

    def _receive(self, session: Any, socket: Any) -> None:
        import zmq

        while True:
            try:
                _, reply = session.recv(socket, mode=zmq.NOBLOCK)
            except zmq.ZMQError:
                raise
            except Exception:  # a message that does not deserialise (a bad signature)
                log.warning("an invalid message on the stdin channel", exc_info=True)
                continue
            if reply is None:
                return
            self._route(reply)

    def _route(self, reply: dict[str, Any]) -> None:
        """Answer the request ``reply`` is for: its parent, else the oldest that waits."""
        if reply.get("msg_type") != "input_reply":
            log.warning("a %r message on the stdin channel: dropped", reply.get("msg_type"))
            return
        parent = (reply.get("parent_header") or {}).get("msg_id")
        with self._lock:
            if parent:
                request = self._waiting.pop(parent, None)
            else:
                oldest = next(iter(self._waiting), None)
                request = self._waiting.pop(oldest) if oldest is not None else None
        if request is None or request.answer is None:
            log.info("an input_reply for a request nobody waits for: dropped")
            return
        value = (reply.get("content") or {}).get("value")
        if not isinstance(value, str):
            log.error("a bad input_reply (no value) for %s", request.msg_id)
            value = ""
        request.answer(value)

    def _fail_all(self, error: Exception) -> None:
        with self._lock:
            requests = [*self._waiting.values(), *self._queued]
            self._waiting.clear()
            self._queued.clear()
            self._reader = None
        for request in requests:
            if request.answer is not None:
                request.answer(error)

    def _close_pipe(self) -> None:
        """With the lock held, once no reader uses it."""
        for fd in (self._wake_out, self._wake_in):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_out = self._wake_in = -1
