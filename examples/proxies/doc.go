// Package proxies runs addrlimit behind the real nginx, HAProxy and Caddy: each
// row of docs/proxies.md is a test here, with the proxy
// configuration from configs/ (the page quotes those files, and a test checks
// that every quoted line is in one of them).
//
// The tests start each proxy as a child process on free loopback ports, in
// front of a real net/http server with a Limiter configured as the row says,
// and reach it from distinct client addresses (127.0.0.2, 127.0.0.3, …) with
// forged X-Forwarded-For, X-Real-IP, Forwarded and CF-Connecting-IP headers.
//
//	go test ./...        # from this directory; needs nginx, haproxy and caddy
//
// A missing proxy binary skips its tests, except under CI=true, where it
// fails them (.ci/test installs the Debian packages nginx, haproxy and caddy).
package proxies
