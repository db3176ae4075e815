package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/middleware"
)

// TestSoftLimitTellsTheHandler: in every mode (memory, Redis, the remote
// check endpoint), a request over a soft limit reaches the next handler
// with OverLimitHeader and OverLimits naming the limit; under it, with
// neither, and a header the client forged is removed; the enforced
// limit beside it still denies.
func TestSoftLimitTellsTheHandler(t *testing.T) {
	policies := []named{{"api", `key: global
limits:
- {name: burst, mode: Soft, fixedWindow: {limit: 1, window: 1h}}
- {name: quota, fixedWindow: {limit: 3, window: 1h}}`}}
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			var header []string
			var over []middleware.SoftLimit
			h := m.new(t, policies).Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				header, over = r.Header.Values(middleware.OverLimitHeader), middleware.OverLimits(r.Context())
			}))
			forged := map[string]string{middleware.OverLimitHeader: "shop/api;limit=quota;mode=Soft"}
			for n, wantOver := range []bool{false, true, true} {
				header, over = nil, nil
				if rec := send(h, "GET", "/", "", forged); rec.Code != 200 {
					t.Fatalf("request %d: %d", n+1, rec.Code)
				}
				if !wantOver {
					if header != nil || over != nil {
						t.Fatalf("request %d, under: header %q, OverLimits %v; want none (the forged one removed)", n+1, header, over)
					}
					continue
				}
				if len(header) != 1 || !strings.HasSuffix(header[0], "/api;limit=burst;mode=Soft") || len(over) != 1 || over[0].Limit != "burst" || !strings.HasSuffix(over[0].Policy, "/api") {
					t.Fatalf("request %d, over burst: header %q, OverLimits %+v", n+1, header, over)
				}
			}
			if rec := send(h, "GET", "/", "", nil); rec.Code != 429 {
				t.Fatalf("over quota: %d, want 429", rec.Code)
			}
		})
	}
}

func TestParseOverLimit(t *testing.T) {
	got := middleware.ParseOverLimit("shop/api;limit=burst;mode=Soft, shop/b;mode=Soft;limit=day,junk, x/y;mode=Soft")
	want := []middleware.SoftLimit{{"shop/api", "burst"}, {"shop/b", "day"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("%+v", got)
	}
}
