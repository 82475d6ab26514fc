"""An IPython startup file for the kernels of tests/test_tracing.py: it gives the kernel a
tracer provider of the OpenTelemetry SDK whose finished spans are written, one JSON object a
line, to ``spans.jsonl`` in the IPython directory (``$IPYTHONDIR``, which reaches kernels
behind a gateway too), as an operator's startup file would set up an OTLP exporter."""


def _trace_to_file() -> None:
    import os

    from IPython.paths import get_ipython_dir
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    spans = open(os.path.join(get_ipython_dir(), "spans.jsonl"), "a", buffering=1)
    exporter = ConsoleSpanExporter(
        out=spans, formatter=lambda span: span.to_json(indent=None) + "\n"
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


_trace_to_file()
del _trace_to_file
