package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// slotsHeld is the in-flight slots the Limiter's default policy holds.
func slotsHeld(lim *addrlimit.Limiter) int { return lim.Stats().Policies[0].InFlight }

// A unary call holds its slot for the call: a second call of the same
// client during it is refused (ResourceExhausted, 1 s pushback), and the
// slot is back once the handler returns, whether it fails or panics.
func TestUnaryHoldsItsSlotForTheCall(t *testing.T) {
	lim, err := addrlimit.New(100, time.Minute, addrlimit.WithInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/Export"}
	var inner error
	var held int
	_, err = gl.Unary()(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
		held = slotsHeld(lim)
		s := &trailerStream{}
		_, inner = gl.Unary()(grpcContextWithStream(ctx, s), nil, info, func(context.Context, any) (any, error) { return nil, nil })
		if got := first(s.trailer[grpclimit.PushbackTrailer]); got != "1000" {
			t.Errorf("pushback %q, want 1000", got)
		}
		return nil, status.Error(codes.Internal, "handler failed")
	})
	if status.Code(err) != codes.Internal {
		t.Fatalf("outer call: %v", err)
	}
	if held != 1 || status.Code(inner) != codes.ResourceExhausted || status.Convert(inner).Message() != "too many calls in flight" {
		t.Fatalf("during the call: %d held, nested call %v; want 1 held, ResourceExhausted", held, inner)
	}
	if got := slotsHeld(lim); got != 0 {
		t.Fatalf("%d slots held after the call", got)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = gl.Unary()(ctx, nil, info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	if got := slotsHeld(lim); got != 0 {
		t.Fatalf("%d slots held after a panic", got)
	}
}

// msgStream is a client stream of n messages.
type msgStream struct {
	grpc.ServerStream
	ctx context.Context
	n   int
}

func (s *msgStream) Context() context.Context     { return s.ctx }
func (s *msgStream) SetHeader(metadata.MD) error  { return nil }
func (s *msgStream) SendHeader(metadata.MD) error { return nil }
func (s *msgStream) SetTrailer(metadata.MD)       {}
func (s *msgStream) RecvMsg(any) error {
	if s.n == 0 {
		return context.Canceled
	}
	s.n--
	return nil
}

// A stream holds its slot for its life, and its messages (charged with
// WithStreamMessageCost) take none: with one slot, every message of the
// stream is received while a second stream is refused.
func TestStreamHoldsItsSlotForItsLife(t *testing.T) {
	lim, err := addrlimit.New(100, time.Minute, addrlimit.WithInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := grpclimit.New(lim, grpclimit.WithStreamMessageCost("/svc/Upload", 1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.StreamServerInfo{FullMethod: "/svc/Upload", IsClientStream: true}
	received := 0
	var second error
	err = gl.Stream()(nil, &msgStream{ctx: ctx, n: 10}, info, func(_ any, ss grpc.ServerStream) error {
		for ss.RecvMsg(nil) == nil {
			received++
		}
		second = gl.Stream()(nil, &msgStream{ctx: ctx}, info, func(any, grpc.ServerStream) error { return nil })
		return nil
	})
	if err != nil || received != 10 || status.Code(second) != codes.ResourceExhausted {
		t.Fatalf("stream: %v, %d messages received, second stream %v; want 10 and ResourceExhausted", err, received, second)
	}
	if got := slotsHeld(lim); got != 0 {
		t.Fatalf("%d slots held after the stream", got)
	}
}

// A method under a policy with an in-flight limit and no rate limit: New
// takes it (with a method cost, which means nothing to it), a call holds
// its slot for the call, a second one of the client is refused
// (ResourceExhausted, "too many calls in flight", 1 s pushback), and no
// call gets quota metadata.
func TestUnaryUnderAnInFlightLimitAlone(t *testing.T) {
	lim, err := addrlimit.New(100, time.Minute, addrlimit.WithPolicy(addrlimit.Policy{Name: "export", InFlight: 1}))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := grpclimit.New(lim, grpclimit.WithMethodPolicy("/svc/Export", "export"),
		grpclimit.WithMethodCost("/svc/Export", 1000), grpclimit.WithQuotaMetadata())
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/Export"}
	outer, inner := &trailerStream{}, &trailerStream{}
	var nested error
	var held int
	_, err = gl.Unary()(grpcContextWithStream(ctx, outer), nil, info, func(context.Context, any) (any, error) {
		held = lim.Stats().Policies[1].InFlight
		_, nested = gl.Unary()(grpcContextWithStream(ctx, inner), nil, info, func(context.Context, any) (any, error) { return nil, nil })
		return nil, nil
	})
	if err != nil || held != 1 {
		t.Fatalf("call: %v, %d slots held during it; want nil, 1", err, held)
	}
	if status.Code(nested) != codes.ResourceExhausted || status.Convert(nested).Message() != "too many calls in flight" {
		t.Fatalf("nested call: %v, want ResourceExhausted, too many calls in flight", nested)
	}
	if got := first(inner.trailer[grpclimit.PushbackTrailer]); got != "1000" {
		t.Errorf("pushback %q, want 1000", got)
	}
	for _, s := range []*trailerStream{outer, inner} {
		for name := range metadata.Join(s.header, s.trailer) {
			if name != grpclimit.PushbackTrailer {
				t.Errorf("metadata %q sent by a policy without rate limits", name)
			}
		}
	}
	if got := lim.Stats().Policies[1].InFlight; got != 0 {
		t.Fatalf("%d slots held after the call", got)
	}
}
