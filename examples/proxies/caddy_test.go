package proxies_test

import (
	"fmt"
	"testing"
)

// caddy runs configs/name in front of a; it returns the proxy's URL.
func caddy(t *testing.T, name string, a *app) string {
	t.Helper()
	listen := freeAddr(t, "127.0.0.1")
	startCaddy(t, config(t, name, confListen, listen, confUpstream, a.addr), listen)
	return "http://" + listen + "/"
}

// Caddy's reverse_proxy replaces X-Forwarded-For with the peer address
// (the client is not in trusted_proxies).
func TestCaddyXForwardedFor(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128"))
	url := caddy(t, "caddy.Caddyfile", a)
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	_, id := get(t, client("127.0.0.9"), url, forged("198.51.100.1")...)
	if got := fmt.Sprint(a.decision(t, id).xff); got != "[127.0.0.9]" {
		t.Errorf("X-Forwarded-For behind Caddy: %s, want [127.0.0.9] (the forged value replaced)", got)
	}
}

// Caddy sets no X-Real-IP, Forwarded or CF-Connecting-IP: it passes the
// client's own through, so trusting one of them from Caddy lets clients
// choose their keys, and honest clients (who send none) share Caddy's.
func TestCaddyPassesClientsOtherHeaders(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"X-Real-IP", "Forwarded", "CF-Connecting-IP"} {
		t.Run(h, func(t *testing.T) {
			t.Parallel()
			a := tcpApp(t, trusted(t, h, "127.0.0.1/32", "::1/128"))
			url := caddy(t, "caddy.Caddyfile", a)
			if got := forge(t, "127.0.0.9", url, 8); got != 8 {
				t.Errorf("forger behind Caddy, app reading %s: %d of 8 served, want 8", h, got)
			}
			sharedBucket(t, url, "127.0.0.2", "127.0.0.3", "127.0.0.4")
		})
	}
}
