package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"github.com/addrlimit/addrlimit/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	secret        = "internal-secret-0123456789abcdef"
	retiredSecret = "old-internal-secret-0123456789ab"
	checkMethod   = "/grpc.health.v1.Health/Check"
	listMethod    = "/grpc.health.v1.Health/List"
	watchMethod   = "/grpc.health.v1.Health/Watch"
)

// observed records what the Limiter's observers were told.
type observed struct {
	mu   sync.Mutex
	list []observation
}

type observation struct {
	at     time.Time
	method string // d.Route: the full method ("" for AllowKey)
	d      addrlimit.Decision
}

func (o *observed) observe(_ context.Context, d addrlimit.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, observation{time.Now(), d.Route, d})
}

func (o *observed) all() []observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observation(nil), o.list...)
}

func (o *observed) last(t *testing.T) observation {
	t.Helper()
	l := o.all()
	if len(l) == 0 {
		t.Fatal("no decision observed")
	}
	return l[len(l)-1]
}

// serve starts a health server on a free loopback port, limited by an
// Interceptor of lim with opts, and returns a client connected to it with
// dialOpts. Both are stopped by t.Cleanup.
func serve(t *testing.T, lim *addrlimit.Limiter, opts []grpclimit.Option, dialOpts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	gl, err := grpclimit.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(serveHealth(t, gl), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// serveHealth starts a health server on a free loopback port, limited by
// gl, until the test ends, and returns its address.
func serveHealth(t *testing.T, gl *grpclimit.Interceptor) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func newLimiter(t *testing.T, limit int, per time.Duration, opts ...addrlimit.Option) (*addrlimit.Limiter, *observed) {
	t.Helper()
	obs := &observed{}
	lim, err := addrlimit.New(limit, per, append(opts, addrlimit.WithObserver(obs.observe))...)
	if err != nil {
		t.Fatal(err)
	}
	return lim, obs
}

func withMD(kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), kv...)
}

// check makes one Check call and returns its error and trailer.
func check(c healthpb.HealthClient, ctx context.Context) (metadata.MD, error) {
	var tr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
	return tr, err
}

// pushback returns the refusal's pushback trailer and RetryInfo delay.
func pushback(t *testing.T, err error, tr metadata.MD) (trailer, retryInfo time.Duration) {
	t.Helper()
	v := tr.Get(grpclimit.PushbackTrailer)
	if len(v) != 1 {
		t.Fatalf("trailer %s = %q, want one value", grpclimit.PushbackTrailer, v)
	}
	ms, perr := strconv.Atoi(v[0])
	if perr != nil || ms < 1 {
		t.Fatalf("trailer %s = %q, want a positive integer", grpclimit.PushbackTrailer, v[0])
	}
	var info *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			info = ri
		}
	}
	if info == nil {
		t.Fatalf("status %v has no RetryInfo detail", err)
	}
	return time.Duration(ms) * time.Millisecond, info.RetryDelay.AsDuration()
}

