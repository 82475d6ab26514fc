"""PtcRetryKernel: an IPythonKernel that loads ptc_retry and reports it in every reply."""

from __future__ import annotations

from typing import Any

from ipykernel.ipkernel import IPythonKernel

from ptc_retry.core.protocol import METADATA_KEY
from ptc_retry.kernel.extension import PtcRetryExtension, active_for


class PtcRetryKernel(IPythonKernel):
    """A stock IPython kernel plus checkpoints, the failure notice and replay."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        shell = self.shell
        assert shell is not None  # IPythonKernel.__init__ made it
        # Through IPython's extension manager, so that %unload_ext ptc_retry knows it is loaded.
        shell.extension_manager.load_extension("ptc_retry")

    @property
    def ptc_retry(self) -> PtcRetryExtension | None:
        return active_for(self.shell)

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        """The stock kernel's, and a reply even when an exception escapes IPython's
        machinery: ipykernel sends none then, and a KeyboardInterrupt stops its shell."""
        # cell_meta and cell_id stay keyword parameters: kernelbase reads the signature.
        try:
            reply: dict[str, Any] = await super().do_execute(
                code,
                silent,
                store_history,
                user_expressions,
                allow_stdin,
                cell_meta=cell_meta,
                cell_id=cell_id,
            )
        except (Exception, KeyboardInterrupt) as exc:
            return self._escaped(exc)
        return reply

    def _escaped(self, error: BaseException) -> dict[str, Any]:
        """The error reply of a request whose cell raised ``error`` out of IPython."""
        shell = self.shell
        assert shell is not None
        shell.showtraceback((type(error), error, error.__traceback__))
        return {
            "status": "error",
            "ename": type(error).__name__,
            "evalue": str(error),
            "traceback": shell._last_traceback or [],
            "execution_count": shell.execution_count - 1,
            "user_expressions": {},
            "payload": [],
        }

    def finish_metadata(
        self, parent: dict[str, Any], metadata: dict[str, Any], reply_content: dict[str, Any]
    ) -> dict[str, Any]:
        metadata = super().finish_metadata(parent, metadata, reply_content)
        extension = self.ptc_retry
        msg_id = (parent.get("header") or {}).get("msg_id")
        # The facts of this request's own program: a subshell's cell may have ended since.
        metadata[METADATA_KEY] = (
            extension.take_reply_metadata(msg_id) if extension is not None else None
        )
        return metadata
