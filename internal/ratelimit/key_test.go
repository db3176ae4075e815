package ratelimit

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// decodeKey splits a key made by Key back into its four components. A
// hashed component comes back as its marker. It is the proof of
// injectivity: Key(t) determines t (up to SHA-256 for long components).
func decodeKey(t *testing.T, key string) [4]string {
	t.Helper()
	rest, ok := strings.CutPrefix(key, KeyPrefix+"{")
	if !ok {
		t.Fatalf("key %q lacks prefix", key)
	}
	tag, limit, ok := strings.Cut(rest, "}:")
	if !ok {
		t.Fatalf("key %q lacks }:", key)
	}
	parts := strings.Split(tag, "/")
	if len(parts) != 3 {
		t.Fatalf("key %q tag has %d parts", key, len(parts))
	}
	var out [4]string
	for i, p := range append(parts, limit) {
		out[i] = unescape(t, p)
	}
	return out
}

func unescape(t *testing.T, s string) string {
	t.Helper()
	if strings.HasPrefix(s, "%H") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) && c != '%' {
			t.Fatalf("unescaped byte %q in %q", c, s)
		}
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isUpperHex(s[i+1]) || !isUpperHex(s[i+2]) {
			t.Fatalf("bad escape in %q", s)
		}
		b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
		i += 2
	}
	return b.String()
}

func isUpperHex(c byte) bool { return strings.IndexByte(hexDigits, c) >= 0 }
func unhex(c byte) byte      { return byte(strings.IndexByte(hexDigits, c)) }

