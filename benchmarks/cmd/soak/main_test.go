package main

import (
	"runtime"
	"testing"
	"time"
)

func samples(heap ...float64) []sample {
	var out []sample
	for i, h := range heap {
		out = append(out, sample{at: time.Duration(i) * time.Second, heap: h, goroutines: 40, rss: 100})
	}
	return out
}

var heapOf = figures[0].f

func TestStatIsMedianAndLargestDeviation(t *testing.T) {
	r := result{samples: samples(100, 1, 9, 10, 11, 12, 10, 11)} // 100, 1: the warm-up
	med, dev, lo, hi := r.stat(config{warmup: 0.25}, heapOf)
	if med != 10.5 || lo != 9 || hi != 12 {
		t.Errorf("median %v, min %v, max %v; want 10.5, 9, 12", med, lo, hi)
	}
	if want := 1.5 / 10.5; dev != want {
		t.Errorf("deviation %v, want %v", dev, want)
	}
}

// A heap that grows by 10% fails a 5% tolerance; the same noise without the
// growth passes, and goroutines that jump on single samples (requests in
// flight) but do not drift pass too.
func TestOKRejectsGrowthNotNoise(t *testing.T) {
	c := config{tolerance: 0.05}
	flat := result{samples: samples(100, 101, 99, 100, 102, 100, 99, 101, 100, 100, 101, 99)}
	for i := range flat.samples {
		if i%3 == 0 {
			flat.samples[i].goroutines = 70
		}
	}
	if !flat.ok(c) {
		t.Error("flat heap with noisy goroutines: not ok")
	}
	growing := result{samples: samples(100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111)}
	if growing.ok(c) {
		t.Error("heap growing by 11%: ok")
	}
	leaking := result{samples: samples(100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100)}
	for i := range leaking.samples {
		leaking.samples[i].goroutines = float64(40 + 2*i)
	}
	if leaking.ok(c) {
		t.Error("goroutines growing from 40 to 62: ok")
	}
	failed := flat
	failed.failed = 1
	if failed.ok(c) {
		t.Error("a failed decision: ok")
	}
}

func TestReadSamplesThisProcess(t *testing.T) {
	runtime.GC() // the live heap is measured by a collection
	s, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if s.heap <= 0 || s.goroutines < 1 || s.rss < s.heap/2 {
		t.Errorf("sample %+v: want a live heap, goroutines and an RSS", s)
	}
}

// The Lua script and address must name the same addresses; the script's
// arithmetic is address's, written with math.floor and %.
func TestAddressIsTenDotCounter(t *testing.T) {
	for i, want := range map[int]string{0: "10.0.0.0", 255: "10.0.0.255", 256: "10.0.1.0", 999_999: "10.15.66.63"} {
		if got := address(i); got != want {
			t.Errorf("address(%d) = %s, want %s", i, got, want)
		}
	}
}
