package addrlimit

import (
	"net/http"
	"net/netip"

	"github.com/addrlimit/addrlimit/internal/clientip"
)

// KeyFunc returns the key of the bucket a request is charged to.
//
// Contract: with a nil error the key is used (an empty key counts as the
// error ErrEmptyKey). With a non-nil error and an empty key, the request is
// charged to the shared bucket UnkeyedKey: a KeyFunc failure is never a
// bypass. With a non-nil error and a non-empty key, the key is used and the
// error is reported to observers as a warning (Decision.Err); TrustedProxies.Key
// does this when a proxy header is malformed. Error texts never reach the
// client.
//
// A KeyFunc is called concurrently and must be safe for that. Its keys share
// one namespace per policy with address keys and UnkeyedKey (see
// PolicySelector): prefix keys that are not addresses ("user:"+id).
type KeyFunc func(*http.Request) (string, error)

// UnkeyedKey is the key of the one bucket shared by all requests whose key
// could not be determined (a RemoteAddr that is not an IP address, such as a
// Unix socket peer, or a KeyFunc error). AddrKey never returns it.
const UnkeyedKey = "addrlimit:unkeyed"

// RemoteAddrKey is the default KeyFunc: the connection's peer address, from
// r.RemoteAddr, normalised by AddrKey (port ignored). It never reads a header,
// so a client cannot choose its key; behind a proxy, every client shares the
// proxy's key, so use TrustedProxies.Key there. Its error is ErrNoClientAddress.
//
// A Limiter without WithKeyFunc computes exactly this key without
// allocating; giving it explicitly changes nothing but speed.
func RemoteAddrKey(r *http.Request) (string, error) {
	a, err := peerAddr(r)
	if err != nil {
		return "", err
	}
	return AddrKey(a), nil
}

// peerAddr parses r.RemoteAddr ("ip:port", "[ip6%zone]:port", or a bare IP
// as some test harnesses set it), unmaps it and drops its zone.
// It accepts exactly what netip.ParseAddrPort or netip.ParseAddr accept, but
// does not convert the port, which it ignores.
func peerAddr(r *http.Request) (netip.Addr, error) {
	if a, ok := clientip.ParseIPv4Port(r.RemoteAddr); ok {
		return a, nil
	}
	host, bracketed, ok := clientip.SplitHostPort(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, ErrNoClientAddress
	}
	a, err := netip.ParseAddr(host)
	if err != nil || bracketed && !a.Is6() {
		return netip.Addr{}, ErrNoClientAddress
	}
	return clientip.Normalise(a), nil
}

// AddrKey returns the bucket key of address a: an IPv4 address as itself
// ("192.0.2.1"), also when written as IPv4-mapped IPv6 ("::ffff:192.0.2.1")
// or under the NAT64 well-known prefix 64:ff9b::/96 ("64:ff9b::192.0.2.1");
// any other IPv6 address, network-specific NAT64 prefixes included (README
// "FAQ"), as its /64 ("2001:db8:1:2::/64"); zones are ignored. It returns ""
// for the zero Addr.
//
// Custom KeyFuncs that derive addresses should key them with AddrKey, so that
// one client cannot appear under several keys.
func AddrKey(a netip.Addr) string {
	var buf [maxAddrKeyLen]byte
	return string(appendAddrKey(buf[:0], a))
}

// maxAddrKeyLen is the longest AddrKey: a full IPv6 /64 prefix.
const maxAddrKeyLen = len("ffff:ffff:ffff:ffff::/64")

// appendAddrKey appends AddrKey(a) to b: unmapped first (so that an IPv4
// client has one key however it is written, mapped or behind NAT64), zone
// dropped, IPv6 masked to its /64. It appends nothing for the zero Addr.
func appendAddrKey(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return b
	}
	a = clientip.Normalise(a)
	if v4, ok := clientip.EmbeddedIPv4(a); ok {
		a = v4
	}
	if a.Is4() {
		return a.AppendTo(b)
	}
	p, _ := a.Prefix(64)
	return p.AppendTo(b)
}
