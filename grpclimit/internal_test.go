package grpclimit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/channelz/grpc_channelz_v1"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// channelz is the internal service of these tests: what a server says about
// its connections is for its operators, not for its clients.
const channelz = "/grpc.channelz.v1.Channelz/"

// internalServer serves the health service (public) and channelz (guarded
// by WithInternalMethods) on a free loopback port, limited to burst calls
// per hour per address by a Limiter whose internal token is tok; it returns
// a plaintext connection, the observer, and the Limiter.
func internalServer(t *testing.T, burst int, tok *addrlimit.InternalToken, opts []grpclimit.Option, srvOpts ...grpc.ServerOption) (*grpc.ClientConn, *observed, *addrlimit.Limiter) {
	t.Helper()
	lim, obs := newLimiter(t, burst, time.Hour, addrlimit.WithInternalToken(tok))
	gl := newGL(t, lim, append([]grpclimit.Option{grpclimit.WithInternalMethods(tok, channelz)}, opts...)...)
	addr := serveInternal(t, gl, nil, srvOpts...)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, obs, lim
}

// serveInternal starts a server with the health and channelz services,
// limited by gl, with TLS when cert is set, until the test ends; it returns
// its address.
func serveInternal(t *testing.T, gl *grpclimit.Interceptor, cert *tls.Certificate, srvOpts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvOpts = append(srvOpts, grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
	if cert != nil {
		srvOpts = append(srvOpts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}})))
	}
	srv := grpc.NewServer(srvOpts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	channelzsvc.RegisterChannelzServiceToServer(srv)
	if err := gl.CheckServer(srv); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func newToken(t *testing.T) *addrlimit.InternalToken {
	t.Helper()
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	tok, err = tok.WithRetired(retiredSecret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// codesOf makes n calls with call and returns their codes.
func codesOf(n int, call func() error) string {
	var got []string
	for range n {
		got = append(got, status.Code(call()).String())
	}
	return fmt.Sprint(got)
}

func getServers(conn *grpc.ClientConn, ctx context.Context) error {
	_, err := grpc_channelz_v1.NewChannelzClient(conn).GetServers(ctx, &grpc_channelz_v1.GetServersRequest{})
	return err
}

// The gRPC twin of lim.Handler(tok.Require(h)): an internal method answers
// Unauthenticated without the token, after the call was charged, so that
// guessing is limited (ResourceExhausted once the budget is spent); with
// the token it is served and exempt; public methods are limited at the
// configured rate.
func TestInternalMethodsNeedTheTokenAndChargeBeforeRefusing(t *testing.T) {
	tok := newToken(t)
	const burst = 3
	for _, tc := range []struct {
		name, authorization string
	}{
		{"no token", ""},
		{"forged token", "Bearer forged-secret-0123456789abcdef"},
		{"retired token", "Bearer " + retiredSecret},
		{"another scheme", "Basic " + secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, obs, lim := internalServer(t, burst, tok, nil)
			ctx := context.Background()
			if tc.authorization != "" {
				ctx = withMD("authorization", tc.authorization)
			}
			if got, want := codesOf(burst+2, func() error { return getServers(conn, ctx) }), "[Unauthenticated Unauthenticated Unauthenticated ResourceExhausted ResourceExhausted]"; got != want {
				t.Fatalf("internal method: %s, want %s (charged, then refused)", got, want)
			}
			if s := lim.Stats(); s.Exempt != 0 || s.Limited < 2 {
				t.Fatalf("Stats: %d exempt, %d limited; want none exempt, every call counted", s.Exempt, s.Limited)
			}
			if d := obs.last(t).d; tc.name == "retired token" && !d.RetiredToken {
				t.Fatal("a retired secret on an internal method was not flagged RetiredToken")
			}
		})
	}
	t.Run("with the token", func(t *testing.T) {
		conn, _, lim := internalServer(t, burst, tok, nil)
		ctx := withMD("authorization", "Bearer "+secret)
		if got, want := codesOf(2*burst, func() error { return getServers(conn, ctx) }), "[OK OK OK OK OK OK]"; got != want {
			t.Fatalf("internal method with the token, beyond the budget: %s, want %s", got, want)
		}
		if s := lim.Stats(); s.Exempt != 2*burst || s.Allowed != 0 {
			t.Fatalf("Stats: %d exempt, %d allowed; want %d exempt", s.Exempt, s.Allowed, 2*burst)
		}
		health := healthpb.NewHealthClient(conn)
		if got, want := codesOf(burst+1, func() error { _, err := check(health, context.Background()); return err }), "[OK OK OK ResourceExhausted]"; got != want {
			t.Fatalf("public method without the token: %s, want %s", got, want)
		}
	})
}

// The message of an Unauthenticated status is fixed: nothing of the token,
// the method or the decision reaches the client.
func TestUnauthenticatedSaysNothingElse(t *testing.T) {
	conn, _, _ := internalServer(t, 10, newToken(t), nil)
	err := getServers(conn, withMD("authorization", "Bearer forged-secret-0123456789abcdef"))
	st := status.Convert(err)
	if st.Code() != codes.Unauthenticated || st.Message() != "unauthenticated" || len(st.Details()) != 0 {
		t.Fatalf("status %v %q with %d details, want Unauthenticated %q and none", st.Code(), st.Message(), len(st.Details()), "unauthenticated")
	}
}

// A call that WithExempt exempts from the limit still needs the token on an
// internal method, as InternalToken.Require does behind the HTTP WithExempt.
func TestWithExemptDoesNotOpenInternalMethods(t *testing.T) {
	conn, _, lim := internalServer(t, 1, newToken(t), []grpclimit.Option{grpclimit.WithExempt(func(context.Context, string) bool { return true })})
	if got, want := codesOf(3, func() error { return getServers(conn, context.Background()) }), "[Unauthenticated Unauthenticated Unauthenticated]"; got != want {
		t.Fatalf("exempt calls without the token: %s, want %s", got, want)
	}
	if got, want := codesOf(2, func() error { return getServers(conn, withMD("authorization", "Bearer "+secret)) }), "[OK OK]"; got != want {
		t.Fatalf("with the token: %s, want %s", got, want)
	}
	if s := lim.Stats(); s.Exempt != 5 {
		t.Fatalf("Stats.Exempt = %d, want 5", s.Exempt)
	}
}

// A method that a client makes up under an internal service's name is
// guarded too when the server has an UnknownServiceHandler (the twin of an
// unknown /internal/ path getting 401, not 404); without one, grpc-go
// answers it Unimplemented before any interceptor runs.
func TestUnknownMethodOfAnInternalService(t *testing.T) {
	tok := newToken(t)
	unknown := func(conn *grpc.ClientConn, ctx context.Context) error {
		return conn.Invoke(ctx, channelz+"NoSuchMethod", &grpc_channelz_v1.GetServersRequest{}, new(grpc_channelz_v1.GetServersResponse))
	}
	conn, _, _ := internalServer(t, 2, tok, nil, grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unimplemented, "no such method")
	}))
	if got, want := codesOf(3, func() error { return unknown(conn, context.Background()) }), "[Unauthenticated Unauthenticated ResourceExhausted]"; got != want {
		t.Fatalf("with an UnknownServiceHandler, without the token: %s, want %s", got, want)
	}
	if got, want := codesOf(1, func() error { return unknown(conn, withMD("authorization", "Bearer "+secret)) }), "[Unimplemented]"; got != want {
		t.Fatalf("with the token: %s, want %s (the handler's answer)", got, want)
	}
	plain, _, _ := internalServer(t, 2, tok, nil)
	if got, want := codesOf(1, func() error { return unknown(plain, context.Background()) }), "[Unimplemented]"; got != want {
		t.Fatalf("without an UnknownServiceHandler: %s, want %s", got, want)
	}
}

