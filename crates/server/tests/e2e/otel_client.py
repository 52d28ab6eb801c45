"""The OpenTelemetry Python SDK with the OTLP/HTTP (protobuf, gzip) exporter: an exponential
histogram (ExponentialBucketHistogramAggregation view, delta temporality) and a cumulative
counter, exported once by force_flush. Names as Prometheus's OTLP receiver makes them by default:
the histogram of unit "ms" is e2e_otel_latency_milliseconds, the counter e2e_otel_requests_total,
resource attribute host.name is host_name."""

import logging
import math

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (AggregationTemporality,
                                              PeriodicExportingMetricReader)
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from common import (BASE, check, fetch, finish, llhist_bin, now_ms, prom, prom_available,
                    prom_instant, run_checks, within)

VALUES = [5 * 1.03 ** i for i in range(150)]
MAX_SIZE = 160
MAX_SCALE = 20


class Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def exp_index(v, scale):
    """OTel bucket index at `scale`: bucket i covers (base^i, base^(i+1)]."""
    return math.ceil(math.log2(v) * 2 ** scale) - 1


def sdk_scale(values):
    """The scale the SDK ends at: the largest ≤ MAX_SCALE whose index span fits MAX_SIZE."""
    for s in range(MAX_SCALE, -11, -1):
        idx = [exp_index(v, s) for v in values]
        if max(idx) - min(idx) + 1 <= MAX_SIZE:
            return s
    raise AssertionError("no scale fits")


def quantile_range_exp(values, q, scale):
    """The quantile lands in the llhist bins overlapping the exponential bucket that holds the
    rank-q sample (the conversion spreads a bucket over the bins it overlaps)."""
    s = sorted(values)
    n = len(s)
    lo_v = s[max(0, math.floor(q * n) - 1)]
    hi_v = s[min(n - 1, math.ceil(q * n))]
    base = 2.0 ** (2.0 ** -scale)
    lo = base ** exp_index(lo_v, scale)
    hi = base ** (exp_index(hi_v, scale) + 1)
    return llhist_bin(lo)[0], llhist_bin(hi * (1 - 1e-12))[1]


def main():
    errors = Errors()
    logging.getLogger("opentelemetry").addHandler(errors)
    exporter = OTLPMetricExporter(
        endpoint=BASE + "/v1/metrics", compression=Compression.Gzip,
        preferred_temporality={Histogram: AggregationTemporality.DELTA})
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({"service.name": "e2e-otel", "host.name": "h1"}),
        views=[View(instrument_name="e2e_otel_latency",
                    aggregation=ExponentialBucketHistogramAggregation(max_size=MAX_SIZE,
                                                                      max_scale=MAX_SCALE))])
    meter = provider.get_meter("e2e")
    hist = meter.create_histogram("e2e_otel_latency", unit="ms")
    counter = meter.create_counter("e2e_otel_requests")
    t0 = now_ms()
    for v in VALUES:
        hist.record(v, {"route": "/checkout"})
    counter.add(40, {"route": "/checkout"})
    counter.add(2, {"route": "/checkout"})
    flushed = provider.force_flush(timeout_millis=30_000)
    provider.shutdown()
    check("otel: force_flush exported without errors", flushed and not errors.records,
          errors.records)
    start, end = t0 - 120_000, now_ms() + 60_000
    scale = sdk_scale(VALUES)

    def values():
        s = fetch("and(__name:e2e_otel_latency_milliseconds)", start, end, transform="count")
        check("otel: one histogram stream tagged job (service.name) and route, host.name only "
              "on target_info (as host_name)",
              len(s) == 1 and {"job:e2e-otel", "route:/checkout"} <= set(s[0]["tags"])
              and not any(t.startswith(("host.name:", "host_name:")) for t in s[0]["tags"]), s)
        total = sum(d["value"] for x in s for d in x["data"] if d.get("value"))
        check("otel: exponential histogram count = 150", total == len(VALUES), s)
        qs = [0.5, 0.9, 0.99]
        s = fetch("and(__name:e2e_otel_latency_milliseconds)", start, end, period="3600s",
                  transform="quantile:" + ",".join(map(str, qs)))
        vals = [d["value"] for x in s for d in x["data"] if d.get("value")]
        for i, q in enumerate(qs):
            lo, hi = quantile_range_exp(VALUES, q, scale)
            got = vals[0][i] if len(vals) == 1 else None
            check(f"otel: quantile {q} in [{lo:.4g}, {hi:.4g}] (scale {scale}, fetch)",
                  within(got, lo, hi), vals)
        s = fetch("and(__name:e2e_otel_requests_total)", start, end)
        lasts = [d["last"] for x in s for d in x["data"] if d.get("count")]
        check("otel: cumulative counter = 42", lasts[-1:] == [42], s)
        if prom_available():
            t = now_ms() / 1000
            lo, hi = quantile_range_exp(VALUES, 0.5, scale)
            r = prom_instant("histogram_quantile(0.5, e2e_otel_latency_milliseconds)", t)
            got = list(r.values())[0] if len(r) == 1 else None
            check(f"otel: histogram_quantile(0.5) in [{lo:.4g}, {hi:.4g}] (PromQL)",
                  within(got, lo, hi), r)
            r = prom_instant('e2e_otel_requests_total{route="/checkout"}', t)
            check("otel: counter = 42 (PromQL)", list(r.values()) == [42.0], r)
            m = prom("/api/v1/metadata", {}, post=False)
            kinds = {name: [e.get("type") for e in entries] for name, entries in m.items()}
            check("otel: /api/v1/metadata types from OTLP (counter, histogram, ms)",
                  kinds.get("e2e_otel_requests_total") == ["counter"]
                  and kinds.get("e2e_otel_latency_milliseconds") == ["histogram"]
                  and m["e2e_otel_latency_milliseconds"][0].get("unit") == "ms", m)
    run_checks("otel values", values)
    finish()


if __name__ == "__main__":
    main()
