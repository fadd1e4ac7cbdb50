// Package clientip finds the client address in a proxy header by the only
// safe rule: walk the header from the right, skipping trusted proxies; the
// first untrusted address is the client. Everything to its left was written
// by the client and is never read.
//
// The walk reads header lines from the last to the first and each line from
// right to left, allocates nothing, and stops after MaxHops trusted hops, so a
// header of thousands of elements costs no more than a short one.
package clientip

import (
	"errors"
	"net/netip"
	"strings"
)

// MaxHops bounds the trusted hops walked before giving up on a header.
const MaxHops = 64

// Format is the syntax of the configured header.
type Format uint8

const (
	// List is a comma-separated list of addresses (X-Forwarded-For), or a
	// single address (X-Real-IP, CF-Connecting-IP, …). Elements may carry a
	// port: "192.0.2.1:4711", "[2001:db8::1]:4711".
	List Format = iota
	// Forwarded is RFC 7239: comma-separated elements of ;-separated
	// parameters, of which only for= is read.
	Forwarded
)

// Problems reported with a usable address. Their texts never include header
// content.
var (
	ErrNoHeader   = errors.New("trusted proxy sent no client address header")
	ErrUnparsable = errors.New("proxy header element that is not an address (misconfigured proxy or trusted ranges); using the nearest trusted hop")
	ErrTooLong    = errors.New("proxy header has more trusted hops than addrlimit walks; using the last one walked")
)

// Trusted is a set of trusted proxy ranges.
type Trusted []netip.Prefix

// Contains reports whether the normalised address a is in a trusted range.
func (t Trusted) Contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Normalise unmaps IPv4-mapped IPv6 and drops the zone, so that one address
// has one form.
func Normalise(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// NAT64Prefix is the well-known prefix of RFC 6052 (64:ff9b::/96), through
// which NAT64 and SIIT gateways show an IPv4 host to IPv6 servers: the low
// 32 bits are the IPv4 address.
var NAT64Prefix = netip.MustParsePrefix("64:ff9b::/96")

// EmbeddedIPv4 returns the IPv4 address that an address inside NAT64Prefix
// embeds in its low 32 bits (RFC 6052 §2.2, /96), and whether a is one. The
// network-specific prefixes of RFC 6052 and RFC 8215 (64:ff9b:1::/48) are
// not recognised: their length, and so where the IPv4 bits sit, is chosen by
// each operator and cannot be read from the address.
func EmbeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !NAT64Prefix.Contains(a) {
		return netip.Addr{}, false
	}
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[12:])), true
}

// Resolve returns the client address for a request from peer (normalised,
// and inside t; or the zero Addr for a trusted peer without an address, such
// as a Unix socket) that carried lines of a header in format f. With a non-nil
// error the address is still the one to use: the peer when the header is
// missing, the nearest trusted hop to the right of an unparsable element.
func Resolve(f Format, t Trusted, peer netip.Addr, lines []string) (netip.Addr, error) {
	if len(lines) == 0 {
		return peer, ErrNoHeader
	}
	nearest, hops := peer, 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for end := len(line); ; {
			start := elementStart(f, line, end)
			a, ok := parseElement(f, line[start:end])
			if !ok {
				return nearest, ErrUnparsable
			}
			if !t.Contains(a) {
				return a, nil
			}
			nearest = a
			if hops++; hops == MaxHops {
				return nearest, ErrTooLong
			}
			if start == 0 {
				break
			}
			end = start - 1 // the comma
		}
	}
	return nearest, nil // every element is a trusted hop: the leftmost one
}

// elementStart returns where the element ending at end begins: just after the
// last comma before end that is not inside a quoted string (Forwarded), or 0.
// Scanning backwards, a quote toggles the state unless it is escaped; a client
// can unbalance quotes only to the left of the elements its proxies append.
func elementStart(f Format, line string, end int) int {
	if f == List {
		return strings.LastIndexByte(line[:end], ',') + 1
	}
	inQuote := false
	for i := end - 1; i >= 0; i-- {
		switch line[i] {
		case '"':
			if !escaped(line, i) {
				inQuote = !inQuote
			}
		case ',':
			if !inQuote {
				return i + 1
			}
		}
	}
	return 0
}

