package sluicectl

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"acme":               "acme",
		"203.0.113.7":        "203.0.113.7",
		"Acme Corp":          "Acme Corp",
		"müller-straße/東京":   "müller-straße/東京",
		"":                   `""`,
		"a\x1b[2Jb":          `"a\x1b[2Jb"`,
		"\x1b[31mred\x1b[0m": `"\x1b[31mred\x1b[0m"`,
		"x\nevil  4m  5m":    `"x\nevil  4m  5m"`,
		"a\tb\rc\x00d\x7f":   `"a\tb\rc\x00d\x7f"`,
		"c1\u0085\u009b":     `"c1\u0085\u009b"`,
		"abc\u202edcba":      `"abc\u202edcba"`,
		"\u2066rtl\u2069":    `"\u2066rtl\u2069"`,
		"zero\u200bwidth":    `"zero\u200bwidth"`,
		"bom\ufeff":          `"bom\ufeff"`,
		"soft\u00adhyphen":   `"soft\u00adhyphen"`,
		"line\u2028sep":      `"line\u2028sep"`,
		"nb\u00a0sp":         `"nb\u00a0sp"`,
		"filler\u3164":       `"filler\u3164"`,
		"vs\ufe0f":           `"vs\ufe0f"`,
		"tag\U000e0041":      `"tag\U000e0041"`,
		"private\ue000":      `"private\ue000"`,
		"bad\xff\xfeutf8":    `"bad\xff\xfeutf8"`,
		"acme ":              `"acme "`,
		" acme":              `" acme"`,
		"a  b":               `"a  b"`,
		`"acme"`:             `"\"acme\""`,
		`back\slash`:         `back\slash`,
		`"a\x1b[2Jb"`:        `"\"a\\x1b[2Jb\""`,
		"-":                  `"-"`,
		"(missing)":          `"(missing)"`,
		"--":                 "--",
	} {
		if got := visible(in); string(got) != want {
			t.Errorf("visible(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzVisible: what visible shows holds nothing a terminal acts on or
// hides, and tells every value apart (a quoted one reads back with
// strconv.Unquote).
func FuzzVisible(f *testing.F) {
	for _, s := range []string{"acme", "a\x1b[2Jb", "\u202e", "\xff", `"x"`, " ", "a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := string(visible(s))
		if !shownSafely(out) {
			t.Fatalf("visible(%q) = %q holds a character that does not print", s, out)
		}
		back := out
		if strings.HasPrefix(out, `"`) {
			var err error
			if back, err = strconv.Unquote(out); err != nil {
				t.Fatalf("visible(%q) = %s does not unquote: %v", s, out, err)
			}
		}
		if back != s {
			t.Fatalf("visible(%q) = %s reads back as %q", s, out, back)
		}
	})
}

// shownSafely reports whether s holds only characters that print as
// themselves (and ASCII spaces): no control, format or invisible one, no
// invalid UTF-8.
func shownSafely(s string) bool {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if size == 1 && r == utf8.RuneError || r != ' ' && (!unicode.IsGraphic(r) || unicode.IsSpace(r) || hidden(r)) {
			return false
		}
		s = s[size:]
	}
	return true
}

// hostile is a key value a client chose: it clears the screen, sets colors,
// forges a row, reverses the line and hides a character. (An answer's
// JSON holds no invalid UTF-8: a decoder reads it as U+FFFD.)
const hostile = "evil\x1b[2J\x1b[31m\nacme  4m  5m\r\u202eevil\u200b"

// hostileAnswer is body with every string a client or a server can set
// replaced by hostile (not the times, which must parse).
func hostileAnswer(t *testing.T, body string) string {
	t.Helper()
	if body == "" {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return hostile
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k, e := range x {
				if k == "expires" || k == "setAt" {
					continue
				}
				x[k] = walk(e)
			}
			if limits, ok := x["limits"].(map[string]any); ok {
				x["limits"] = map[string]any{hostile: limits[firstKey(limits)]}
			}
		}
		return v
	}
	b, err := json.Marshal(walk(v))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func firstKey(m map[string]any) string {
	for k := range m {
		return k
	}
	return ""
}

// TestTablesEscapeWhatTheyShow: every command's table, given answers
// whose every string holds control bytes, a newline and a forged row, bidi
// and invisible characters and invalid UTF-8 (and the KEY argument the
// same), prints only characters that print, on as many lines as a plain
// answer takes; JSON and YAML keep the value exact.
func TestTablesEscapeWhatTheyShow(t *testing.T) {
	for _, tc := range tableCases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string(nil), tc.args...)
			if i := keyIndex(args); i > 0 {
				args[i] = hostile
			}
			f := fakeServer(t, 200, hostileAnswer(t, tc.body))
			var stdout, stderr bytes.Buffer
			if code := Main(append([]string{"--server", f.url}, args...), &stdout, &stderr); code != ExitOK {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
			}
			out := stdout.String()
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if !shownSafely(line) {
					t.Errorf("printed a character that does not print: %q", line)
				}
			}
			if got, want := strings.Count(out, "\n"), strings.Count(tc.want, "\n"); got != want {
				t.Errorf("printed %d lines, want %d as for a plain answer:\n%s", got, want, out)
			}
			if !strings.Contains(out, `"evil\x1b[2J\x1b[31m\nacme  4m  5m\r\u202eevil\u200b"`) {
				t.Errorf("printed:\n%s\nwant the value escaped and quoted", out)
			}
		})
	}
	f := fakeServer(t, 200, `{"namespace":"shop","policy":"p","bans":[{"key":"a\u001b[2J\u202e","remaining":"4m","length":"5m"}]}`)
	for format, want := range map[string]string{"json": `"key": "a\u001b[2J\u202e"`, "yaml": "key: \"a\\e[2J\u202e\""} {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"bans", "shop/p", "--server", f.url, "-o", format}, &stdout, &stderr); code != ExitOK {
			t.Fatalf("-o %s: exit code %d; stderr:\n%s", format, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("-o %s printed:\n%s\nwant the value as the server sent it, %s", format, stdout.String(), want)
		}
	}
}

