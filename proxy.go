package addrlimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/addrlimit/addrlimit/internal/clientip"
)

// TrustedProxies resolves the client address behind your proxies from the
// one header they set: the peer if it is not trusted, else the header's
// last untrusted element (read backwards, skipping trusted ones). A bad
// element or a missing header yields the nearest trusted hop, never
// anything further left, with ErrProxyHeader. The zero value trusts no
// proxy; it is immutable and safe for concurrent use.
type TrustedProxies struct {
	header  string // canonical
	format  clientip.Format
	trusted clientip.Trusted
	unix    bool // a Unix socket peer is a trusted proxy
}

// NewTrustedProxies returns a resolver for header, the ONE header your
// outermost proxy sets ("X-Forwarded-For", "Forwarded", "X-Real-IP", ...),
// trusting the ranges your proxies connect from (not /0).
func NewTrustedProxies(header string, trusted ...netip.Prefix) (*TrustedProxies, error) {
	if header == "" {
		return nil, errors.New("addrlimit: trusted proxy header name is empty")
	}
	for _, c := range []byte(header) {
		if !isTokenChar(c) {
			return nil, fmt.Errorf("addrlimit: trusted proxy header name %q is not a valid field name", header)
		}
	}
	if len(trusted) == 0 {
		return nil, errors.New("addrlimit: no trusted proxy ranges given; without a proxy, use the default RemoteAddrKey")
	}
	t := &TrustedProxies{header: textproto.CanonicalMIMEHeaderKey(header)}
	if t.header == "Forwarded" {
		t.format = clientip.Forwarded
	}
	for i, p := range trusted {
		if !p.IsValid() {
			return nil, fmt.Errorf("addrlimit: trusted proxy range %d of %d is not a valid prefix", i+1, len(trusted))
		}
		p = p.Masked()
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("addrlimit: trusted proxy range %v trusts every address, so any client could choose its key", trusted[i])
		}
		t.trusted = append(t.trusted, p)
	}
	return t, nil
}

// WithUnixSocket returns a copy of t that also trusts a Unix socket peer (a
// proxy on the same machine), which otherwise shares UnkeyedKey. Trust it only
// if nothing but your proxy can open the socket.
func (t *TrustedProxies) WithUnixSocket() *TrustedProxies {
	c := *t
	c.unix = true
	return &c
}

// ClientAddr returns r's client address (unmapped, no zone, not grouped:
// AddrKey does that). An error with a valid address is an ErrProxyHeader
// warning: the address is the safe one. A RemoteAddr that is no IP address
// gives the zero Addr and ErrNoClientAddress (unless WithUnixSocket).
func (t *TrustedProxies) ClientAddr(r *http.Request) (netip.Addr, error) {
	peer, err := peerAddr(r)
	if err != nil && !(t.unix && unixPeer(r)) {
		return netip.Addr{}, err
	}
	return t.resolve(peer, r.Header[t.header])
}

// ClientAddrFrom is ClientAddr for another transport: peer is the
// connection's peer (zero only for a Unix socket), values the header's lines
// in order (gRPC: the metadata under strings.ToLower(t.Header())).
func (t *TrustedProxies) ClientAddrFrom(peer netip.Addr, values []string) (netip.Addr, error) {
	if !peer.IsValid() && !t.unix {
		return netip.Addr{}, ErrNoClientAddress
	}
	return t.resolve(clientip.Normalise(peer), values)
}

// resolve applies the rules to a normalised peer (the zero Addr for a
// trusted Unix socket) and the header's lines.
func (t *TrustedProxies) resolve(peer netip.Addr, lines []string) (netip.Addr, error) {
	if peer.IsValid() && !t.trusted.Contains(peer) {
		return peer, nil
	}
	a, err := clientip.Resolve(t.format, t.trusted, peer, lines)
	if err != nil {
		err = &proxyError{header: t.header, err: err}
	}
	return a, err
}

// Header returns the name of the header t reads, in canonical form.
func (t *TrustedProxies) Header() string { return t.header }

// unixPeer reports whether r came over a Unix socket.
func unixPeer(r *http.Request) bool {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.Network() == "unix"
	}
	ra := r.RemoteAddr
	return ra == "" || ra == "@" || strings.HasPrefix(ra, "/")
}

// Key is the KeyFunc behind the proxies (WithKeyFunc(t.Key)): AddrKey of
// ClientAddr, with its warning.
func (t *TrustedProxies) Key(r *http.Request) (string, error) {
	a, err := t.ClientAddr(r)
	return AddrKey(a), err
}

// isTokenChar reports whether c may appear in a field name (RFC 9110 tchar).
func isTokenChar(c byte) bool {
	return c < 0x80 && c > ' ' && !strings.ContainsRune("\"(),/:;<=>?@[\\]{}", rune(c))
}
