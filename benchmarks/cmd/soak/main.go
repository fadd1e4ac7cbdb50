// Command soak serves addrlimit under wrk for a long time with a million
// rotating client addresses, once with the in-memory store and once on a real
// Redis, and checks that the server stays flat: after the warm-up, the live
// heap, the goroutine count and the RSS of this process stay within a
// tolerance of their median, and no decision is degraded or carries an error.
// It is a command, not a benchmark, so that `go test -bench .` never runs it.
//
//	go run ./cmd/soak                                # 10 minutes per store
//	go run ./cmd/soak -duration 60s -store memory    # a short check
//	./run.sh soak                                    # both, 10 minutes each, into BENCHMARKS.md
//
// Rotating addresses: wrk on loopback connects from 127.0.0.1 only, and cannot
// bind a million source addresses. So the server keys requests the way it does
// behind a reverse proxy: NewTrustedProxies("X-Forwarded-For", 127.0.0.1/32).Key,
// and wrk, as that proxy, sets X-Forwarded-For from a counter (a Lua script
// written by this command): request i of thread t carries address 10.x.y.z
// number (i*threads + t) mod keys, so every thread walks its own share of the
// key space and all of it is walked in turn. Each decision is then a real one
// for a different client address, through the same code path as any request.
//
// The server, the sampler and the limiter run in this process; wrk and
// redis-server are child processes (redis-server on a free loopback port,
// without persistence, killed at the end). The policy, 2 per hour, allows a
// key's first two requests and limits the later ones, so both paths (and
// redisstore's deny cache) serve throughout; no bucket refills, so the local
// table (DefaultMaxKeys; with Redis it mirrors the store's answers) keeps
// every key. Before wrk starts, 16 goroutines send one request per key
// through the handler, filling the table and Redis, so that the measured part
// is the steady state. Samples, every -every: the live heap (runtime/metrics
// /gc/heap/live:bytes), VmRSS from /proc/self/status, and the goroutines
// (/sched/goroutines:goroutines) as the least of 10 readings 10 ms apart, which
// leaves out some of the goroutines net/http runs per request in flight. The
// first -warmup fraction is left out; over the rest, the deviation of a figure
// is max |sample - median| / median, and its drift the distance between the
// medians of the first and the last quarter. It exits 1 if a decision failed
// (an observer sees Err or Degraded), or the heap or RSS deviates, or the
// goroutine count drifts, by more than -tolerance (see result.ok).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/benchmarks"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/redis/go-redis/v9"
)

