package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit/benchmarks"
)

// Each contender is served over real HTTP on a loopback port and answers a
// few requests with 200; addrlimit sends its quota fields.
func TestServesEveryContender(t *testing.T) {
	for _, lib := range benchmarks.Names() {
		t.Run(lib, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"-lib", lib, "-addr", "127.0.0.1:0"}, pw)
				pw.Close()
			}()
			url, err := bufio.NewReader(pr).ReadString('\n')
			if err != nil {
				t.Fatalf("no URL: %v (run: %v)", err, <-done)
			}
			go io.Copy(io.Discard, pr)
			client := &http.Client{Timeout: 10 * time.Second}
			for range 5 {
				resp, err := client.Get(strings.TrimSpace(url))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if got := resp.Header.Get("RateLimit"); (lib == "addrlimit" || lib == benchmarks.HeadersOnly) != (got != "") {
					t.Fatalf("RateLimit = %q", got)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestList(t *testing.T) {
	var b strings.Builder
	if err := run(context.Background(), []string{"-list"}, &b); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(b.String()), benchmarks.Names(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("-list = %v, want %v", got, want)
	}
}

func TestRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-addr", "0.0.0.0:0"},
		{"-addr", "192.0.2.1:0"},
		{"-addr", "localhost:0"},
		{"-addr", "127.0.0.1"},
		{"-lib", "nope"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
