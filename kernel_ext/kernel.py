"""PtcRetryKernel: an IPythonKernel that loads ptc_retry and reports it in every reply."""

from __future__ import annotations

from typing import Any

from ipykernel.ipkernel import IPythonKernel

from ptc_retry.extension import METADATA_KEY, PtcRetryExtension, active_for, load_ipython_extension


class PtcRetryKernel(IPythonKernel):
    """A stock IPython kernel plus checkpoints, the failure notice and replay."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        load_ipython_extension(self.shell)

    @property
    def ptc_retry(self) -> PtcRetryExtension | None:
        return active_for(self.shell)

    def init_metadata(self, parent: dict[str, Any]) -> dict[str, Any]:
        md = super().init_metadata(parent)
        extension = self.ptc_retry
        if extension is not None:
            # A reply must never carry the previous request's facts.
            extension.reply_metadata = None
        return md

    def finish_metadata(
        self, parent: dict[str, Any], metadata: dict[str, Any], reply_content: dict[str, Any]
    ) -> dict[str, Any]:
        metadata = super().finish_metadata(parent, metadata, reply_content)
        extension = self.ptc_retry
        metadata[METADATA_KEY] = extension.reply_metadata if extension is not None else None
        return metadata
