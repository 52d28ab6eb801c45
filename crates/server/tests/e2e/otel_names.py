"""OTLP metric and label names: the OpenTelemetry Python SDK exports one set of metrics (dotted
names, UCUM units, a monotonic and an up-down counter, a gauge of unit "1", a histogram, odd
attribute keys) and the series the receiver made are listed through `/api/v1/series`.

    otel_names.py record <prometheus base url> <file>   (scripts/otlp-names-prometheus)
    otel_names.py check <file>                           (crates/server/tests/e2e_otlp_names.rs)

`record` sends to a real Prometheus 3.5 (`--web.enable-otlp-receiver`) and writes what it
made; `check` sends to `strata serve` (STRATA_E2E_HTTP) and compares its series with the
recording, one check per metric family. A Prometheus classic histogram's `_bucket`, `_sum` and
`_count` series (and its `le`) are one family: Strata keeps one histogram series under the
family name."""

import json
import logging
import os
import sys
import time
import urllib.parse
import urllib.request

os.environ["OTEL_SERVICE_NAME"] = "names"
os.environ["OTEL_RESOURCE_ATTRIBUTES"] = (
    "service.namespace=otlp,service.instance.id=names-1,deployment.environment=e2e,"
    "host.name=h1,k8s.pod.name=names-7f")

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # noqa: E402
from opentelemetry.metrics import Observation  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402

JOB = "otlp/names"
POLL_ROUNDS_MAX = 100


def export(endpoint):
    """The metrics, exported once to `endpoint` (an OTLP/HTTP metrics URL)."""
    errors = []

    class Errors(logging.Handler):
        def emit(self, record):
            errors.append(record.getMessage())

    logging.getLogger("opentelemetry").addHandler(Errors(logging.WARNING))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint),
                                           export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create())
    meter = provider.get_meter("names")
    attrs = {"http.method": "GET", "url.scheme": "https", "1st.try": "yes", "_private": "p"}
    meter.create_counter("http.server.requests", unit="{request}").add(3, attrs)
    meter.create_counter("net.io", unit="By").add(1024, {"direction": "in"})
    meter.create_counter("db.calls.total").add(2, {"db.system": "pg"})
    meter.create_counter("http.2xx-responses").add(1)
    meter.create_up_down_counter("queue.items", unit="{item}").add(4, {"queue.name": "q"})
    meter.create_up_down_counter("process.memory.usage", unit="By").add(2048)
    meter.create_histogram("http.server.duration", unit="ms").record(12.5, {"http.route": "/a"})
    meter.create_histogram("rpc.latency", unit="s").record(0.25)
    meter.create_observable_gauge("system.cpu.utilization", [lambda _: [Observation(0.5)]],
                                  unit="1")
    meter.create_observable_gauge("room.temperature", [lambda _: [Observation(21.5)]],
                                  unit="Cel")
    meter.create_observable_gauge("disk.io.rate", [lambda _: [Observation(7.0)]],
                                  unit="By/s")
    flushed = provider.force_flush(timeout_millis=30_000)
    provider.shutdown()
    return flushed, errors


def get_json(base, path, params):
    url = base + path + "?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def families(base):
    """{family: sorted list of label sets (without __name__ and le)} of the job's series and
    its target_info, once both are there."""
    for _ in range(POLL_ROUNDS_MAX):
        found = get_json(base, "/api/v1/series", {"match[]": [f'{{job="{JOB}"}}']})["data"]
        names = {s["__name__"] for s in found}
        if "target_info" in names and len(names) >= 12:
            break
        time.sleep(0.2)
    out = {}
    names = {s["__name__"] for s in found}
    for s in found:
        name = s.pop("__name__")
        s.pop("le", None)
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] + "_bucket" in names:
                name = name[: -len(suffix)]
        labels = sorted([k, v] for k, v in s.items())
        if labels not in out.setdefault(name, []):
            out[name].append(labels)
    for labels in out.values():
        labels.sort()
    return out


def main():
    mode = sys.argv[1]
    if mode == "record":
        base, path = sys.argv[2].rstrip("/"), sys.argv[3]
        flushed, errors = export(base + "/api/v1/otlp/v1/metrics")
        if not flushed or errors:
            sys.exit(f"export to Prometheus failed: {errors}")
        with open(path, "w") as f:
            json.dump(families(base), f, indent=1, sort_keys=True)
            f.write("\n")
        return
    from common import BASE, check, finish
    with open(sys.argv[2]) as f:
        want = json.load(f)
    flushed, errors = export(BASE + "/v1/metrics")
    check("otlp names: exported without errors", flushed and not errors, errors)
    got = families(BASE)
    for name in sorted(set(want) | set(got)):
        check(f"otlp names: {name} as Prometheus 3.5 names it, labels too",
              got.get(name) == want.get(name),
              f"strata {got.get(name)} / prometheus {want.get(name)}")
    finish()


if __name__ == "__main__":
    main()