// A guarded stream is refused when it opens, after being charged.
func TestInternalStreamNeedsTheToken(t *testing.T) {
	tok := newToken(t)
	lim, _ := newLimiter(t, 2, time.Hour, addrlimit.WithInternalToken(tok))
	gl := newGL(t, lim, grpclimit.WithInternalMethods(tok, watchMethod))
	conn, err := grpc.NewClient(serveInternal(t, gl, nil), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	watch := func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if got, want := codesOf(3, func() error { return watch(context.Background()) }), "[Unauthenticated Unauthenticated ResourceExhausted]"; got != want {
		t.Fatalf("Watch without the token: %s, want %s", got, want)
	}
	if got, want := codesOf(3, func() error { return watch(withMD("authorization", "Bearer "+secret)) }), "[OK OK OK]"; got != want {
		t.Fatalf("Watch with the token: %s, want %s", got, want)
	}
}

func TestWithInternalMethodsRejectsMisconfiguration(t *testing.T) {
	tok, other := newToken(t), newToken(t)
	lim, _ := newLimiter(t, 10, time.Minute)
	for name, opts := range map[string][]grpclimit.Option{
		"nil token":        {grpclimit.WithInternalMethods(nil, channelz)},
		"no method":        {grpclimit.WithInternalMethods(tok)},
		"not a method":     {grpclimit.WithInternalMethods(tok, "grpc.channelz.v1.Channelz")},
		"two tokens":       {grpclimit.WithInternalMethods(tok, channelz), grpclimit.WithInternalMethods(other, checkMethod)},
		"empty method arg": {grpclimit.WithInternalMethods(tok, channelz, "")},
	} {
		if _, err := grpclimit.New(lim, opts...); err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: New returned %v, want a grpclimit error without the secret", name, err)
		}
	}
	if _, err := grpclimit.New(lim, grpclimit.WithInternalMethods(tok, channelz), grpclimit.WithInternalMethods(tok, checkMethod)); err != nil {
		t.Errorf("the same token twice: %v", err)
	}
}

