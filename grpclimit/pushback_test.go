package grpclimit_test

import (
	"context"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"github.com/addrlimit/addrlimit/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// hugeStore refuses every call with a RetryAfter at the top of the
// Duration range, as a custom Store may to mean "blocked for good".
type hugeStore struct{ failingStore }

func (hugeStore) Take(_ context.Context, _ string, p addrlimit.Policy, _ int) (store.Result, error) {
	return store.Result{RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64}, nil
}

// The pushback trailer of a refusal with the longest delay must not wrap
// around to a negative value, and must agree with the RetryInfo detail
// (ceil(MaxInt64 ns / 1 ms) = 9223372036855 ms). RateLimit's t is the
// bucket's wait for one token, 9 intervals of 6 minutes sooner than the
// ResetAfter of MaxInt64 ns: ceil(MaxInt64 ns - 3240 s) = 9223368797 s.
func TestHugeRetryAfterGivesPositivePushback(t *testing.T) {
	lim, _ := newLimiter(t, 10, time.Hour, addrlimit.WithStore(hugeStore{}))
	gl, err := grpclimit.New(lim, grpclimit.WithQuotaMetadata())
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	tr := &trailerStream{}
	ctx = grpcContextWithStream(ctx, tr)
	ran, err := callUnary(gl, ctx)
	if ran || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("handler ran %v, error %v; want ResourceExhausted", ran, err)
	}
	ms, perr := strconv.ParseInt(first(tr.trailer[grpclimit.PushbackTrailer]), 10, 64)
	if perr != nil || ms != 9223372036855 {
		t.Errorf("pushback %q, want 9223372036855 (ms, rounded up)", tr.trailer[grpclimit.PushbackTrailer])
	}
	if got, want := first(tr.trailer["ratelimit"]), `"default";r=0;t=9223368797`; got != want {
		t.Errorf("ratelimit %q, want %q", got, want)
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// trailerStream records what an interceptor sets on its call.
type trailerStream struct {
	header, trailer metadata.MD
}

func (*trailerStream) Method() string { return checkMethod }
func (s *trailerStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *trailerStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *trailerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

func grpcContextWithStream(ctx context.Context, s grpc.ServerTransportStream) context.Context {
	return grpc.NewContextWithServerTransportStream(ctx, s)
}

// Under FailOpen a store failure lets the call through with no quota
// metadata (the quota is unknown); under FailLocal the local bucket decides,
// so the budget still holds and refusals still carry the pushback.
func TestStoreFailureUnderFailOpenAndFailLocal(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	for _, tc := range []struct {
		policy     addrlimit.FailurePolicy
		wantServed int
	}{{addrlimit.FailOpen, 5}, {addrlimit.FailLocal, 2}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			lim, _ := newLimiter(t, 2, time.Hour, addrlimit.WithStore(failingStore{}), addrlimit.WithStoreFailure(tc.policy))
			gl, err := grpclimit.New(lim, grpclimit.WithQuotaMetadata())
			if err != nil {
				t.Fatal(err)
			}
			served := 0
			for range 5 {
				s := &trailerStream{}
				ran, err := callUnary(gl, grpcContextWithStream(ctx, s))
				switch {
				case ran && err == nil:
					served++
					if tc.policy == addrlimit.FailOpen && len(s.header) != 0 {
						t.Errorf("FailOpen: quota metadata %v sent for an unknown quota", s.header)
					}
				case status.Code(err) == codes.ResourceExhausted:
					if len(s.trailer[grpclimit.PushbackTrailer]) != 1 {
						t.Errorf("refusal without a pushback trailer: %v", s.trailer)
					}
				default:
					t.Fatalf("handler ran %v, error %v", ran, err)
				}
			}
			if served != tc.wantServed {
				t.Errorf("%d of 5 calls served, want %d", served, tc.wantServed)
			}
		})
	}
}
