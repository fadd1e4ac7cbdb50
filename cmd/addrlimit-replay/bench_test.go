package main

import (
	"bufio"
	"io"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// synthLog is an io.Reader of n nginx "main" lines, generated as they are
// read (so no file and no memory holds the log): 1,000 requests a second
// from 1,000 busy addresses, or with flood set 30 % of them from 2^20 other
// addresses; four user agents, six paths, an X-Forwarded-For field. The
// generation is counted in the benchmark's time.
type synthLog struct {
	n, i   int
	rng    uint64
	sec    int64
	stamp  []byte
	buf    []byte
	off    int
	busy   []string
	uas    []string
	paths  []string
	t0     time.Time
	perSec int
	flood  bool
}

func newSynthLog(n int, flood bool) *synthLog {
	s := &synthLog{n: n, flood: flood, rng: 0x9e3779b97f4a7c15, sec: -1, perSec: 1000, t0: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
		uas:   []string{"Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0", "curl/8.5.0", "python-requests/2.32.3", "Go-http-client/1.1"},
		paths: []string{"/", "/v1/sites", "/v1/sites/42", "/login", "/internal/domains/lookup", "/static/app.js"}}
	for i := range 1000 {
		s.busy = append(s.busy, "192.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256))
	}
	return s
}

func (s *synthLog) next() uint64 {
	s.rng ^= s.rng << 13
	s.rng ^= s.rng >> 7
	s.rng ^= s.rng << 17
	return s.rng
}

func (s *synthLog) line() {
	if sec := int64(s.i / s.perSec); sec != s.sec {
		s.sec = sec
		s.stamp = s.t0.Add(time.Duration(sec)*time.Second).AppendFormat(s.stamp[:0], "02/Jan/2006:15:04:05 -0700")
	}
	r := s.next()
	b := s.buf[:0]
	if !s.flood || r%10 < 7 {
		b = append(b, s.busy[(r>>8)%1000]...)
	} else {
		x := (r >> 8) % (1 << 20)
		b = append(b, "10."...)
		b = strconv.AppendUint(b, x>>16, 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, x>>8&255, 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, x&255, 10)
	}
	b = append(b, " - - ["...)
	b = append(b, s.stamp...)
	b = append(b, "] \"GET "...)
	b = append(b, s.paths[(r>>32)%6]...)
	b = append(b, " HTTP/1.1\" 200 512 \"-\" \""...)
	b = append(b, s.uas[(r>>40)%4]...)
	b = append(b, "\" \"-\"\n"...)
	s.buf, s.off = b, 0
	s.i++
}

func (s *synthLog) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if s.off == len(s.buf) {
			if s.i == s.n {
				if n == 0 {
					return 0, io.EOF
				}
				break
			}
			s.line()
		}
		c := copy(p[n:], s.buf[s.off:])
		s.off += c
		n += c
	}
	return n, nil
}

// BenchmarkReplay: lines per second through parse, decision and report, on
// the generated nginx log, 300/min per address, the default tables (the
// Limiter's 2^20 exact buckets, the report's 10,000 keys). Run on one core
// as the issue asks, with enough lines to fill the tables:
//
//	GOMAXPROCS=1 go test -run '^$' -bench Replay -benchtime 10000000x -cpu 1 .
//
// stage=parse parses only, stage=decide also decides (Limiter.Allow),
// stage=all is the command's loop; /flood adds the flood of new addresses
// (each one a new bucket in the Limiter and a replaced key in the report). Each reports lines/s (wall clock),
// lines/cpu-s (per second of the process's CPU time: what one core does
// when other processes share the machine) and the heap in use at the end
// (after a GC): the memory bound, which does not grow with the number of
// lines.
func BenchmarkReplay(b *testing.B) {
	for _, bc := range []struct {
		stage string
		flood bool
	}{{"parse", false}, {"decide", false}, {"all", false}, {"all", true}} {
		stage := bc.stage
		name := "stage=" + stage
		if bc.flood {
			name += "/flood"
		}
		b.Run(name, func(b *testing.B) {
			e, err := newEngine(limits{Limit: 300, Per: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			t := newTally(10000)
			p := &combinedParser{extra: extraFields{fwd: 1}}
			r := bufio.NewReaderSize(newSynthLog(b.N, bc.flood), maxLine)
			var rec record
			n := 0
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			switch stage {
			case "all":
				if err := replay(r, p, e, t); err != nil {
					b.Fatal(err)
				}
				n = int(t.requests)
			default:
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						break
					}
					if p.parse(trimEOL(line), &rec) {
						n++
						if stage == "decide" {
							e.decide(&rec)
						}
					}
				}
			}
			b.StopTimer()
			cpu := cpuTime(b) - cpu0
			if n != b.N {
				b.Fatalf("%d requests of %d lines", n, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
			b.ReportMetric(float64(b.N)/cpu.Seconds(), "lines/cpu-s")
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
			runtime.KeepAlive(e)
			runtime.KeepAlive(t)
		})
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