func wantCode(t *testing.T, err error, want codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestUnaryLimitedAfterTheBudgetWithRetryInfoAndPushback(t *testing.T) {
	lim, obs := newLimiter(t, 3, time.Hour)
	c := serve(t, lim, nil)
	for n := range 3 {
		_, err := check(c, context.Background())
		wantCode(t, err, codes.OK, "call "+strconv.Itoa(n+1)+" of the budget")
	}
	tr, err := check(c, context.Background())
	wantCode(t, err, codes.ResourceExhausted, "call over the budget")
	if got := status.Convert(err).Message(); got != "rate limit exceeded" {
		t.Errorf("message %q, want the fixed text", got)
	}
	d := obs.last(t).d
	if d.Outcome != addrlimit.Limited || d.Key != "127.0.0.1" {
		t.Fatalf("decision %+v, want Limited for key 127.0.0.1", d)
	}
	trailer, info := pushback(t, err, tr)
	if info != d.RetryAfter {
		t.Errorf("RetryInfo %v, want Decision.RetryAfter %v", info, d.RetryAfter)
	}
	if want := d.RetryAfter.Round(time.Millisecond); trailer < d.RetryAfter || trailer-d.RetryAfter >= time.Millisecond {
		t.Errorf("pushback %v, want RetryAfter %v rounded up to ms (≈%v)", trailer, d.RetryAfter, want)
	}
	if trailer < 19*time.Minute || trailer > 20*time.Minute { // 3/hour: one token per 20 minutes
		t.Errorf("pushback %v, want just under 20m", trailer)
	}
}

func TestStreamChargedOnceAtOpen(t *testing.T) {
	lim, obs := newLimiter(t, 2, time.Hour)
	c := serve(t, lim, nil)
	watch := func() (healthpb.Health_WatchClient, error) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return nil, err
		}
		_, err = s.Recv()
		return s, err
	}
	for n := range 2 {
		if _, err := watch(); err != nil {
			t.Fatalf("stream %d of the budget: %v", n+1, err)
		}
	}
	s, err := watch()
	wantCode(t, err, codes.ResourceExhausted, "stream over the budget")
	trailer, info := pushback(t, err, s.Trailer())
	if trailer < info || info <= 0 {
		t.Errorf("pushback %v, RetryInfo %v", trailer, info)
	}
	var n int
	for _, o := range obs.all() {
		if o.method != watchMethod {
			t.Errorf("observer saw %q, want the stream's method", o.method)
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d decisions for 3 streams, want one per stream (messages are not charged)", n)
	}
}

func TestInternalTokenExemptWrongAndRetiredCharged(t *testing.T) {
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = tok.WithRetired(retiredSecret); err != nil {
		t.Fatal(err)
	}
	lim, obs := newLimiter(t, 1, time.Hour, addrlimit.WithInternalToken(tok))
	c := serve(t, lim, nil)
	for range 5 {
		_, err := check(c, withMD("authorization", "Bearer "+secret))
		wantCode(t, err, codes.OK, "internal token")
	}
	if s := lim.Stats(); s.Exempt != 5 || s.Allowed != 0 {
		t.Fatalf("after 5 exempt calls: Exempt %d, Allowed %d; want 5, 0 (not counted against the bucket)", s.Exempt, s.Allowed)
	}
	_, err = check(c, withMD("authorization", "Bearer wrong-token-0123456789abc"))
	wantCode(t, err, codes.OK, "wrong token spends the last token")
	_, err = check(c, withMD("authorization", "Bearer wrong-token-0123456789abc"))
	wantCode(t, err, codes.ResourceExhausted, "wrong token is charged")
	_, err = check(c, withMD("authorization", "Bearer "+retiredSecret))
	wantCode(t, err, codes.ResourceExhausted, "retired token is charged")
	if d := obs.last(t).d; !d.RetiredToken {
		t.Error("retired token not flagged in the Decision")
	}
	if s := lim.Stats(); s.RetiredTokenLimited != 1 || s.CredentialedLimited != 2 {
		t.Errorf("RetiredTokenLimited %d, CredentialedLimited %d; want 1, 2", s.RetiredTokenLimited, s.CredentialedLimited)
	}
	_, err = check(c, withMD("authorization", "Bearer "+secret, "authorization", "Bearer "+secret))
	wantCode(t, err, codes.ResourceExhausted, "two authorization values are ambiguous: no exemption")
}

