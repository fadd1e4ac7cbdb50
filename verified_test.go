package addrlimit_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/internal/testpki"
)

const (
	edgeID  = "spiffe://prod.example/ns/edge/sa/gateway"
	otherID = "spiffe://prod.example/ns/shop/sa/web"
)

// mtlsOutcome is what one request over mutual TLS came to.
type mtlsOutcome string

const (
	exempted        mtlsOutcome = "exempt"            // Stats: one Exempt, no bucket
	charged         mtlsOutcome = "charged"           // Stats: one Allowed or Limited
	handshakeFailed mtlsOutcome = "handshake refused" // no response, no decision
)

// overMTLS serves one request from a client presenting cert (none if nil)
// to a server whose tls.Config verifies client certificates of ca as auth
// says, limited by a Limiter exempting peers, and says what it came to and
// what the server logged.
func overMTLS(t *testing.T, ca *testpki.CA, auth tls.ClientAuthType, peers *addrlimit.VerifiedPeers, cert *tls.Certificate) (mtlsOutcome, string) {
	t.Helper()
	lim := mustNew(t, 1, time.Hour, addrlimit.WithExempt(peers.Match))
	presented := 0
	srv := httptest.NewUnstartedServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented = len(r.TLS.PeerCertificates)
	})))
	var serverLog strings.Builder
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.TLS = ca.ServerConfig(t, auth)
	srv.StartTLS()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(cert)}}
	resp, err := client.Get(srv.URL)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	client.CloseIdleConnections()
	srv.Close() // waits for the connection to end: its log is written
	s := lim.Stats()
	if err != nil {
		if s.Allowed+s.Limited+s.Exempt != 0 {
			t.Fatalf("request failed (%v) but the Limiter decided: %+v", err, s)
		}
		return handshakeFailed, serverLog.String()
	}
	if cert != nil && presented != 1 {
		t.Fatalf("the server saw %d client certificates, want the 1 presented", presented)
	}
	switch {
	case s.Exempt == 1 && s.Allowed+s.Limited == 0 && s.Keys == 0:
		return exempted, serverLog.String()
	case s.Exempt == 0 && s.Allowed+s.Limited == 1 && s.Keys == 1:
		return charged, serverLog.String()
	}
	t.Fatalf("one request, Stats %+v", s)
	return "", ""
}

// Only a certificate chain that crypto/tls verified against the server's
// ClientCAs, with a leaf carrying the identity, gives a pass; every other
// certificate is charged like anyone or refused at the handshake.
func TestVerifiedPeersOverMutualTLS(t *testing.T) {
	ca, wrongCA := testpki.NewCA(t, "prod CA"), testpki.NewCA(t, "another CA")
	peers, err := addrlimit.NewVerifiedPeers(edgeID, "CN=billing,OU=payments,O=Example Corp")
	if err != nil {
		t.Fatal(err)
	}
	edge := testpki.Leaf{URIs: []string{edgeID}}
	billing := testpki.Leaf{Subject: pkix.Name{CommonName: "billing", OrganizationalUnit: []string{"payments"}, Organization: []string{"Example Corp"}}}
	cert := func(c tls.Certificate) *tls.Certificate { return &c }
	cases := []struct {
		name string
		auth tls.ClientAuthType
		cert *tls.Certificate
		want mtlsOutcome
		why  string // in the server's log of a refused handshake
	}{
		{"SPIFFE ID, RequireAndVerifyClientCert", tls.RequireAndVerifyClientCert, cert(ca.Issue(t, edge)), exempted, ""},
		{"SPIFFE ID, VerifyClientCertIfGiven", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, edge)), exempted, ""},
		{"subject", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, billing)), exempted, ""},
		{"no certificate", tls.VerifyClientCertIfGiven, nil, charged, ""},
		{"no certificate, required", tls.RequireAndVerifyClientCert, nil, handshakeFailed, "client didn't provide a certificate"},
		{"another SPIFFE ID", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{otherID}})), charged, ""},
		{"the SPIFFE ID and a second URI SAN", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{edgeID, otherID}})), charged, ""},
		{"the SPIFFE ID with a port", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{"spiffe://prod.example:443/ns/edge/sa/gateway"}})), charged, ""},
		{"the SPIFFE ID in the subject, not the URI SAN", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{Subject: pkix.Name{CommonName: edgeID}})), charged, ""},
		{"the subject and one more attribute", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{Subject: pkix.Name{CommonName: "billing", OrganizationalUnit: []string{"payments"}, Organization: []string{"Example Corp"}, Country: []string{"FR"}}})), charged, ""},
		{"the subject in another case", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{Subject: pkix.Name{CommonName: "Billing", OrganizationalUnit: []string{"payments"}, Organization: []string{"Example Corp"}}})), charged, ""},
		{"a CA certificate with the SPIFFE ID", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{edgeID}, IsCA: true})), charged, ""},
		{"self-signed", tls.VerifyClientCertIfGiven, cert(testpki.SelfSigned(t, edge)), handshakeFailed, "certificate signed by unknown authority"},
		{"another CA", tls.VerifyClientCertIfGiven, cert(wrongCA.Issue(t, edge)), handshakeFailed, "certificate signed by unknown authority"},
		{"another CA, required", tls.RequireAndVerifyClientCert, cert(wrongCA.Issue(t, edge)), handshakeFailed, "certificate signed by unknown authority"},
		{"expired", tls.VerifyClientCertIfGiven, cert(ca.Issue(t, testpki.Leaf{URIs: []string{edgeID}, NotAfter: time.Now().Add(-time.Minute)})), handshakeFailed, "certificate has expired or is not yet valid"},
		{"not yet valid", tls.RequireAndVerifyClientCert, cert(ca.Issue(t, testpki.Leaf{URIs: []string{edgeID}, NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})), handshakeFailed, "certificate has expired or is not yet valid"},
		// The server does not verify: the client's certificates reach
		// r.TLS.PeerCertificates as sent, VerifiedChains stays empty.
		{"RequestClientCert, self-signed with the SPIFFE ID", tls.RequestClientCert, cert(testpki.SelfSigned(t, edge)), charged, ""},
		{"RequestClientCert, the right CA", tls.RequestClientCert, cert(ca.Issue(t, edge)), charged, ""},
		{"RequireAnyClientCert, subject", tls.RequireAnyClientCert, cert(testpki.SelfSigned(t, billing)), charged, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, serverLog := overMTLS(t, ca, c.auth, peers, c.cert)
			if got != c.want || !strings.Contains(serverLog, c.why) {
				t.Fatalf("%s, server log %q; want %s, %q", got, serverLog, c.want, c.why)
			}
		})
	}
}

