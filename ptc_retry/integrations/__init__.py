"""Adapters for agent frameworks, each in its own module and behind its own extra (the core
install brings none of the frameworks): ``smolagents`` (``PtcRetryExecutor``),
``openai_agents``, ``pydantic_ai`` (``PtcRetry``) and ``langgraph``; the last three share
``run_code.RunCodeTool``. See docs/integrations.md."""