// A misspelt internal service would leave the real one unguarded:
// CheckServer names it.
func TestCheckServerNamesAMisspeltInternalMethod(t *testing.T) {
	lim, _ := newLimiter(t, 10, time.Minute)
	gl := newGL(t, lim, grpclimit.WithInternalMethods(newToken(t), "/grpc.channelz.v1.Chanelz/"))
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
	channelzsvc.RegisterChannelzServiceToServer(srv)
	err := gl.CheckServer(srv)
	if want := `"/grpc.channelz.v1.Chanelz/" (WithInternalMethods): the server registers no such service`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("CheckServer: %v, want it to say %s", err, want)
	}
}

// bearer sends an internal secret as the authorization metadata of every
// call, and only over a connection with transport security: grpc-go refuses
// to dial with it in plaintext (RequireTransportSecurity).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// The client side: per-RPC credentials send the token over real TLS on
// loopback, and grpc-go will not send them in plaintext.
func TestPerRPCCredentialsSendTheTokenOverTLSOnly(t *testing.T) {
	tok := newToken(t)
	cert, pool := selfSigned(t)
	lim, _ := newLimiter(t, 1, time.Hour, addrlimit.WithInternalToken(tok))
	addr := serveInternal(t, newGL(t, lim, grpclimit.WithInternalMethods(tok, channelz)), cert)

	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})),
		grpc.WithPerRPCCredentials(bearer(secret)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got, want := codesOf(3, func() error { return getServers(conn, context.Background()) }), "[OK OK OK]"; got != want {
		t.Fatalf("internal calls with per-RPC credentials over TLS: %s, want %s", got, want)
	}
	if s := lim.Stats(); s.Exempt != 3 {
		t.Fatalf("Stats.Exempt = %d, want 3", s.Exempt)
	}

	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer(secret)))
	if err == nil {
		plain.Close()
		t.Fatal("grpc-go accepted credentials that require transport security on a plaintext connection")
	}
}

// selfSigned returns a certificate for 127.0.0.1, valid for an hour, and a
// pool that trusts it.
func selfSigned(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
