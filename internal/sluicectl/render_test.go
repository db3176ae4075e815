package sluicectl

import (
	"bytes"
	"strings"
	"testing"
)

const inspectAnswer = `{"namespace":"shop","policy":"per-tenant","key":"acme","limits":[
 {"name":"per-minute","algorithm":"FixedWindow","limit":1000,"remaining":997,"reset":"41s","allowed":true,"retryAfter":"0s",
  "override":{"source":"Runtime","limit":1000,"policyLimit":100}},
 {"name":"per-day","algorithm":"TokenBucket","limit":5000,"remaining":0,"reset":"3h","allowed":false,"retryAfter":"17s","override":null}],
 "ban":{"remaining":"4m10s","length":"5m"}}`

// tableCase is a command line, the answer it gets and the table printed.
type tableCase struct {
	args []string
	body string
	want string
}

// tableCases are an answer of every command and what people see of it.
var tableCases = []tableCase{
	{[]string{"inspect", "shop/per-tenant", "acme"}, inspectAnswer, `shop/per-tenant key acme
LIMIT       ALGORITHM    QUOTA  REMAINING  RESET  ALLOWED  RETRY-AFTER  OVERRIDE
per-minute  FixedWindow  1000   997        41s    yes      0s           Runtime (policy 100)
per-day     TokenBucket  5000   0          3h     no       17s          -
ban: 4m10s left of 5m
`},
	{[]string{"inspect", "llm/tokens", "acme"}, `{"namespace":"llm","policy":"tokens","key":"acme","limits":[
 {"name":"month","algorithm":"Calendar","limit":5000000,"remaining":4990000,"reset":"400h","allowed":true,"retryAfter":"0s","override":null,"reserved":4000},
 {"name":"minute","algorithm":"FixedWindow","limit":100000,"remaining":96000,"reset":"41s","allowed":true,"retryAfter":"0s","override":null,"reserved":4000}],
 "ban":null}`, `llm/tokens key acme
LIMIT   ALGORITHM    QUOTA    REMAINING  SPENT  RESERVED  RESET  ALLOWED  RETRY-AFTER  OVERRIDE
month   Calendar     5000000  4990000    6000   4000      400h   yes      0s           -
minute  FixedWindow  100000   96000      0      4000      41s    yes      0s           -
ban: none
`},
	{[]string{"explain", "shop", "--url", "https://shop.example.com/api/cart"}, `{"namespace":"shop","policies":[
 {"name":"per-tenant","matched":true,"key":"acme","missingKey":false,"limits":[
  {"name":"per-minute","algorithm":"FixedWindow","limit":100,"remaining":0,"reset":"41s","allowed":false,"retryAfter":"41s","override":null}],"ban":null},
 {"name":"admin-only","matched":false,"reason":"path /api/cart matches none of spec.match.paths"}],
 "decision":{"allowed":false,"reason":"Denied","policy":"per-tenant","limit":"per-minute","retryAfter":"41s"}}`, `POLICY      MATCHED  KEY   REASON
per-tenant  yes      acme  -
admin-only  no       -     path /api/cart matches none of spec.match.paths

shop/per-tenant key acme
LIMIT       ALGORITHM    QUOTA  REMAINING  RESET  ALLOWED  RETRY-AFTER  OVERRIDE
per-minute  FixedWindow  100    0          41s    no       41s          -
ban: none

decision: denied (Denied) by per-tenant/per-minute, retry after 41s
`},
	{[]string{"explain", "shop", "--url", "https://shop.example.com/api/cart"}, `{"namespace":"shop","policies":[
 {"name":"in-flight","matched":true,"key":"acme","missingKey":false,"limits":[
  {"name":"in-flight","algorithm":"Concurrency","limit":10,"remaining":9,"reset":"1m","allowed":true,"retryAfter":"0s","override":null}],"ban":null}],
 "decision":{"allowed":false,"reason":"NoRelease","retryAfter":"0s","detail":"a concurrency limit needs a release this transport cannot send: policy shop/in-flight, limit in-flight"}}`, `POLICY     MATCHED  KEY   REASON
in-flight  yes      acme  -

shop/in-flight key acme
LIMIT      ALGORITHM    QUOTA  REMAINING  RESET  ALLOWED  RETRY-AFTER  OVERRIDE
in-flight  Concurrency  10     9          1m     yes      0s           -
ban: none

decision: refused (NoRelease): a concurrency limit needs a release this transport cannot send: policy shop/in-flight, limit in-flight
`},
	{[]string{"reset", "shop/per-tenant", "acme"}, `{"namespace":"shop","policy":"per-tenant","key":"acme","limits":["per-minute","per-day"]}`,
		"reset key acme of shop/per-tenant: per-minute, per-day\n"},
	{[]string{"top", "shop/per-tenant"}, `{"namespace":"shop","policy":"per-tenant","window":"5m",
 "denied":[{"key":"acme","count":1234,"overestimate":12}],
 "admitted":[{"key":"acme","count":5000,"overestimate":12},{"key":"beta","count":40,"overestimate":0}],
 "errorBound":"counts exceed the truth by at most 0.1% of the requests in the window"}`, `shop/per-tenant, last 5m

DENIED  COUNT  AT MOST OVER BY
acme    1234   +12

ADMITTED  COUNT  AT MOST OVER BY
acme      5000   +12
beta      40     +0

error bound: counts exceed the truth by at most 0.1% of the requests in the window
`},
	{[]string{"bans", "shop/per-tenant"}, `{"namespace":"shop","policy":"per-tenant","bans":[{"key":"acme","remaining":"4m","length":"5m"}]}`,
		"KEY   REMAINING  LENGTH\nacme  4m         5m\n"},
	{[]string{"bans", "shop/per-tenant"}, `{"namespace":"shop","policy":"per-tenant","bans":[]}`,
		"no bans in force under shop/per-tenant\n"},
	{[]string{"lift", "shop/per-tenant", "acme"}, `{"kind":"Status","apiVersion":"v1","status":"Success"}`,
		"lifted the ban of key acme in shop/per-tenant\n"},
	{[]string{"override", "list", "shop/per-tenant"}, `{"namespace":"shop","policy":"per-tenant","overrides":[
 {"key":"acme","limits":{"per-minute":1000,"per-day":50000},"source":"Runtime","expires":"2026-12-31T00:00:00Z","setBy":"alice","object":""},
 {"key":"beta","limits":{"per-minute":10},"source":"Declared","expires":null,"setBy":null,"object":"tenants"}]}`,
		`KEY   LIMITS                         SOURCE    EXPIRES               SET BY  OBJECT
acme  per-day=50000,per-minute=1000  Runtime   2026-12-31T00:00:00Z  alice   -
beta  per-minute=10                  Declared  -                     -       tenants
`},
	{[]string{"override", "list", "shop/per-tenant"}, `{"namespace":"shop","policy":"per-tenant","overrides":[]}`,
		"no overrides under shop/per-tenant\n"},
	{[]string{"override", "set", "shop/per-tenant", "acme", "per-minute=1000"},
		`{"key":"acme","limits":{"per-minute":1000},"source":"Runtime","expires":null,"setBy":"local"}`,
		"KEY   LIMITS           SOURCE   EXPIRES  SET BY  OBJECT\nacme  per-minute=1000  Runtime  -        local   -\n"},
	{[]string{"override", "delete", "shop/per-tenant", "acme"}, ``,
		"deleted the run-time override of key acme in shop/per-tenant\n"},
}

