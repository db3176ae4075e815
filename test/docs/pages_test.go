package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A page marks a fenced block for the test with an HTML comment on the
// line before it (blank lines between allowed), which the site does not
// show:
//
//	<!-- runnable-file: policies/x.yaml -->  the block is a file the examples read
//	<!-- runnable-server -->                 the block is the one server command
//	<!-- runnable -->                        the block is a console session to run
var marker = regexp.MustCompile(`^<!--\s*runnable(?:-(file|server))?(?::\s*(\S+))?\s*-->$`)

// block is one marked fenced block.
type block struct {
	kind string // "file", "server" or "" (a console session)
	arg  string // the file's path
	body string
	line int // of the marker
}

// page is a page's runnable blocks.
type page struct {
	rel      string
	files    []block
	server   *block
	consoles []block
}

// runnablePages reads every page of dir that marks a block.
func runnablePages(t *testing.T, dir string) []page {
	t.Helper()
	var pages []page
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		p, err := parsePage(rel, string(text))
		if err != nil {
			return err
		}
		if p.server != nil || len(p.consoles) > 0 {
			pages = append(pages, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// parsePage finds a page's marked blocks; a marker not followed by a
// fenced block is an error, so a marker never silently marks nothing.
func parsePage(rel, text string) (page, error) {
	p := page{rel: rel}
	lines := scanLines(text)
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		b := block{kind: m[1], arg: m[2], line: i + 1}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j >= len(lines) || !strings.HasPrefix(lines[j], "```") {
			return p, fmt.Errorf("%s:%d: a runnable marker must come right before a fenced block", rel, b.line)
		}
		var body []string
		for j++; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			body = append(body, lines[j])
		}
		b.body = strings.Join(body, "\n") + "\n"
		i = j
		switch b.kind {
		case "file":
			if b.arg == "" || filepath.IsAbs(b.arg) || strings.Contains(b.arg, "..") {
				return p, fmt.Errorf("%s:%d: runnable-file needs a relative path", rel, b.line)
			}
			p.files = append(p.files, b)
		case "server":
			if p.server != nil {
				return p, fmt.Errorf("%s:%d: a page starts one server", rel, b.line)
			}
			p.server = &b
		default:
			p.consoles = append(p.consoles, b)
		}
	}
	return p, nil
}

// command is one `$ ` command of a console block and the output shown.
type command struct {
	command string
	output  []string
}

// parseConsole splits a console block into commands (a line ending with
// `\` goes on in the next) and their output.
func parseConsole(body string) []command {
	var cmds []command
	cont := false
	for _, l := range scanLines(body) {
		switch {
		case cont:
			cmds[len(cmds)-1].command += "\n" + l
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, command{command: strings.TrimPrefix(l, "$ ")})
		case len(cmds) > 0:
			cmds[len(cmds)-1].output = append(cmds[len(cmds)-1].output, l)
		}
		cont = len(cmds) > 0 && strings.HasSuffix(l, `\`)
	}
	return cmds
}

// What may differ between a page and a run: the time a command ran at
// (Unix times, revisions: numbers of ten digits or more) and durations
// counting down while the commands run (Go durations, within slack).
var (
	bigNumber = regexp.MustCompile(`\d{10,}`)
	duration  = regexp.MustCompile(`\b(?:\d+h)?(?:\d+m)?\d+(?:\.\d+)?s\b`)
)

const slack = 5 * time.Second

// compare matches a run's output against the page's, line by line after
// spaces are collapsed and `Date:` headers dropped: `...` in a line stands
// for any text, and a line of `...` alone for any number of lines. It
// returns what differs, or "".
func compare(want []string, got string) string {
	w, g := normalize(want), normalize(scanLines(got))
	if matchLines(w, g) {
		return ""
	}
	return fmt.Sprintf("output differs (%d lines shown, %d printed)", len(w), len(g))
}

func normalize(lines []string) []string {
	var out []string
	for _, l := range lines {
		l = strings.Join(strings.Fields(l), " ")
		if strings.HasPrefix(l, "Date: ") {
			continue
		}
		out = append(out, l)
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for k := 0; k <= len(got); k++ {
			if matchLines(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && matchLine(want[0], got[0]) && matchLines(want[1:], got[1:])
}

// matchLine turns the page's line into a pattern: literal text, `...` as
// anything, big numbers as any big number, durations captured and held
// within slack of the page's.
func matchLine(want, got string) bool {
	var pattern strings.Builder
	var durations []time.Duration
	pattern.WriteString("^")
	for i, part := range strings.Split(want, "...") {
		if i > 0 {
			pattern.WriteString(".*")
		}
		pattern.WriteString(literal(part, &durations))
	}
	pattern.WriteString("$")
	m := regexp.MustCompile(pattern.String()).FindStringSubmatch(got)
	if m == nil {
		return false
	}
	for i, d := range durations {
		g, err := time.ParseDuration(m[i+1])
		if err != nil || g < d-slack || g > d+slack {
			return false
		}
	}
	return true
}

// literal quotes text for a pattern, with big numbers and durations as
// their groups; the durations shown are appended to durations in order.
func literal(text string, durations *[]time.Duration) string {
	var out strings.Builder
	for text != "" {
		dl := duration.FindStringIndex(text)
		bl := bigNumber.FindStringIndex(text)
		switch {
		case bl != nil && (dl == nil || bl[0] <= dl[0]):
			out.WriteString(regexp.QuoteMeta(text[:bl[0]]) + `\d{10,}`)
			text = text[bl[1]:]
		case dl != nil:
			d, err := time.ParseDuration(text[dl[0]:dl[1]])
			if err != nil {
				out.WriteString(regexp.QuoteMeta(text[:dl[1]]))
			} else {
				*durations = append(*durations, d)
				out.WriteString(regexp.QuoteMeta(text[:dl[0]]) + `(\d[\dhms.]*s)`)
			}
			text = text[dl[1]:]
		default:
			out.WriteString(regexp.QuoteMeta(text))
			text = ""
		}
	}
	return out.String()
}
