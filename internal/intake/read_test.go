package intake

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Every refusal names the field it refuses, for the transport to name in
// its own terms.
func TestReadNamesTheField(t *testing.T) {
	ok := func() Original {
		return Original{Method: "GET", Authority: "api.example.com", Target: "/login"}
	}
	for _, c := range []struct {
		name string
		edit func(*Original)
		want Field
	}{
		{"lower-case method", func(o *Original) { o.Method = "get" }, FieldMethod},
		{"empty host", func(o *Original) { o.Authority = "" }, FieldHost},
		{"unclosed bracket", func(o *Original) { o.Authority = "[x" }, FieldHost},
		{"relative target", func(o *Original) { o.Target = "login" }, FieldTarget},
		{"bad escape", func(o *Original) { o.Target = "/a%zz" }, FieldTarget},
		{"over the URL bound", func(o *Original) { o.Target = "/" + strings.Repeat("a", policy.MaxURLBytes) }, FieldTarget},
	} {
		o := ok()
		c.edit(&o)
		err := Read(&o, nil, new(policy.Request))
		if f, isIntake := FieldOf(err); !isIntake || f != c.want {
			t.Errorf("%s: %v (field %v, intake error %v), want field %v", c.name, err, f, isIntake, c.want)
		}
	}
	o := ok()
	o.Authority, o.HostOptional = "", true
	var r policy.Request
	if err := Read(&o, nil, &r); err != nil || r.Host != "" {
		t.Errorf("optional host left empty: %v, host %q", err, r.Host)
	}
	if _, err := ReadAddress("not an address"); !isField(err, FieldClientAddress) {
		t.Errorf("ReadAddress: %v", err)
	}
}

func isField(err error, want Field) bool {
	f, ok := FieldOf(err)
	return ok && f == want
}

// A section is bounded as a server bounds one: pseudo-headers count and
// are dropped, names must be tokens.
func TestHeaderSection(t *testing.T) {
	var s HeaderSection
	for _, kv := range [][2]string{{":path", "/x"}, {"x-plan", "gold"}, {"X-Plan", "silver"}} {
		if err := s.Add(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Header["X-Plan"]; len(s.Header) != 1 || len(got) != 2 || got[0] != "gold" {
		t.Errorf("header %v, want X-Plan: gold, silver only", s.Header)
	}
	if err := s.Add("bad name", "v"); !isField(err, FieldHeaders) {
		t.Errorf("a name with a space: %v", err)
	}
	big := strings.Repeat("b", policy.MaxHeaderBytes)
	if err := s.Add("X-Big", big); !errors.Is(err, ErrHeadersTooLarge) || !isField(err, FieldHeaders) {
		t.Errorf("over the bound: %v", err)
	}
	if err := CheckHeaderSection(http.Header{"X-Big": {big}}); !errors.Is(err, ErrHeadersTooLarge) {
		t.Errorf("CheckHeaderSection over the bound: %v", err)
	}
}

// Forwarded headers are believed from trusted peers only; without
// trusted proxies the peer is the client.
func TestReadClientAddress(t *testing.T) {
	trusted, err := clientip.ParseTrustedProxies([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{"X-Forwarded-For": {"203.0.113.7"}}
	for _, c := range []struct {
		peer    string
		trusted *clientip.TrustedProxies
		want    string
	}{
		{"10.0.0.1", trusted, "203.0.113.7"},
		{"192.0.2.1", trusted, "192.0.2.1"},
		{"10.0.0.1", nil, "10.0.0.1"},
		{"::ffff:10.0.0.1", nil, "10.0.0.1"},
	} {
		o := Original{Method: "GET", Authority: "h", Target: "/", Header: header, Peer: netip.MustParseAddr(c.peer)}
		var r policy.Request
		if err := Read(&o, c.trusted, &r); err != nil || r.ClientIP.String() != c.want {
			t.Errorf("peer %s: %v %v, want %s", c.peer, r.ClientIP, err, c.want)
		}
	}
}

func TestReadAllocations(t *testing.T) {
	o := Original{Method: "GET", Authority: "api.example.com", Target: "/api/items?page=2",
		Header: http.Header{"X-Real-Ip": {"203.0.113.7"}}, Peer: netip.MustParseAddr("127.0.0.1")}
	trusted := clientip.Default()
	var r policy.Request
	if n := testing.AllocsPerRun(100, func() { _ = Read(&o, trusted, &r) }); n != 0 {
		t.Errorf("a clean request: %v allocations, want 0", n)
	}
}