func TestTrustedProxyMetadata(t *testing.T) {
	loopback := netip.MustParsePrefix("127.0.0.1/32")
	tests := []struct {
		name    string
		trusted netip.Prefix
		xff     []string
		wantKey string
		wantErr error
	}{
		{"trusted peer: client from the header", loopback, []string{"203.0.113.9"}, "203.0.113.9", nil},
		{"trusted peer: forged left part ignored", loopback, []string{"1.2.3.4, 203.0.113.9"}, "203.0.113.9", nil},
		{"trusted peer: IPv6 client grouped by /64", loopback, []string{"2001:db8:1:2::99"}, "2001:db8:1:2::/64", nil},
		{"trusted peer: IPv4-mapped client unmapped", loopback, []string{"::ffff:203.0.113.9"}, "203.0.113.9", nil},
		{"trusted peer without header: the peer", loopback, nil, "127.0.0.1", addrlimit.ErrProxyHeader},
		{"trusted peer, garbage: nearest trusted hop", loopback, []string{"garbage"}, "127.0.0.1", addrlimit.ErrProxyHeader},
		{"untrusted peer: forged header ignored (GHSA-9g5q-2w5x-hmxf)", netip.MustParsePrefix("10.0.0.0/8"), []string{"203.0.113.9"}, "127.0.0.1", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", tc.trusted)
			if err != nil {
				t.Fatal(err)
			}
			lim, obs := newLimiter(t, 10, time.Hour)
			c := serve(t, lim, []grpclimit.Option{grpclimit.WithTrustedProxies(tp)})
			var kv []string
			for _, v := range tc.xff {
				kv = append(kv, "x-forwarded-for", v)
			}
			_, err = check(c, withMD(kv...))
			wantCode(t, err, codes.OK, "call")
			d := obs.last(t).d
			if d.Key != tc.wantKey {
				t.Errorf("key %q, want %q", d.Key, tc.wantKey)
			}
			if tc.wantErr == nil && d.Err != nil || tc.wantErr != nil && !errors.Is(d.Err, tc.wantErr) {
				t.Errorf("Decision.Err %v, want %v", d.Err, tc.wantErr)
			}
		})
	}
}

func TestPerMethodPolicyAndCost(t *testing.T) {
	lim, obs := newLimiter(t, 100, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "list", Limits: []addrlimit.Limit{{Burst: 4, Interval: time.Hour / 4}}}))
	c := serve(t, lim, []grpclimit.Option{
		grpclimit.WithMethodPolicy(listMethod, "list"),
		grpclimit.WithMethodCost(listMethod, 2),
	})
	for n := range 2 {
		if _, err := c.List(context.Background(), &healthpb.HealthListRequest{}); err != nil {
			t.Fatalf("List %d: %v", n+1, err)
		}
		o := obs.last(t)
		if o.d.Policy != "list" || o.d.Cost != 2 || o.method != listMethod {
			t.Fatalf("List %d decided %+v for %q; want policy list, cost 2", n+1, o.d, o.method)
		}
	}
	_, err := c.List(context.Background(), &healthpb.HealthListRequest{})
	wantCode(t, err, codes.ResourceExhausted, "third List (cost 2, burst 4)")
	_, err = check(c, context.Background())
	wantCode(t, err, codes.OK, "Check is under the default policy")
	if o := obs.last(t); o.d.Policy != addrlimit.DefaultPolicyName || o.d.Cost != 1 || o.method != checkMethod {
		t.Errorf("Check decided %+v for %q; want the default policy at cost 1", o.d, o.method)
	}
}

func TestServiceRuleAndMethodOverride(t *testing.T) {
	lim, obs := newLimiter(t, 100, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "health", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour / 10}}}))
	c := serve(t, lim, []grpclimit.Option{
		grpclimit.WithMethodPolicy("/grpc.health.v1.Health/", "health"),
		grpclimit.WithMethodCost("/grpc.health.v1.Health/", 3),
		grpclimit.WithMethodCost(checkMethod, 1),
	})
	_, err := check(c, context.Background())
	wantCode(t, err, codes.OK, "Check")
	if d := obs.last(t).d; d.Policy != "health" || d.Cost != 1 {
		t.Errorf("Check: policy %q cost %d; want the service's policy and its own cost 1", d.Policy, d.Cost)
	}
	if _, err := c.List(context.Background(), &healthpb.HealthListRequest{}); err != nil {
		t.Fatal(err)
	}
	if d := obs.last(t).d; d.Policy != "health" || d.Cost != 3 {
		t.Errorf("List: policy %q cost %d; want the service's", d.Policy, d.Cost)
	}
}

