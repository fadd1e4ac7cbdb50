package proxies_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A load balancer (HAProxy, connecting from 127.0.0.20 as a cloud load
// balancer connects from its subnet) in front of nginx in front of the app.
// nginx's X-Real-IP names its own peer, the load balancer: every client
// shares the load balancer's bucket.
func TestLoadBalancerThenNginxXRealIPKeysEveryClientByTheLB(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Real-IP", "127.0.0.1/32", "::1/128"))
	nginxAddr, lbAddr := freeAddr(t, "127.0.0.1"), freeAddr(t, "127.0.0.1")
	startNginx(t, config(t, "nginx-real-ip.conf", confListen, nginxAddr, confUpstream, a.addr), nginxAddr)
	startHAProxy(t, config(t, "haproxy-lb-to-nginx.cfg", confListen2, lbAddr, confListen, nginxAddr), lbAddr)
	url := "http://" + lbAddr + "/"
	sharedBucket(t, url, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	_, id := get(t, client("127.0.0.5"), url)
	if got := a.decision(t, id).d.Key; got != "127.0.0.20" {
		t.Errorf("client behind LB and nginx: keyed %q, want the load balancer's 127.0.0.20", got)
	}
}

// The fix: both append to X-Forwarded-For, and the app trusts both the
// address nginx connects from and the load balancer's.
func TestLoadBalancerThenNginxXForwardedFor(t *testing.T) {
	t.Parallel()
	a := tcpApp(t, trusted(t, "X-Forwarded-For", "127.0.0.1/32", "::1/128", "127.0.0.20/32"))
	nginxAddr, lbAddr := freeAddr(t, "127.0.0.1"), freeAddr(t, "127.0.0.1")
	startNginx(t, config(t, "nginx-xff.conf", confListen, nginxAddr, confUpstream, a.addr), nginxAddr)
	startHAProxy(t, config(t, "haproxy-lb-to-nginx.cfg", confListen2, lbAddr, confListen, nginxAddr), lbAddr)
	checkRow(t, a, "http://"+lbAddr+"/", "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
}

// cdnThenLB starts a CDN (nginx setting CF-Connecting-IP, connecting from
// 127.0.0.30) in front of a load balancer (HAProxy with configs/lbConf) in
// front of an app that reads CF-Connecting-IP from the load balancer. It
// returns the URLs of the CDN and of the load balancer.
func cdnThenLB(t *testing.T, lbConf string) (a *app, cdn, lb string) {
	t.Helper()
	a = tcpApp(t, trusted(t, "CF-Connecting-IP", "127.0.0.1/32", "::1/128"))
	cdnAddr, lbAddr := freeAddr(t, "127.0.0.1"), freeAddr(t, "127.0.0.1")
	startHAProxy(t, config(t, lbConf, confListen2, lbAddr, confUpstream, a.addr), lbAddr)
	startNginx(t, config(t, "nginx-cdn.conf", confListen, cdnAddr, confListen2, lbAddr), cdnAddr)
	return a, "http://" + cdnAddr + "/", "http://" + lbAddr + "/"
}

// CDN → load balancer → app with the CDN's header: a client that reaches
// the load balancer directly, bypassing the CDN, writes the header itself.
func TestCDNThenLoadBalancerLetsClientsBypassingTheCDNChooseKeys(t *testing.T) {
	t.Parallel()
	_, cdn, lb := cdnThenLB(t, "haproxy-behind-cdn.cfg")
	if got := forge(t, "127.0.0.9", lb, 8); got != 8 {
		t.Errorf("forger reaching the load balancer directly: %d of 8 served, want 8", got)
	}
	if r, _ := get(t, client("127.0.0.2"), cdn); r.status != http.StatusOK {
		t.Errorf("client through the CDN: %d, want 200", r.status)
	}
}

// The fix: the load balancer deletes the header on requests that do not
// come from the CDN.
func TestCDNThenLoadBalancerStrippingTheHeader(t *testing.T) {
	t.Parallel()
	a, cdn, lb := cdnThenLB(t, "haproxy-behind-cdn-strip.cfg")
	// Honest clients through the CDN: their own budgets (the forger comes
	// through the CDN too).
	checkRow(t, a, cdn, "127.0.0.9", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	// A client bypassing the CDN has its header deleted: it is charged to
	// the load balancer's bucket, with a warning, and chooses nothing.
	c := client("127.0.0.8")
	served := 0
	for i := 1; i <= 8; i++ {
		r, id := get(t, c, lb, forged(forgedAddr(i))...)
		if r.status == http.StatusOK {
			served++
		}
		if s := a.decision(t, id); s.d.Key != "127.0.0.1" || s.d.Err == nil {
			t.Errorf("client bypassing the CDN: keyed %q (warning %v), want the load balancer's 127.0.0.1 with a warning", s.d.Key, s.d.Err)
		}
	}
	if served != budget {
		t.Errorf("client bypassing the CDN: %d of 8 served, want %d", served, budget)
	}
}

// Google Cloud load balancers connect from 35.191.0.0/16 and 130.211.0.0/22
// and append the client and then the load balancer's own address
// (its forwarding rule's IP) to X-Forwarded-For: trust that address too, or
// every client is keyed by it. (No real Google load balancer here: the
// request is built as Google documents it.)
func TestGoogleCloudLoadBalancer(t *testing.T) {
	const lbIP = "34.120.7.8" // your forwarding rule's address
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "35.191.4.5:51234"
	req.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.7, "+lbIP) // forged, client, load balancer

	onlyRanges := trusted(t, "X-Forwarded-For", "35.191.0.0/16", "130.211.0.0/22")
	if k, _ := onlyRanges(req); k != lbIP {
		t.Errorf("trusting the ranges only: keyed %q, want the load balancer's %s (every client alike)", k, lbIP)
	}
	withLB := trusted(t, "X-Forwarded-For", "35.191.0.0/16", "130.211.0.0/22", lbIP+"/32")
	if k, err := withLB(req); k != "203.0.113.7" || err != nil {
		t.Errorf("trusting the ranges and the load balancer's address: keyed %q (%v), want the client 203.0.113.7", k, err)
	}
}
