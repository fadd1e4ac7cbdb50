package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkUnaryInterceptor is the interceptor's own cost per allowed call,
// called directly with a peer and metadata in the context.
func BenchmarkUnaryInterceptor(b *testing.B) {
	lim, err := addrlimit.New(1<<20, time.Second, addrlimit.WithBurst(1<<30))
	if err != nil {
		b.Fatal(err)
	}
	gl, err := grpclimit.New(lim)
	if err != nil {
		b.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{
		Addr:      &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711},
		LocalAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 443},
	})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("user-agent", "grpc-go", "authorization", "Bearer not-the-secret-0123456789"))
	unary := gl.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unary(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoopbackCheck is a whole unary call over loopback (client and
// server in this process), without and with the interceptor.
func BenchmarkLoopbackCheck(b *testing.B) {
	for _, limited := range []bool{false, true} {
		name := "without"
		if limited {
			name = "grpclimit"
		}
		b.Run(name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if limited {
				lim, err := addrlimit.New(1<<20, time.Second, addrlimit.WithBurst(1<<30))
				if err != nil {
					b.Fatal(err)
				}
				gl, err := grpclimit.New(lim)
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, grpc.UnaryInterceptor(gl.Unary()))
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(opts...)
			healthpb.RegisterHealthServer(srv, health.NewServer())
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := healthpb.NewHealthClient(conn)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoopbackChatMessage is one message echoed on an open
// bidirectional stream over loopback, with its messages free (the default)
// and charged (WithStreamMessageCost): the price of a per-message decision.
func BenchmarkLoopbackChatMessage(b *testing.B) {
	for _, charged := range []bool{false, true} {
		name := "free"
		if charged {
			name = "charged"
		}
		b.Run(name, func(b *testing.B) {
			lim, err := addrlimit.New(1<<20, time.Second, addrlimit.WithBurst(1<<30))
			if err != nil {
				b.Fatal(err)
			}
			var opts []grpclimit.Option
			if charged {
				opts = append(opts, grpclimit.WithStreamMessageCost(chatMethod, 1))
			}
			gl, err := grpclimit.New(lim, opts...)
			if err != nil {
				b.Fatal(err)
			}
			_, conn := serveEcho(b, gl, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, chatMethod)
			if err != nil {
				b.Fatal(err)
			}
			in, out := wrapperspb.String("message"), new(wrapperspb.StringValue)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.SendMsg(in); err != nil {
					b.Fatal(err)
				}
				if err := s.RecvMsg(out); err != nil {
					b.Fatal(err)
				}
			}
			if st := lim.Stats(); charged && st.Allowed < uint64(b.N) {
				b.Fatalf("%d decisions for %d messages", st.Allowed, b.N)
			}
		})
	}
}
