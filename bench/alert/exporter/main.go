// Command exporter serves the alerting benchmark's data to Prometheus: 1,000 metrics
// lat_<r> × 100 hosts of native histograms (schema 3), each growing every minute by the same
// observations the Strata benchmark writes (crates/alert/benches/alert_eval.rs): 400 fast
// logins over eight values, and for 1 % of the series (host h0) 200 at 1.6 s and 100 at
// 2.5 s.
package main

import (
	"flag"
	"log"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const (
	rulesets = 1000
	streams  = 100
	schema   = 3
)

var fast = []float64{0.05, 0.07, 0.09, 0.12, 0.15, 0.2, 0.3, 0.5}

// bucket is the schema-3 native histogram bucket index of v > 0: (2^((i-1)/8), 2^(i/8)].
func bucket(v float64) int {
	return int(math.Ceil(math.Log2(v) * (1 << schema)))
}

type series struct {
	count   uint64
	sum     float64
	buckets map[int]int64
}

type collector struct {
	mu      sync.Mutex
	descs   []*prometheus.Desc
	data    [][]series
	created time.Time
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r, row := range c.data {
		for s := range row {
			x := &row[s]
			b := make(map[int]int64, len(x.buckets))
			for k, v := range x.buckets {
				b[k] = v
			}
			ch <- prometheus.MustNewConstNativeHistogram(c.descs[r], x.count, x.sum, b, nil, 0, schema, 1e-128, c.created, hostName(s))
		}
	}
}

func hostName(s int) string {
	return "h" + itoa(s)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}

func (c *collector) observe(v float64, n uint64, x *series) {
	x.count += n
	x.sum += v * float64(n)
	x.buckets[bucket(v)] += int64(n)
}

// minute adds one minute's observations to every series.
func (c *collector) minute() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := range c.data {
		for s := range c.data[r] {
			x := &c.data[r][s]
			for i, v := range fast {
				c.observe(v, uint64(400/8+i), x)
			}
			if s == 0 {
				c.observe(1.6, 200, x)
				c.observe(2.5, 100, x)
			}
		}
	}
}

func main() {
	addr := flag.String("listen", "127.0.0.1:19191", "address to serve /metrics on")
	flag.Parse()
	c := &collector{created: time.Now()}
	for r := 0; r < rulesets; r++ {
		c.descs = append(c.descs, prometheus.NewDesc("lat_"+itoa(r), "login latency", []string{"host"}, nil))
		row := make([]series, streams)
		for s := range row {
			row[s].buckets = map[int]int64{}
		}
		c.data = append(c.data, row)
	}
	c.minute()
	go func() {
		for range time.Tick(time.Minute) {
			c.minute()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe(*addr, nil))
}
