// Command retained measures the heap a limiter keeps per tracked client
// address, one contender per process so that nothing else shares the heap:
//
//	go run ./cmd/retained -lib addrlimit -keys 1000000
//	go run ./cmd/retained -flood 10000000 -maxkeys 100000   # addrlimit at its cap
//
// The retained measurement uses 300 requests per hour, so that no bucket
// refills (and may be forgotten) while the addresses are sent; the table
// layout does not depend on the rate.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/benchmarks"
)

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func main() {
	lib := flag.String("lib", "addrlimit", "contender")
	keys := flag.Int("keys", 1_000_000, "distinct addresses")
	flood := flag.Int("flood", 0, "addresses of an addrlimit flood at -maxkeys (replaces -lib)")
	maxKeys := flag.Int("maxkeys", 100_000, "addrlimit WithMaxKeys for -flood")
	flag.Parse()
	var err error
	if *flood > 0 {
		err = runFlood(*flood, *maxKeys)
	} else {
		err = runRetained(*lib, *keys)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func send(h http.Handler, n int, every int, sample func(i int)) {
	w := benchmarks.NewWriter()
	r := httptest.NewRequest("GET", "/", nil)
	for i := range n {
		clear(w.H)
		r.RemoteAddr = benchmarks.Addr(i)
		h.ServeHTTP(w, r)
		if sample != nil && (i+1)%every == 0 {
			sample(i + 1)
		}
	}
}

func runRetained(lib string, keys int) error {
	p := benchmarks.Policy{Limit: 300, Per: time.Hour, Burst: 300}
	var h http.Handler
	tracked := func() int { return keys }
	switch lib {
	case "addrlimit":
		lim, err := addrlimit.New(p.Limit, p.Per, addrlimit.WithBurst(p.Burst), addrlimit.WithMaxKeys(2*keys))
		if err != nil {
			return err
		}
		h, tracked = lim.Handler(benchmarks.OK), func() int { return lim.Stats().Keys }
	case "throttled":
		tracked = func() int { return min(keys, 65536) } // its LRU store holds 65,536 keys
		fallthrough
	default:
		var err error
		if h, err = benchmarks.Handler(lib, p); err != nil {
			return err
		}
	}
	before := heap()
	send(h, keys, 0, nil)
	after := heap()
	runtime.KeepAlive(h)
	n := tracked()
	fmt.Printf("%s\t%d\t%d\t%.1f\n", lib, keys, n, float64(after-before)/float64(n))
	return nil
}

func runFlood(n, maxKeys int) error {
	lim, err := addrlimit.New(benchmarks.Incident.Limit, benchmarks.Incident.Per, addrlimit.WithMaxKeys(maxKeys))
	if err != nil {
		return err
	}
	h := lim.Handler(benchmarks.OK)
	base := heap()
	var peak uint64
	var samples []string
	send(h, n, n/10, func(i int) {
		hp := heap() - base
		peak = max(peak, hp)
		samples = append(samples, fmt.Sprintf("%dM:%.1fMB", i/1_000_000, float64(hp)/1e6))
	})
	s := lim.Stats()
	fmt.Printf("flood\t%d\t%d\t%d\t%d\t%.1f\t%v\n", n, maxKeys, s.Keys, s.Evictions, float64(peak)/1e6, samples)
	return nil
}
