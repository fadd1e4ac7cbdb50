package addrlimit

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// VerifiedPeers recognises your own services by the SPIFFE ID or subject of
// a client certificate crypto/tls verified (mutual TLS): exempt them with
// WithExempt(peers.Match) or give them a policy with Selector. Trust only CAs
// that issue such identities. A nil *VerifiedPeers matches nothing; it is
// immutable and safe for concurrent use.
type VerifiedPeers struct {
	spiffe   []spiffeRule
	subjects []subjectRule
}

// spiffeRule is one SPIFFE ID, or with prefix set every ID under a path.
type spiffeRule struct {
	id     string // as configured: the identity and bucket key of an exact match
	td     string // trust domain
	path   string // the exact path, or the prefix ending in '/' of a wildcard
	prefix bool
}

// subjectRule is one distinguished name, as configured and as the
// attributes it consists of.
type subjectRule struct {
	dn    string
	attrs []dnAttr
}

type dnAttr struct {
	oid   asn1.ObjectIdentifier
	value string
}

// maxSPIFFEIDLen is the length in bytes of the longest SPIFFE ID that
// implementations must support (SPIFFE-ID §2.3).
const maxSPIFFEIDLen = 2048

// NewVerifiedPeers matches verified client certificates with one of
// identities: a SPIFFE ID ("spiffe://domain/path", strict, the leaf's only
// URI SAN), one ending in "/*" (every ID below), or a distinguished name
// ("CN=gateway,O=Example Corp", any order). Errors name the bad identity.
func NewVerifiedPeers(identities ...string) (*VerifiedPeers, error) {
	if len(identities) == 0 {
		return nil, errors.New("addrlimit: NewVerifiedPeers needs at least one identity")
	}
	p := &VerifiedPeers{}
	seen := make(map[string]int, len(identities))
	for i, s := range identities {
		if j, dup := seen[s]; dup {
			return nil, fmt.Errorf("addrlimit: NewVerifiedPeers identity %d of %d (%q) repeats identity %d", i+1, len(identities), s, j)
		}
		seen[s] = i + 1
		var err error
		if len(s) >= len("spiffe:") && strings.EqualFold(s[:len("spiffe:")], "spiffe:") {
			var r spiffeRule
			if r, err = parseSPIFFERule(s); err == nil {
				p.spiffe = append(p.spiffe, r)
			}
		} else {
			var attrs []dnAttr
			if attrs, err = parseDN(s); err == nil {
				p.subjects = append(p.subjects, subjectRule{dn: s, attrs: attrs})
			}
		}
		if err != nil {
			return nil, fmt.Errorf("addrlimit: NewVerifiedPeers identity %d of %d (%q): %w", i+1, len(identities), s, err)
		}
	}
	return p, nil
}

// Match reports whether r's verified client certificate has one of p's
// identities.
func (p *VerifiedPeers) Match(r *http.Request) bool {
	return p.MatchState(r.TLS)
}

// MatchState is Match for a connection's state (nil without TLS).
func (p *VerifiedPeers) MatchState(cs *tls.ConnectionState) bool {
	_, _, ok := p.match(cs)
	return ok
}

// Identity returns the identity of p that cs's verified leaf matched (for a
// wildcard, the leaf's own SPIFFE ID), or false.
func (p *VerifiedPeers) Identity(cs *tls.ConnectionState) (string, bool) {
	leaf, id, ok := p.match(cs)
	if ok && id == "" { // a wildcard: the leaf's own ID, valid as match checked
		u := leaf.URIs[0]
		id = "spiffe://" + u.Host + u.Path
	}
	return id, ok
}

// Selector returns a PolicySelector that charges p's identities to the named
// policy, each in a bucket keyed by its Identity (no address looks like one),
// and leaves other requests to the default policy and the KeyFunc.
func (p *VerifiedPeers) Selector(policy string) PolicySelector {
	return func(r *http.Request) (string, string, error) {
		if id, ok := p.Identity(r.TLS); ok {
			return policy, id, nil
		}
		return "", "", nil
	}
}

