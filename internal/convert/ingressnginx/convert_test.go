package ingressnginx

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
)

// manifest is an Ingress named name in namespace shop: annotation i (a
// "key: value" line, the key without prefix) is on line 7+i, then spec
// (one rule, host shop.example.com, Prefix /api when spec is "").
func manifest(name string, spec string, anns ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: %s\n  namespace: shop\n  annotations:\n", name)
	for _, a := range anns {
		b.WriteString("    nginx.ingress.kubernetes.io/" + a + "\n")
	}
	if spec == "" {
		spec = rules("shop.example.com", "/api Prefix")
	}
	b.WriteString(spec)
	return b.String()
}

// rules is a spec with one rule for host ("" for none) with the paths,
// each "PATH TYPE" (TYPE "-" for none).
func rules(host string, paths ...string) string {
	var b strings.Builder
	b.WriteString("spec:\n  rules:\n")
	if host != "" {
		fmt.Fprintf(&b, "  - host: %q\n    http:\n", host)
	} else {
		b.WriteString("  - http:\n")
	}
	b.WriteString("      paths:\n")
	for _, p := range paths {
		i := strings.LastIndexByte(p, ' ')
		path, typ := p[:i], p[i+1:]
		fmt.Fprintf(&b, "      - path: %q\n", path)
		if typ != "-" {
			fmt.Fprintf(&b, "        pathType: %s\n", typ)
		}
		b.WriteString("        backend:\n          service:\n            name: app\n            port:\n              number: 80\n")
	}
	return b.String()
}

// want is an expected report: line, annotation, severity and a piece of
// the message.
type want struct {
	line int
	ann  string
	sev  convert.Severity
	sub  string
}

type convertCase struct {
	name  string
	input string
	opts  Options
	// policies summarize the expected policies (see summary).
	policies []string
	reports  []want
}