// escaped reports whether line[i] is preceded by an odd number of backslashes.
func escaped(line string, i int) bool {
	n := 0
	for i--; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func parseElement(f Format, s string) (netip.Addr, bool) {
	s = trimOWS(s)
	if f == List {
		return parseNode(s, false)
	}
	return parseForwardedElement(s)
}

// parseForwardedElement returns the address of the single for= parameter of
// an RFC 7239 forwarded-element. No for=, several, "unknown", obfuscated
// identifiers and malformed values all fail.
func parseForwardedElement(s string) (netip.Addr, bool) {
	var value string
	found := false
	for s != "" {
		var pair string
		if i := strings.IndexByte(s, ';'); i >= 0 {
			pair, s = s[:i], s[i+1:]
		} else {
			pair, s = s, ""
		}
		pair = trimOWS(pair)
		if len(pair) < 4 || pair[3] != '=' || !strings.EqualFold(pair[:3], "for") {
			continue
		}
		if found {
			return netip.Addr{}, false
		}
		value, found = pair[4:], true
	}
	if !found {
		return netip.Addr{}, false
	}
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		value = value[1 : len(value)-1]
		if strings.IndexByte(value, '\\') >= 0 || strings.IndexByte(value, '"') >= 0 {
			return netip.Addr{}, false
		}
	}
	return parseNode(value, true)
}

// parseNode parses "v4", "v4:port", "[v6]", "[v6]:port" and, outside
// Forwarded, a bare "v6". Forwarded also allows obfuscated ports ("_x").
func parseNode(s string, forwarded bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		i := strings.IndexByte(s, ']')
		if i < 0 || (i+1 < len(s) && !validPort(s[i+1:], forwarded)) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:i])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return Normalise(a), true
	}
	host := s
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		if !validPort(s[i:], forwarded) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (host != s || forwarded) && !a.Is4() {
		return netip.Addr{}, false // IPv6 with a port or in Forwarded needs brackets
	}
	return Normalise(a), true
}

// ParseIPv4Port is a fast path for the common RemoteAddr "a.b.c.d:port" (or
// "a.b.c.d"). It accepts only what netip.ParseAddrPort (or netip.ParseAddr)
// accepts, and reports false for anything else, which the caller then parses
// the general way.
func ParseIPv4Port(s string) (netip.Addr, bool) {
	var ip [4]byte
	field, v, digits, i := 0, 0, 0, 0
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			if digits == 1 && v == 0 {
				return netip.Addr{}, false // leading zero
			}
			v, digits = v*10+int(c-'0'), digits+1
			if v > 255 {
				return netip.Addr{}, false
			}
			continue
		case c == '.' && digits > 0 && field < 3:
			ip[field] = byte(v)
			field, v, digits = field+1, 0, 0
			continue
		}
		break
	}
	if field != 3 || digits == 0 || (i < len(s) && !validPort(s[i:], false)) {
		return netip.Addr{}, false
	}
	ip[3] = byte(v)
	return netip.AddrFrom4(ip), true
}

// SplitHostPort splits a RemoteAddr of the form "host:port" or "[host]:port",
// and returns a bare host ("192.0.2.1", "2001:db8::1") unchanged. The port
// must be decimal and at most 65535; it is not returned.
func SplitHostPort(s string) (host string, bracketed, ok bool) {
	if len(s) > 0 && s[0] == '[' {
		i := strings.LastIndexByte(s, ']')
		if i < 0 || !validPort(s[i+1:], false) {
			return "", false, false
		}
		return s[1:i], true, true
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.IndexByte(s[i+1:], ':') >= 0 {
		return s, false, true // a bare IPv4 or IPv6 address
	}
	return s[:i], false, validPort(s[i:], false)
}

// validPort reports whether s is ":" and a decimal port (or, in Forwarded, an
// obfuscated one: "_" and letters, digits, ".", "_", "-").
func validPort(s string, forwarded bool) bool {
	if len(s) < 2 || s[0] != ':' {
		return false
	}
	p := s[1:]
	if forwarded && p[0] == '_' {
		for _, c := range []byte(p) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	n := 0
	for _, c := range []byte(p) {
		if c < '0' || c > '9' {
			return false
		}
		if n = n*10 + int(c-'0'); n > 65535 {
			return false
		}
	}
	return true
}

func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
