package addrlimit

import (
	"net/http"
	"net/netip"
	"reflect"
	"strings"

	"github.com/addrlimit/addrlimit/internal/clientip"
)

// KeyFunc returns the key of a request's bucket, concurrently. An error with
// an empty key charges UnkeyedKey (never a bypass); with a key, it is a
// warning (as TrustedProxies.Key's). Keys share a namespace with addresses.
type KeyFunc func(*http.Request) (string, error)

// UnkeyedKey is the one bucket of requests whose key is unknown (a Unix
// socket peer, a KeyFunc error); AddrKey never returns it.
const UnkeyedKey = "addrlimit:unkeyed"

// RemoteAddrKey is the default KeyFunc: AddrKey of r.RemoteAddr. No client can
// pick it; behind a proxy, use TrustedProxies.Key.
func RemoteAddrKey(r *http.Request) (string, error) {
	a, err := peerAddr(r)
	if err != nil {
		return "", err
	}
	return AddrKey(a), nil
}

// peerAddr is the address of r.RemoteAddr (parseAddr), or
// ErrNoClientAddress.
func peerAddr(r *http.Request) (netip.Addr, error) {
	if a, ok := parseAddr(r.RemoteAddr); ok {
		return a, nil
	}
	return netip.Addr{}, ErrNoClientAddress
}

// parseAddr parses an address as RemoteAddr holds it ("ip:port",
// "[ip6%zone]:port", or a bare IP as some test harnesses set it), unmaps it
// and drops its zone. It accepts exactly what netip.ParseAddrPort or
// netip.ParseAddr accept, but does not convert the port, which it ignores.
func parseAddr(s string) (netip.Addr, bool) {
	if a, ok := clientip.ParseIPv4Port(s); ok {
		return a, true
	}
	host, bracketed, ok := clientip.SplitHostPort(s)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || bracketed && !a.Is6() {
		return netip.Addr{}, false
	}
	return clientip.Normalise(a), true
}

// AddrKey returns a's bucket key: an IPv4 address as itself (also written
// IPv4-mapped or under NAT64 64:ff9b::/96), any other IPv6 address as its /64
// ("2001:db8:1:2::/64"), "" for the zero Addr; zones are ignored.
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

// addrKeyOf returns the bucket key of s when s is written as an address or
// a network, as people type a client's address: as RemoteAddr holds it
// ("192.0.2.1:443", "[2001:db8::1]:443"), bare in any notation
// ("::ffff:192.0.2.1", "64:ff9b::c000:201", "2001:db8::1%eth0"), or as a
// network ("2001:db8::1/64", "192.0.2.1/32"). ok is false when s is none of
// these. key is AddrKey of the address, or of the network when all of it has
// one key, else "" (a network of several clients' buckets). A key AddrKey
// returns gives itself, allocating nothing.
func addrKeyOf(s string) (key string, ok bool) {
	host := s // up to a zone ("%eth0"), which may hold anything
	if i := strings.IndexByte(s, '%'); i >= 0 {
		host = s[:i]
	}
	if !addrChars(host) {
		return "", false // "user:1", "job-7": no parser is asked (a parse error allocates)
	}
	var a netip.Addr
	if strings.IndexByte(host, '/') < 0 {
		if a, ok = parseAddr(s); !ok {
			return "", false
		}
		if a.Is4() && strings.IndexByte(s, ':') < 0 {
			return s, true // an IPv4 address without port is its own key: the parsers refuse leading zeros
		}
	} else {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return "", false
		}
		if !oneKey(p) {
			return "", true
		}
		a = p.Masked().Addr()
	}
	var buf [maxAddrKeyLen]byte
	if b := appendAddrKey(buf[:0], a); string(b) != s {
		return string(b), true
	}
	return s, true
}

// addrChars reports whether s is not empty and has only the characters of
// addresses, ports and networks: hexadecimal digits and ":.[]/".
func addrChars(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' ||
			c == ':' || c == '.' || c == '/' || c == '[' || c == ']') {
			return false
		}
	}
	return s != ""
}

// mapped is the IPv4-mapped IPv6 range, whose addresses are keyed as IPv4.
var mapped = netip.MustParsePrefix("::ffff:0:0/96")

// oneKey reports whether every address of the network p has the same
// AddrKey: one IPv4 address (also when mapped or behind NAT64), or a network
// inside one IPv6 /64.
func oneKey(p netip.Prefix) bool {
	switch {
	case p.Addr().Is4():
		return p.Bits() == 32
	case p.Overlaps(mapped) || p.Overlaps(clientip.NAT64Prefix):
		return p.Bits() == 128
	}
	return p.Bits() >= 64
}

// addrKeyFuncs are the code addresses (reflect.Value.Pointer of a func) of
// the KeyFuncs that key requests by AddrKey: RemoteAddrKey, and
// TrustedProxies.Key as a method value (t.Key, whatever t: all method
// values of one method share its code; the receiver is data). Read once per
// New, never per request.
var addrKeyFuncs = [...]uintptr{
	reflect.ValueOf(KeyFunc(RemoteAddrKey)).Pointer(),
	reflect.ValueOf(KeyFunc((&TrustedProxies{}).Key)).Pointer(),
}

// keysByAddr reports whether f (nil: the default key) keys requests by
// AddrKey, so that a key written as an address names its client's bucket.
// A function wrapping one of them is the caller's own: it may key otherwise.
func keysByAddr(f KeyFunc) bool {
	if f == nil {
		return true
	}
	p := reflect.ValueOf(f).Pointer()
	return p == addrKeyFuncs[0] || p == addrKeyFuncs[1]
}
