package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// placeholderSeparator goes between two placeholders with no literal text
// between them, so "{header:A}{header:B}" cannot render "ab"+"c" and "a"+"bc"
// the same way. It is escaped inside values.
const placeholderSeparator = '\x1f'

// sharedKeyValue is the key value of the bucket that onMissingKey: Shared
// puts requests without a placeholder's value into. Rendered values escape
// NUL, so no request's own key can equal it.
const sharedKeyValue = "\x00missing"

type partKind uint8

const (
	partLiteral partKind = iota
	partClientIP
	partHeader
	partQuery
	partMethod
	partHost
	partPath
	partDescriptorEntry // the value of one descriptor entry
	partDescriptor      // the whole descriptor: every key and value
	partDomain          // the rate limit service domain; no spec can write it
)

type keyPart struct {
	kind partKind
	text string // the literal, the canonical header name or the query parameter name
	// For partClientIP: the prefix lengths applied to IPv4 and IPv6 addresses.
	v4Bits, v6Bits int
}

// keyTemplate is a compiled spec.key. Rendering is injective for a given
// template: placeholder values escape '%', NUL, the separator and the first
// byte of each literal that follows a placeholder, so a value can never
// imitate a boundary.
type keyTemplate struct {
	source  string
	parts   []keyPart
	escape  [256]bool
	dynamic bool // has a placeholder; a static key is one global bucket
	// usesHTTP and usesDescriptor say which kind of request the
	// placeholders read: a policy's key may read only its own kind.
	usesHTTP, usesDescriptor bool
}

// Defaults for {client_ip}: an IPv4 address is one bucket; an IPv6 client
// usually owns a whole /64 and can rotate addresses inside it freely, so
// the /64 is the bucket.
const (
	defaultV4Bits = 32
	defaultV6Bits = 64
)

func parseKeyTemplate(src string) (keyTemplate, error) {
	t := keyTemplate{source: src}
	var literal strings.Builder
	flushLiteral := func() {
		if literal.Len() > 0 {
			t.parts = append(t.parts, keyPart{kind: partLiteral, text: literal.String()})
			literal.Reset()
		}
	}
	for i := 0; i < len(src); {
		switch src[i] {
		case '}':
			return keyTemplate{}, fmt.Errorf("'}' at offset %d closes no placeholder", i)
		case '{':
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return keyTemplate{}, fmt.Errorf("placeholder at offset %d is not closed with '}'", i)
			}
			body := src[i+1 : i+end]
			part, err := parsePlaceholder(body)
			if err != nil {
				return keyTemplate{}, fmt.Errorf("placeholder {%s}: %w", body, err)
			}
			flushLiteral()
			if n := len(t.parts); n > 0 && t.parts[n-1].kind != partLiteral {
				t.parts = append(t.parts, keyPart{kind: partLiteral, text: string(placeholderSeparator)})
			}
			t.parts = append(t.parts, part)
			t.dynamic = true
			if part.kind == partDescriptor || part.kind == partDescriptorEntry {
				t.usesDescriptor = true
			} else {
				t.usesHTTP = true
			}
			i += end + 1
		default:
			literal.WriteByte(src[i])
			i++
		}
	}
	flushLiteral()

	// Parsing a rendered key left to right, a value ends at the first byte
	// of the literal after it; escaping that byte inside values makes the
	// boundary unambiguous, and so the rendering injective.
	t.escape['%'] = true
	t.escape[0] = true
	t.escape[placeholderSeparator] = true
	for i := 1; i < len(t.parts); i++ {
		if t.parts[i].kind == partLiteral && t.parts[i-1].kind != partLiteral {
			t.escape[t.parts[i].text[0]] = true
		}
	}
	return t, nil
}

