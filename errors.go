package addrlimit

import "errors"

// Errors that Decision.Err may wrap (test with errors.Is): no client address
// (a Unix socket peer, a Call without Addr or Key), misconfigured proxies, ...
// None means the limit was skipped; none is sent to a client.
var (
	ErrNoClientAddress = errors.New("addrlimit: RemoteAddr is not an IP address") // charged to UnkeyedKey
	ErrEmptyKey        = errors.New("addrlimit: empty key")                       // charged to UnkeyedKey
	ErrProxyHeader     = errors.New("addrlimit: proxy header")                    // charged to the nearest trusted hop
	ErrUnknownPolicy   = errors.New("addrlimit: unknown policy")                  // charged to the default one
	ErrInvalidCost     = errors.New("addrlimit: cost must be at least 1")         // charged 1
	ErrCostOverBurst   = errors.New("addrlimit: cost exceeds the burst")          // refused (see WithCost)
)

// proxyError wraps a clientip problem so that it matches ErrProxyHeader and
// keeps the header name and the detail in its text.
type proxyError struct {
	header string
	err    error
}

func (e *proxyError) Error() string {
	return "addrlimit: " + e.header + ": " + e.err.Error()
}

func (e *proxyError) Is(target error) bool { return target == ErrProxyHeader }

func (e *proxyError) Unwrap() error { return e.err }
