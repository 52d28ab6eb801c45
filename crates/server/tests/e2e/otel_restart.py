"""OTLP from the OpenTelemetry Python SDK across a process restart. Run twice, `first` then
`second`, each a new process with the SDK's own resource (telemetry.sdk.*) plus the attributes a
deployment sets through OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.namespace, a
stable service.instance.id, deployment.environment). Labels follow the OpenTelemetry-Prometheus
compatibility spec: job = "shop/cart", instance = the instance id, deployment.environment
promoted by the server's config, every other resource attribute on `target_info` only; so both
processes write one series. Names as Prometheus's OTLP receiver makes them by default: the
counter is e2e_restart_requests_total, attribute keys have `_` for `.`."""

import logging
import os
import sys

os.environ["OTEL_SERVICE_NAME"] = "cart"
os.environ["OTEL_RESOURCE_ATTRIBUTES"] = (
    "service.namespace=shop,service.instance.id=cart-1,deployment.environment=e2e,"
    "host.name=h1")

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402

from common import BASE, check, fetch, finish, now_ms, poll, run_checks, tags_of  # noqa: E402

SERIES_TAGS = {"job:shop/cart", "instance:cart-1", "deployment_environment:e2e",
               "route:/buy"}
ADDED = {"first": 5, "second": 7}


class Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def main():
    phase = sys.argv[1]
    errors = Errors()
    logging.getLogger("opentelemetry").addHandler(errors)
    exporter = OTLPMetricExporter(endpoint=BASE + "/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create())
    counter = provider.get_meter("e2e").create_counter("e2e_restart_requests")
    t0 = now_ms()
    counter.add(ADDED[phase], {"route": "/buy"})
    flushed = provider.force_flush(timeout_millis=30_000)
    provider.shutdown()
    check(f"otel restart ({phase}): exported without errors", flushed and not errors.records,
          errors.records)
    start, end = t0 - 3_600_000, now_ms() + 60_000

    def series():
        want = ADDED[phase]

        def current():
            s = fetch("and(__name:e2e_restart_requests_total)", start, end)
            lasts = [d["last"] for x in s for d in x["data"] if d.get("count")]
            return s if lasts and lasts[-1] == want else None

        s = poll(current, "the counter's value") or []
        check(f"otel restart ({phase}): one series, job, instance, promoted and point tags only",
              len(s) == 1 and tags_of(s[0]) == SERIES_TAGS, s)
        info = fetch("and(__name:target_info)", start, end)
        mine = [x for x in info if "job:shop/cart" in tags_of(x)]
        check(f"otel restart ({phase}): one target_info with the other resource attributes",
              len(mine) == 1 and {"instance:cart-1", "host_name:h1",
                                  "telemetry_sdk_language:python"} <= tags_of(mine[0])
              and not any(t.startswith(("service.", "service_")) for t in tags_of(mine[0])), info)
    run_checks(f"otel restart ({phase})", series)
    finish()


if __name__ == "__main__":
    main()
