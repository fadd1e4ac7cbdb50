// Package testpki issues the certificates of tests that need real mutual
// TLS on loopback: a CA, a server certificate for 127.0.0.1 and client
// certificates with chosen SPIFFE IDs, subjects and validity. Keys are
// ECDSA P-256, made at test time.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"
)

// CA is a certificate authority: its certificate, key, and a pool holding
// the certificate.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool
}

// Leaf describes a certificate to issue. URIs are the URI SANs, parsed with
// url.Parse (so "spiffe://a/b" and stranger forms alike). A zero NotAfter
// means one hour from now; a zero NotBefore one hour ago.
type Leaf struct {
	Subject             pkix.Name
	URIs                []string
	NotBefore, NotAfter time.Time
	IsCA                bool
}

// NewCA returns a new CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, Leaf{Subject: pkix.Name{CommonName: name}, IsCA: true})
	cert := create(t, tmpl, tmpl, key, key)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Issue returns a client certificate (ExtKeyUsageClientAuth) for l,
// signed by ca, with its key.
func (ca *CA) Issue(t testing.TB, l Leaf) tls.Certificate {
	t.Helper()
	key := newKey(t)
	cert := create(t, template(t, l), ca.Cert, key, ca.Key)
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// SelfSigned returns a client certificate for l signed by its own key.
func SelfSigned(t testing.TB, l Leaf) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, l)
	cert := create(t, tmpl, tmpl, key, key)
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// ServerConfig returns a server configuration with a certificate for
// 127.0.0.1 issued by ca, which verifies client certificates against ca as
// auth says.
func (ca *CA) ServerConfig(t testing.TB, auth tls.ClientAuthType) *tls.Config {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, Leaf{Subject: pkix.Name{CommonName: "server"}})
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	cert := create(t, tmpl, ca.Cert, key, ca.Key)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
		ClientAuth:   auth,
		ClientCAs:    ca.Pool,
		MinVersion:   tls.VersionTLS12,
	}
}

// ClientConfig returns a client configuration that trusts ca's servers
// and presents cert (none if nil) whatever CAs the server says it accepts
// (crypto/tls would otherwise send no certificate the server's CAs did not
// issue).
func (ca *CA) ClientConfig(cert *tls.Certificate) *tls.Config {
	if cert == nil {
		cert = &tls.Certificate{}
	}
	return &tls.Config{
		RootCAs:    ca.Pool,
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		},
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func template(t testing.TB, l Leaf) *x509.Certificate {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               l.Subject,
		NotBefore:             l.NotBefore,
		NotAfter:              l.NotAfter,
		BasicConstraintsValid: true,
		IsCA:                  l.IsCA,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(time.Hour)
	}
	if l.IsCA { // any use, so as not to restrict the chains it issues
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	}
	for _, s := range l.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return tmpl
}

func create(t testing.TB, tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