func parsePlaceholder(body string) (keyPart, error) {
	switch {
	case body == "client_ip":
		return keyPart{kind: partClientIP, v4Bits: defaultV4Bits, v6Bits: defaultV6Bits}, nil
	case strings.HasPrefix(body, "client_ip/"):
		n, err := strconv.Atoi(strings.TrimPrefix(body, "client_ip/"))
		if err != nil || n < 1 || n > 128 {
			return keyPart{}, fmt.Errorf("prefix length must be a number from 1 to 128")
		}
		// One number serves both families: up to 32 it is the IPv4 prefix
		// and IPv6 keeps its /64; above 32 it is the IPv6 prefix and IPv4
		// addresses stay whole.
		if n <= 32 {
			return keyPart{kind: partClientIP, v4Bits: n, v6Bits: defaultV6Bits}, nil
		}
		return keyPart{kind: partClientIP, v4Bits: 32, v6Bits: n}, nil
	case strings.HasPrefix(body, "header:"):
		name := strings.TrimPrefix(body, "header:")
		if !validHeaderName(name) {
			return keyPart{}, fmt.Errorf("%q is not an HTTP header name", name)
		}
		return keyPart{kind: partHeader, text: http.CanonicalHeaderKey(name)}, nil
	case strings.HasPrefix(body, "query:"):
		name := strings.TrimPrefix(body, "query:")
		if name == "" {
			return keyPart{}, fmt.Errorf("query parameter name is empty")
		}
		return keyPart{kind: partQuery, text: name}, nil
	case body == "method":
		return keyPart{kind: partMethod}, nil
	case body == "host":
		return keyPart{kind: partHost}, nil
	case body == "path":
		return keyPart{kind: partPath}, nil
	case body == "descriptor":
		return keyPart{kind: partDescriptor}, nil
	case strings.HasPrefix(body, "descriptor:"):
		name := strings.TrimPrefix(body, "descriptor:")
		if name == "" {
			return keyPart{}, fmt.Errorf("descriptor entry key is empty")
		}
		return keyPart{kind: partDescriptorEntry, text: name}, nil
	}
	return keyPart{}, fmt.Errorf("unknown placeholder; use {client_ip}, {client_ip/N}, {header:Name}, {query:name}, {method}, {host}, {path}, {descriptor} or {descriptor:name}")
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// render appends the key value of r to dst. ok is false when a placeholder
// has no value in r (an absent header or query parameter, no client IP).
func (t *keyTemplate) render(dst []byte, r *Request) (out []byte, ok bool) {
	for i := range t.parts {
		p := &t.parts[i]
		switch p.kind {
		case partLiteral:
			dst = append(dst, p.text...)
		case partClientIP:
			if !r.ClientIP.IsValid() {
				return dst, false
			}
			dst = appendClientIP(dst, r.ClientIP, p.v4Bits, p.v6Bits)
		case partHeader:
			values, found := r.Header[p.text]
			if !found || len(values) == 0 {
				return dst, false
			}
			dst = t.appendEscaped(dst, values[0])
		case partQuery:
			v, found := lookupQuery(r.RawQuery, p.text)
			if !found {
				return dst, false
			}
			dst = t.appendEscaped(dst, v)
		case partMethod:
			dst = t.appendEscaped(dst, r.Method)
		case partHost:
			dst = t.appendEscaped(dst, r.Host)
		case partPath:
			dst = t.appendEscaped(dst, r.Path)
		case partDescriptorEntry:
			v, found := r.Lookup(p.text)
			if !found {
				return dst, false
			}
			dst = t.appendEscaped(dst, v)
		case partDescriptor:
			if len(r.Descriptor) == 0 {
				return dst, false
			}
			dst = t.appendDescriptor(dst, r.Descriptor)
		case partDomain:
			dst = t.appendEscaped(dst, r.Domain)
		}
	}
	return dst, true
}

// appendDescriptor writes every entry as key=value, separated by the
// placeholder separator; '=' is escaped inside keys and values (beside
// what every value escapes), so two descriptors render alike only when
// they are equal.
func (t *keyTemplate) appendDescriptor(dst []byte, d []DescriptorEntry) []byte {
	for i := range d {
		if i > 0 {
			dst = append(dst, placeholderSeparator)
		}
		dst = t.appendEscapedAlso(dst, d[i].Key, '=')
		dst = append(dst, '=')
		dst = t.appendEscapedAlso(dst, d[i].Value, '=')
	}
	return dst
}

// appendEscapedAlso is appendEscaped that also escapes c.
func (t *keyTemplate) appendEscapedAlso(dst []byte, v string, c byte) []byte {
	for i := 0; i < len(v); i++ {
		b := v[i]
		if t.escape[b] || b == c {
			dst = append(dst, '%', hexDigits[b>>4], hexDigits[b&15])
			continue
		}
		dst = append(dst, b)
	}
	return dst
}

const hexDigits = "0123456789ABCDEF"

func (t *keyTemplate) appendEscaped(dst []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if t.escape[c] {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// appendClientIP writes the address, or its network when the prefix is
// shorter than the address ("10.1.2.0/24", "2001:db8:1:2::/64").
func appendClientIP(dst []byte, ip netip.Addr, v4Bits, v6Bits int) []byte {
	ip = ip.Unmap()
	bits := v6Bits
	if ip.Is4() {
		bits = v4Bits
	}
	if bits >= ip.BitLen() {
		return ip.AppendTo(dst)
	}
	prefix, err := ip.Prefix(bits)
	if err != nil { // bits is validated at compile time; keep the whole address
		return ip.AppendTo(dst)
	}
	return prefix.AppendTo(dst)
}

// lookupQuery returns the first value of the query parameter name, without
// building a map of the whole query.
func lookupQuery(rawQuery, name string) (string, bool) {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			unescaped, err := url.QueryUnescape(v)
			if err != nil {
				return v, true // a malformed escape is still a value: count it as sent
			}
			v = unescaped
		}
		return v, true
	}
	return "", false
}
