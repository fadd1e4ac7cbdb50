package addrlimit

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
)

// Secret length bounds for NewInternalToken, in bytes.
const (
	minTokenLen = 16
	maxTokenLen = 512
)

// InternalToken recognises your own services by the bearer token they send to
// internal routes (WithInternalToken exempts them; Require guards the routes).
// Whoever holds a secret has the bypass: keep it out of logs and URLs; rotate
// by adding the new secret beside the old. It keeps and prints no secret,
// only SHA-256 digests. The zero value matches nothing; it is safe for
// concurrent use, and Replace changes it for every holder at once.
type InternalToken struct {
	s *tokenCell
}

// tokenCell holds a token's current secrets: Replace swaps them, and each
// check reads them once, so it compares with one set or the other.
type tokenCell struct {
	cur atomic.Pointer[tokenSecrets]
}

// newToken returns a token of secrets ts.
func newToken(ts *tokenSecrets) *InternalToken {
	c := &tokenCell{}
	c.cur.Store(ts)
	return &InternalToken{c}
}

// load returns t's current secrets (nil for the zero InternalToken).
func (t InternalToken) load() *tokenSecrets {
	if t.s == nil {
		return nil
	}
	return t.s.cur.Load()
}

// Replace makes t accept exactly what with accepts (secrets, retired ones,
// identities), at once for every holder of t; each check sees one set. Its
// constructors refuse a bad set; Replace fails only for a nil or zero with.
func (t *InternalToken) Replace(with *InternalToken) error {
	switch {
	case t == nil || t.s == nil:
		return errors.New("addrlimit: InternalToken.Replace called on a nil or zero token")
	case with == nil || with.s == nil:
		return errors.New("addrlimit: InternalToken.Replace given a nil or zero token, which would accept nothing")
	}
	t.s.cur.Store(with.s.cur.Load())
	return nil
}

// tokenSecrets holds the digests of an InternalToken inside a closure:
// reflection shows a func as an address and cannot reach what it captured
// (a pointer or an unexported field would not stop go-spew, which walks
// both). Calling it costs Match one indirect call. names are the names of
// the identities (NewIdentities), which are no secret: names[i-1] is
// identity i, and identity 0 holds the anonymous secrets.
type tokenSecrets struct {
	digests func() (accepted, retired []secretDigest)
	names   []string
}

// secretDigest is the digest of one secret and the identity that holds it
// (0: anonymous).
type secretDigest struct {
	sum [sha256.Size]byte
	id  int
}

// newTokenSecrets keeps accepted and retired out of reflection's reach.
func newTokenSecrets(accepted, retired []secretDigest, names []string) *tokenSecrets {
	return &tokenSecrets{digests: func() ([]secretDigest, []secretDigest) { return accepted, retired }, names: names}
}

// secrets returns t's accepted and retired digests and its identity names
// (none for the zero InternalToken). They are shared: do not modify them.
func (t InternalToken) secrets() (accepted, retired []secretDigest, names []string) {
	ts := t.load()
	if ts == nil {
		return nil, nil, nil
	}
	accepted, retired = ts.digests()
	return accepted, retired, ts.names
}

// NewInternalToken returns a token accepting any of secrets, each 16 to 512
// bytes of RFC 6750 b64token characters. Errors say which secret is wrong and
// why, never what it is.
func NewInternalToken(secrets ...string) (*InternalToken, error) {
	if len(secrets) == 0 {
		return nil, errors.New("addrlimit: NewInternalToken needs at least one secret")
	}
	digests, err := digestSecrets("secret", secrets, 0)
	if err != nil {
		return nil, err
	}
	return newToken(newTokenSecrets(digests, nil, nil)), nil
}

// WithRetired returns a copy of t that also knows secrets no longer accepted: a
// call carrying one is charged (Require answers 401) and marked RetiredToken, a
// signal no client can forge.
func (t *InternalToken) WithRetired(secrets ...string) (*InternalToken, error) {
	if len(secrets) == 0 {
		return nil, errors.New("addrlimit: WithRetired needs at least one secret")
	}
	retired, err := digestSecrets("retired secret", secrets, 0)
	if err != nil {
		return nil, err
	}
	accepted, was, names := t.secrets()
	for i, r := range retired {
		for _, d := range accepted {
			if r.sum == d.sum {
				return nil, fmt.Errorf("addrlimit: retired secret %d of %d is also an accepted secret", i+1, len(secrets))
			}
		}
		for _, d := range was {
			if r.sum == d.sum && d.id != 0 {
				return nil, fmt.Errorf("addrlimit: retired secret %d of %d is also a retired secret of identity %q", i+1, len(secrets), names[d.id-1])
			}
		}
	}
	return newToken(newTokenSecrets(accepted, append(was[:len(was):len(was)], retired...), names)), nil
}

