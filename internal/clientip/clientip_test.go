package clientip

import (
	"net/netip"
	"testing"
)

func TestParseIPv4PortAgreesWithNetip(t *testing.T) {
	for _, s := range []string{
		"1.2.3.4", "1.2.3.4:80", "255.255.255.255:65535", "0.0.0.0:0", "10.0.0.1:00080",
		"1.2.3.4:65536", "1.2.3.4:", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.256", "1.2.3.4:x",
		"1..3.4", ".1.2.3", "1.2.3.4 ", "::1", "[::1]:80", "", "1.2.3.04:80", "300.1.1.1",
	} {
		got, ok := ParseIPv4Port(s)
		ref, err := netip.ParseAddrPort(s)
		refAddr := ref.Addr()
		if err != nil {
			refAddr, err = netip.ParseAddr(s)
		}
		refOK := err == nil && refAddr.Is4()
		if ok && (!refOK || got != refAddr) {
			t.Errorf("ParseIPv4Port(%q) = %v, but net/netip says %v (%v)", s, got, refAddr, err)
		}
		if !ok && refOK && refAddr.Is4() && s[0] != '[' {
			t.Errorf("ParseIPv4Port(%q) rejected what net/netip accepts", s)
		}
	}
}

func FuzzParseIPv4Port(f *testing.F) {
	for _, s := range []string{"1.2.3.4:80", "01.2.3.4", "1.2.3.4:99999", "255.255.255.255"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseIPv4Port(s)
		if !ok {
			return
		}
		ref, err := netip.ParseAddrPort(s)
		refAddr := ref.Addr()
		if err != nil {
			refAddr, err = netip.ParseAddr(s)
		}
		if err != nil || refAddr != got {
			t.Fatalf("ParseIPv4Port(%q) = %v, net/netip: %v %v", s, got, refAddr, err)
		}
	})
}

func TestResolveStopsAtTheFirstUntrustedHop(t *testing.T) {
	trusted := Trusted{netip.MustParsePrefix("10.0.0.0/8")}
	peer := netip.MustParseAddr("10.0.0.1")
	got, err := Resolve(List, trusted, peer, []string{"garbage, 203.0.113.9, 10.1.1.1"})
	if err != nil || got != netip.MustParseAddr("203.0.113.9") {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	got, err = Resolve(Forwarded, trusted, peer, []string{`for=203.0.113.9, for="_x"`})
	if err != ErrUnparsable || got != peer {
		t.Fatalf("obfuscated rightmost: %v, %v", got, err)
	}
}