// match returns the verified leaf of cs and the identity it matched (""
// for a wildcard rule).
func (p *VerifiedPeers) match(cs *tls.ConnectionState) (*x509.Certificate, string, bool) {
	if p == nil || cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, "", false
	}
	// Every verified chain starts with the same leaf: the client's.
	leaf := cs.VerifiedChains[0][0]
	if len(p.spiffe) > 0 && len(leaf.URIs) == 1 && !leaf.IsCA {
		if u := leaf.URIs[0]; isPlainSPIFFEURI(u) {
			for i := range p.spiffe {
				r := &p.spiffe[i]
				if u.Host != r.td {
					continue
				}
				if !r.prefix && u.Path == r.path {
					return leaf, r.id, true
				}
				if r.prefix && len(u.Path) > len(r.path) && strings.HasPrefix(u.Path, r.path) &&
					len("spiffe://")+len(u.Host)+len(u.Path) <= maxSPIFFEIDLen && validSPIFFEPath(u.Path) == nil {
					return leaf, "", true
				}
			}
		}
	}
	for i := range p.subjects {
		if subjectIs(leaf.Subject.Names, p.subjects[i].attrs) {
			return leaf, p.subjects[i].dn, true
		}
	}
	return nil, "", false
}

// isPlainSPIFFEURI reports whether u, parsed from a certificate, is a
// spiffe URI with nothing but a host and a path spelt without escapes.
func isPlainSPIFFEURI(u *url.URL) bool {
	return u.Scheme == "spiffe" && u.Opaque == "" && u.User == nil && !u.OmitHost &&
		u.RawPath == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.RawFragment == ""
}

// subjectIs reports whether names, a certificate subject's attributes, are
// want and nothing else, as multisets: as many as want, and each of want as
// often in names as in want.
func subjectIs(names []pkix.AttributeTypeAndValue, want []dnAttr) bool {
	if len(names) != len(want) {
		return false
	}
	for _, w := range want {
		inWant, inNames := 0, 0
		for _, v := range want {
			if v.value == w.value && v.oid.Equal(w.oid) {
				inWant++
			}
		}
		for _, n := range names {
			if s, ok := n.Value.(string); ok && s == w.value && n.Type.Equal(w.oid) {
				inNames++
			}
		}
		if inWant != inNames {
			return false
		}
	}
	return true
}

// parseSPIFFERule parses a SPIFFE ID, or one whose last segment is "*".
func parseSPIFFERule(s string) (spiffeRule, error) {
	const scheme = "spiffe://"
	if !strings.HasPrefix(s, scheme) {
		return spiffeRule{}, errors.New(`a SPIFFE ID starts with "spiffe://", in lower case`)
	}
	if len(s) > maxSPIFFEIDLen {
		return spiffeRule{}, fmt.Errorf("a SPIFFE ID is at most %d bytes, this one %d", maxSPIFFEIDLen, len(s))
	}
	rest := s[len(scheme):]
	td, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		td, path = rest[:i], rest[i:]
	}
	if td == "" {
		return spiffeRule{}, errors.New("the trust domain is empty")
	}
	for i := range len(td) {
		switch c := td[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
			return spiffeRule{}, errors.New("the trust domain must be in lower case")
		case c == ':':
			return spiffeRule{}, errors.New("the trust domain has a port, which a SPIFFE ID may not")
		case c == '@':
			return spiffeRule{}, errors.New("the trust domain has userinfo, which a SPIFFE ID may not")
		case c == '?', c == '#':
			return spiffeRule{}, errors.New("a SPIFFE ID has no query or fragment")
		default:
			return spiffeRule{}, fmt.Errorf("the trust domain has the character %q (allowed: a-z 0-9 . - _)", c)
		}
	}
	r := spiffeRule{id: s, td: td, path: path}
	if p, ok := strings.CutSuffix(path, "/*"); ok {
		r.path, r.prefix = p+"/", true
		if p == "" {
			return r, nil
		}
		path = p
	}
	if path == "" {
		return spiffeRule{}, errors.New(`the path is empty: a client's SPIFFE ID names a workload under its trust domain ("/*" for all of them)`)
	}
	return r, validSPIFFEPath(path)
}

// validSPIFFEPath checks a non-empty SPIFFE ID path (SPIFFE-ID §2.2).
func validSPIFFEPath(path string) error {
	if path == "" || path[0] != '/' {
		return errors.New("the path must start with '/'")
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		switch seg {
		case "":
			return errors.New("the path has an empty segment or a trailing '/'")
		case ".", "..":
			return errors.New(`the path has a "." or ".." segment`)
		}
		for i := range len(seg) {
			switch c := seg[i]; {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
			case c == '%':
				return errors.New("the path is percent-encoded, which a SPIFFE ID may not be")
			case c == '?', c == '#':
				return errors.New("a SPIFFE ID has no query or fragment")
			default:
				return fmt.Errorf("the path has the character %q (allowed: A-Z a-z 0-9 . - _)", c)
			}
		}
	}
	return nil
}

