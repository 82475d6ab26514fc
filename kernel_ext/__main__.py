"""``python -m kernel_ext -f CONNECTION_FILE``: start the ptc-retry kernel."""

from __future__ import annotations

from ipykernel.kernelapp import IPKernelApp

from kernel_ext.kernel import PtcRetryKernel

if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=PtcRetryKernel)