// want is what decodeKey must return for component s.
func want(s string) string {
	if escapedLen(s) <= MaxKeyComponent {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "%H" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func checkKey(t *testing.T, ns, policy, value, limit string) string {
	t.Helper()
	key := Key(ns, policy, value, limit)
	if len(key) > MaxKeyLen {
		t.Fatalf("key length %d > %d", len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) || strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		t.Fatalf("key %q is not printable ASCII", key)
	}
	got := decodeKey(t, key)
	exp := [4]string{want(ns), want(policy), want(value), want(limit)}
	if got != exp {
		t.Fatalf("Key(%q,%q,%q,%q) = %q decodes to %q", ns, policy, value, limit, key, got)
	}
	// The hash tag is exactly the namespace/policy/value part.
	tag := HashTag(key)
	wantTag := key[len(KeyPrefix)+1 : strings.LastIndex(key, "}:")]
	if tag != wantTag || strings.Count(tag, "/") != 2 {
		t.Fatalf("hash tag of %q is %q, want %q", key, tag, wantTag)
	}
	if HashSlot(key) != HashSlot("{"+wantTag+"}") || HashSlot(key) != crc16(wantTag)&16383 {
		t.Fatalf("slot of %q is not the slot of its tag", key)
	}
	// The bucket is everything up to the tag's end, the field the limit;
	// both in the key's slot. (An empty limit is no field: the key is a
	// bucket of its own.)
	bucket, field := SplitKey(key)
	wantBucket, wantField := key[:strings.LastIndex(key, "}:")+1], key[strings.LastIndex(key, "}:")+2:]
	if wantField == "" {
		wantBucket = key
	}
	if bucket != wantBucket || field != wantField || HashSlot(bucket) != HashSlot(key) {
		t.Fatalf("SplitKey(%q) = %q, %q; want %q, %q in the key's slot", key, bucket, field, wantBucket, wantField)
	}
	return key
}

// crc16 is a bitwise CRC16-XMODEM, independent of the table.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestKeyExamples(t *testing.T) {
	long := strings.Repeat("x", 129)
	cases := []struct{ ns, policy, value, limit, key string }{
		{"default", "api", "10.0.0.1", "burst", "sluice:v2:{default/api/10.0.0.1}:burst"},
		{"default", "api", "a}b{c", "daily", "sluice:v2:{default/api/a%7Db%7Bc}:daily"},
		{"default", "api", "a/b:c%d", "x", "sluice:v2:{default/api/a%2Fb%3Ac%25d}:x"},
		{"default", "api", "", "x", "sluice:v2:{default/api/}:x"},
		{"default", "api", "é \n", "x", "sluice:v2:{default/api/%C3%A9%20%0A}:x"},
		{"default", "api", strings.Repeat("x", 128), "x", "sluice:v2:{default/api/" + strings.Repeat("x", 128) + "}:x"},
		{"default", "api", long, "x", "sluice:v2:{default/api/" + want(long) + "}:x"},
		{"default", "api", "v", "a:b}", "sluice:v2:{default/api/v}:a%3Ab%7D"},
	}
	for _, c := range cases {
		if got := checkKey(t, c.ns, c.policy, c.value, c.limit); got != c.key {
			t.Errorf("Key(%q,%q,%q,%q) = %q, want %q", c.ns, c.policy, c.value, c.limit, got, c.key)
		}
	}
}

func TestSplitKey(t *testing.T) {
	for key, want := range map[string][2]string{
		"sluice:v2:{ns/p/v}:burst": {"sluice:v2:{ns/p/v}", "burst"},
		"x{t}:f":                   {"x{t}", "f"},
		"{t}:f}":                   {"{t}", "f}"},
		"{t}:f{g}":                 {"{t}", "f{g}"},
		// Buckets of their own.
		"k":        {"k", ""},
		"a/b":      {"a/b", ""},
		"{}:f":     {"{}:f", ""},     // an empty tag is no tag
		"x{t}:":    {"x{t}:", ""},    // no field
		"x{t}:a:b": {"x{t}:a:b", ""}, // a field holds no ':'
		"x{t}f":    {"x{t}f", ""},
		"x{t":      {"x{t", ""},
	} {
		if b, f := SplitKey(key); b != want[0] || f != want[1] {
			t.Errorf("SplitKey(%q) = %q, %q; want %q, %q", key, b, f, want[0], want[1])
		}
		if k, f := RedisKey(key, GCRA); k != want[0] || f != want[1] {
			t.Errorf("RedisKey(%q, GCRA) = %q, %q; want %q, %q", key, k, f, want[0], want[1])
		}
		if k, f := RedisKey(key, SlidingWindowLog); k != key || f != "" {
			t.Errorf("RedisKey(%q, SlidingWindowLog) = %q, %q; want the key itself", key, k, f)
		}
	}
}

// TestValidateKeys: a key ending with its hash tag names a bucket, not a
// limit, so a bucket of its own can never be another key's bucket.
func TestValidateKeys(t *testing.T) {
	l := Limit{Algorithm: SlidingWindowLog, Capacity: 1, Interval: time.Second}
	for key, ok := range map[string]bool{"sluice:v2:{ns/p/v}:x": true, "k": true, "x{t}:": true, "{}": true, "sluice:v2:{ns/p/v}": false, "{t}": false} {
		req := Request{Entries: []Entry{{Key: key, Limit: l, Cost: 1}}}
		if err := req.Validate(); (err == nil) != ok {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

func TestHashSlotVectors(t *testing.T) {
	// From the Redis Cluster specification and CLUSTER KEYSLOT documentation.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 check value = %#x", got)
	}
	for key, slot := range map[string]uint16{
		"123456789":     0x31C3,
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"{}foo":         HashSlot("{}foo"), // empty tag: whole key
		"foo{}{bar}":    crc16("foo{}{bar}") & 16383,
		"foo{{bar}}zap": crc16("{bar") & 16383,
		"foo{bar}{zap}": crc16("bar") & 16383,
	} {
		if got := HashSlot(key); got != slot {
			t.Errorf("HashSlot(%q) = %d, want %d", key, got, slot)
		}
	}
}

func FuzzKey(f *testing.F) {
	seeds := [][8]string{
		{"default", "api", "1.2.3.4", "burst", "default", "api", "1.2.3.4", "daily"},
		{"a", "b/c", "d", "e", "a/b", "c", "d", "e"},
		{"a", "b", "c}:x", "y", "a", "b", "c", "x}:y"},
		{"ns", "p", "%2F", "l", "ns", "p", "/", "l"},
		{"ns", "p", strings.Repeat("{", 64), "l", "ns", "p", strings.Repeat("}", 64), "l"},
		{"ns", "p", strings.Repeat("v", 200), "l", "ns", "p", strings.Repeat("v", 201), "l"},
		{"ns", "p", "%H" + strings.Repeat("A", 43), "l", "ns", "p", "\x00\xff", "l"},
		{"", "", "", "", "", "", "", "x"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	f.Fuzz(func(t *testing.T, ns1, p1, v1, l1, ns2, p2, v2, l2 string) {
		k1 := checkKey(t, ns1, p1, v1, l1)
		k2 := checkKey(t, ns2, p2, v2, l2)
		same := ns1 == ns2 && p1 == p2 && v1 == v2 && l1 == l2
		if (k1 == k2) != same {
			t.Fatalf("tuples %q and %q give keys %q and %q", []string{ns1, p1, v1, l1}, []string{ns2, p2, v2, l2}, k1, k2)
		}
		// Same namespace/policy/value always share a slot, whatever the limit.
		if ns1 == ns2 && p1 == p2 && v1 == v2 && HashSlot(k1) != HashSlot(k2) {
			t.Fatalf("limits of one key value in different slots: %q %q", k1, k2)
		}
	})
}
