package grpclimit

import (
	"context"

	"github.com/addrlimit/addrlimit"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// VerifiedPeer returns a WithExempt predicate that exempts the calls of
// p's verified peers: calls whose connection's TLS state
// (credentials.TLSInfo, from peer.FromContext) has a client certificate
// chain that crypto/tls verified with a leaf carrying one of p's
// identities (addrlimit.VerifiedPeers.MatchState):
//
//	peers, err := addrlimit.NewVerifiedPeers("spiffe://prod.example/ns/edge/sa/gateway")
//	gl, err := grpclimit.New(lim, grpclimit.WithExempt(grpclimit.VerifiedPeer(peers)))
//
// The server's credentials.NewTLS configuration must set ClientCAs and
// ClientAuth to tls.RequireAndVerifyClientCert or
// tls.VerifyClientCertIfGiven: under tls.RequestClientCert nothing is
// verified and no call is exempt, although grpc-go fills
// credentials.TLSInfo.SPIFFEID from the unverified certificate (never base
// an exemption on that field). A call over another transport (insecure,
// ALTS) is not exempt, nor is any call when p is nil. It allocates nothing.
func VerifiedPeer(p *addrlimit.VerifiedPeers) func(ctx context.Context, method string) bool {
	return func(ctx context.Context, _ string) bool {
		pr, ok := peer.FromContext(ctx)
		if !ok {
			return false
		}
		switch info := pr.AuthInfo.(type) {
		case credentials.TLSInfo:
			return p.MatchState(&info.State)
		case *credentials.TLSInfo:
			return info != nil && p.MatchState(&info.State)
		}
		return false
	}
}
