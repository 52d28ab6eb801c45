// A remote write 2.0 sender built on Prometheus's own remote-write library
// (github.com/prometheus/client_golang/exp/api/remote and its io.prometheus.write.v2 types): one
// request with float samples, an exponential and a custom-bucket native histogram, an exemplar,
// metadata and a created timestamp, sent to the URL given; prints the written counts the
// receiver's response headers reported, as JSON. Exits non-zero when the library reports an
// error (a non-2xx answer, or a 2xx without the 2.0 written headers).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/exp/api/remote"
	writev2 "github.com/prometheus/client_golang/exp/api/remote/genproto/v2"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: rw2_sender <write URL> <timestamp ms>")
		os.Exit(2)
	}
	ts, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "timestamp:", err)
		os.Exit(2)
	}
	api, err := remote.NewAPI(os.Args[1], remote.WithAPIPath(""),
		remote.WithAPIBackoff(remote.BackoffConfig{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond, MaxRetries: 2}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
	symbols := writev2.NewSymbolTable()
	series := func(labels ...string) []uint32 { return symbols.SymbolizeLabels(labels, nil) }
	meta := func(t writev2.Metadata_MetricType, help, unit string) *writev2.Metadata {
		return &writev2.Metadata{Type: t, HelpRef: symbols.Symbolize(help), UnitRef: symbols.Symbolize(unit)}
	}
	request := &writev2.Request{
		Timeseries: []*writev2.TimeSeries{
			{
				LabelsRefs: series("__name__", "rw2_requests_total", "job", "rw2", "path", "/a"),
				Samples:    []*writev2.Sample{{Value: 5, Timestamp: ts - 1000}, {Value: 8, Timestamp: ts}},
				Exemplars: []*writev2.Exemplar{{
					LabelsRefs: series("trace_id", "4bf92f3577b34da6"), Value: 1, Timestamp: ts,
				}},
				Metadata:         meta(writev2.Metadata_METRIC_TYPE_COUNTER, "Requests served.", ""),
				CreatedTimestamp: ts - 60000,
			},
			{
				LabelsRefs: series("__name__", "rw2_temperature_celsius", "job", "rw2"),
				Samples:    []*writev2.Sample{{Value: 21.5, Timestamp: ts}},
				Metadata:   meta(writev2.Metadata_METRIC_TYPE_GAUGE, "Room temperature.", "celsius"),
			},
			{
				// Exponential schema 0: buckets (0.5,1], (1,2], (2,4] hold 2, 1, 2; zero bucket 1.
				LabelsRefs: series("__name__", "rw2_latency_seconds", "job", "rw2"),
				Histograms: []*writev2.Histogram{{
					Count:         &writev2.Histogram_CountInt{CountInt: 6},
					Sum:           9.5,
					Schema:        0,
					ZeroThreshold: 1e-128,
					ZeroCount:     &writev2.Histogram_ZeroCountInt{ZeroCountInt: 1},
					PositiveSpans: []*writev2.BucketSpan{{Offset: 0, Length: 3}},
					PositiveDeltas: []int64{2, -1, 1},
					Timestamp:     ts,
				}},
				Metadata: meta(writev2.Metadata_METRIC_TYPE_HISTOGRAM, "Request latency.", "seconds"),
			},
			{
				// Custom buckets (schema -53): (-Inf,0.1], (0.1,0.5], (0.5,1], (1,+Inf] hold 1, 2, 2, 1.
				LabelsRefs: series("__name__", "rw2_nhcb_seconds", "job", "rw2"),
				Histograms: []*writev2.Histogram{{
					Count:          &writev2.Histogram_CountInt{CountInt: 6},
					Sum:            4.2,
					Schema:         -53,
					PositiveSpans:  []*writev2.BucketSpan{{Offset: 0, Length: 4}},
					PositiveDeltas: []int64{1, 1, 0, -1},
					CustomValues:   []float64{0.1, 0.5, 1},
					Timestamp:      ts,
				}},
				Metadata: meta(writev2.Metadata_METRIC_TYPE_HISTOGRAM, "Queue wait.", "seconds"),
			},
		},
	}
	request.Symbols = symbols.Symbols()
	stats, err := api.Write(context.Background(), remote.WriteV2MessageType, request)
	if err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(map[string]int{
		"samples": stats.Samples, "histograms": stats.Histograms, "exemplars": stats.Exemplars,
	})
	fmt.Println(string(out))
}