// Selector gives each verified identity its own bucket under its own
// policy, keyed by the identity; a wildcard keys by the leaf's own ID.
func TestVerifiedPeersSelector(t *testing.T) {
	ca := testpki.NewCA(t, "prod CA")
	peers, err := addrlimit.NewVerifiedPeers("spiffe://prod.example/ns/edge/*", "CN=billing")
	if err != nil {
		t.Fatal(err)
	}
	lim := mustNew(t, 1, time.Hour,
		addrlimit.WithPolicy(addrlimit.Policy{Name: "internal", Limits: []addrlimit.Limit{{Burst: 2, Interval: time.Hour}}}),
		addrlimit.WithPolicySelector(peers.Selector("internal")), addrlimit.WithDecisionInContext())
	var got []string
	srv := httptest.NewUnstartedServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := addrlimit.DecisionFromContext(r.Context())
		got = append(got, d.Policy+" "+d.Key)
	})))
	srv.TLS = ca.ServerConfig(t, tls.VerifyClientCertIfGiven)
	srv.StartTLS()
	defer srv.Close()
	for _, l := range []testpki.Leaf{
		{URIs: []string{edgeID}},
		{URIs: []string{"spiffe://prod.example/ns/edge/sa/admin"}},
		{URIs: []string{"spiffe://prod.example/ns/edge"}}, // not under /ns/edge/
		{Subject: pkix.Name{CommonName: "billing"}},
	} {
		c := ca.Issue(t, l)
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(&c)}}
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		client.CloseIdleConnections()
	}
	want := []string{
		"internal " + edgeID,
		"internal spiffe://prod.example/ns/edge/sa/admin",
		"default 127.0.0.1",
		"internal CN=billing",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("decisions (policy key):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// verifiedState is the state of a connection whose client presented the
// certificate for l and crypto/tls verified it.
func verifiedState(t *testing.T, ca *testpki.CA, l testpki.Leaf) *tls.ConnectionState {
	c := ca.Issue(t, l)
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.Leaf}, VerifiedChains: [][]*x509.Certificate{{c.Leaf, ca.Cert}}}
}