type config struct {
	duration, every, redisTimeout time.Duration
	keys, threads, conns          int
	warmup, tolerance             float64
	stores                        []string
	md, tsv                       string
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	var c config
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long wrk loads each store")
	fs.DurationVar(&c.every, "every", 0, "sampling interval (default: duration/120, 1 s to 10 s)")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", 0, "redisstore.WithTimeout (default: redisstore's, 50 ms)")
	fs.IntVar(&c.keys, "keys", 1_000_000, "distinct client addresses")
	fs.IntVar(&c.threads, "threads", 1, "wrk threads")
	fs.IntVar(&c.conns, "conns", 32, "wrk connections")
	fs.Float64Var(&c.warmup, "warmup", 0.2, "fraction of the samples left out at the start")
	fs.Float64Var(&c.tolerance, "tolerance", 0.05, "largest deviation from the median allowed after warm-up")
	store := fs.String("store", "memory,redis", "stores to soak, in order: memory, redis")
	fs.StringVar(&c.md, "md", "", "also write the results as a Markdown section to this file")
	fs.StringVar(&c.tsv, "samples", "", "also write every sample to this file (store, seconds, heap, goroutines, RSS; tab-separated)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.stores = strings.Split(*store, ",")
	if c.every == 0 {
		c.every = min(max(c.duration/120, time.Second), 10*time.Second)
	}
	if c.keys < 1 || c.keys > 1<<24 || c.threads < 1 || c.conns < c.threads || c.warmup < 0 || c.warmup >= 1 {
		return errors.New("need 1 <= keys <= 2^24, 1 <= threads <= conns, 0 <= warmup < 1")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk not found (Debian/Ubuntu: apt-get install -y wrk)")
	}
	var results []result
	failed := false
	for _, s := range c.stores {
		r, err := soak(c, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		fmt.Fprint(out, r.text(c))
		failed = failed || !r.ok(c)
		results = append(results, r)
	}
	if c.md != "" {
		if err := os.WriteFile(c.md, []byte(markdown(c, results)), 0o644); err != nil {
			return err
		}
	}
	if c.tsv != "" {
		var b strings.Builder
		for _, r := range results {
			for _, s := range r.samples {
				fmt.Fprintf(&b, "%s\t%.0f\t%.0f\t%.0f\t%.0f\n", r.store, s.at.Seconds(), s.heap, s.goroutines, s.rss)
			}
		}
		if err := os.WriteFile(c.tsv, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if failed {
		return errors.New("not flat, or decisions failed (see above)")
	}
	return nil
}

// sample is one reading of the process.
type sample struct {
	at                    time.Duration
	heap, goroutines, rss float64
}

type result struct {
	store            string
	samples          []sample
	allowed, limited int64
	failed           int64 // decisions with Err or Degraded
	fillFailed       int64 // the same, while filling the table
	rps              string
	non2xx, sockErrs string
	why              []string // failure reasons with their counts
	load             string   // 1-minute load average at the start and at the end
	extra            string   // store detail (Redis keys and memory)
}

func soak(c config, store string) (result, error) {
	r := result{store: store}
	dir, err := os.MkdirTemp("", "soak-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	var opts []addrlimit.Option
	var rdb *redis.Client
	switch store {
	case "memory":
	case "redis":
		addr, stop, err := benchmarks.StartRedis(dir)
		if err != nil {
			return r, err
		}
		defer stop()
		rdb = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 128})
		defer rdb.Close()
		var sopts []redisstore.Option
		if c.redisTimeout > 0 {
			sopts = append(sopts, redisstore.WithTimeout(c.redisTimeout))
		}
		s, err := redisstore.New(rdb, sopts...)
		if err != nil {
			return r, err
		}
		opts = append(opts, addrlimit.WithStore(s))
	default:
		return r, fmt.Errorf("unknown store %q (memory, redis)", store)
	}
	proxies, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		return r, err
	}
	var allowed, limited, failed atomic.Int64
	var whyMu sync.Mutex
	why := map[string]int64{} // failure reasons, by error text
	opts = append(opts, addrlimit.WithKeyFunc(proxies.Key), addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
		switch {
		case d.Err != nil || d.Degraded:
			failed.Add(1)
			whyMu.Lock()
			why[fmt.Sprint(d.Err)]++
			whyMu.Unlock()
		case d.Outcome == addrlimit.Allowed:
			allowed.Add(1)
		case d.Outcome == addrlimit.Limited:
			limited.Add(1)
		}
	}))
	lim, err := addrlimit.New(2, time.Hour, opts...)
	if err != nil {
		return r, err
	}
	h := lim.Handler(benchmarks.OK)
	// Fill the table (and Redis) with every key through the handler before
	// wrk starts, so that the soak measures the steady state: redisstore's
	// answers are mirrored into the local table too (WithMaxKeys bounds it).
	var wg sync.WaitGroup
	for w := range fillers {
		wg.Go(func() {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = "127.0.0.1:1"
			rw := benchmarks.NewWriter()
			for i := w; i < c.keys; i += fillers {
				req.Header.Set("X-Forwarded-For", address(i))
				clear(rw.H)
				h.ServeHTTP(rw, req)
			}
		})
	}
	wg.Wait()
	allowed.Store(0)
	limited.Store(0)
	r.fillFailed = failed.Swap(0) // reported, not counted: the soak starts after
	whyMu.Lock()
	clear(why)
	whyMu.Unlock()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	script := filepath.Join(dir, "soak.lua")
	if err := os.WriteFile(script, []byte(luaScript), 0o644); err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration+time.Minute)
	defer cancel()
	wrk := exec.CommandContext(ctx, "wrk", "-t"+strconv.Itoa(c.threads), "-c"+strconv.Itoa(c.conns),
		"-d"+strconv.Itoa(int(c.duration.Seconds()))+"s", "-s", script, "http://"+ln.Addr().String()+"/",
		"--", strconv.Itoa(c.threads), strconv.Itoa(c.keys))
	var wrkOut strings.Builder
	wrk.Stdout, wrk.Stderr = &wrkOut, &wrkOut
	r.load = loadavg()
	start := time.Now()
	if err := wrk.Start(); err != nil {
		return r, err
	}
	done := make(chan error, 1)
	go func() { done <- wrk.Wait() }()
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				return r, fmt.Errorf("wrk: %w\n%s", err, wrkOut.String())
			}
			waiting = false
		case <-tick.C:
			s, err := read()
			if err != nil {
				return r, err
			}
			s.at = time.Since(start)
			r.samples = append(r.samples, s)
		}
	}
	r.allowed, r.limited, r.failed = allowed.Load(), limited.Load(), failed.Load()
	r.load += " → " + loadavg()
	whyMu.Lock()
	for msg, n := range why {
		r.why = append(r.why, fmt.Sprintf("%d× %s", n, msg))
	}
	whyMu.Unlock()
	slices.Sort(r.why)
	// wrk's connections close as it ends: only samples of the full load count.
	r.samples = slices.DeleteFunc(r.samples, func(s sample) bool { return s.at > c.duration-c.every })
	o := wrkOut.String()
	r.rps = find(o, `Requests/sec:\s+(\S+)`, "?")
	r.non2xx = find(o, `Non-2xx or 3xx responses:\s+(\d+)`, "0")
	r.sockErrs = find(o, `Socket errors:\s+(.*)`, "none")
	if rdb != nil {
		n, _ := rdb.DBSize(context.Background()).Result()
		info, _ := rdb.Info(context.Background(), "memory").Result()
		r.extra = fmt.Sprintf("Redis at the end: %d keys, used_memory %s", n, find(info, `used_memory_human:(\S+)`, "?"))
	}
	return r, nil
}

