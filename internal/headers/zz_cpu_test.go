package headers

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func threadCPU() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func cpuPerOp(n int, f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	for range n {
		f()
	}
	return float64(threadCPU()-t0) / float64(n)
}

func TestZZCPU(t *testing.T) {
	if os.Getenv("ZZCPU") == "" {
		return
	}
	w := New(Draft, "default", 300, 200*time.Millisecond)
	w9 := New(Draft, "default", 1_000_000_000, time.Millisecond)
	h := http.Header{}
	policy, quota := []string{`"default";q=300;w=60`}, []string{`"default";r=299;t=0`}
	var pool sync.Pool
	pool.Put(new(chunk))
	cases := []struct {
		name string
		f    func()
	}{
		{"clear only", func() { clear(h) }},
		{"inserts only", func() { clear(h); h[fieldPolicy] = policy; h[fieldRateLimit] = quota }},
		{"pool get/put", func() { clear(h); c := pool.Get(); pool.Put(c) }},
		{"write full", func() { clear(h); w.Write(h, State{Remaining: 299}) }},
		{"write 1e9 half", func() { clear(h); w9.Write(h, State{Remaining: 500_000_000}) }},
		{"write denied", func() { clear(h); w.WriteDenied(h, State{RetryAfter: time.Second, Denied: true}, 429) }},
	}
	res := map[string][]float64{}
	for range 15 {
		for _, tc := range cases {
			res[tc.name] = append(res[tc.name], cpuPerOp(500000, tc.f))
		}
	}
	for _, tc := range cases {
		v := res[tc.name]
		sort.Float64s(v)
		fmt.Printf("%-16s med %6.1f  min %6.1f  ns thread-CPU/op\n", tc.name, v[len(v)/2], v[0])
	}
}
