// A Prometheus exporter for the checks crate's tests: client_golang serving known values in
// every exposition format it negotiates (protobuf, OpenMetrics, text), including a native
// histogram. Usage: exporter 127.0.0.1:PORT
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: exporter ADDR")
		os.Exit(2)
	}
	reg := prometheus.NewRegistry()

	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_test_requests_total", Help: "Requests served.",
	}, []string{"code"})
	requests.WithLabelValues("200").Add(7)
	requests.WithLabelValues("500").Add(2)

	temperature := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "strata_test_temperature_celsius", Help: "A gauge.",
	})
	temperature.Set(21.5)

	classic := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "strata_test_classic_seconds", Help: "A classic histogram.",
		Buckets: []float64{0.1, 0.5, 1},
	})
	for _, v := range []float64{0.05, 0.2, 0.3, 0.7, 2} {
		classic.Observe(v)
	}

	// Native only: schema 3 (factor 1.1), no classic buckets.
	native := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "strata_test_native_seconds", Help: "A native histogram.",
		NativeHistogramBucketFactor: 1.1,
		Buckets:                     []float64{},
	})
	for _, v := range []float64{0.003, 0.003, 0.042, 0.042, 0.042, 1.7, 12.5} {
		native.Observe(v)
	}

	summary := prometheus.NewSummary(prometheus.SummaryOpts{
		Name: "strata_test_summary_seconds", Help: "A summary.",
		Objectives: map[float64]float64{0.5: 0.05},
	})
	for _, v := range []float64{1, 2, 3} {
		summary.Observe(v)
	}

	reg.MustRegister(requests, temperature, classic, native, summary)

	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	http.Handle("/metrics", handler)
	fmt.Println("listening")
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
