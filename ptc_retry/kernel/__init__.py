"""The kernel side: the IPython extension, its hooks, replay and resume, and the magics.

It runs inside the kernel and imports only the core, never the agent side. The
extension (``extension``) imports the rooms it is made of; ``replay``, ``magics`` and
``remote`` reach it back only through the ``host`` interface, so imports go one way.
"""
