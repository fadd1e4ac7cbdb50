// Command e2e serves one contender around the trivial handler over real
// HTTP, for the end-to-end runs of run.sh: a load generator (wrk) sends the
// requests, so what is measured is what a server loses to its limiter.
//
//	go run ./cmd/e2e -list                          # the contenders, one a line
//	go run ./cmd/e2e -lib addrlimit [-addr 127.0.0.1:0] [-cpuprofile FILE]
//
// With -cpuprofile it profiles the server's CPU from the first line of output
// until it stops, and then prints to standard error the allocations and
// garbage collections of that time, so that profiles of two contenders under
// the same load compare per request.
//
// It prints the URL it serves on its first line of output and serves until
// interrupted (SIGINT, SIGTERM). It listens on loopback addresses only. The
// policy (policy below) never refuses the one client, so every contender
// answers 200 and only its cost per request differs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/addrlimit/addrlimit/benchmarks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

// run parses args, then serves until ctx is done (or lists the contenders).
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	lib := fs.String("lib", "addrlimit", "contender to serve (see -list)")
	addr := fs.String("addr", "127.0.0.1:0", "loopback address to listen on")
	list := fs.Bool("list", false, "print the contenders and exit")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the serving time to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *list {
		for _, name := range benchmarks.Names() {
			fmt.Fprintln(out, name)
		}
		return nil
	}
	if err := checkLoopback(*addr); err != nil {
		return err
	}
	h, err := benchmarks.Handler(*lib, policy)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if *cpuprofile != "" {
		stop, err := profile(*cpuprofile)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(out, "http://%s/\n", ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// policy is benchmarks.Unlimited with a burst of 10^6 instead of 300. With
// a burst of 300 at 10^9 per minute a bucket holds 18 µs of requests, and a
// request whose goroutine was descheduled for longer between reading the
// clock and charging the bucket looks like part of a burst and is refused:
// on one core, under load, that happens.
var policy = benchmarks.Policy{Limit: benchmarks.Unlimited.Limit, Per: benchmarks.Unlimited.Per, Burst: 1_000_000}

// profile starts a CPU profile into path; stop ends it and prints the
// allocations (count and bytes) and garbage collections since the start.
func profile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		fmt.Fprintf(os.Stderr, "mallocs %d bytes %d gc %d\n", after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc, after.NumGC-before.NumGC)
	}, nil
}

// checkLoopback refuses any listening address that is not a loopback IP.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.IsLoopback() {
		return fmt.Errorf("-addr %q: only loopback IP addresses are allowed", addr)
	}
	return nil
}
