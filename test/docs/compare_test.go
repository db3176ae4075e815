package docs

import "testing"

// The comparison allows what the pages say it allows, and nothing else.
func TestCompare(t *testing.T) {
	for _, c := range []struct {
		name, got string
		want      []string
		ok        bool
	}{
		{"same", "200 200 403\n", []string{"200 200 403"}, true},
		{"another status", "200 200 200\n", []string{"200 200 403"}, false},
		{"spaces collapse", "acme   5m0s  5m0s\n", []string{"acme  5m0s       5m0s"}, true},
		{"a duration counts down", "acme 4m58s 5m0s\n", []string{"acme 5m0s 5m0s"}, true},
		{"past the slack", "acme 4m50s 5m0s\n", []string{"acme 5m0s 5m0s"}, false},
		{"a Unix time", "X-RateLimit-Reset: 1796528701\n", []string{"X-RateLimit-Reset: 1796026156"}, true},
		{"a small number is exact", "retryAfter:299\n", []string{"retryAfter:300"}, false},
		{"ellipsis in a line", `{"type":"x","status":403,"y":1}` + "\n", []string{`{"type":...,"status":403,...}`}, true},
		{"ellipsis line", "a\nb\nc\nd\n", []string{"a", "...", "d"}, true},
		{"Date dropped", "HTTP/1.1 200 OK\nDate: Sun, 06 Dec 2026 03:39:59 GMT\nX: 1\n", []string{"HTTP/1.1 200 OK", "X: 1"}, true},
		{"a line more", "a\nb\n", []string{"a"}, false},
		{"a line less", "a\n", []string{"a", "b"}, false},
		{"regexp text is literal", "a.b\n", []string{"a+b"}, false},
	} {
		if msg := compare(c.want, c.got); (msg == "") != c.ok {
			t.Errorf("%s: compare(%q, %q) = %q, want ok=%v", c.name, c.want, c.got, msg, c.ok)
		}
	}
}

func TestParseConsole(t *testing.T) {
	cmds := parseConsole("$ for i in 1 2; do \\\n    echo $i; done\n1\n2\n$ echo x\nx\n")
	if len(cmds) != 2 || cmds[0].command != "for i in 1 2; do \\\n    echo $i; done" || len(cmds[0].output) != 2 || cmds[1].output[0] != "x" {
		t.Fatalf("parseConsole: %+v", cmds)
	}
	if _, err := parsePage("p.md", "<!-- runnable -->\ntext\n"); err == nil {
		t.Fatal("a marker before no fenced block must be an error")
	}
}