// TestTables checks what people see for each answer.
func TestTables(t *testing.T) {
	for _, tc := range tableCases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := fakeServer(t, 200, tc.body)
			var stdout, stderr bytes.Buffer
			if code := Main(append([]string{"--server", f.url}, tc.args...), &stdout, &stderr); code != ExitOK {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
			}
			if stdout.String() != tc.want {
				t.Errorf("printed:\n%s\nwant:\n%s", stdout.String(), tc.want)
			}
		})
	}
}

// TestScriptFormats checks that -o json and -o yaml print the server's
// answer, every field kept.
func TestScriptFormats(t *testing.T) {
	f := fakeServer(t, 200, `{"namespace":"shop","policy":"per-tenant","key":"acme","limits":[],"ban":null,"future":{"a":1}}`)
	for format, want := range map[string]string{
		"json": "{\n  \"namespace\": \"shop\",\n  \"policy\": \"per-tenant\",\n  \"key\": \"acme\",\n  \"limits\": [],\n  \"ban\": null,\n  \"future\": {\n    \"a\": 1\n  }\n}\n",
		"yaml": "ban: null\nfuture:\n  a: 1\nkey: acme\nlimits: []\nnamespace: shop\npolicy: per-tenant\n",
	} {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"inspect", "shop/per-tenant", "acme", "--server", f.url, "-o", format}, &stdout, &stderr); code != ExitOK {
			t.Fatalf("-o %s: exit code %d; stderr:\n%s", format, code, stderr.String())
		}
		if stdout.String() != want {
			t.Errorf("-o %s printed:\n%s\nwant:\n%s", format, stdout.String(), want)
		}
	}
}

func TestAnswerNotJSON(t *testing.T) {
	f := fakeServer(t, 200, `<html>`)
	for _, format := range []string{"table", "json", "yaml"} {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"bans", "shop/p", "--server", f.url, "-o", format}, &stdout, &stderr); code != ExitError {
			t.Errorf("-o %s: exit code %d, want %d", format, code, ExitError)
		}
	}
}
