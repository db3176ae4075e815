package intake

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/sluice-dev/sluice/internal/policy"
)

// readTarget reads a request target as sent (path, query, and a fragment,
// which no router reads and is dropped) into out's path readings
// (readPath) and query, as Read reads one.
func readTarget(out *policy.Request, target string) error {
	if !strings.HasPrefix(target, "/") {
		return fmt.Errorf("must start with '/': %q", Excerpt(target))
	}
	if !validURLText(target) {
		return fmt.Errorf("control bytes or spaces in %q", Excerpt(target))
	}
	if i := strings.IndexByte(target, '#'); i >= 0 {
		target = target[:i]
	}
	escapedPath, rawQuery, _ := strings.Cut(target, "?")
	if err := readPath(out, escapedPath); err != nil {
		return err
	}
	out.RawQuery = rawQuery
	return nil
}

var errBadEscape = errors.New("malformed percent-encoding in the path")

// readPath sets r.Path and r.AltPaths from the path as sent (escaped, no
// query). Routers read one target in different ways, and a policy applies
// when any of them matches it, so that no spelling skips a policy:
//
//   - r.Path: percent-decoded, then "." and ".." segments and repeated
//     slashes resolved (how nginx matches locations). Keys and `when` see
//     this reading.
//   - the path as sent, when it differs (routers that match the raw path,
//     such as Envoy without normalize_path).
//   - encoded slashes kept inside their segment, when there are any (Go's
//     ServeMux and most application routers: "/api/x%2F..%2F..%2Fpub" is
//     under /api/ for them, while the decoded reading is "/pub").
//   - path parameters removed, when there are any: servlet containers drop
//     ";jsessionid=x" from every segment before they route, so
//     "/login;jsessionid=x" is /login and "/pub/..;/admin" is /admin there.
//   - without its trailing slash, for the decoded readings (Express,
//     Spring 5 and Rails route "/login/" to the handler of /login).
//
// It allocates nothing for a path that is already clean and unescaped.
func readPath(r *policy.Request, escaped string) error {
	decoded, err := normalizePath(escaped)
	if err != nil {
		return err
	}
	r.Path = decoded
	r.AltPaths = [len(r.AltPaths)]string{}
	n := 0
	add := func(p string) {
		if p == "" || p == decoded {
			return
		}
		for _, q := range r.AltPaths[:n] {
			if q == p {
				return
			}
		}
		r.AltPaths[n] = p
		n++
	}
	add(escaped)
	if hasEncodedSlash(escaped) {
		add(cleanPath(decodeKeepingSlashes(escaped)))
	}
	add(trimTrailingSlash(decoded))
	if strings.IndexByte(escaped, ';') >= 0 {
		// The escapes were checked by normalizePath above, and removing
		// whole parameters leaves only whole escapes.
		if withoutParams, err := normalizePath(stripPathParams(escaped)); err == nil {
			add(withoutParams)
			add(trimTrailingSlash(withoutParams))
		}
	}
	return nil
}

// trimTrailingSlash drops one trailing slash, never the root's.
func trimTrailingSlash(p string) string {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}

// stripPathParams removes every segment's parameters (from a ';' to the
// end of its segment), as servlet containers do before decoding: an
// escaped "%3B" is not a separator for them.
func stripPathParams(escaped string) string {
	var b strings.Builder
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); {
		j := strings.IndexByte(escaped[i:], ';')
		if j < 0 {
			b.WriteString(escaped[i:])
			break
		}
		b.WriteString(escaped[i : i+j])
		i += j
		if k := strings.IndexByte(escaped[i:], '/'); k >= 0 {
			i += k
		} else {
			break
		}
	}
	return b.String()
}

// normalizePath decodes percent-escapes and resolves "." and ".." segments
// and repeated slashes, so "/a/../login", "//login" and "/%6Cogin" match a
// policy for "/login" the way the upstream application will route them.
// A trailing slash is kept. A path that is already clean is returned as is.
func normalizePath(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	decoded := escaped
	if strings.IndexByte(escaped, '%') >= 0 {
		var ok bool
		if decoded, ok = unescape(escaped, false); !ok {
			return "", errBadEscape
		}
	}
	return cleanPath(decoded), nil
}

// cleanPath makes p absolute and resolves its dot segments and repeated
// slashes, keeping a trailing slash.
func cleanPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if isClean(p) {
		return p
	}
	cleaned := path.Clean(p)
	if strings.HasSuffix(p, "/") && cleaned != "/" {
		cleaned += "/"
	}
	return cleaned
}

// isClean reports whether p has no empty, "." or ".." segments (a trailing
// slash is fine), so path.Clean and its allocation can be skipped.
func isClean(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		seg := p[i+1:]
		if j := strings.IndexByte(seg, '/'); j >= 0 {
			seg = seg[:j]
			if seg == "" {
				return false // "//"
			}
		}
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func hasEncodedSlash(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && s[i+1] == '2' && (s[i+2] == 'F' || s[i+2] == 'f') {
			return true
		}
	}
	return false
}

// decodeKeepingSlashes decodes every escape but %2F, which stays (as
// "%2F") a character of its segment. The escapes were checked by
// normalizePath.
func decodeKeepingSlashes(s string) string {
	out, _ := unescape(s, true)
	return out
}

// unescape percent-decodes s; with keepSlashes, "%2F" stays as it is
// (upper-cased). ok is false for a malformed escape.
func unescape(s string, keepSlashes bool) (string, bool) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", false
		}
		v := unhex(s[i+1])<<4 | unhex(s[i+2])
		i += 2
		if keepSlashes && v == '/' {
			b.WriteString("%2F")
			continue
		}
		b.WriteByte(v)
	}
	return b.String(), true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
