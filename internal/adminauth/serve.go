package adminauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/tlsfiles"
)

// Options configure the admin API's TLS port in the controller process.
type Options struct {
	// Listen is the address of the port kube-apiserver proxies to ("":
	// not served). Never the check port: the proxies reach that one.
	Listen string
	// CertFile and KeyFile are the serving certificate; empty: a
	// self-signed one made at start, which the APIService then trusts with
	// insecureSkipTLSVerify (as metrics-server does).
	CertFile, KeyFile string
}

// BindFlags registers --admin-listen and the serving certificate's flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Listen, "admin-listen", "", "address of the admin API (TLS, an aggregated API that kube-apiserver proxies to), such as :8443 (config/manager's); off when empty")
	fs.StringVar(&o.CertFile, "admin-tls-cert-file", "", "serving certificate of the admin API (PEM; default: a self-signed one made at start)")
	fs.StringVar(&o.KeyFile, "admin-tls-key-file", "", "private key of --admin-tls-cert-file (PEM)")
}

// Server serves the admin API behind its front on Options.Listen. It is a
// controller-runtime Runnable that every replica runs, leader or not: the
// Service sends calls to any of them.
type Server struct {
	opts  Options
	front *Front
	cs    kubernetes.Interface
}

// NewServer wraps the admin API, inner, in the front; cfg reaches the API
// server for SubjectAccessReviews and the front-proxy ConfigMap.
func NewServer(opts Options, inner http.Handler, cfg *rest.Config) (*Server, error) {
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("--admin-tls-cert-file and --admin-tls-key-file go together")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin API client: %w", err)
	}
	return &Server{
		opts:  opts,
		front: &Front{Inner: inner, Trust: &Trust{}, Reviews: cs.AuthorizationV1().SubjectAccessReviews()},
		cs:    cs,
	}, nil
}

// NeedLeaderElection is false: standbys serve the admin API too.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	tlsCfg, err := s.tlsConfig()
	if err != nil {
		return err
	}
	if err := s.front.Trust.Follow(ctx, s.cs); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	return serveTLS(ctx, ln, s.front, tlsCfg)
}

// serveTLS serves h on ln until ctx ends. Client certificates are asked
// for, not required: the front checks them against the CA in force, and
// answers 401 when there is none.
func serveTLS(ctx context.Context, ln net.Listener, h http.Handler, tlsCfg *tls.Config) error {
	tlsCfg.ClientAuth = tls.RequestClientCert
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		TLSConfig:         tlsCfg,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin API: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// tlsConfig serves the certificate files as they change (a Secret's
// renewal takes effect without a restart), else a self-signed
// certificate.
func (s *Server) tlsConfig() (*tls.Config, error) {
	if s.opts.CertFile != "" {
		pair, err := tlsfiles.Load(s.opts.CertFile, s.opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("admin API serving certificate: %w", err)
		}
		return pair.Config(), nil
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// selfSigned makes a serving certificate for this process's life. Its
// names do not matter: the APIService that uses it skips verification.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "sluice-admin"},
		DNSNames:     []string{"localhost", host},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed admin certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
