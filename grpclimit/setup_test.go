package grpclimit_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc/peer"
)

// An Interceptor that New did not build (its error ignored, or a zero
// value) must fail when the server is set up, not panic in every call: grpc-go
// does not recover a panicking interceptor, so the first call would take the
// whole server down.
func TestUnbuiltInterceptorPanicsAtSetupNotPerCall(t *testing.T) {
	var nilGL *grpclimit.Interceptor
	for name, gl := range map[string]*grpclimit.Interceptor{"nil": nilGL, "zero": {}} {
		for kind, build := range map[string]func(){
			"Unary":  func() { gl.Unary() },
			"Stream": func() { gl.Stream() },
		} {
			t.Run(name+" "+kind, func(t *testing.T) {
				defer func() {
					if recover() == nil {
						t.Errorf("%s Interceptor: %s() returned an interceptor that would panic in every call", name, kind)
					}
				}()
				build()
			})
		}
	}
}

// The Limiter's WithExempt is an HTTP rule: a gRPC call has no request to
// give it, so it is not consulted, and the call is charged.
func TestLimiterWithExemptIsNotConsulted(t *testing.T) {
	called := 0
	lim, err := addrlimit.New(1, time.Hour, addrlimit.WithExempt(func(*http.Request) bool {
		called++
		return true
	}))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	if ran, err := callUnary(gl, ctx); !ran || err != nil {
		t.Fatalf("first call: handler ran %v, error %v; want it allowed", ran, err)
	}
	if ran, _ := callUnary(gl, ctx); ran {
		t.Fatal("second call ran: the budget of 1 was not charged")
	}
	if called != 0 {
		t.Fatalf("WithExempt called %d times for gRPC calls", called)
	}
}

// grpclimit's WithExempt is the Limiter's WithExempt for calls: an exempt
// call (here the health check, by its method) is never limited, charges
// nothing, and is counted and observed as Exempt with its method.
func TestWithExemptExemptsCallsByMethod(t *testing.T) {
	lim, obs := newLimiter(t, 1, time.Hour)
	gl, err := grpclimit.New(lim, grpclimit.WithExempt(func(_ context.Context, method string) bool {
		return method == checkMethod
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	for n := range 5 {
		if ran, err := callUnary(gl, ctx); !ran || err != nil {
			t.Fatalf("exempt call %d: handler ran %v, error %v", n+1, ran, err)
		}
		if o := obs.last(t); o.d.Outcome != addrlimit.Exempt || o.method != checkMethod {
			t.Fatalf("exempt call %d observed as %v for %q", n+1, o.d.Outcome, o.method)
		}
	}
	if s := lim.Stats(); s.Exempt != 5 || s.Keys != 0 {
		t.Fatalf("Stats: %d exempt, %d keys; want 5 and none", s.Exempt, s.Keys)
	}
	if _, err := grpclimit.New(lim, grpclimit.WithExempt(nil)); err == nil {
		t.Fatal("WithExempt(nil) accepted")
	}
}