// Certificates whose URI SAN is not a plain SPIFFE ID, spelt as the
// configured one, match no SPIFFE ID.
func TestVerifiedPeersSPIFFEStrictness(t *testing.T) {
	ca := testpki.NewCA(t, "prod CA")
	peers, err := addrlimit.NewVerifiedPeers(edgeID, "spiffe://prod.example/ns/batch/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uri  string
		want bool
	}{
		{edgeID, true},
		{"spiffe://prod.example/ns/batch/sa/nightly", true},
		{"SPIFFE://prod.example/ns/edge/sa/gateway", true}, // the scheme is case-insensitive in URIs; x509 lowers it
		{"spiffe://PROD.example/ns/edge/sa/gateway", false},
		{"spiffe://prod.example/ns/edge/sa/Gateway", false},
		{"spiffe://prod.example/ns/edge/sa/gateway/", false},
		{"spiffe://prod.example/ns/edge/sa/%67ateway", false},
		{"spiffe://prod.example/ns/edge/sa/gateway?x=1", false},
		{"spiffe://prod.example/ns/edge/sa/gateway?", false},
		{"spiffe://prod.example/ns/edge/sa/gateway#f", false},
		{"spiffe://user@prod.example/ns/edge/sa/gateway", false},
		{"spiffe://prod.example:8443/ns/edge/sa/gateway", false},
		{"https://prod.example/ns/edge/sa/gateway", false},
		{"spiffe://prod.example/ns/batch", false},
		{"spiffe://prod.example/ns/batch/", false},
		{"spiffe://prod.example/ns/batch//x", false},
		{"spiffe://prod.example/ns/batch/../edge", false},
		{"spiffe://prod.example/ns/batch/a b", false},
		{"spiffe://prod.example/ns/batchx/y", false},
		{"spiffe://prod.example/ns/batch/" + strings.Repeat("a", 2048), false},
	} {
		cs := verifiedState(t, ca, testpki.Leaf{URIs: []string{c.uri}})
		if got := peers.MatchState(cs); got != c.want {
			t.Errorf("certificate URI SAN %.80q: match %v, want %v", c.uri, got, c.want)
		}
		unverified := &tls.ConnectionState{PeerCertificates: cs.PeerCertificates}
		if peers.MatchState(unverified) {
			t.Errorf("certificate URI SAN %.80q matched without a verified chain", c.uri)
		}
	}
	var nilPeers *addrlimit.VerifiedPeers
	if nilPeers.MatchState(verifiedState(t, ca, testpki.Leaf{URIs: []string{edgeID}})) || peers.MatchState(nil) || peers.Match(httptest.NewRequest("GET", "/", nil)) {
		t.Fatal("a nil VerifiedPeers, a nil state or a request without TLS matched")
	}
}

func TestVerifiedPeersSubjects(t *testing.T) {
	ca := testpki.NewCA(t, "prod CA")
	peers, err := addrlimit.NewVerifiedPeers(`CN=a\,b+OU=x,OU=y, O=Example\2C Inc.`, "2.5.4.3=oid-named")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name pkix.Name
		id   string
	}{
		{pkix.Name{CommonName: "a,b", OrganizationalUnit: []string{"y", "x"}, Organization: []string{"Example, Inc."}}, `CN=a\,b+OU=x,OU=y, O=Example\2C Inc.`},
		{pkix.Name{CommonName: "oid-named"}, "2.5.4.3=oid-named"},
		{pkix.Name{CommonName: "a,b", OrganizationalUnit: []string{"x", "x"}, Organization: []string{"Example, Inc."}}, ""},
		{pkix.Name{CommonName: "a,b", OrganizationalUnit: []string{"x"}, Organization: []string{"Example, Inc."}}, ""},
		{pkix.Name{CommonName: "a", OrganizationalUnit: []string{"x", "y"}, Organization: []string{"Example, Inc."}}, ""},
		{pkix.Name{CommonName: "oid-named", Country: []string{"FR"}}, ""},
	} {
		id, ok := peers.Identity(verifiedState(t, ca, testpki.Leaf{Subject: c.name}))
		if id != c.id || ok != (c.id != "") {
			t.Errorf("subject %s: identity %q %v, want %q", c.name, id, ok, c.id)
		}
	}
}