// dnTypes are the attribute types that crypto/x509/pkix names in a
// distinguished name.
var dnTypes = map[string]asn1.ObjectIdentifier{
	"CN":           {2, 5, 4, 3},
	"SERIALNUMBER": {2, 5, 4, 5},
	"C":            {2, 5, 4, 6},
	"L":            {2, 5, 4, 7},
	"ST":           {2, 5, 4, 8},
	"STREET":       {2, 5, 4, 9},
	"O":            {2, 5, 4, 10},
	"OU":           {2, 5, 4, 11},
	"POSTALCODE":   {2, 5, 4, 17},
}

// parseDN parses an RFC 4514 distinguished name into its attributes. It
// allows spaces after a separator, not around '='.
func parseDN(s string) ([]dnAttr, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("a distinguished name is empty")
	}
	var attrs []dnAttr
	for i := 0; i < len(s); {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("attribute %d has no '=' (a SPIFFE ID starts with \"spiffe://\"; a distinguished name is \"CN=name,O=org\")", len(attrs)+1)
		}
		typ := s[i : i+eq]
		oid, err := dnType(typ)
		if err != nil {
			return nil, fmt.Errorf("attribute %d: %w", len(attrs)+1, err)
		}
		i += eq + 1
		var v []byte
		leadSpace, escaped := false, false // an unescaped space first; the last byte escaped
		for i < len(s) && s[i] != ',' && s[i] != '+' {
			c := s[i]
			switch {
			case c == '\\' && i+1 < len(s) && strings.IndexByte(`,+"\<>;= #`, s[i+1]) >= 0:
				v, escaped, i = append(v, s[i+1]), true, i+2
				continue
			case c == '\\' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
				b, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
				v, escaped, i = append(v, byte(b)), true, i+3
				continue
			case c == '\\':
				return nil, fmt.Errorf("attribute %d (%s) has a '\\' that escapes nothing RFC 4514 allows", len(attrs)+1, typ)
			case c == '"' || c == ';' || c == '<' || c == '>' || len(v) == 0 && c == '#':
				return nil, fmt.Errorf("attribute %d (%s) has an unescaped %q (a value in #hex form is not supported)", len(attrs)+1, typ, c)
			}
			leadSpace = leadSpace || len(v) == 0 && c == ' '
			v, escaped, i = append(v, c), false, i+1
		}
		switch {
		case len(v) == 0:
			return nil, fmt.Errorf("attribute %d (%s) has an empty value", len(attrs)+1, typ)
		case leadSpace || v[len(v)-1] == ' ' && !escaped:
			return nil, fmt.Errorf("attribute %d (%s) has an unescaped space at the start or end of its value", len(attrs)+1, typ)
		}
		attrs = append(attrs, dnAttr{oid: oid, value: string(v)})
		if i < len(s) {
			i++ // the separator
			if i == len(s) {
				return nil, errors.New("the name ends with a separator")
			}
		}
	}
	return attrs, nil
}

// dnType returns the OID of an attribute type: a name of dnTypes (in any
// case) or a dotted OID.
func dnType(typ string) (asn1.ObjectIdentifier, error) {
	if oid, ok := dnTypes[strings.ToUpper(typ)]; ok {
		return oid, nil
	}
	var oid asn1.ObjectIdentifier
	for arc := range strings.SplitSeq(typ, ".") {
		n, err := strconv.Atoi(arc)
		if err != nil || n < 0 || arc != strconv.Itoa(n) {
			return nil, fmt.Errorf("the attribute type %q is not one of CN, SERIALNUMBER, C, L, ST, STREET, O, OU, POSTALCODE or a dotted OID", typ)
		}
		oid = append(oid, n)
	}
	if len(oid) < 2 {
		return nil, fmt.Errorf("the attribute type %q is not one of CN, SERIALNUMBER, C, L, ST, STREET, O, OU, POSTALCODE or a dotted OID", typ)
	}
	return oid, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
