package clientip

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted, err := ParseTrustedProxies(DefaultTrustedProxies)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		peer   string
		xff    []string
		realIP string
		want   string
	}{
		{"untrusted peer: headers ignored", "203.0.113.9", []string{"1.1.1.1"}, "2.2.2.2", "203.0.113.9"},
		{"trusted peer, one hop", "10.0.0.5", []string{"198.51.100.7"}, "", "198.51.100.7"},
		{"right-most untrusted wins over a forged left part", "10.0.0.5", []string{"6.6.6.6, 198.51.100.7"}, "", "198.51.100.7"},
		{"trusted hops are skipped", "10.0.0.5", []string{"198.51.100.7, 10.1.2.3, 192.168.0.4"}, "", "198.51.100.7"},
		{"several header lines", "10.0.0.5", []string{"6.6.6.6", "198.51.100.7, 10.1.2.3"}, "", "198.51.100.7"},
		{"all hops trusted: left-most", "127.0.0.1", []string{"10.9.9.9, 10.1.1.1"}, "", "10.9.9.9"},
		{"X-Real-IP without X-Forwarded-For", "127.0.0.1", nil, "198.51.100.7", "198.51.100.7"},
		{"X-Forwarded-For wins over X-Real-IP", "127.0.0.1", []string{"198.51.100.7"}, "6.6.6.6", "198.51.100.7"},
		{"garbage stops the walk at the last known hop", "10.0.0.5", []string{"garbage, 10.1.1.1"}, "", "10.1.1.1"},
		{"port and brackets", "10.0.0.5", []string{"[2001:db8::1]:443"}, "", "2001:db8::1"},
		{"IPv4-mapped peer", "::ffff:10.0.0.5", []string{"198.51.100.7"}, "", "198.51.100.7"},
		{"no headers: the peer", "10.0.0.5", nil, "", "10.0.0.5"},
		// A zone names an interface of the host that wrote the address:
		// it would make a bucket of its own, and a trusted proxy untrusted.
		{"zone dropped", "10.0.0.5", []string{"2001:db8::1%eth0"}, "", "2001:db8::1"},
		{"zoned peer", "fe80::1%eth0", nil, "", "fe80::1"},
		{"zoned trusted hop", "10.0.0.5", []string{"198.51.100.7, fd00::1%2"}, "", "198.51.100.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := trusted.ClientIP(netip.MustParseAddr(tt.peer), tt.xff, tt.realIP)
			if got.String() != tt.want {
				t.Errorf("ClientIP = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	if _, err := ParseTrustedProxies([]string{"10.0.0.0/8", "192.0.2.1", " "}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"10.0.0.0/33", "not-an-ip", "10.0.0/8"} {
		if _, err := ParseTrustedProxies([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: error %v, want one naming it", bad, err)
		}
	}
}

// FuzzSpoofedForwardedHeaders: whatever an untrusted peer sends, its key
// is its own address; and for a trusted peer the chosen client is always
// one of the hops (never an address made up by parsing).
func FuzzSpoofedForwardedHeaders(f *testing.F) {
	f.Add("1.2.3.4, 5.6.7.8", "9.9.9.9")
	f.Add("garbage,,, ,[::1]:80", "")
	f.Add("\x00\xff", "::ffff:1.2.3.4")
	trusted, _ := ParseTrustedProxies(DefaultTrustedProxies)
	untrustedPeer := netip.MustParseAddr("203.0.113.50")
	trustedPeer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, xff, realIP string) {
		if got := trusted.ClientIP(untrustedPeer, []string{xff}, realIP); got != untrustedPeer {
			t.Fatalf("untrusted peer's key moved to %s", got)
		}
		got := trusted.ClientIP(trustedPeer, []string{xff}, realIP)
		if got == trustedPeer {
			return
		}
		for _, hop := range strings.Split(xff, ",") {
			if a, ok := parseHop(hop); ok && a == got {
				return
			}
		}
		t.Fatalf("client %s is not one of the hops %q", got, xff)
	})
}

func TestPeer(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:1234": "192.0.2.1", "[2001:db8::1]:443": "2001:db8::1", "192.0.2.1": "192.0.2.1",
		"2001:db8::1": "2001:db8::1", "": "invalid IP", "pipe": "invalid IP", "host:80": "invalid IP",
	} {
		if got := Peer(in).String(); got != want {
			t.Errorf("Peer(%q) = %s, want %s", in, got, want)
		}
	}
}

// FromRequest reads the peer and both headers from the request.
func TestFromRequest(t *testing.T) {
	trusted, err := ParseTrustedProxies(DefaultTrustedProxies)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:40000"
	r.Header.Set("X-Real-IP", "198.51.100.7")
	if got := trusted.FromRequest(r).String(); got != "198.51.100.7" {
		t.Errorf("X-Real-IP from a trusted peer: %s", got)
	}
	r.Header.Add("X-Forwarded-For", "6.6.6.6, 198.51.100.8")
	if got := trusted.FromRequest(r).String(); got != "198.51.100.8" {
		t.Errorf("X-Forwarded-For from a trusted peer: %s", got)
	}
	r.RemoteAddr = "203.0.113.9:40000"
	if got := trusted.FromRequest(r).String(); got != "203.0.113.9" {
		t.Errorf("an untrusted peer: %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { trusted.FromRequest(r) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
