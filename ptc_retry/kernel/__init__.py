"""The kernel side: the IPython extension, its hooks, replay and resume, the magics, and
the agent's tools inside programs (``tools``, ``@ptc_retry.recorded``, their recording).

It runs inside the kernel and imports only the core, never the agent side. The
extension (``extension``) imports the rooms it is made of; ``replay``, ``magics``,
``remote`` and the tool modules reach it back only through the ``host`` interface, so
imports go one way.
"""
