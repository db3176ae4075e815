package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/certtest"
)

// pemPair is a server certificate named cn from ca, and its key, as
// the PEM files' contents.
func pemPair(t *testing.T, ca *certtest.CA, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	p := ca.Server(t, cn)
	c, err := os.ReadFile(p.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// write puts data in file with modification time at, so that a change
// shows whatever the file system's time resolution.
func write(t *testing.T, file string, data []byte, at time.Time) {
	t.Helper()
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, at, at); err != nil {
		t.Fatal(err)
	}
}

// served connects to ln and returns the common name the server presents.
func served(t *testing.T, ln net.Listener, ca *certtest.CA) string {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// A server on a Pair presents the certificate the files hold: a rotated
// pair once the next check comes, and the last good one while the files
// hold something that does not load.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	start := time.Now().Add(-time.Hour)
	ca := certtest.NewCA(t, "test CA")
	c1, k1 := pemPair(t, ca, "first")
	write(t, certFile, c1, start)
	write(t, keyFile, k1, start)

	pair, err := Load(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	pair.now = func() time.Time { return clock }

	ln, err := tls.Listen("tcp", "127.0.0.1:0", pair.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	if got := served(t, ln, ca); got != "first" {
		t.Fatalf("served %q, want first", got)
	}

	// A new certificate with the old key: the pair does not load, the
	// first stays in use.
	c2, k2 := pemPair(t, ca, "second")
	write(t, certFile, c2, start.Add(time.Minute))
	clock = clock.Add(checkEvery)
	if got := served(t, ln, ca); got != "first" {
		t.Fatalf("with a mismatched pair in the files: served %q, want the last good one (first)", got)
	}

	// Its key follows: the second is served at the next check, not before.
	write(t, keyFile, k2, start.Add(2*time.Minute))
	if got := served(t, ln, ca); got != "first" {
		t.Fatalf("before the next check: served %q, want first", got)
	}
	clock = clock.Add(checkEvery)
	if got := served(t, ln, ca); got != "second" {
		t.Fatalf("after rotation: served %q, want second", got)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if _, err := Load(certFile, ""); err == nil {
		t.Error("a certificate without its key loaded")
	}
	if _, err := Load(certFile, keyFile); err == nil {
		t.Error("missing files loaded")
	}
	ca := certtest.NewCA(t, "test CA")
	c, _ := pemPair(t, ca, "a")
	_, k := pemPair(t, ca, "b")
	write(t, certFile, c, time.Now())
	write(t, keyFile, k, time.Now())
	if _, err := Load(certFile, keyFile); err == nil {
		t.Error("a certificate with another's key loaded")
	}
}
