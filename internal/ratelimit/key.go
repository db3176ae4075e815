package ratelimit

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// KeyPrefix starts every key Key returns. Its "v2" is the layout version:
// one Redis hash per bucket, see SplitKey. A new layout takes a new
// version, so a process of another version never reads state it would
// misunderstand; the other version's keys expire by their TTL.
const KeyPrefix = "sluice:v2:"

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

// Key returns the key of one limit's state:
//
//	sluice:v2:{<namespace>/<policy>/<value>}:<limit>
//
// Everything up to the closing brace names the bucket of (policy, key
// value): one Redis hash that holds the state of each of its limits in the
// field <limit> (see SplitKey); a SlidingWindowLog keeps its log in a
// sorted set under the key itself. The part in braces is the Redis Cluster
// hash tag, so a bucket and its logs share a slot and one atomic call
// evaluates all limits of a key value. Each component is
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

// BanIndexKey returns the key of the index of policy namespace/name's bans
// (ratelimit.BanIndex in Redis):
//
//	sluice:v2:bans:{<namespace>/<policy>}
//
// its components escaped as Key's are, so no policy reaches another's.
func BanIndexKey(namespace, policy string) string {
	var b strings.Builder
	b.WriteString(KeyPrefix)
	b.WriteString("bans:{")
	writeComponent(&b, namespace)
	b.WriteByte('/')
	writeComponent(&b, policy)
	b.WriteByte('}')
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

// SplitKey tells where the state of the limit named by key lives: in the
// field field of the Redis hash bucket. A key of Key's shape,
// <prefix>{<tag>}:<field> with a non-empty tag (HashTag's) and a non-empty
// field without ':', splits at the tag's closing brace: all limits of one
// (namespace, policy, key value) share the bucket <prefix>{<tag>}. Any
// other key is a bucket of its own with field "" (tests use plain names),
// except that a key ending with its tag (<prefix>{<tag>} itself) is no
// valid key at all: it is the bucket of the keys <prefix>{<tag>}:<field>
// (Request.Validate rejects it). Both results are substrings of key.
//
// A SlidingWindowLog's log is the sorted set at key itself; for a key that
// splits, the bucket's field records that the log holds the limit's state,
// so a limit whose algorithm changes between a log and a hash field never
// reads the other's stale state.
func SplitKey(key string) (bucket, field string) {
	end := tagEnd(key)
	if end < 0 || len(key)-end < 2 || key[end] != ':' || strings.IndexByte(key[end+1:], ':') >= 0 {
		return key, ""
	}
	return key[:end], key[end+1:]
}

// RedisKey returns the Redis key that holds the state of the limit named
// by key when it counts with alg, and the field there: the bucket and the
// limit's field for a hash algorithm, the key itself (and no field) for a
// SlidingWindowLog. For logs and debugging; the stores work it out alone.
func RedisKey(key string, alg Algorithm) (redisKey, field string) {
	if alg == SlidingWindowLog {
		return key, ""
	}
	return SplitKey(key)
}

// tagEnd returns the index just past the '}' that closes key's hash tag,
// or -1 when key has no (non-empty) tag.
func tagEnd(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return s + 1 + e + 1
		}
	}
	return -1
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
