package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// A call is decided as the HTTP request that says the same: the same
// peer, proxy header, Authorization values, policy and cost, and its method
// as the path. One sequence of calls, through the interceptor and through
// the HTTP middleware of a Limiter configured alike, gives equal decisions
// (as observers see them) step for step, every field but the clock's.
func TestCallsAreDecidedAsHTTPRequests(t *testing.T) {
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = tok.WithRetired(retiredSecret); err != nil {
		t.Fatal(err)
	}
	tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("10.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	write := addrlimit.Policy{Name: "write", Limits: []addrlimit.Limit{{Burst: 4, Interval: time.Hour / 4}}}
	newLim := func(obs *observed, opts ...addrlimit.Option) *addrlimit.Limiter {
		lim, err := addrlimit.New(3, time.Hour, append(opts, addrlimit.WithInternalToken(tok), addrlimit.WithPolicy(write), addrlimit.WithObserver(obs.observe))...)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	var httpObs, grpcObs observed
	h := newLim(&httpObs, addrlimit.WithKeyFunc(tp.Key),
		addrlimit.WithPolicySelector(func(r *http.Request) (string, string, error) {
			if r.URL.Path == listMethod {
				return "write", "", nil
			}
			return "", "", nil
		}),
		addrlimit.WithCost(func(r *http.Request) int {
			if r.URL.Path == listMethod {
				return 2
			}
			return 1
		}),
	).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	gl, err := grpclimit.New(newLim(&grpcObs), grpclimit.WithTrustedProxies(tp),
		grpclimit.WithMethodPolicy(listMethod, "write"), grpclimit.WithMethodCost(listMethod, 2))
	if err != nil {
		t.Fatal(err)
	}
	unary := gl.Unary()

	type call struct {
		peer, method string
		md           []string // metadata pairs, as HTTP header fields
	}
	var calls []call
	for _, peer := range []string{"192.0.2.1:1", "[::ffff:192.0.2.1]:2", "[2001:db8:1:2::7]:1", "[2001:db8:1:2::8]:1", "10.0.0.5:1"} {
		for _, md := range [][]string{
			nil,
			{"authorization", "Bearer " + secret},
			{"authorization", "Bearer " + retiredSecret},
			{"authorization", "Bearer wrong-token-0123456789"},
			{"authorization", "Bearer " + secret, "authorization", "Bearer " + secret},
			{"x-forwarded-for", "203.0.113.9"},
			{"x-forwarded-for", "garbage"},
			{"x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.2"},
		} {
			for _, m := range []string{checkMethod, listMethod, checkMethod} {
				calls = append(calls, call{peer, m, md})
			}
		}
	}
	seen := map[string]int{}
	for i, c := range calls {
		r := httptest.NewRequest(http.MethodPost, c.method, nil)
		r.RemoteAddr = c.peer
		for j := 0; j < len(c.md); j += 2 {
			r.Header.Add(c.md[j], c.md[j+1])
		}
		h.ServeHTTP(httptest.NewRecorder(), r)

		ap := netip.MustParseAddrPort(c.peer)
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(ap)})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(c.md...))
		_, _ = unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: c.method}, okUnary)

		want, got := httpObs.last(t).d, grpcObs.last(t).d
		if errors.Is(want.Err, addrlimit.ErrProxyHeader) != errors.Is(got.Err, addrlimit.ErrProxyHeader) || (want.Err == nil) != (got.Err == nil) {
			t.Fatalf("call %d %+v: error %v, HTTP %v", i, c, got.Err, want.Err)
		}
		seen[got.Outcome.String()]++
		if got.RetiredToken {
			seen["retired"]++
		}
		if errors.Is(got.Err, addrlimit.ErrProxyHeader) {
			seen["proxy warning"]++
		}
		if got.Policy == "write" {
			seen["write"]++
		}
		for _, d := range []*addrlimit.Decision{&want, &got} {
			d.RetryAfter, d.ResetAfter, d.Err = 0, 0, nil
		}
		if public(got) != public(want) || got.Limit() != want.Limit() {
			t.Fatalf("call %d %+v:\n gRPC %+v\n HTTP %+v", i, c, got, want)
		}
	}
	for _, k := range []string{"allowed", "limited", "exempt", "retired", "proxy warning", "write"} {
		if seen[k] == 0 {
			t.Errorf("no %s decision in the sequence: %v", k, seen)
		}
	}
	if n := len(grpcObs.all()); n != len(calls) {
		t.Fatalf("%d decisions observed for %d calls", n, len(calls))
	}
}

// Deciding an allowed call allocates the copy of the authorization values
// that grpc-go's metadata API makes and Decision.Key; nothing else (8
// allocations when each call was described as an *http.Request).
func TestAllowedCallAllocations(t *testing.T) {
	lim, err := addrlimit.New(1<<20, time.Second, addrlimit.WithBurst(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer not-the-secret-0123456789"))
	unary, info := gl.Unary(), &grpc.UnaryServerInfo{FullMethod: checkMethod}
	if got := testing.AllocsPerRun(1000, func() { _, _ = unary(ctx, nil, info, okUnary) }); got > 2 {
		t.Fatalf("%v allocations per allowed call, want at most 2", got)
	}
}

func okUnary(context.Context, any) (any, error) { return nil, nil }

// public returns d's exported fields only: decisions of two Limiters differ
// in the policy they point to.
func public(d addrlimit.Decision) addrlimit.Decision {
	var out addrlimit.Decision
	src, dst := reflect.ValueOf(d), reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		if src.Type().Field(i).IsExported() {
			dst.Field(i).Set(src.Field(i))
		}
	}
	return out
}
