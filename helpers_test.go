package addrlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
	"github.com/stretchr/testify/require"
)

const (
	secret        = "s3cr3t-internal-token-0123456789"
	retiredSecret = "old-internal-secret-0123456789ab"
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

// req builds a request from remote with header fields given as name, value pairs.
func req(remote string, fields ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func mustNew(t testing.TB, limit int, per time.Duration, opts ...addrlimit.Option) *addrlimit.Limiter {
	t.Helper()
	l, err := addrlimit.New(limit, per, opts...)
	require.NoError(t, err)
	return l
}

func mustToken(t testing.TB, secrets ...string) *addrlimit.InternalToken {
	t.Helper()
	tok, err := addrlimit.NewInternalToken(secrets...)
	require.NoError(t, err)
	return tok
}

// requirePackageError checks that err is one of this package's
// configuration errors: it starts with "addrlimit: " and contains want.
func requirePackageError(t testing.TB, err error, want string) {
	t.Helper()
	require.ErrorContains(t, err, want)
	require.True(t, strings.HasPrefix(err.Error(), "addrlimit: "), "error %q, want the prefix \"addrlimit: \"", err)
}

// codes serves n copies of r (fresh each time) and returns the status codes.
func codes(h http.Handler, n int, mk func() *http.Request) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = serve(h, mk()).Code
	}
	return out
}

func count(codes []int, code int) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

func netipAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// failingStore fails every call while down is set, and otherwise delegates
// to a memory store.
type failingStore struct {
	down  atomic.Bool
	inner store.Store
	calls atomic.Int64
}

func newFailingStore() *failingStore {
	return &failingStore{inner: addrlimit.NewTestMemoryStore(100)}
}

var errRefused = errors.New("dial tcp 10.9.9.9:6379: connection refused")

func (s *failingStore) fail() error {
	s.calls.Add(1)
	if s.down.Load() {
		return errRefused
	}
	return nil
}

func (s *failingStore) Take(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	if err := s.fail(); err != nil {
		return store.Result{}, err
	}
	return s.inner.Take(ctx, key, p, n)
}

func (s *failingStore) Refund(ctx context.Context, key string, p addrlimit.Policy, n int) (store.Result, error) {
	if err := s.fail(); err != nil {
		return store.Result{}, err
	}
	return s.inner.Refund(ctx, key, p, n)
}

func (s *failingStore) Peek(ctx context.Context, key string, p addrlimit.Policy) (store.Result, error) {
	if err := s.fail(); err != nil {
		return store.Result{}, err
	}
	return s.inner.Peek(ctx, key, p)
}

func (s *failingStore) Reset(ctx context.Context, key string, p addrlimit.Policy) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.inner.Reset(ctx, key, p)
}

// public returns d's exported fields only: decisions of two Limiters differ
// in the policy they point to.
func public(d addrlimit.Decision) addrlimit.Decision {
	var out addrlimit.Decision
	src, dst := reflect.ValueOf(d), reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		if src.Type().Field(i).IsExported() {
			dst.Field(i).Set(src.Field(i))
		}
	}
	return out
}
