package addrlimit

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
)

// Secret length bounds for NewInternalToken, in bytes.
const (
	MinTokenLen = 16
	MaxTokenLen = 512
)

// InternalToken recognises requests from your own services by the bearer
// token they already send to internal routes. Use Match with WithExempt so
// those requests bypass the per-address limit, and Require to guard the
// internal routes with the very same check.
//
// Exemption is a bypass: a request that matches is not counted or limited at
// all. Anyone holding the token has it, so keep the token secret (out of
// logs, URLs and client-side code) and rotate it by configuring the new
// secret next to the old one until every caller has switched.
//
// An InternalToken keeps only SHA-256 digests of its secrets. It is immutable
// and safe for concurrent use.
type InternalToken struct {
	digests [][sha256.Size]byte
}

// NewInternalToken returns a token that accepts any of secrets (several during
// a rotation). Each secret must be 16 to 512 bytes of RFC 6750 b64token
// characters (A-Z a-z 0-9 - . _ ~ + / followed by optional = padding). Errors
// say which secret is wrong and why, never what it is.
func NewInternalToken(secrets ...string) (*InternalToken, error) {
	if len(secrets) == 0 {
		return nil, errors.New("addrlimit: NewInternalToken needs at least one secret")
	}
	t := &InternalToken{digests: make([][sha256.Size]byte, len(secrets))}
	for i, s := range secrets {
		switch {
		case s == "":
			return nil, fmt.Errorf("addrlimit: internal token secret %d of %d is empty", i+1, len(secrets))
		case len(s) < MinTokenLen:
			return nil, fmt.Errorf("addrlimit: internal token secret %d of %d is %d bytes, shorter than the minimum of %d", i+1, len(secrets), len(s), MinTokenLen)
		case len(s) > MaxTokenLen:
			return nil, fmt.Errorf("addrlimit: internal token secret %d of %d is %d bytes, longer than the maximum of %d", i+1, len(secrets), len(s), MaxTokenLen)
		case !isB64Token(s):
			return nil, fmt.Errorf("addrlimit: internal token secret %d of %d has a character outside RFC 6750 b64token (A-Z a-z 0-9 - . _ ~ + / then = padding; check for spaces or a trailing newline)", i+1, len(secrets))
		}
		t.digests[i] = sha256.Sum256([]byte(s))
	}
	return t, nil
}

// Match reports whether r carries exactly one Authorization header field of
// the form "Bearer <token>" (scheme in any case) with a token equal to one of
// the secrets. It compares SHA-256 digests in constant time against every
// secret without stopping early, so the response time reveals neither the
// secrets nor their lengths. A missing, repeated, empty or malformed header,
// another scheme or a wrong token gives false.
func (t *InternalToken) Match(r *http.Request) bool {
	tok, ok := bearerToken(r.Header)
	if !ok {
		return false
	}
	var buf [MaxTokenLen]byte
	d := sha256.Sum256(buf[:copy(buf[:], tok)])
	match := 0
	for i := range t.digests {
		match |= subtle.ConstantTimeCompare(d[:], t.digests[i][:])
	}
	return match == 1
}

// Require returns a handler that serves next only for requests that Match,
// and answers all others 401 Unauthorized with "WWW-Authenticate: Bearer" and
// a fixed body.
func (t *InternalToken) Require(next http.Handler) http.Handler {
	if next == nil {
		panic("addrlimit: InternalToken.Require called with a nil handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !t.Match(r) {
			h := w.Header()
			h.Set("Www-Authenticate", `Bearer realm="internal"`)
			h.Set("Cache-Control", "no-store")
			h.Set("Content-Type", "text/plain; charset=utf-8")
			h.Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte("unauthorized\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken extracts the token of the single "Authorization: Bearer <token>"
// field of h (RFC 6750 §2.1). It reports false for no field, several fields,
// another scheme, or a token that is empty, too long or not a b64token.
func bearerToken(h http.Header) (string, bool) {
	vals := h["Authorization"]
	if len(vals) != 1 {
		return "", false
	}
	v := vals[0]
	const scheme = "bearer"
	if len(v) <= len(scheme) || v[len(scheme)] != ' ' {
		return "", false
	}
	for i := range len(scheme) {
		if v[i]|0x20 != scheme[i] {
			return "", false
		}
	}
	tok := v[len(scheme)+1:]
	for len(tok) > 0 && tok[0] == ' ' {
		tok = tok[1:]
	}
	if len(tok) > MaxTokenLen || !isB64Token(tok) {
		return "", false
	}
	return tok, true
}

// isB64Token reports whether s matches RFC 6750's
// b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	i := 0
	for i < len(s) && isB64Char(s[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	for i < len(s) && s[i] == '=' {
		i++
	}
	return i == len(s)
}

func isB64Char(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
}
