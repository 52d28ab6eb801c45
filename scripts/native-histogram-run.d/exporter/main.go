// An exporter for scripts/native-histogram-run: client_golang with one native histogram `nh`
// (bucket factor 1.1, no classic buckets) fed about `-rate` observations a second of a known
// distribution (log-normal, median 0.1, σ 0.8, seeded), and `nh_observations_true_total`, the
// observations it made. It starts observing once it has been scraped, observes for
// `-observe-s` seconds, then stays idle (so its last counts are scraped before it is stopped).
// Usage: exporter -listen 127.0.0.1:PORT -seed N -observe-s S
package main

import (
	"flag"
	"log"
	"math"
	"math/rand"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:19101", "address to serve /metrics on")
	seed := flag.Int64("seed", 1, "seed of the observations")
	observeS := flag.Int("observe-s", 180, "seconds to observe after the first scrape")
	rate := flag.Float64("rate", 20, "observations per second")
	flag.Parse()

	reg := prometheus.NewRegistry()
	nh := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:                        "nh",
		Help:                        "Observations of a log-normal distribution.",
		NativeHistogramBucketFactor: 1.1,
	})
	observed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nh_observations_true_total",
		Help: "Observations made into nh.",
	})
	reg.MustRegister(nh, observed)

	var scraped atomic.Bool
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	http.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metrics.ServeHTTP(w, r)
		scraped.Store(true)
	}))

	go func() {
		for !scraped.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		r := rand.New(rand.NewSource(*seed))
		ticker := time.NewTicker(time.Duration(float64(time.Second) / *rate))
		defer ticker.Stop()
		end := time.Now().Add(time.Duration(*observeS) * time.Second)
		n := 0
		for now := range ticker.C {
			if now.After(end) {
				break
			}
			nh.Observe(math.Exp(math.Log(0.1) + 0.8*r.NormFloat64()))
			observed.Inc()
			n++
		}
		log.Printf("observed %d", n)
	}()
	log.Fatal(http.ListenAndServe(*listen, nil))
}
