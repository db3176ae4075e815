package ratelimit

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// KeyPrefix starts every key Sluice writes.
const KeyPrefix = "sluice:"

// Key encoding bounds.
const (
	// MaxKeyComponent is the longest encoded component kept verbatim; a
	// longer one is replaced by its hash marker.
	MaxKeyComponent = 128
	// hashMarkerLen is len("%H") plus unpadded base64url of a SHA-256.
	hashMarkerLen = 2 + 43
	// MaxKeyLen bounds the length of every key Key returns.
	MaxKeyLen = len(KeyPrefix) + len("{//}:") + 4*MaxKeyComponent
)

// Key returns the Redis key of one limit's state:
//
//	sluice:{<namespace>/<policy>/<value>}:<limit>
//
// The part in braces is the Redis Cluster hash tag, so all limits of one key
// value share a slot and one atomic call evaluates them. Each component is
// escaped injectively: '{', '}', ':', '/', '%' and every byte outside
// printable ASCII become %XX (uppercase hex), so no value can close the tag
// early, reach into another policy's or namespace's keys, or collide with a
// different tuple. An encoded component longer than MaxKeyComponent bytes is
// replaced by "%H" + base64url(SHA-256(raw component)); an escaped string
// never contains "%H" (H is not a hex digit), so hashed and verbatim forms
// cannot collide. Keys are therefore at most MaxKeyLen bytes.
func Key(namespace, policy, value, limit string) string {
	var b strings.Builder
	b.Grow(len(KeyPrefix) + len("{//}:") + encodedLen(namespace) + encodedLen(policy) + encodedLen(value) + encodedLen(limit))
	b.WriteString(KeyPrefix)
	b.WriteByte('{')
	writeComponent(&b, namespace)
	b.WriteByte('/')
	writeComponent(&b, policy)
	b.WriteByte('/')
	writeComponent(&b, value)
	b.WriteString("}:")
	writeComponent(&b, limit)
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

// needsEscape reports whether byte c is written as %XX.
func needsEscape(c byte) bool {
	switch c {
	case '{', '}', ':', '/', '%':
		return true
	}
	return c <= ' ' || c >= 0x7f
}

// escapedLen is the length of s after escaping.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n += 2
		}
	}
	return n
}

// encodedLen is the length writeComponent will write.
func encodedLen(s string) int {
	if n := escapedLen(s); n <= MaxKeyComponent {
		return n
	}
	return hashMarkerLen
}

func writeComponent(b *strings.Builder, s string) {
	if escapedLen(s) > MaxKeyComponent {
		sum := sha256.Sum256([]byte(s))
		var enc [43]byte
		base64.RawURLEncoding.Encode(enc[:], sum[:])
		b.WriteString("%H")
		b.Write(enc[:])
		return
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
}

// HashTag returns the part of key that Redis Cluster hashes: the bytes
// between the first '{' and the next '}' when that is non-empty, else the
// whole key (the rule of the Redis Cluster specification).
func HashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// HashSlot returns the Redis Cluster slot (0..16383) of key:
// CRC16-XMODEM of its hash tag, modulo 16384.
func HashSlot(key string) uint16 {
	tag := HashTag(key)
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return crc & 16383
}

// crc16Table is CRC16-XMODEM (polynomial 0x1021), built at init.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
