"""The pure core: checkpoint store and session layout, program, edits, patch, guard,
notice, time limit and errors.

Nothing here imports IPython, ipykernel or jupyter_client, nor any other part of
ptc_retry: the kernel side and the agent side both build on it.
"""