// loadavg is the machine's 1-minute load average, from /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// fillers is the number of goroutines that fill the table before the soak.
const fillers = 16

// address is client address number i: 10.x.y.z, as the Lua script makes it.
func address(i int) string {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
}

// luaScript is wrk's: thread t (numbered by setup) sends addresses t,
// t+threads, t+2*threads, ... modulo keys; init gets threads and keys as
// script arguments.
const luaScript = `
local n = 0
function setup(thread)
  thread:set("id", n)
  n = n + 1
end
function init(args)
  threads = tonumber(args[1])
  keys = tonumber(args[2])
  i = id
  headers = {}
end
function request()
  local a = i % keys
  i = i + threads
  headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(a / 65536) % 256, math.floor(a / 256) % 256, a % 256)
  return wrk.format(nil, nil, headers)
end
`

var metricSamples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/sched/goroutines:goroutines"}}

func read() (sample, error) {
	metrics.Read(metricSamples)
	s := sample{heap: float64(metricSamples[0].Value.Uint64()), goroutines: float64(metricSamples[1].Value.Uint64())}
	for range 9 {
		time.Sleep(10 * time.Millisecond)
		metrics.Read(metricSamples[1:])
		s.goroutines = min(s.goroutines, float64(metricSamples[1].Value.Uint64()))
	}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return s, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			s.rss = kb * 1024
			return s, nil
		}
	}
	return s, errors.New("no VmRSS in /proc/self/status")
}

func find(text, expr, fallback string) string {
	if m := regexp.MustCompile(expr).FindStringSubmatch(text); m != nil {
		return strings.TrimSpace(m[1])
	}
	return fallback
}

// steady returns the samples after the warm-up.
func (r result) steady(c config) []sample {
	return r.samples[int(float64(len(r.samples))*c.warmup):]
}

// stat returns the median of one figure over the steady samples, its largest
// deviation from the median (a fraction of it), and its minimum and maximum.
func (r result) stat(c config, f func(sample) float64) (med, dev, lo, hi float64) {
	var v []float64
	for _, s := range r.steady(c) {
		v = append(v, f(s))
	}
	if len(v) == 0 {
		return 0, 1, 0, 0
	}
	slices.Sort(v)
	med = v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	lo, hi = v[0], v[len(v)-1]
	if med > 0 {
		dev = max(hi-med, med-lo) / med
	}
	return med, dev, lo, hi
}

var figures = []struct {
	name string
	f    func(sample) float64
	unit func(float64) string
}{
	{"live heap", func(s sample) float64 { return s.heap }, mb},
	{"goroutines", func(s sample) float64 { return s.goroutines }, func(v float64) string { return strconv.Itoa(int(v)) }},
	{"RSS", func(s sample) float64 { return s.rss }, mb},
}

func mb(v float64) string { return fmt.Sprintf("%.1f MB", v/1e6) }

// drift is how far the median of the last quarter of the steady samples is
// from the median of their first quarter, as a fraction of the latter: a leak
// moves it, the noise of single samples does not.
func (r result) drift(c config, f func(sample) float64) float64 {
	st := r.steady(c)
	q := len(st) / 4
	if q == 0 {
		return 1
	}
	first, _, _, _ := result{samples: st[:q]}.stat(config{}, f)
	last, _, _, _ := result{samples: st[len(st)-q:]}.stat(config{}, f)
	if first == 0 {
		return 1
	}
	return math.Abs(last-first) / first
}

