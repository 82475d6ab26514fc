"""An IPython startup file that makes a ptc-retry kernel export its spans over OTLP
(docs/operators.md): copy it into ``$IPYTHONDIR/profile_default/startup/`` of the kernel's
environment (``~/.ipython`` by default). The standard ``OTEL_*`` variables configure the
exporter (``OTEL_EXPORTER_OTLP_ENDPOINT`` and the rest); it needs ``opentelemetry-sdk`` and
``opentelemetry-exporter-otlp-proto-http`` installed beside the kernel."""


def _export_spans() -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The name it has in a trace viewer (it wins over OTEL_SERVICE_NAME).
    provider = TracerProvider(resource=Resource.create({"service.name": "ptc-retry-kernel"}))
    # Batched: the kernel sends spans every few seconds and at exit, not at each span's end.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


_export_spans()
del _export_spans