// digestSecrets validates secrets and returns their digests, held by
// identity id. Errors say which secret is wrong and why, never what it is.
func digestSecrets(what string, secrets []string, id int) ([]secretDigest, error) {
	digests := make([]secretDigest, len(secrets))
	for i, s := range secrets {
		switch {
		case s == "":
			return nil, fmt.Errorf("addrlimit: internal token %s %d of %d is empty", what, i+1, len(secrets))
		case len(s) < minTokenLen:
			return nil, fmt.Errorf("addrlimit: internal token %s %d of %d is %d bytes, shorter than the minimum of %d", what, i+1, len(secrets), len(s), minTokenLen)
		case len(s) > maxTokenLen:
			return nil, fmt.Errorf("addrlimit: internal token %s %d of %d is %d bytes, longer than the maximum of %d", what, i+1, len(secrets), len(s), maxTokenLen)
		case !isB64Token(s):
			return nil, fmt.Errorf("addrlimit: internal token %s %d of %d has a character outside RFC 6750 b64token (A-Z a-z 0-9 - . _ ~ + / then = padding; check for spaces or a trailing newline)", what, i+1, len(secrets))
		}
		digests[i] = secretDigest{sha256.Sum256([]byte(s)), id}
	}
	return digests, nil
}

// String returns "InternalToken(3 secrets, 1 retired; identities edge)",
// nothing derived from a secret; by value or pointer alike.
func (t InternalToken) String() string {
	accepted, retired, names := t.secrets()
	ids := ""
	if len(names) > 0 {
		ids = "; identities " + strings.Join(names, ", ")
	}
	if len(retired) > 0 {
		return fmt.Sprintf("InternalToken(%d secrets, %d retired%s)", len(accepted), len(retired), ids)
	}
	return fmt.Sprintf("InternalToken(%d secrets%s)", len(accepted), ids)
}

// Format prints String for every verb.
func (t InternalToken) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// GoString returns String.
func (t InternalToken) GoString() string { return t.String() }

// LogValue makes log/slog print String.
func (t InternalToken) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Match reports whether r carries exactly one "Authorization: Bearer" field
// whose token is an accepted secret, compared with every secret in constant
// time.
func (t *InternalToken) Match(r *http.Request) bool {
	class, _, _ := t.classify(r.Header["Authorization"])
	return class == tokenAccepted
}

// tokenClass is what a request's bearer token is to an InternalToken.
type tokenClass uint8

const (
	tokenNone     tokenClass = iota // no bearer token, or an unknown one
	tokenAccepted                   // one of the secrets: exempt
	tokenRetired                    // a retired secret: counted, and flagged
)

// classify hashes the bearer token of the Authorization values once and
// compares the digest with every accepted and retired secret in constant
// time, without stopping early, and picks the identity of the one that
// matched (0: anonymous, or none) with a constant-time select: the work is
// the same whichever secret, of whichever identity, matches, or none. It
// returns the secrets it compared with, whose identities id numbers.
func (t *InternalToken) classify(authorization []string) (tokenClass, int, *tokenSecrets) {
	tok, ok := bearerToken(authorization)
	if !ok {
		return tokenNone, 0, nil
	}
	if t == nil || t.s == nil { // a nil or zero token accepts nothing
		return tokenNone, 0, nil
	}
	var buf [maxTokenLen]byte
	d := sha256.Sum256(buf[:copy(buf[:], tok)])
	ts := t.s.cur.Load()
	digests, retiredDigests := ts.digests()
	accepted, retired, id := 0, 0, 0
	for i := range digests {
		eq := subtle.ConstantTimeCompare(d[:], digests[i].sum[:])
		accepted |= eq
		id = subtle.ConstantTimeSelect(eq, digests[i].id, id)
	}
	for i := range retiredDigests {
		eq := subtle.ConstantTimeCompare(d[:], retiredDigests[i].sum[:])
		retired |= eq
		id = subtle.ConstantTimeSelect(eq, retiredDigests[i].id, id)
	}
	if countComparisons.Load() {
		comparisons.Add(int64(len(digests) + len(retiredDigests)))
	}
	switch {
	case accepted == 1:
		return tokenAccepted, id, ts
	case retired == 1:
		return tokenRetired, id, ts
	}
	return tokenNone, 0, ts
}

// Tests set countComparisons to have classify add the digests it compared
// to comparisons. (A replaceable compare function would move the digest of
// every token to the heap.)
var (
	countComparisons atomic.Bool
	comparisons      atomic.Int64
)

// Require serves next only for requests that Match, and answers others 401 with
// "WWW-Authenticate: Bearer". It panics when t or next is nil.
func (t *InternalToken) Require(next http.Handler) http.Handler {
	if next == nil {
		panic("addrlimit: InternalToken.Require called with a nil handler")
	}
	if t == nil {
		panic("addrlimit: InternalToken.Require called on a nil token")
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
// field whose values are vals (RFC 6750 §2.1). It reports false for no
// field, several fields, another scheme, or a token that is empty, too long
// or not a b64token.
func bearerToken(vals []string) (string, bool) {
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
	if len(tok) > maxTokenLen || !isB64Token(tok) {
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
