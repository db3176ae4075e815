package redisstore

import (
	"crypto/sha1" //nolint:gosec // EVALSHA names scripts by SHA-1; not a security use.
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"hash"
)

// source is the Lua library: the algorithms, the penalty box and sluice_check.
//
//go:embed lua/sluice.lua
var source string

var (
	// Version identifies the library's source: the first 12 hex digits of
	// its SHA-256. The library and its function are named after it, so
	// processes running different versions side by side (a rolling
	// upgrade) never call each other's code; the controller reports it in
	// a policy's status.
	Version = hashHex(sha256.New, source)[:12]
	// LibraryName is the Redis Functions library name, "sluice_<Version>".
	LibraryName = "sluice_" + Version
	// FunctionName is the function FCALL invokes.
	FunctionName = "sluice_check_" + Version

	// functionCode is what FUNCTION LOAD REPLACE receives.
	functionCode = "#!lua name=" + LibraryName + "\n" + source +
		"\nredis.register_function('" + FunctionName + "', sluice_check)\n"
	// scriptCode is the EVALSHA fallback: the same code, run as a script.
	scriptCode = source + "\nreturn sluice_check(KEYS, ARGV)\n"
	// scriptSHA names scriptCode for EVALSHA.
	scriptSHA = hashHex(sha1.New, scriptCode)
)

// Version names the library the store loads (LibraryName), so a Store is
// the library the controller's policy table publisher keeps loaded.
func (s *Store) Version() string { return LibraryName }

func hashHex(newHash func() hash.Hash, s string) string {
	h := newHash()
	_, _ = h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil))
}

// Mode selects how the library is invoked.
type Mode int32

const (
	// ModeAuto uses Functions and switches to scripts for good the first
	// time the server answers that FCALL or FUNCTION is an unknown command.
	ModeAuto Mode = iota
	// ModeFunctions uses FUNCTION LOAD REPLACE and FCALL.
	ModeFunctions
	// ModeScripts uses SCRIPT LOAD and EVALSHA (Redis < 7, proxies without
	// FUNCTION; tests force it to cover the fallback).
	ModeScripts
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeFunctions:
		return "functions"
	case ModeScripts:
		return "scripts"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}