var convertCases = []convertCase{
	{
		name:     "limit-rps alone: the default multiplier 5",
		input:    manifest("api", "", `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "limit-rpm alone, a whole number of thousandths per second",
		input:    manifest("api", "", `limit-rpm: "6"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rpm=gcra(6/1m,31) auth=$namespace/api remove=[limit-rpm]`},
	},
	{
		name:     "limit-rpm: nginx's rate in thousandths per second, rounded down",
		input:    manifest("api", "", `limit-rpm: "10"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rpm=gcra(166/1000s,51) auth=$namespace/api remove=[limit-rpm]`},
	},
	{
		name:  "both, with a multiplier and a whitelist: two limits, both apply",
		input: manifest("api", "", `limit-rps: "2"`, `limit-rpm: "30"`, `limit-burst-multiplier: "3"`, `limit-whitelist: " 10.0.0.0/8, 192.168.1.7,10.1.2.3/8, 2001:db8::/32 "`),
		policies: []string{
			`shop/api hosts=[shop.example.com] paths=[/api /api/*] exempt=[10.0.0.0/8 192.168.1.7 2001:db8::/32] rps=gcra(2/1s,7) rpm=gcra(30/1m,91) auth=$namespace/api remove=[limit-rps limit-rpm limit-burst-multiplier limit-whitelist]`,
		},
	},
	{
		name:     "multiplier 0: one request at once",
		input:    manifest("api", "", `limit-rps: "3"`, `limit-burst-multiplier: "0"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(3/1s,1) auth=$namespace/api remove=[limit-rps limit-burst-multiplier]`},
	},
	{
		name:     "a multiplier that is not an integer: ingress-nginx's default",
		input:    manifest("api", "", `limit-rps: "3"`, `limit-burst-multiplier: "two"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(3/1s,16) auth=$namespace/api remove=[limit-rps limit-burst-multiplier]`},
		reports:  []want{{8, "limit-burst-multiplier", convert.Note, `"two" is not an integer: ingress-nginx uses the default 5`}},
	},
	{
		name:    "a negative multiplier: nginx refuses the burst",
		input:   manifest("api", "", `limit-rps: "3"`, `limit-burst-multiplier: "-2"`),
		reports: []want{{8, "limit-burst-multiplier", convert.Error, "negative burst"}},
	},
	{
		name:    "a multiplier alone",
		input:   manifest("api", "", `limit-burst-multiplier: "2"`),
		reports: []want{{7, "limit-burst-multiplier", convert.Note, "nothing to convert"}},
	},
	{
		name:    `limit-rps: "ten": the annotation named, no policy`,
		input:   manifest("api", "", `limit-rps: "ten"`),
		reports: []want{{7, "limit-rps", convert.Error, `"ten" is not an integer: ingress-nginx refuses the whole Ingress`}},
	},
	{
		name:  "several bad values, each reported",
		input: manifest("api", "", `limit-rps: "5"`, `limit-rpm: " 60"`, `limit-connections: "1.5"`, `limit-whitelist: "10.0.0.300"`),
		reports: []want{
			{8, "limit-rpm", convert.Error, `" 60" is not an integer`},
			{9, "limit-connections", convert.Error, `"1.5" is not an integer`},
			{10, "limit-whitelist", convert.Error, `"10.0.0.300" is neither a CIDR nor an IP address`},
		},
	},
	{
		name:     "strconv.Atoi's integers: a sign, leading zeros",
		input:    manifest("api", "", `limit-rps: "+05"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:  "zero and negative limits: none",
		input: manifest("api", "", `limit-rps: "0"`, `limit-rpm: "-3"`),
		reports: []want{
			{7, "limit-rps", convert.Note, "0 is not positive"},
			{8, "limit-rpm", convert.Note, "-3 is not positive"},
		},
	},
	{
		name:     "an empty value is no value",
		input:    manifest("api", "", `limit-rps: ""`, `limit-rpm: "60"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rpm=gcra(60/1m,301) auth=$namespace/api remove=[limit-rpm]`},
	},
	{
		name:     "limit-allowlist wins over limit-whitelist",
		input:    manifest("api", "", `limit-rps: "1"`, `limit-whitelist: "10.0.0.0/8"`, `limit-allowlist: "172.16.0.0/12"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] exempt=[172.16.0.0/12] rps=gcra(1/1s,6) auth=$namespace/api remove=[limit-rps limit-allowlist limit-whitelist]`},
		reports:  []want{{8, "limit-whitelist", convert.Note, "limit-allowlist is set and takes precedence"}},
	},
	{
		name:     "an empty limit-allowlist gives way to limit-whitelist",
		input:    manifest("api", "", `limit-rps: "1"`, `limit-allowlist: ""`, `limit-whitelist: "10.0.0.1"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] exempt=[10.0.0.1] rps=gcra(1/1s,6) auth=$namespace/api remove=[limit-rps limit-whitelist]`},
	},
	{
		name:    "a trailing comma in the whitelist: ingress-nginx refuses it",
		input:   manifest("api", "", `limit-rps: "1"`, `limit-whitelist: "10.0.0.0/8,"`),
		reports: []want{{8, "limit-whitelist", convert.Error, `"" is neither a CIDR nor an IP address`}},
	},
	{
		name:    "a whitelist alone",
		input:   manifest("api", "", `limit-whitelist: "10.0.0.0/8"`),
		reports: []want{{7, "limit-whitelist", convert.Note, "no limit-rps or limit-rpm to exempt"}},
	},
	{
		name:     "more networks than a policy exempts",
		input:    manifest("api", "", `limit-rps: "1"`, `limit-whitelist: "`+manyNets(70)+`"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] exempt=64 rps=gcra(1/1s,6) auth=$namespace/api remove=[limit-rps limit-whitelist]`},
		reports:  []want{{8, "limit-whitelist", convert.Inexact, "70 networks, and a policy exempts at most 64"}},
	},
	{
		name:    "limit-connections alone: not convertible",
		input:   manifest("api", "", `limit-connections: "10"`),
		reports: []want{{7, "limit-connections", convert.Inexact, "not convertible: at most 10 open connections per client address"}},
	},
	{
		name:     "limit-connections beside limit-rps: the whitelist stays for limit_conn",
		input:    manifest("api", "", `limit-rps: "4"`, `limit-connections: "10"`, `limit-whitelist: "10.0.0.0/8"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] exempt=[10.0.0.0/8] rps=gcra(4/1s,21) auth=$namespace/api remove=[limit-rps]`},
		reports:  []want{{8, "limit-connections", convert.Inexact, "not convertible"}},
	},
	{
		name:     "bandwidth: limit-rate and limit-rate-after",
		input:    manifest("api", "", `limit-rps: "4"`, `limit-rate: "100"`, `limit-rate-after: "1024"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(4/1s,21) auth=$namespace/api remove=[limit-rps]`},
		reports: []want{
			{8, "limit-rate", convert.Inexact, "limits bandwidth"},
			{9, "limit-rate-after", convert.Inexact, "limits bandwidth"},
		},
	},
	{
		name:    "bandwidth values that are not integers: ignored by ingress-nginx",
		input:   manifest("api", "", `limit-rate: "fast"`, `limit-rate-after: "0"`),
		reports: []want{{7, "limit-rate", convert.Note, "ingress-nginx ignores it"}},
	},
	{
		name:  "global rate limiting: not converted",
		input: manifest("api", "", `global-rate-limit: "100"`, `global-rate-limit-window: "1m"`),
		reports: []want{
			{7, "global-rate-limit", convert.Inexact, "removed in ingress-nginx v1.12"},
			{8, "global-rate-limit-window", convert.Inexact, "removed in ingress-nginx v1.12"},
		},
	},
	{
		name:    "a canary Ingress: its own limits never applied",
		input:   manifest("api-canary", "", `canary: "true"`, `limit-rps: "5"`),
		reports: []want{{7, "canary", convert.Note, "a canary Ingress"}},
	},
	{
		name:     "an auth-url of another service: no auth-url for Sluice",
		input:    manifest("api", "", `limit-rps: "5"`, `auth-url: "https://oauth2-proxy.auth.svc/oauth2/auth"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=- remove=[limit-rps]`},
		reports:  []want{{8, "auth-url", convert.Inexact, "already asks an auth service"}},
	},
	{
		name:     "an auth-url of Sluice's already",
		input:    manifest("api", "", `limit-rps: "5"`, `auth-url: "http://sluice-check.sluice-system.svc.cluster.local:8080/check/$namespace?host=$host"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
		reports:  []want{{8, "auth-url", convert.Note, "already asks a Sluice check endpoint"}},
	},
	{
		name:     "regular expressions: every path of the hosts",
		input:    manifest("api", rules("shop.example.com", "/api/v[0-9]+/.* ImplementationSpecific"), `limit-rps: "5"`, `use-regex: "true"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
		reports:  []want{{8, "use-regex", convert.Note, "regular expressions"}},
	},
	{
		name:     "a rewrite target makes the paths regular expressions",
		input:    manifest("api", rules("shop.example.com", "/api(/|$)(.*) ImplementationSpecific"), `limit-rps: "5"`, `rewrite-target: "/$2"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
		reports:  []want{{8, "rewrite-target", convert.Note, "regular expressions"}},
	},
	{
		name: "every pathType, as ingress-nginx writes its locations",
		input: manifest("api", rules("shop.example.com",
			"/login Exact", "/api Prefix", "/static/ Prefix", "/files ImplementationSpecific", "/legacy -"), `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/* /files* /legacy* /login /static/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "Prefix /: every path",
		input:    manifest("api", rules("shop.example.com", "/ Prefix", "/login Exact"), `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "Exact /: the root alone",
		input:    manifest("api", rules("shop.example.com", "/ Exact"), `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "a path a policy cannot write",
		input:    manifest("api", rules("shop.example.com", "/a b ImplementationSpecific"), `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
		reports:  []want{{4, "", convert.Note, `path "/a b" cannot be written`}},
	},
	{
		name:     "a rule without a host: any host",
		input:    manifest("api", rules("", "/api Prefix"), `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "a wildcard host and server aliases",
		input:    manifest("api", rules("*.shop.example.com", "/api Prefix"), `limit-rps: "5"`, `server-alias: "Shop.example.org, shop.example.net"`),
		policies: []string{`shop/api hosts=[*.shop.example.com shop.example.net shop.example.org] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "a default backend alone: the catch-all server",
		input:    manifest("api", "spec:\n  defaultBackend:\n    service:\n      name: app\n      port:\n        number: 80\n", `limit-rps: "5"`),
		policies: []string{`shop/api hosts=[] paths=[] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:     "an annotation written as a number",
		input:    manifest("api", "", `limit-rps: 5`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
		reports:  []want{{7, "limit-rps", convert.Note, "written as a YAML number"}},
	},
	{
		name:     "limits beyond the API's bounds: the multiplier and whitelist stay with the limit that stays",
		input:    manifest("api", "", `limit-rps: "2000000000"`, `limit-rpm: "600"`, `limit-burst-multiplier: "2"`, `limit-whitelist: "10.0.0.0/8"`),
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] exempt=[10.0.0.0/8] rpm=gcra(600/1m,1201) auth=$namespace/api remove=[limit-rpm]`},
		reports:  []want{{7, "limit-rps", convert.Inexact, "beyond what a policy holds"}},
	},
	{
		name:     "a name that is not a DNS label",
		input:    manifest("api.v2", "", `limit-rps: "5"`),
		policies: []string{`shop/api-v2-ba81b846 hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api-v2-ba81b846 remove=[limit-rps]`},
	},
	{
		name:    "the same Ingress twice",
		input:   manifest("api", "", `limit-rps: "5"`) + "---\n" + manifest("api", "", `limit-rps: "6"`),
		reports: []want{{4 + strings.Count(manifest("api", "", `limit-rps: "5"`), "\n") + 1, "", convert.Error, "this Ingress is also at"}},
		policies: []string{
			`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`,
		},
	},
	{
		name:     "another annotations prefix",
		input:    strings.ReplaceAll(manifest("api", "", `limit-rps: "5"`), "nginx.ingress.kubernetes.io/", "ingress.example.com/"),
		opts:     Options{AnnotationsPrefix: "ingress.example.com"},
		policies: []string{`shop/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[ingress.example.com/limit-rps]`},
	},
	{
		name:     "every policy in one namespace: the auth-url names it",
		input:    manifest("api", "", `limit-rps: "5"`),
		opts:     Options{Namespace: "sandbox", IgnoreIngressNamespace: true},
		policies: []string{`sandbox/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=sandbox/api remove=[limit-rps]`},
	},
	{
		name:     "no namespace in the manifest: none in the policy, or --namespace's",
		input:    strings.Replace(manifest("api", "", `limit-rps: "5"`), "  namespace: shop\n", "", 1),
		opts:     Options{Namespace: "web"},
		policies: []string{`web/api hosts=[shop.example.com] paths=[/api /api/*] rps=gcra(5/1s,26) auth=$namespace/api remove=[limit-rps]`},
	},
	{
		name:    "no rate limit: no policy, no report",
		input:   manifest("api", "", `ssl-redirect: "false"`),
		reports: nil,
	},
	{
		name:    "not YAML",
		input:   "apiVersion: v1\nkind: Ingress\nmetadata: [\n",
		reports: []want{{3, "", convert.Error, "cannot read the file"}},
	},
}

// manyNets is n distinct /24 networks, comma-separated.
func manyNets(n int) string {
	nets := make([]string, n)
	for i := range nets {
		nets[i] = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	}
	return strings.Join(nets, ",")
}

// TestConvert converts the table's manifests: the policies (compiled by
// the policy compiler, as the controller would) and every report are as
// expected, no report more.
func TestConvert(t *testing.T) {
	for _, tc := range convertCases {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert([]convert.File{{Name: "in.yaml", Data: []byte(tc.input)}}, tc.opts)
			checkReports(t, res.Reports, tc.reports)
			var got []string
			for _, p := range res.Policies {
				if _, err := policy.Compile(p.Object.Namespace, p.Object.Name, &p.Object.Spec); err != nil {
					t.Errorf("%s does not compile: %v", p.Object.Name, err)
				}
				got = append(got, summary(p))
			}
			if !slices.Equal(got, tc.policies) {
				t.Errorf("policies:\n got %q\nwant %q", got, tc.policies)
			}
		})
	}
}

func checkReports(t *testing.T, got []Report, wants []want) {
	t.Helper()
	used := make([]bool, len(got))
	for _, w := range wants {
		found := false
		for i, r := range got {
			if !used[i] && r.Pos.Line == w.line && r.Annotation == w.ann && r.Severity == w.sev && strings.Contains(r.Message, w.sub) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no report at line %d, annotation %q, %v, saying %q; got:\n%s", w.line, w.ann, w.sev, w.sub, reportLines(got))
		}
	}
	for i, r := range got {
		if !used[i] {
			t.Errorf("unexpected report: %s", r)
		}
	}
}

func reportLines(rs []Report) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString("  " + r.String() + "\n")
	}
	return b.String()
}

// summary is a policy in one line: namespace/name, hosts, paths, exempt
// clients (their number when more than 8), each limit, the auth-url's
// namespace/policy ("-" for none) and the annotations to remove
// (without the default prefix).
func summary(p Policy) string {
	o := p.Object
	m := o.Spec.Match
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s hosts=%v paths=%v", o.Namespace, o.Name, m.Hosts, m.Paths)
	switch {
	case len(m.ExemptClients) > 8:
		fmt.Fprintf(&b, " exempt=%d", len(m.ExemptClients))
	case len(m.ExemptClients) > 0:
		fmt.Fprintf(&b, " exempt=%v", m.ExemptClients)
	}
	for _, l := range o.Spec.Limits {
		fmt.Fprintf(&b, " %s=gcra(%d/%s,%d)", l.Name, l.GCRA.Rate, l.GCRA.Period, l.GCRA.Burst)
	}
	auth := "-"
	if p.AuthURL != "" {
		rest := strings.TrimPrefix(p.AuthURL, DefaultCheckURL+"/check/")
		auth = strings.TrimSuffix(rest, "?host=$host")
	}
	var remove []string
	for _, r := range p.Remove {
		remove = append(remove, strings.TrimPrefix(r, DefaultAnnotationsPrefix+"/"))
	}
	fmt.Fprintf(&b, " auth=%s remove=%v", auth, remove)
	if o.Spec.Key != "{client_ip}" {
		fmt.Fprintf(&b, " key=%s", o.Spec.Key)
	}
	return b.String()
}

// TestTestdata converts each file of testdata/ and compares the output
// (policies with their comments, then the reports) with its golden file
// in testdata/golden/. UPDATE_GOLDEN=1 rewrites them.
func TestTestdata(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	json, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	inputs = append(inputs, json...)
	if len(inputs) == 0 {
		t.Fatal("no test data")
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			res := Convert([]convert.File{{Name: filepath.Base(in), Data: data}}, Options{})
			var out strings.Builder
			if err := convert.WriteYAML(&out, res.Policies); err != nil {
				t.Fatal(err)
			}
			out.WriteString("# reports:\n")
			for _, r := range res.Reports {
				out.WriteString("# " + r.String() + "\n")
			}
			for _, p := range res.Policies {
				if _, err := policy.Compile(p.Object.Namespace, p.Object.Name, &p.Object.Spec); err != nil {
					t.Errorf("%s does not compile: %v", p.Object.Name, err)
				}
			}
			golden := filepath.Join("testdata", "golden", strings.TrimSuffix(filepath.Base(in), filepath.Ext(in))+".out")
			if os.Getenv("UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			wantOut, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
			}
			if out.String() != string(wantOut) {
				t.Errorf("output differs from %s (UPDATE_GOLDEN=1 rewrites it):\n%s", golden, out.String())
			}
		})
	}
}

// TestReportFormat pins the report line the command prints.
func TestReportFormat(t *testing.T) {
	r := Report{Report: convert.Report{Pos: convert.Pos{File: "in.yaml", Line: 7}, Severity: convert.Error, Message: "bad"}, Ingress: "shop/api", Annotation: "limit-rps"}
	if got, want := r.String(), "in.yaml:7: shop/api: annotation limit-rps: error: bad"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	r = Report{Report: convert.Report{Pos: convert.Pos{File: "in.yaml", Line: 3}, Severity: convert.Error, Message: "cannot read"}}
	if got, want := r.String(), "in.yaml:3: error: cannot read"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// FuzzConvert: any input converts without panicking, and every policy
// written compiles.
func FuzzConvert(f *testing.F) {
	for _, tc := range convertCases {
		f.Add([]byte(tc.input))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res := Convert([]convert.File{{Name: "in.yaml", Data: data}}, Options{})
		for _, p := range res.Policies {
			if _, err := policy.Compile(p.Object.Namespace, p.Object.Name, &p.Object.Spec); err != nil {
				t.Fatalf("%s does not compile: %v", p.Object.Name, err)
			}
			var out strings.Builder
			if err := convert.WriteYAML(&out, []Policy{p}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
