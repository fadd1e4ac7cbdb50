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

// TrustedProxies resolves the client address of requests that reach the
// server through proxies you run or pay for (load balancers, CDNs, ingress
// controllers), from the one header those proxies set. It is immutable and
// safe for concurrent use.
//
// The rule, which no client can steer:
//  1. If the peer (RemoteAddr) is not inside a trusted range, the peer is the
//     client and no header is read.
//  2. Otherwise the header's lines are read last to first, each from right to
//     left, skipping addresses inside trusted ranges; the first untrusted
//     address is the client. If every element is trusted, the leftmost is:
//     so a client that connects from a trusted address can name any address.
//  3. An element that is not an address ("unknown", "_hidden", garbage, an
//     empty element, a Forwarded element without for=) means the proxies or
//     the ranges are misconfigured: the nearest trusted hop to its right (or
//     the peer) is used, never anything further left, and the problem is
//     reported as a warning error. So is a trusted peer that sent no header.
//
// At most 64 trusted hops are walked, so a header of thousands of elements
// costs no more than a short one. Build it with NewTrustedProxies: the zero
// TrustedProxies trusts no proxy, so ClientAddr and Key give the peer
// address (Key is then RemoteAddrKey) and read no header.
type TrustedProxies struct {
	header  string // canonical
	format  clientip.Format
	trusted clientip.Trusted
	unix    bool // a Unix socket peer is a trusted proxy
}

// NewTrustedProxies returns a resolver for header, the ONE header your
// outermost trusted proxy sets: "X-Forwarded-For", "Forwarded" (RFC 7239),
// or a single-address header such as "X-Real-IP", "CF-Connecting-IP",
// "True-Client-IP" or "Fly-Client-IP". trusted are the ranges of your proxies
// (addresses they connect from and that they write into the header). IPv4 ranges
// also match IPv4-mapped IPv6 peers. A range of all addresses (/0) is
// rejected: with it, the client writes its own address.
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

// WithUnixSocket returns a copy of t that also trusts a peer connected over
// a Unix socket: for a server that a reverse proxy on the same machine
// reaches through a socket file. Such a request has no peer address
// (RemoteAddr is "@" or empty, or a path), so without this every client
// would share UnkeyedKey. Trust it only if nothing but your proxy can open
// the socket (check the file's permissions).
//
// A request counts as coming over a Unix socket when the server's local
// address (http.LocalAddrContextKey) is a Unix address, or, without that
// context value, when RemoteAddr is "", "@" or a path: forms no TCP peer can
// produce. The header is then resolved as from any trusted peer; if it is
// missing or malformed, there is no nearer trusted hop with an address, so
// the request is charged to UnkeyedKey and the problem reported.
func (t *TrustedProxies) WithUnixSocket() *TrustedProxies {
	c := *t
	c.unix = true
	return &c
}

// ClientAddr returns the client address of r (unmapped, without zone, not
// grouped: use AddrKey for that). A non-nil error with a valid address is a
// warning that matches ErrProxyHeader: the address is the safe one to use,
// but the proxies or the trusted ranges look misconfigured. A RemoteAddr that
// is not an IP address gives the zero Addr and ErrNoClientAddress (unless
// WithUnixSocket trusts it). Handlers can call it to log or display the
// client.
func (t *TrustedProxies) ClientAddr(r *http.Request) (netip.Addr, error) {
	peer, err := peerAddr(r)
	if err != nil && !(t.unix && unixPeer(r)) {
		return netip.Addr{}, err
	}
	return t.resolve(peer, r.Header[t.header])
}

// ClientAddrFrom is ClientAddr for a Call of another protocol (gRPC: the
// peer's address, and the metadata under strings.ToLower(t.Header())): peer
// is the connection's peer address, values every line of the header in
// order; rules and errors are ClientAddr's. The zero peer stands for a Unix
// socket peer, which only WithUnixSocket trusts: pass it only for a
// connection known to be one, or a client of that transport names any
// address.
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

// Header returns the name of the header t reads, in canonical form
// ("X-Forwarded-For"). gRPC metadata holds it under its lower-case form.
func (t *TrustedProxies) Header() string { return t.header }

// unixPeer reports whether r came over a Unix socket.
func unixPeer(r *http.Request) bool {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.Network() == "unix"
	}
	ra := r.RemoteAddr
	return ra == "" || ra == "@" || strings.HasPrefix(ra, "/")
}

// Key is the KeyFunc of requests behind the proxies,
// WithKeyFunc(t.Key): AddrKey of ClientAddr, so the key and the address a
// handler logs come from one configuration. A malformed header yields the
// nearest trusted hop's key together with a warning error, which the
// Limiter reports to observers as Decision.Err.
func (t *TrustedProxies) Key(r *http.Request) (string, error) {
	a, err := t.ClientAddr(r)
	return AddrKey(a), err
}

// isTokenChar reports whether c may appear in a field name (RFC 9110 tchar).
func isTokenChar(c byte) bool {
	return c < 0x80 && c > ' ' && !strings.ContainsRune("\"(),/:;<=>?@[\\]{}", rune(c))
}
