package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"github.com/addrlimit/addrlimit/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// serveUnix is serve over a Unix socket in a temporary directory.
func serveUnix(t *testing.T, lim *addrlimit.Limiter, opts ...grpclimit.Option) (healthpb.HealthClient, *grpclimit.Interceptor) {
	t.Helper()
	gl, err := grpclimit.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "grpc.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn), gl
}

func TestUnixSocketPeer(t *testing.T) {
	tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := withMD("x-forwarded-for", "203.0.113.9")
	t.Run("untrusted socket: one shared bucket, header ignored", func(t *testing.T) {
		lim, obs := newLimiter(t, 10, time.Hour)
		c, _ := serveUnix(t, lim, grpclimit.WithTrustedProxies(tp))
		_, err := check(c, ctx)
		wantCode(t, err, codes.OK, "call")
		if d := obs.last(t).d; d.Key != addrlimit.UnkeyedKey || !errors.Is(d.Err, addrlimit.ErrNoClientAddress) {
			t.Errorf("key %q err %v; want UnkeyedKey and ErrNoClientAddress", d.Key, d.Err)
		}
	})
	t.Run("trusted socket (WithUnixSocket): the header's client", func(t *testing.T) {
		lim, obs := newLimiter(t, 10, time.Hour)
		c, _ := serveUnix(t, lim, grpclimit.WithTrustedProxies(tp.WithUnixSocket()))
		_, err := check(c, ctx)
		wantCode(t, err, codes.OK, "call")
		if d := obs.last(t).d; d.Key != "203.0.113.9" || d.Err != nil {
			t.Errorf("key %q err %v; want the header's client", d.Key, d.Err)
		}
	})
}

// A call without peer information (an in-process transport) is never
// mistaken for a trusted Unix socket.
func TestNoPeerIsNotAUnixSocket(t *testing.T) {
	tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("127.0.0.1/32"))
	if err != nil {
		t.Fatal(err)
	}
	lim, obs := newLimiter(t, 10, time.Hour)
	gl, err := grpclimit.New(lim, grpclimit.WithTrustedProxies(tp.WithUnixSocket()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-forwarded-for", "203.0.113.9"))
	if _, err := callUnary(gl, ctx); err != nil {
		t.Fatal(err)
	}
	if d := obs.last(t).d; d.Key != addrlimit.UnkeyedKey {
		t.Errorf("key %q without a peer, want UnkeyedKey", d.Key)
	}
	if _, err := gl.ClientAddr(ctx); !errors.Is(err, addrlimit.ErrNoClientAddress) {
		t.Errorf("ClientAddr without a peer: %v, want ErrNoClientAddress", err)
	}
}

func callUnary(gl *grpclimit.Interceptor, ctx context.Context) (bool, error) {
	ran := false
	_, err := gl.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	return ran, err
}

// ctxStore fails when the context it is given is done.
type ctxStore struct{ failingStore }

func (ctxStore) Take(ctx context.Context, _ string, p addrlimit.Policy, _ int) (store.Result, error) {
	if err := ctx.Err(); err != nil {
		return store.Result{}, err
	}
	return store.Result{Allowed: true, Remaining: p.Limits[0].Burst - 1}, nil
}

// A client that hangs up (a cancelled call context) must not make the
// decision a store failure.
func TestCancelledCallIsNotAStoreFailure(t *testing.T) {
	lim, obs := newLimiter(t, 10, time.Hour, addrlimit.WithStore(ctxStore{}), addrlimit.WithStoreFailure(addrlimit.FailClosed))
	gl, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}}))
	cancel()
	ran, err := callUnary(gl, ctx)
	if !ran || err != nil {
		t.Fatalf("handler ran %v, error %v; want the call allowed", ran, err)
	}
	if d := obs.last(t).d; d.Degraded || d.Key != "192.0.2.1" {
		t.Errorf("decision %+v, want a clean one for 192.0.2.1", d)
	}
}

func TestClientAddr(t *testing.T) {
	tp, err := addrlimit.NewTrustedProxies("X-Forwarded-For", netip.MustParsePrefix("10.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := newLimiter(t, 10, time.Hour)
	plain, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := grpclimit.New(lim, grpclimit.WithTrustedProxies(tp))
	if err != nil {
		t.Fatal(err)
	}
	call := func(peerAddr string, xff string) context.Context {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(peerAddr))})
		return metadata.NewIncomingContext(ctx, metadata.Pairs("x-forwarded-for", xff))
	}
	tests := []struct {
		name string
		gl   *grpclimit.Interceptor
		ctx  context.Context
		want string
	}{
		{"no proxies: the peer, unmapped", plain, call("[::ffff:192.0.2.1]:1", "203.0.113.9"), "192.0.2.1"},
		{"no proxies: IPv6 in full", plain, call("[2001:db8::1]:1", "203.0.113.9"), "2001:db8::1"},
		{"trusted peer: the header's client", proxied, call("10.0.0.1:1", "203.0.113.9"), "203.0.113.9"},
		{"untrusted peer: the peer", proxied, call("192.0.2.1:1", "203.0.113.9"), "192.0.2.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.gl.ClientAddr(tc.ctx)
			if err != nil || a != netip.MustParseAddr(tc.want) {
				t.Errorf("ClientAddr = %v, %v; want %s", a, err, tc.want)
			}
		})
	}
}