func TestNewVerifiedPeersErrors(t *testing.T) {
	for _, c := range []struct {
		ids  []string
		want string
	}{
		{nil, "needs at least one identity"},
		{[]string{edgeID, edgeID}, "identity 2 of 2 (\"" + edgeID + "\") repeats identity 1"},
		{[]string{"Spiffe://prod.example/a"}, "in lower case"},
		{[]string{"spiffe:prod.example/a"}, `starts with "spiffe://"`},
		{[]string{"spiffe://Prod.example/a"}, "trust domain must be in lower case"},
		{[]string{"spiffe:///a"}, "trust domain is empty"},
		{[]string{"spiffe://prod.example:443/a"}, "port"},
		{[]string{"spiffe://u@prod.example/a"}, "userinfo"},
		{[]string{"spiffe://prod.example"}, "path is empty"},
		{[]string{"spiffe://prod.example/"}, "trailing '/'"},
		{[]string{"spiffe://prod.example/a//b"}, "empty segment"},
		{[]string{"spiffe://prod.example/a/../b"}, `".." segment`},
		{[]string{"spiffe://prod.example/a/%41"}, "percent-encoded"},
		{[]string{"spiffe://prod.example/a?b"}, "no query or fragment"},
		{[]string{"spiffe://prod.example/a#b"}, "no query or fragment"},
		{[]string{"spiffe://prod.example/a*"}, `character '*'`},
		{[]string{"spiffe://prod.example/*/a"}, `character '*'`},
		{[]string{"spiffe://prod.example/" + strings.Repeat("a", 2040)}, "at most 2048 bytes"},
		{[]string{""}, "distinguished name is empty"},
		{[]string{"edge"}, "has no '='"},
		{[]string{"spife://prod.example/a"}, "has no '='"},
		{[]string{"CN=edge , O=x"}, "unescaped space"},
		{[]string{"CN= edge"}, "unescaped space"},
		{[]string{"CN=edge,"}, "ends with a separator"},
		{[]string{"CN="}, "empty value"},
		{[]string{"CN=#0403"}, "#hex form"},
		{[]string{`CN=a"b`}, `unescaped '"'`},
		{[]string{`CN=a\qb`}, "escapes nothing"},
		{[]string{"EMAIL=a@b"}, `the attribute type "EMAIL" is not one of`},
		{[]string{"1=a"}, "dotted OID"},
	} {
		_, err := addrlimit.NewVerifiedPeers(c.ids...)
		requirePackageError(t, err, c.want)
	}
}

// Matching allocates nothing; Identity allocates only the ID of a
// wildcard match.
func TestVerifiedPeersAllocations(t *testing.T) {
	ca := testpki.NewCA(t, "prod CA")
	peers, err := addrlimit.NewVerifiedPeers(otherID, edgeID, "spiffe://prod.example/ns/batch/*", "CN=billing,O=Example Corp")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		leaf          testpki.Leaf
		identityAlloc float64
	}{
		{testpki.Leaf{URIs: []string{edgeID}}, 0},
		{testpki.Leaf{URIs: []string{"spiffe://prod.example/ns/batch/sa/nightly"}}, 1},
		{testpki.Leaf{Subject: pkix.Name{CommonName: "billing", Organization: []string{"Example Corp"}}}, 0},
		{testpki.Leaf{URIs: []string{"spiffe://prod.example/ns/x/sa/y"}, Subject: pkix.Name{CommonName: "x"}}, 0},
	} {
		cs := verifiedState(t, ca, c.leaf)
		r := httptest.NewRequest("GET", "/", nil)
		r.TLS = cs
		if n := testing.AllocsPerRun(100, func() { peers.Match(r) }); n != 0 {
			t.Errorf("%v: Match allocates %v times, want 0", c.leaf.URIs, n)
		}
		if n := testing.AllocsPerRun(100, func() { peers.Identity(cs) }); n != c.identityAlloc {
			t.Errorf("%v: Identity allocates %v times, want %v", c.leaf.URIs, n, c.identityAlloc)
		}
	}
}

// NewVerifiedPeers never panics, and a SPIFFE ID it accepts matches a
// verified leaf whose URI SAN is that ID as x509 parses it (a wildcard:
// an ID one segment below it), with that ID as the identity.
func FuzzNewVerifiedPeers(f *testing.F) {
	for _, s := range []string{edgeID, "spiffe://prod.example/ns/batch/*", "spiffe://td/*", "CN=a\\,b+OU=x, O=y", "2.5.4.3=x", "spiffe://a:1/b", "CN=\\41\\", "CN=#00", "SPIFFE://x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := addrlimit.NewVerifiedPeers(s)
		if err != nil || !strings.HasPrefix(s, "spiffe://") {
			return
		}
		id := s
		if base, ok := strings.CutSuffix(s, "*"); ok {
			id = base + "w0rk-load_1.x"
		}
		u, err := url.Parse(id)
		if err != nil {
			t.Fatalf("accepted %q, which url.Parse refuses: %v", s, err)
		}
		leaf := &x509.Certificate{URIs: []*url.URL{u}}
		got, ok := peers.Identity(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}})
		if !ok || got != id {
			t.Fatalf("accepted %q; a leaf with %q gives identity %q %v", s, id, got, ok)
		}
	})
}
