package webhook

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// A check spends a client's budget, and /v1/check takes the client's
// address from the body. A page on any site could post a form or a
// text/plain body to it without asking the browser first; a JSON body
// needs a CORS preflight, which this server never grants. So only
// declared JSON is read.
func TestJSONCheckRequiresJSONContentType(t *testing.T) {
	ep := newEndpoint(t, memstore.New().Backend(), Options{}, compile(t, "shop", "api", shopPolicy))
	body := `{"namespace":"shop","request":{"method":"POST","host":"shop.example.com","path":"/api/x","clientIP":"192.0.2.1"}}`
	post := func(contentType, body string) (int, string) {
		req, err := http.NewRequest("POST", ep.URL+"/v1/check", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	form := "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n" + body + "\r\n--x--\r\n"
	for _, c := range []struct{ contentType, body string }{
		{"text/plain", body}, {"text/plain;charset=UTF-8", body}, {"application/x-www-form-urlencoded", body},
		{"multipart/form-data; boundary=x", form}, {"", body}, {"application/jsonp", body}, {"json", body},
	} {
		ct := c.contentType
		code, out := post(ct, c.body)
		var pr checkhttp.Problem
		_ = json.Unmarshal([]byte(out), &pr)
		if code != http.StatusUnsupportedMediaType || pr.Status != code || !strings.Contains(pr.Detail, "Content-Type") {
			t.Errorf("Content-Type %q: %d %s, want 415 naming Content-Type", ct, code, out)
		}
	}
	// Nothing was spent: the bucket (capacity 3) is full.
	code, out := post("application/json; charset=utf-8", strings.TrimSuffix(body, "}")+`,"dryRun":true}`)
	var r CheckResponse
	if err := json.Unmarshal([]byte(out), &r); code != http.StatusOK || err != nil || len(r.Policies) != 1 || r.Policies[0].Limits[0].Remaining != 2 {
		t.Fatalf("dry run after refused checks: %d %s, want remaining 2 (nothing spent)", code, out)
	}
}
