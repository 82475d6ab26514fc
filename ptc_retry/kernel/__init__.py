"""The kernel side: the IPython extension, its hooks, replay and resume, and the magics.

It runs inside the kernel and imports only the core, never the agent side.
"""
