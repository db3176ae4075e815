// Package docs tests the documentation's examples: every RateLimitPolicy
// and RateLimitOverrides in a fenced yaml block of README.md or a page
// under docs/ is applied to a real API server (envtest, dry run, strict
// field validation) and must be accepted, or, when the block is marked as
// an example of a refusal, refused.
//
// A block without a kind whose top level is a policy's spec (limits
// among its fields) or holds one (spec.limits) is a policy fragment: it is
// applied as a RateLimitPolicy, named after its line when it names none.
//
// The marker is an HTML comment on the last non-blank line before the
// block: <!-- refused --> (any refusal), or <!-- refused: TEXT --> (the API
// server's message must contain TEXT). It does not show on the site.
package docs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// example is one fenced yaml block that holds a policy or overrides, or a
// policy's fragment.
type example struct {
	file string
	line int // of the fence, 1-based
	text string
	// refused: the block is marked as an example of a refusal; message,
	// when set, is text the refusal must contain.
	refused bool
	message string
}

func (e example) String() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

var (
	fenceOpen  = regexp.MustCompile("^( *)(`{3,}|~{3,})\\s*(ya?ml)\\b")
	sluiceKind = regexp.MustCompile(`(?m)^\s*kind:\s*["']?RateLimit(Policy|Overrides)["']?\s*$`)
	limitsKey  = regexp.MustCompile(`(?m)^\s*limits:`)
	refusedRe  = regexp.MustCompile(`^<!--\s*refused(?::\s*(.*?))?\s*-->$`)
)

// examples reads the examples of one markdown file: its fenced yaml
// blocks (indented ones too, inside lists) of a Sluice kind.
func examples(file string, md []byte) []example {
	var out []example
	var last string // the last non-blank line before the current one
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		m := fenceOpen.FindStringSubmatch(line)
		if m == nil {
			if strings.TrimSpace(line) != "" {
				last = strings.TrimSpace(line)
			}
			continue
		}
		ex := example{file: file, line: lineNo}
		if r := refusedRe.FindStringSubmatch(last); r != nil {
			ex.refused, ex.message = true, r[1]
		}
		indent, fence := len(m[1]), m[2]
		var body []string
		for sc.Scan() {
			lineNo++
			l := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(l), fence) && strings.Trim(strings.TrimSpace(l), fence[:1]) == "" {
				break
			}
			body = append(body, strings.TrimPrefix(l, strings.Repeat(" ", indent)))
		}
		ex.text = strings.Join(body, "\n") + "\n"
		last = ""
		if sluiceKind.MatchString(ex.text) || limitsKey.MatchString(ex.text) {
			out = append(out, ex)
		}
	}
	return out
}

// objects decodes an example's YAML documents of a Sluice kind.
func (e example) objects() ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(e.text), 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw map[string]any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: not YAML: %w", e, err)
		}
		if raw == nil {
			continue
		}
		if u := e.object(raw); u != nil {
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 && sluiceKind.MatchString(e.text) {
		return nil, fmt.Errorf("%s: a block that names a Sluice kind holds no ratelimit.sluice.dev object (apiVersion?)", e)
	}
	return objs, nil
}

// object is a document of the block as an object to apply: a Sluice
// object, a policy fragment made whole, or nil for anything else.
func (e example) object(raw map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: raw}
	if _, ok := raw["kind"]; ok {
		if gv := u.GroupVersionKind(); gv.Group == "ratelimit.sluice.dev" && sluiceKind.MatchString("kind: "+gv.Kind) {
			return u
		}
		return nil
	}
	spec, ok := raw["spec"].(map[string]any)
	switch {
	case ok && spec["limits"] != nil:
	case raw["limits"] != nil:
		u = &unstructured.Unstructured{Object: map[string]any{"spec": raw}}
	default:
		return nil
	}
	u.SetAPIVersion("ratelimit.sluice.dev/v1alpha1")
	u.SetKind("RateLimitPolicy")
	if u.GetName() == "" {
		u.SetName(fmt.Sprintf("example-line-%d", e.line))
	}
	return u
}

// allExamples reads README.md and every docs/**/*.md of the repository
// at root.
func allExamples(root string) ([]example, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []example
	for _, f := range files {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		out = append(out, examples(f, md)...)
	}
	return out, nil
}