// ok: no failed decision; live heap and RSS within the tolerance of their
// median over every steady sample; goroutines without drift. Goroutines are
// not held to every sample: net/http runs one more goroutine per request in
// flight, so a sample counts between the connections' goroutines and up to
// twice as many, depending on how many requests wait (on Redis, say).
func (r result) ok(c config) bool {
	if r.failed > 0 || len(r.steady(c)) < 8 {
		return false
	}
	for i, fg := range figures {
		_, dev, _, _ := r.stat(c, fg.f)
		if fg.name == "goroutines" {
			dev = r.drift(c, figures[i].f)
		}
		if dev > c.tolerance {
			return false
		}
	}
	return true
}

func (r result) text(c config) string {
	var b strings.Builder
	verdict := "FLAT"
	if !r.ok(c) {
		verdict = "NOT FLAT OR FAILED"
	}
	fmt.Fprintf(&b, "store=%s: %s; %d samples, %d after warm-up; wrk %s req/s, non-2xx %s, socket errors %s; decisions allowed %d, limited %d, failed %d; load average %s\n",
		r.store, verdict, len(r.samples), len(r.steady(c)), r.rps, r.non2xx, r.sockErrs, r.allowed, r.limited, r.failed, r.load)
	for _, fg := range figures {
		med, dev, lo, hi := r.stat(c, fg.f)
		fmt.Fprintf(&b, "  %-10s median %s, min %s, max %s, max deviation %.1f%%, drift %.1f%%\n", fg.name, fg.unit(med), fg.unit(lo), fg.unit(hi), dev*100, r.drift(c, fg.f)*100)
	}
	for _, w := range r.why {
		fmt.Fprintf(&b, "  failed decisions: %s\n", w)
	}
	if r.extra != "" {
		fmt.Fprintf(&b, "  %s\n", r.extra)
	}
	fmt.Fprintf(&b, "  decisions failed while filling the table (before the soak): %d\n", r.fillFailed)
	return b.String()
}

func markdown(c config, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Soak\n\n")
	fmt.Fprintf(&b, "`go run ./cmd/soak -duration %s -keys %d -threads %d -conns %d` (`./run.sh soak`): wrk serves each store for %s with %d rotating client addresses (X-Forwarded-For from a trusted loopback proxy, see cmd/soak), policy 2 per hour; heap, goroutines and RSS of the server process sampled every %s, the first %.0f%% left out as warm-up. Go %s, GOMAXPROCS %d, %s.\n\n",
		c.duration, c.keys, c.threads, c.conns, c.duration, c.keys, c.every, c.warmup*100, strings.TrimPrefix(runtime.Version(), "go"), runtime.GOMAXPROCS(0), time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "Failed decisions: seen by an observer with Err or Degraded (for Redis: its timeout, 50 ms by default, then its circuit breaker). Max deviation: from the median, over every sample after the warm-up; drift: between the medians of the first and the last quarter of those. Heap and RSS are held to the deviation, goroutines to the drift (net/http runs one more goroutine per request in flight). A load average above 2 means other work shared the 2 cores.\n\n")
	fmt.Fprintf(&b, "| store | req/s | allowed | limited | failed decisions | live heap (max dev., drift) | goroutines (max dev., drift) | RSS (max dev., drift) | flat within %.0f%% | load average (2 cores) |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n", c.tolerance*100)
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d |", r.store, r.rps, r.allowed, r.limited, r.failed)
		for _, fg := range figures {
			med, dev, _, _ := r.stat(c, fg.f)
			fmt.Fprintf(&b, " %s (%.1f%%, %.1f%%) |", fg.unit(med), dev*100, r.drift(c, fg.f)*100)
		}
		verdict := "yes"
		if !r.ok(c) {
			verdict = "**no**"
		}
		fmt.Fprintf(&b, " %s | %s |\n", verdict, r.load)
	}
	for _, r := range results {
		if r.extra != "" {
			fmt.Fprintf(&b, "\n%s.\n", r.extra)
		}
		if r.fillFailed > 0 {
			fmt.Fprintf(&b, "\n%s: %d decisions failed while filling the table, before the soak.\n", r.store, r.fillFailed)
		}
		for _, w := range r.why {
			fmt.Fprintf(&b, "\n%s, failed decisions: %s.\n", r.store, w)
		}
	}
	return b.String()
}
