// Prometheus's own text-format parser (github.com/prometheus/common/expfmt) over one payload N
// times, printing the process CPU it took: the reference for bench/checks/run.sh.
// Usage: textparse FILE N
package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	body, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		panic(err)
	}
	parse := func() int {
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			panic(err)
		}
		samples := 0
		for _, f := range families {
			samples += len(f.Metric)
		}
		return samples
	}
	samples := parse()
	start := cpuNanos()
	for i := 0; i < n; i++ {
		parse()
	}
	fmt.Printf("cpu_ns=%d n=%d bytes=%d metrics=%d\n", cpuNanos()-start, n, len(body), samples)
}
