package grpclimit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"github.com/addrlimit/addrlimit/internal/testpki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

const (
	edgeID  = "spiffe://prod.example/ns/edge/sa/gateway"
	otherID = "spiffe://prod.example/ns/shop/sa/web"
)

// callOverMTLS makes one Check call from a client presenting cert (none if
// nil) to a gRPC server whose credentials.NewTLS configuration verifies
// client certificates of ca as auth says, limited by an Interceptor
// exempting peers. It returns the Limiter's Stats, the SPIFFEID grpc-go put
// in the call's credentials.TLSInfo ("" for none) and the call's error.
func callOverMTLS(t *testing.T, ca *testpki.CA, auth tls.ClientAuthType, peers *addrlimit.VerifiedPeers, cert *tls.Certificate) (addrlimit.Stats, string, error) {
	t.Helper()
	lim, _ := newLimiter(t, 1, time.Hour)
	gl, err := grpclimit.New(lim, grpclimit.WithExempt(grpclimit.VerifiedPeer(peers)))
	if err != nil {
		t.Fatal(err)
	}
	var grpcSPIFFEID string
	seeTLSInfo := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && info.SPIFFEID != nil {
				grpcSPIFFEID = info.SPIFFEID.String()
			}
		}
		return h(ctx, req)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(ca.ServerConfig(t, auth))), grpc.ChainUnaryInterceptor(seeTLSInfo, gl.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientConfig(cert))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// The deadline only bounds a refused handshake's wait: either way the
	// call fails and the Limiter decides nothing.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = check(healthpb.NewHealthClient(conn), ctx)
	return lim.Stats(), grpcSPIFFEID, err
}

// VerifiedPeer exempts the calls of a peer whose client certificate
// crypto/tls verified with one of the identities, and no other: the same
// cases as the HTTP path's TestVerifiedPeersOverMutualTLS, over grpc-go.
func TestVerifiedPeerOverMutualTLS(t *testing.T) {
	ca, wrongCA := testpki.NewCA(t, "prod CA"), testpki.NewCA(t, "another CA")
	peers, err := addrlimit.NewVerifiedPeers(edgeID, "CN=billing,O=Example Corp")
	if err != nil {
		t.Fatal(err)
	}
	edge := testpki.Leaf{URIs: []string{edgeID}}
	cert := func(c tls.Certificate) *tls.Certificate { return &c }
	const (
		exempt  = "exempt"
		charged = "charged"
		refused = "handshake refused"
	)
	cases := []struct {
		name string
		auth tls.ClientAuthType
		cert *tls.Certificate
		want string
	}{
		{"SPIFFE ID, RequireAndVerifyClientCert", tls.RequireAndVerifyClientCert, cert(ca.Issue(t, edge)), exempt},
		{"SPIFFE ID, VerifyClientCertIfGiven", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, edge)), exempt},
		{"subject", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{Subject: pkix.Name{CommonName: "billing", Organization: []string{"Example Corp"}}})), exempt},
		{"no certificate", tls.VerifyClientCertIfGiven, nil, charged},
		{"no certificate, required", tls.RequireAndVerifyClientCert, nil, refused},
		{"another SPIFFE ID", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{otherID}})), charged},
		{"the SPIFFE ID and a second URI SAN", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{edgeID, otherID}})), charged},
		{"self-signed", tls.VerifyClientCertIfGiven, cert(testpki.SelfSigned(t, edge)), refused},
		{"another CA", tls.RequireAndVerifyClientCert, cert(wrongCA.Issue(t, edge)), refused},
		{"expired", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{edgeID}, NotAfter: time.Now().Add(-time.Minute)})), refused},
		{"RequestClientCert, self-signed with the SPIFFE ID", tls.RequestClientCert, cert(testpki.SelfSigned(t, edge)), charged},
		{"RequireAnyClientCert, the right CA", tls.RequireAnyClientCert, cert(ca.Issue(t, edge)), charged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, grpcID, err := callOverMTLS(t, ca, c.auth, peers, c.cert)
			got := ""
			switch {
			case err != nil && s.Exempt+s.Allowed+s.Limited == 0:
				got = refused
			case err == nil && s.Exempt == 1 && s.Allowed+s.Limited == 0 && s.Keys == 0:
				got = exempt
			case err == nil && s.Exempt == 0 && s.Allowed+s.Limited == 1 && s.Keys == 1:
				got = charged
			default:
				t.Fatalf("call error %v, Stats %+v", err, s)
			}
			if got != c.want {
				t.Fatalf("%s (call error %v); want %s", got, err, c.want)
			}
			if got == refused {
				wantCode(t, err, codes.Unavailable, "call with a refused certificate")
			}
			// The trap VerifiedPeer avoids: without verification grpc-go
			// still names the certificate's SPIFFE ID in TLSInfo.
			if c.auth == tls.RequestClientCert && grpcID != edgeID {
				t.Fatalf("TLSInfo.SPIFFEID %q under RequestClientCert, want %q", grpcID, edgeID)
			}
		})
	}
}

// Deciding whether a call is exempt allocates nothing, and a call without
// TLS, or a nil VerifiedPeers, is not exempt.
func TestVerifiedPeerOutsideTLS(t *testing.T) {
	ca := testpki.NewCA(t, "prod CA")
	peers, err := addrlimit.NewVerifiedPeers(edgeID)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Issue(t, testpki.Leaf{URIs: []string{edgeID}})
	state := tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.Leaf}, VerifiedChains: [][]*x509.Certificate{{c.Leaf, ca.Cert}}}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	verified := peer.NewContext(context.Background(), &peer.Peer{Addr: addr, AuthInfo: credentials.TLSInfo{State: state}})
	exempt := grpclimit.VerifiedPeer(peers)
	if !exempt(verified, checkMethod) || !exempt(peer.NewContext(context.Background(), &peer.Peer{Addr: addr, AuthInfo: &credentials.TLSInfo{State: state}}), checkMethod) {
		t.Fatal("a verified peer with the identity is not exempt")
	}
	if n := testing.AllocsPerRun(100, func() { exempt(verified, checkMethod) }); n != 0 {
		t.Errorf("VerifiedPeer allocates %v times per call, want 0", n)
	}
	for name, ctx := range map[string]context.Context{
		"no peer":     context.Background(),
		"no TLS":      peer.NewContext(context.Background(), &peer.Peer{Addr: addr}),
		"unverified":  peer.NewContext(context.Background(), &peer.Peer{Addr: addr, AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: state.PeerCertificates}}}),
		"nil TLSInfo": peer.NewContext(context.Background(), &peer.Peer{Addr: addr, AuthInfo: (*credentials.TLSInfo)(nil)}),
	} {
		if exempt(ctx, checkMethod) {
			t.Errorf("%s: exempt", name)
		}
	}
	if grpclimit.VerifiedPeer(nil)(verified, checkMethod) {
		t.Error("VerifiedPeer(nil) exempts a call")
	}
}
