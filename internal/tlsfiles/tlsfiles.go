// Package tlsfiles serves TLS with a certificate and key read from files,
// and read again when the files change: a Secret's new version, mounted
// in a pod, or cert-manager's renewal of it takes effect without a
// restart. The gRPC endpoint and the admin API both serve through it.
package tlsfiles

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// checkEvery is how often a handshake looks at the files: a rotated
// certificate is served within this time of the new files being in place.
const checkEvery = time.Second

// Pair is a certificate and key kept in two files.
type Pair struct {
	certFile, keyFile string
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   stamp
	checked time.Time
}

// stamp is what says the files changed: their sizes and modification
// times. A Secret volume swaps a symlink to a new directory, which Stat
// follows, so the new files have their own times.
type stamp struct {
	certSize, keySize int64
	certTime, keyTime time.Time
}

// Load reads the pair now, so that a process whose certificate is
// unreadable fails at start.
func Load(certFile, keyFile string) (*Pair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a certificate file and its key file go together")
	}
	p := &Pair{certFile: certFile, keyFile: keyFile, now: time.Now}
	st, err := p.stat()
	if err != nil {
		return nil, err
	}
	if err := p.read(st); err != nil {
		return nil, err
	}
	p.checked = p.now()
	return p, nil
}

// Config is a server configuration (TLS 1.2 and later) that serves the
// pair as the files hold it.
func (p *Pair) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: p.GetCertificate}
}

// GetCertificate is tls.Config's: the pair as last read, read again first
// when the files changed. A new pair that does not load (a key written
// before its certificate) leaves the last good one in use, and is tried
// again at the next check.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); now.Sub(p.checked) >= checkEvery {
		p.checked = now
		if st, err := p.stat(); err == nil && st != p.stamp {
			_ = p.read(st)
		}
	}
	return p.cert, nil
}

func (p *Pair) stat() (stamp, error) {
	c, err := os.Stat(p.certFile)
	if err != nil {
		return stamp{}, fmt.Errorf("certificate: %w", err)
	}
	k, err := os.Stat(p.keyFile)
	if err != nil {
		return stamp{}, fmt.Errorf("certificate key: %w", err)
	}
	return stamp{certSize: c.Size(), keySize: k.Size(), certTime: c.ModTime(), keyTime: k.ModTime()}, nil
}

// read loads the files and, when they make a pair, keeps it with st.
func (p *Pair) read(st stamp) error {
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		return err
	}
	p.cert, p.stamp = &cert, st
	return nil
}
