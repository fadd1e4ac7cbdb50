// Package benchmarks puts addrlimit side by side with the Go rate limiters
// people use today, in one run, on the same workloads. It is a separate module
// so that the peers never become dependencies of addrlimit.
//
//	cd benchmarks && ./run.sh     # writes BENCHMARKS.md
package benchmarks

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/didip/tollbooth/v8"
	tblimiter "github.com/didip/tollbooth/v8/limiter"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulumemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Policy is what every contender enforces per client IP: Limit requests per
// Per, in bursts of Burst (libraries without a separate burst use Limit).
type Policy struct {
	Limit int
	Per   time.Duration
	Burst int
}

// Incident is the policy of the incident: 300 per minute, burst 300.
var Incident = Policy{Limit: 300, Per: time.Minute, Burst: 300}

// Unlimited is the policy of the allowed-path workloads: a budget that cannot
// run out during a run, with a burst of 300 where the library has one.
var Unlimited = Policy{Limit: 1_000_000_000, Per: time.Minute, Burst: 300}

// OK is the handler behind every limiter: it writes 200.
var OK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// Contender builds a limiter around OK, keyed by the RemoteAddr IP, with each
// library's default headers.
type Contender struct {
	Name string
	New  func(p Policy) (http.Handler, error)
}

// Contenders in the order of the report.
var Contenders = []Contender{
	{"addrlimit", func(p Policy) (http.Handler, error) {
		lim, err := addrlimit.New(p.Limit, p.Per, addrlimit.WithBurst(p.Burst))
		if err != nil {
			return nil, err
		}
		return lim.Handler(OK), nil
	}},
	{"httprate", func(p Policy) (http.Handler, error) {
		return httprate.LimitBy(p.Limit, p.Per, httprateKey)(OK), nil
	}},
	{"ulule", func(p Policy) (http.Handler, error) {
		l := ulule.New(ulumemory.NewStore(), ulule.Rate{Period: p.Per, Limit: int64(p.Limit)})
		return ululestdlib.NewMiddleware(l).Handler(OK), nil
	}},
	{"tollbooth", func(p Policy) (http.Handler, error) {
		lmt := tollbooth.NewLimiter(float64(p.Limit)/p.Per.Seconds(), &tblimiter.ExpirableOptions{DefaultExpirationTTL: time.Hour})
		lmt.SetBurst(p.Burst)
		// v8 limits nothing until an IP lookup is set: ShouldSkipLimiter
		// skips every request whose address it cannot find.
		lmt.SetIPLookup(tblimiter.IPLookup{Name: "RemoteAddr"})
		return tollbooth.LimitHandler(lmt, OK), nil
	}},
	{"go-limiter", func(p Policy) (http.Handler, error) { return goLimiter(p, OK) }},
	{"throttled", func(p Policy) (http.Handler, error) {
		store, err := memstore.NewCtx(65536)
		if err != nil {
			return nil, err
		}
		rl, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerDuration(p.Limit, p.Per), MaxBurst: p.Burst - 1})
		if err != nil {
			return nil, err
		}
		h := &throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
		return h.RateLimit(OK), nil
	}},
	{"rate-map", func(p Policy) (http.Handler, error) { return newRateMap(p), nil }},
}

// goLimiter is sethvargo/go-limiter's middleware around next under p.
func goLimiter(p Policy, next http.Handler) (http.Handler, error) {
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.Limit), Interval: p.Per})
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
	if err != nil {
		return nil, err
	}
	return mw.Handle(next), nil
}

// Bare is the name of the handler without a limiter (OK itself), the
// reference of the end-to-end runs.
const Bare = "bare"

// NoHeaders is the name of addrlimit with WithHeaders(HeaderNone).
const NoHeaders = "addrlimit-noheaders"

// HeadersOnly is the name of the floor of the end-to-end runs: no limiter,
// but the handler's response carries the two draft quota fields addrlimit
// sends (fixed values of the same length), so that the runs show what
// sending those bytes costs by itself.
const HeadersOnly = "headers-only"

// headersOnly sets the two fields, then serves OK.
var headersOnly = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Ratelimit-Policy"] = []string{`"default";q=1000000;w=1`}
	h["Ratelimit"] = []string{`"default";r=1000000;t=0`}
	OK.ServeHTTP(w, r)
})

// Names returns every name Handler knows, in the order of the report: Bare,
// HeadersOnly, then the Contenders with NoHeaders after addrlimit.
func Names() []string {
	names := []string{Bare, HeadersOnly}
	for _, c := range Contenders {
		names = append(names, c.Name)
		if c.Name == "addrlimit" {
			names = append(names, NoHeaders)
		}
	}
	return names
}

// Handler returns the named contender (see Names) around OK under p.
func Handler(name string, p Policy) (http.Handler, error) {
	switch name {
	case Bare:
		return OK, nil
	case HeadersOnly:
		return headersOnly, nil
	case NoHeaders:
		lim, err := addrlimit.New(p.Limit, p.Per, addrlimit.WithBurst(p.Burst), addrlimit.WithHeaders(addrlimit.HeaderNone))
		if err != nil {
			return nil, err
		}
		return lim.Handler(OK), nil
	}
	for _, c := range Contenders {
		if c.Name == name {
			return c.New(p)
		}
	}
	return nil, fmt.Errorf("unknown contender %q (known: %s)", name, strings.Join(Names(), ", "))
}

// httprateKey is httprate's former KeyByIP, spelled out as its deprecation
// note recommends: the RemoteAddr host, canonicalised (IPv6 by /64).
func httprateKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(host), nil
}

// rateMap is the baseline: a mutex-guarded map of rate.Limiter per IP, no
// headers, no memory bound.
type rateMap struct {
	mu     sync.Mutex
	limits map[string]*rate.Limiter
	p      Policy
}

func newRateMap(p Policy) *rateMap { return &rateMap{limits: map[string]*rate.Limiter{}, p: p} }

func (m *rateMap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	m.mu.Lock()
	l, ok := m.limits[host]
	if !ok {
		l = rate.NewLimiter(rate.Every(m.p.Per/time.Duration(m.p.Limit)), m.p.Burst)
		m.limits[host] = l
	}
	m.mu.Unlock()
	if !l.Allow() {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	OK.ServeHTTP(w, r)
}

// Len is the number of tracked keys.
func (m *rateMap) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.limits)
}

// Writer is a reusable ResponseWriter whose header map the caller clears
// before each request.
type Writer struct {
	H    http.Header
	Code int
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer { return &Writer{H: http.Header{}} }

func (w *Writer) Header() http.Header         { return w.H }
func (w *Writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *Writer) WriteHeader(code int)        { w.Code = code }

// Addr returns the i-th of 2^32 distinct IPv4 client addresses as a RemoteAddr.
func Addr(i int) string {
	return net.IPv4(byte(i>>24)|1, byte(i>>16), byte(i>>8), byte(i)).String() + ":40000"
}
