// Package redisconn turns connection settings (flags or environment) into a
// go-redis UniversalClient: a single server by URL, Sentinel, or Cluster,
// with credentials from mounted files and TLS with a private CA.
package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Config is how to reach Redis. Exactly one of URL, SentinelAddrs or
// ClusterAddrs selects the topology.
type Config struct {
	// URL is redis://[user:password@]host:port/db or rediss:// for TLS.
	URL string
	// SentinelMaster and SentinelAddrs select a Sentinel-managed master.
	SentinelMaster string
	SentinelAddrs  []string
	// ClusterAddrs are seed nodes of a Redis Cluster.
	ClusterAddrs []string
	// Username and PasswordFile (a mounted Secret) authenticate; they
	// override credentials in the URL.
	Username     string
	PasswordFile string
	// SentinelUsername and SentinelPasswordFile authenticate to the
	// Sentinels themselves (their requirepass or ACL user), which is
	// separate from the data nodes' credentials above.
	SentinelUsername     string
	SentinelPasswordFile string
	// TLS turns TLS on for Sentinel and Cluster (rediss:// does it for a URL).
	TLS bool
	// CAFile is a PEM bundle that verifies the server (default: system roots).
	CAFile string
	// TLSServerName overrides the name verified in the server certificate.
	TLSServerName string
}

// Enabled reports whether any topology is configured.
func (c *Config) Enabled() bool {
	return c.URL != "" || len(c.SentinelAddrs) > 0 || len(c.ClusterAddrs) > 0
}

// BindFlags registers the settings on fs with defaults from the
// environment (SLUICE_REDIS_URL, ...), so a Deployment can use either.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "redis-url", os.Getenv("SLUICE_REDIS_URL"), "Redis URL, redis://host:port/db or rediss:// for TLS (env SLUICE_REDIS_URL)")
	fs.StringVar(&c.SentinelMaster, "redis-sentinel-master", os.Getenv("SLUICE_REDIS_SENTINEL_MASTER"), "Sentinel master name (env SLUICE_REDIS_SENTINEL_MASTER)")
	fs.Func("redis-sentinel-addrs", "comma-separated Sentinel addresses (env SLUICE_REDIS_SENTINEL_ADDRS)", func(s string) error {
		c.SentinelAddrs = splitList(s)
		return nil
	})
	fs.Func("redis-cluster-addrs", "comma-separated Redis Cluster seed addresses (env SLUICE_REDIS_CLUSTER_ADDRS)", func(s string) error {
		c.ClusterAddrs = splitList(s)
		return nil
	})
	c.SentinelAddrs = splitList(os.Getenv("SLUICE_REDIS_SENTINEL_ADDRS"))
	c.ClusterAddrs = splitList(os.Getenv("SLUICE_REDIS_CLUSTER_ADDRS"))
	fs.StringVar(&c.Username, "redis-username", os.Getenv("SLUICE_REDIS_USERNAME"), "Redis ACL user name (env SLUICE_REDIS_USERNAME)")
	fs.StringVar(&c.PasswordFile, "redis-password-file", os.Getenv("SLUICE_REDIS_PASSWORD_FILE"), "file holding the Redis password, e.g. a mounted Secret (env SLUICE_REDIS_PASSWORD_FILE)")
	fs.StringVar(&c.SentinelUsername, "redis-sentinel-username", os.Getenv("SLUICE_REDIS_SENTINEL_USERNAME"), "ACL user name on the Sentinels, when they have their own (env SLUICE_REDIS_SENTINEL_USERNAME)")
	fs.StringVar(&c.SentinelPasswordFile, "redis-sentinel-password-file", os.Getenv("SLUICE_REDIS_SENTINEL_PASSWORD_FILE"), "file holding the Sentinels' own password (their requirepass), e.g. a mounted Secret (env SLUICE_REDIS_SENTINEL_PASSWORD_FILE)")
	fs.BoolVar(&c.TLS, "redis-tls", os.Getenv("SLUICE_REDIS_TLS") == "true", "use TLS for Sentinel or Cluster connections (env SLUICE_REDIS_TLS=true)")
	fs.StringVar(&c.CAFile, "redis-ca-file", os.Getenv("SLUICE_REDIS_CA_FILE"), "PEM CA bundle that verifies the Redis server (env SLUICE_REDIS_CA_FILE)")
	fs.StringVar(&c.TLSServerName, "redis-tls-server-name", os.Getenv("SLUICE_REDIS_TLS_SERVER_NAME"), "server name to verify in the Redis certificate (env SLUICE_REDIS_TLS_SERVER_NAME)")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Options builds go-redis options from the config.
func (c *Config) Options() (*redis.UniversalOptions, error) {
	n := 0
	for _, set := range []bool{c.URL != "", len(c.SentinelAddrs) > 0, len(c.ClusterAddrs) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("redis: set exactly one of --redis-url, --redis-sentinel-addrs (with --redis-sentinel-master) or --redis-cluster-addrs")
	}
	// Silently ignoring Sentinel credentials would hide a mistyped topology.
	if len(c.SentinelAddrs) == 0 && (c.SentinelUsername != "" || c.SentinelPasswordFile != "") {
		return nil, errors.New("--redis-sentinel-username, --redis-sentinel-password-file: only with --redis-sentinel-addrs")
	}
	o := &redis.UniversalOptions{}
	switch {
	case c.URL != "":
		u, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		o.Addrs = []string{u.Addr}
		o.DB = u.DB
		o.Username, o.Password = u.Username, u.Password
		o.TLSConfig = u.TLSConfig
	case len(c.SentinelAddrs) > 0:
		if c.SentinelMaster == "" {
			return nil, errors.New("--redis-sentinel-master: required with --redis-sentinel-addrs")
		}
		o.Addrs, o.MasterName = c.SentinelAddrs, c.SentinelMaster
		o.SentinelUsername = c.SentinelUsername
		if c.SentinelPasswordFile != "" {
			pw, err := readPassword("--redis-sentinel-password-file", c.SentinelPasswordFile)
			if err != nil {
				return nil, err
			}
			o.SentinelPassword = pw
		}
	default:
		o.Addrs, o.IsClusterMode = c.ClusterAddrs, true
	}
	if c.Username != "" {
		o.Username = c.Username
	}
	if c.PasswordFile != "" {
		pw, err := readPassword("--redis-password-file", c.PasswordFile)
		if err != nil {
			return nil, err
		}
		o.Password = pw
	}
	if c.TLS && o.TLSConfig == nil {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.CAFile != "" || c.TLSServerName != "" {
		if o.TLSConfig == nil {
			return nil, errors.New("--redis-ca-file: TLS is off; use a rediss:// URL or --redis-tls")
		}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis-ca-file: %s holds no PEM certificate", c.CAFile)
		}
		o.TLSConfig.RootCAs = pool
	}
	if c.TLSServerName != "" {
		o.TLSConfig.ServerName = c.TLSServerName
	}
	return o, nil
}

// readPassword reads a password from a mounted file, without the trailing
// newline an editor or `kubectl create secret --from-file` may leave.
func readPassword(flagName, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