func TestNewErrors(t *testing.T) {
	lim, _ := newLimiter(t, 5, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "small", Limits: []addrlimit.Limit{{Burst: 2, Interval: time.Hour / 2}}}))
	tests := []struct {
		name string
		lim  *addrlimit.Limiter
		opts []grpclimit.Option
		want string
	}{
		{"nil limiter", nil, nil, "nil Limiter"},
		{"nil option", lim, []grpclimit.Option{nil}, "option 1 is nil"},
		{"unknown policy", lim, []grpclimit.Option{grpclimit.WithMethodPolicy(checkMethod, "nope")}, `no policy "nope"`},
		{"empty policy", lim, []grpclimit.Option{grpclimit.WithMethodPolicy(checkMethod, "")}, "empty policy"},
		{"bad method", lim, []grpclimit.Option{grpclimit.WithMethodCost("Check", 1)}, "not a full method name"},
		{"method with three slashes", lim, []grpclimit.Option{grpclimit.WithMethodCost("/a/b/c", 1)}, "not a full method name"},
		{"cost below 1", lim, []grpclimit.Option{grpclimit.WithMethodCost(checkMethod, 0)}, "at least 1"},
		{"cost over the default burst", lim, []grpclimit.Option{grpclimit.WithMethodCost(checkMethod, 6)}, "more than the burst 5"},
		{"cost over the method's policy burst", lim, []grpclimit.Option{grpclimit.WithMethodCost(checkMethod, 3), grpclimit.WithMethodPolicy(checkMethod, "small")}, "more than the burst 2"},
		{"service cost over a method's policy burst", lim, []grpclimit.Option{grpclimit.WithMethodCost("/grpc.health.v1.Health/", 3), grpclimit.WithMethodPolicy(checkMethod, "small")}, "more than the burst 2"},
		{"message cost below 1", lim, []grpclimit.Option{grpclimit.WithStreamMessageCost(watchMethod, 0)}, "at least 1"},
		{"message cost over the method's policy burst", lim, []grpclimit.Option{grpclimit.WithStreamMessageCost("/grpc.health.v1.Health/", 3), grpclimit.WithMethodPolicy(watchMethod, "small")}, "a message costs 3, more than the burst 2"},
		{"message cost for a bad method", lim, []grpclimit.Option{grpclimit.WithStreamMessageCost("Watch", 1)}, "not a full method name"},
		{"nil proxies", lim, []grpclimit.Option{grpclimit.WithTrustedProxies(nil)}, "nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := grpclimit.New(tc.lim, tc.opts...)
			if err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one starting grpclimit: and containing %q", err, tc.want)
			}
		})
	}
}

// A failing Store under FailClosed: the quota is unknown.
type failingStore struct{}

var errStore = errors.New("store down: secret-internal-detail")

func (failingStore) Take(context.Context, string, addrlimit.Policy, int) (store.Result, error) {
	return store.Result{}, errStore
}
func (failingStore) Refund(context.Context, string, addrlimit.Policy, int) (store.Result, error) {
	return store.Result{}, errStore
}
func (failingStore) Peek(context.Context, string, addrlimit.Policy) (store.Result, error) {
	return store.Result{}, errStore
}
func (failingStore) Reset(context.Context, string, addrlimit.Policy) error { return errStore }

func TestStoreFailureUnderFailClosedIsUnavailableWithPushback(t *testing.T) {
	lim, obs := newLimiter(t, 10, time.Hour, addrlimit.WithStore(failingStore{}), addrlimit.WithStoreFailure(addrlimit.FailClosed))
	c := serve(t, lim, []grpclimit.Option{grpclimit.WithQuotaMetadata()})
	tr, err := check(c, context.Background())
	wantCode(t, err, codes.Unavailable, "store down, FailClosed")
	if msg := status.Convert(err).Message(); msg != "rate limiter unavailable" || strings.Contains(err.Error(), "secret") {
		t.Errorf("status %v reveals more than the fixed message", err)
	}
	trailer, info := pushback(t, err, tr)
	if trailer != time.Second || info != time.Second {
		t.Errorf("pushback %v, RetryInfo %v; want 1s", trailer, info)
	}
	if len(tr.Get("ratelimit")) != 0 {
		t.Errorf("quota %q sent although it is unknown", tr.Get("ratelimit"))
	}
	if d := obs.last(t).d; !d.Degraded || !errors.Is(d.Err, errStore) {
		t.Errorf("observer got %+v, want the degraded decision with the store's error", d)
	}
}

