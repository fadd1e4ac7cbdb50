package proxies_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/pires/go-proxyproto"
)

// proxyApp serves the app, with the default key (RemoteAddr), behind a
// PROXY protocol listener with policy (nil: go-proxyproto's default).
func proxyApp(t *testing.T, policy proxyproto.ConnPolicyFunc) *app {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startApp(t, &proxyproto.Listener{Listener: l, ConnPolicy: policy}, nil)
}

// proxyClient connects from src and opens each connection with a PROXY v2
// header that names claimed as the client.
func proxyClient(src string, claimed func() string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		h := &proxyproto.Header{
			Version:           2,
			Command:           proxyproto.PROXY,
			TransportProtocol: proxyproto.TCPv4,
			SourceAddr:        &net.TCPAddr{IP: net.ParseIP(claimed()), Port: 4711},
			DestinationAddr:   c.RemoteAddr(),
		}
		if _, err := h.WriteTo(c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: clientTimeout}
}

// HAProxy's send-proxy-v2 in front of a go-proxyproto listener that trusts
// PROXY headers from HAProxy's address only: the default key is the client.
func TestHAProxySendProxyV2WithConnPolicy(t *testing.T) {
	t.Parallel()
	policy, err := proxyproto.TrustProxyHeaderFromRanges([]string{"127.0.0.1/32", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	a := proxyApp(t, policy)
	url := haproxy(t, "haproxy-send-proxy-v2.cfg", a)
	checkRow(t, a, url, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")

	// A client connecting directly with a forged PROXY header is refused,
	// and so is one without a header.
	i := 0
	forger := proxyClient("127.0.0.9", func() string { i++; return forgedAddr(i) })
	direct := "http://" + a.addr + "/"
	for range 6 {
		if resp, err := forger.Get(direct); err == nil {
			resp.Body.Close()
			t.Errorf("direct client with a forged PROXY header: %d, want the connection refused", resp.StatusCode)
		}
	}
	if resp, err := client("127.0.0.9").Get(direct); err == nil {
		resp.Body.Close()
		t.Errorf("direct client without a PROXY header: %d, want the connection refused", resp.StatusCode)
	}
}

// go-proxyproto's default policy accepts a PROXY header from any peer: a
// client that reaches the app directly chooses its key.
func TestProxyProtocolWithoutConnPolicyLetsClientsChooseKeys(t *testing.T) {
	t.Parallel()
	a := proxyApp(t, nil)
	i := 0
	forger := proxyClient("127.0.0.9", func() string { i++; return forgedAddr(i) })
	served := 0
	for range 6 {
		r, id := get(t, forger, "http://"+a.addr+"/")
		if r.status == http.StatusOK {
			served++
		}
		if got, want := a.decision(t, id).d.Key, forgedAddr(i); got != want {
			t.Errorf("forged PROXY header naming %s: keyed %q", want, got)
		}
	}
	if served != 6 {
		t.Errorf("forged PROXY headers: %d of 6 served, want 6", served)
	}
}