// keyIndex is where a command line gives KEY, 0 for a command without.
func keyIndex(args []string) int {
	switch {
	case args[0] == "inspect" || args[0] == "reset" || args[0] == "lift":
		return 2
	case args[0] == "override" && (args[1] == "set" || args[1] == "delete"):
		return 3
	}
	return 0
}

// TestErrorsEscapeWhatTheyShow: a server's message and the arguments an
// error names are printed with the same escapes, the hint on its own line.
func TestErrorsEscapeWhatTheyShow(t *testing.T) {
	message, err := json.Marshal("reset " + hostile + ": no such key")
	if err != nil {
		t.Fatal(err)
	}
	f := fakeServer(t, 404, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":`+string(message)+`}`)
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"reset", "shop/p", hostile, "--server", f.url}, &stdout, &stderr); code != ExitNotFound {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitNotFound, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
		if !shownSafely(line) {
			t.Errorf("printed a character that does not print: %q", line)
		}
	}
	if !strings.Contains(stderr.String(), `"reset evil\x1b[2J`) {
		t.Errorf("stderr:\n%s\nwant the server's message, escaped", stderr.String())
	}
	if lines := strings.Count(stderr.String(), "\n"); lines != 1 {
		t.Errorf("printed %d lines, want 1:\n%s", lines, stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"lift", "shop/p\x1b[2J", "a\xff\u202e", "--server", f.url}, &stdout, &stderr); code != ExitUsage {
		t.Errorf("exit code %d, want %d", code, ExitUsage)
	}
	for _, line := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
		if !shownSafely(line) {
			t.Errorf("printed a character that does not print: %q", line)
		}
	}
}