func TestQuotaMetadata(t *testing.T) {
	lim, _ := newLimiter(t, 2, time.Minute)
	c := serve(t, lim, []grpclimit.Option{grpclimit.WithQuotaMetadata()})
	var hdr metadata.MD
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got, want := hdr.Get("ratelimit-policy"), `"default";q=2;w=60`; len(got) != 1 || got[0] != want {
		t.Errorf("ratelimit-policy %q, want %q", got, want)
	}
	if got, want := hdr.Get("ratelimit"), `"default";r=1;t=0`; len(got) != 1 || got[0] != want {
		t.Errorf("ratelimit %q, want %q", got, want)
	}
	_, _ = check(c, context.Background())
	tr, err := check(c, context.Background())
	wantCode(t, err, codes.ResourceExhausted, "third call")
	if got, want := tr.Get("ratelimit"), `"default";r=0;t=30`; len(got) != 1 || got[0] != want {
		t.Errorf("ratelimit trailer %q, want %q", got, want)
	}
}

// A client whose retry policy lists RESOURCE_EXHAUSTED waits the server's
// pushback before retrying, not its own (much shorter) backoff, and the
// retry then succeeds.
//
// A stall of the machine can only lengthen a wait, never shorten it, so the
// bound "waited at least the pushback" holds under any load. A stall of a
// whole refill between emptying the bucket and the call lets the call's
// first attempt through unretried; such a call proves nothing and is simply
// not counted: the test makes up to 200 calls until 2 were retried (a fast
// allowed call costs about a millisecond), so only 199 such stalls in a row
// could leave it without a measurement.
func TestClientRetryPolicyHonoursThePushback(t *testing.T) {
	lim, obs := newLimiter(t, 1, 200*time.Millisecond) // one token per 200 ms
	const serviceConfig = `{"methodConfig": [{
		"name": [{"service": "grpc.health.v1.Health"}],
		"retryPolicy": {
			"maxAttempts": 5,
			"initialBackoff": "0.001s",
			"maxBackoff": "0.001s",
			"backoffMultiplier": 1,
			"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
		}
	}]}`
	c := serve(t, lim, nil, grpc.WithDefaultServiceConfig(serviceConfig))
	retried := 0
	for n := 0; n < 200 && retried < 2; n++ {
		// Empty the bucket, so that the call's first attempt is refused
		// (unless the machine stalls for a whole refill in between: then
		// the call is not retried and not counted).
		for lim.AllowKey(context.Background(), "", "127.0.0.1", 1).Outcome == addrlimit.Allowed {
		}
		start := len(obs.all())
		_, err := check(c, context.Background())
		wantCode(t, err, codes.OK, "call "+strconv.Itoa(n+1)+" (retried until allowed)")
		var attempts []observation
		for _, o := range obs.all()[start:] {
			if o.method == checkMethod { // not the AllowKey decisions
				attempts = append(attempts, o)
			}
		}
		for k := 1; k < len(attempts); k++ {
			prev, next := attempts[k-1], attempts[k]
			if prev.d.Outcome != addrlimit.Limited {
				t.Fatalf("call %d: attempt %d was %v, yet retried", n+1, k, prev.d.Outcome)
			}
			pushback := time.Duration(ceilMS(prev.d.RetryAfter)) * time.Millisecond
			waited := next.at.Sub(prev.at)
			if waited < pushback {
				t.Errorf("call %d: retry %d came %v after its refusal, before the pushback of %v", n+1, k, waited, pushback)
			}
			t.Logf("call %d: retry %d waited %v for a pushback of %v (client backoff 1 ms)", n+1, k, waited, pushback)
		}
		if len(attempts) > 1 {
			retried++
		}
	}
	if retried < 2 {
		t.Fatalf("only %d of 200 calls were retried; the test measured too little", retried)
	}
}

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
